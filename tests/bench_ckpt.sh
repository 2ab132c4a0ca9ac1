#!/usr/bin/env bash
# bench_ckpt.sh VIT3D [ROUNDS]: what checkpoints cost a run, written in place (--async-save 0)
# against in the background (--async-save 1), in the same run: one rank trains ViT-S/16 at 64 px
# (22M parameters: 260 MB per checkpoint with AdamW's moments) for 15 steps, saving every 5
# (steps 5 and 10; step 15's, the last, is written in place either way), ROUNDS times each way (default 3), alternating, into a fresh directory under /tmp, and
# once without saving. Prints the median wall time of each kind of run (start-up included, the
# same for all three), what the checkpoints added, and the ratio background / in place.
# A commit syncs its files (fsync), so the disk's speed is in the figures: say which disk.
set -uo pipefail
vit3d=$1
rounds=${2:-3}
work=$(mktemp -d /tmp/vt_bench_ckpt.XXXXXX)
trap 'rm -rf "$work"' EXIT
args=(train --model vit-s16 --img-size 64 --num-classes 10 --micro-batch-size 8 --steps 15
      --warmup-steps 0 --log-interval 100 --threads "$(nproc)")
wall() {  # wall NAME FLAGS...: seconds for the whole run (a failed run: the script stops)
  local name=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$vit3d" "${args[@]}" "$@" > "$work/$name.log" 2>&1 ||
    { echo "FAIL: $name $*" >&2; tail -5 "$work/$name.log" >&2; kill $$; }
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}
echo "bench_ckpt: ViT-S/16 at 64 px, 1 rank, $(nproc) threads, 15 steps, a checkpoint every 5"
# (the disk's speed is in these figures: the file system the checkpoints go to, and the CPU)
echo "conditions: checkpoints on $(df -hT "$work" | awk 'NR == 2 {print $2 " (" $1 ")"}')," \
     "cpu '$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)'"
declare -a inplace background none
for r in $(seq "$rounds"); do
  rm -rf "$work/ck"
  inplace+=("$(wall inplace --save "$work/ck" --save-interval 5 --async-save 0 | tail -1)")
  rm -rf "$work/ck"
  background+=("$(wall background --save "$work/ck" --save-interval 5 --async-save 1 | tail -1)")
  none+=("$(wall none | tail -1)")
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
mi=$(med "${inplace[@]}") mb=$(med "${background[@]}") mn=$(med "${none[@]}")
echo "run wall time, median of $rounds: no checkpoints ${mn} s (${none[*]}), in place ${mi} s" \
     "(${inplace[*]}), background ${mb} s (${background[*]})"
awk -v i="$mi" -v b="$mb" -v n="$mn" 'BEGIN {
  printf "checkpoint cost per run: in place %.2f s, background %.2f s; run time background / in place = %.3f\n",
         i - n, b - n, b / i }'
