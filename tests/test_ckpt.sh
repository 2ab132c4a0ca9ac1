#!/usr/bin/env bash
# test_ckpt.sh VIT3D: checkpoints, end to end, on 8 CPU ranks.
#  1. exact resume: 2x2x2, 20 steps straight against 10 steps + save + a new process with
#     --resume auto: byte-identical final weights and identical losses of steps 11-20; also from
#     a checkpoint written in the background (--async-save); also
#     with --zero 1, drop path, Mixup, CutMix, random erasing and the weights' EMA (also byte-identical; its
#     export from the checkpoint equals the run's --final-ema, and a checkpoint without one is
#     refused by export --use-ema); SGD with ZeRO-1 and the EMA; LARC (nlarc) with ZeRO-1 (another --opt
#     refused); a frozen prefix with ZeRO-1 and
#     the EMA (no optimizer state saved for it; its checkpoint continued on one rank); and on an image folder with
#     RandAugment and repeated augmentation;
#  2. resume on another mesh: the step-10 checkpoint of 2x2x2 continued on 1x1x1, 4x2x1, 1x4x2,
#     2x1x4 and 2x2x2 with the interleaved schedule (other blocks per stage) matches an
#     uninterrupted run on that mesh (tests/compare_runs.py tolerances); a rank reads only its
#     part (rank 0 of 4 stages under half the checkpoint, of tp 4 x pp 2 under a quarter, one
#     rank all of it);
#  2b. every rank writes its part of a save (rank 0 of 8 under a quarter), a part that fails
#     to write on rank 3 is said by rank 0, and a --save folder that rank 1 does not see is
#     refused at start-up;
#  3. kill -9 of one rank in the middle of a run and (fault switch) in the middle of a save, and
#     SIGINT (Ctrl-C) to one rank (a checkpoint at the next step boundary, exit 130): a
#     relaunch with --resume auto completes with the weights of an uninterrupted run.
#  4. a damaged newest checkpoint (its header; a byte of the last stage's moments, which only
#     that stage's ranks read and check): --resume auto falls back to the previous one and says so.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: $py cannot import numpy"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
common=(train --model tiny --heads 8 --depth 8 --width 64 --steps 20 --global-batch-size 16
        --micro-batch-size 2 --lr 1e-3 --warmup-steps 2 --seed 5 --threads 1 --log-interval 10)
fail=0
run() {  # run NAME NP flags...: logs to NAME.log, metrics in NAME/, weights NAME/weights.safetensors
  local name=$1 np=$2; shift 2
  timeout 300 mpirun -np "$np" --oversubscribe "$vit3d" "${common[@]}" --log-dir "$work/$name" \
    --final-weights "$work/$name/weights.safetensors" "$@" > "$work/$name.log" 2>&1
}
must() { "$@" || { echo "FAIL: $*"; tail -15 "$work/${2}.log" 2>/dev/null; fail=1; }; }

for z in 0 1; do
  extra=()
  # drop path's and dropout's masks and the mixing are keyed by stream position: resumable; the
  # weights' EMA is saved (ema.safetensors) and restored
  [ $z = 1 ] && extra=(--drop-path 0.2 --proj-drop 0.1 --attn-drop 0.1 --pos-drop 0.1 --drop 0.1
                       --mixup 0.8 --cutmix 1.0 --reprob 0.25 --model-ema 0.99)
  must run straight$z 8 --tp 2 --pp 2 --zero $z "${extra[@]}" ${extra:+--final-ema "$work/ema_straight.st"}
  must run first$z 8 --tp 2 --pp 2 --zero $z "${extra[@]}" --save "$work/ck$z" --save-interval 10 \
    --run-steps 10
  must run second$z 8 --tp 2 --pp 2 --zero $z "${extra[@]}" --save "$work/ck$z" --resume auto \
    ${extra:+--final-ema "$work/ema_second.st"}
  if cmp -s "$work/straight$z/weights.safetensors" "$work/second$z/weights.safetensors" &&
     { [ $z = 0 ] || cmp -s "$work/ema_straight.st" "$work/ema_second.st"; } &&
     "$py" - "$work/straight$z/metrics.jsonl" "$work/second$z/metrics.jsonl" <<'PY'
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
sys.exit(0 if sorted(b) == list(range(11, 21)) and all(a[s] == b[s] for s in b) else 1)
PY
  then echo "ok: exact resume (zero $z ${extra[*]}): weights$([ $z = 1 ] && echo " and EMA") byte-identical, losses of steps 11-20 identical"
  else echo "FAIL: exact resume (zero $z ${extra[*]}) differs"; fail=1; fi
done
# SGD (its momentum buffer the optimizer file's one tensor per weight) with ZeRO-1 and the EMA:
# each rank writes and reads its shard of the buffer.
sgd=(--tp 2 --pp 2 --zero 1 --opt sgd --momentum 0.9 --lr 0.05 --model-ema 0.99)
must run sgd_straight 8 "${sgd[@]}" --final-ema "$work/sgd_ema_straight.st"
must run sgd_first 8 "${sgd[@]}" --save "$work/ck_sgd" --save-interval 10 --run-steps 10
must run sgd_second 8 "${sgd[@]}" --save "$work/ck_sgd" --resume auto --final-ema "$work/sgd_ema_second.st"
# (each resume below must say so: a --resume auto that found no usable checkpoint would start
# from step 0 and end with the same weights)
# (and a resume prints the progress line of its first step, whatever --log-interval)
resumed() {
  grep -q "resumed from .*step-$2" "$work/$1.log" || { echo "    $1 did not resume from step $2"; return 1; }
  grep -Eq "^step +$((10#$2 + 1))/" "$work/$1.log" || { echo "    $1 printed no line of its first step"; return 1; }
}
if resumed sgd_second 00000010 &&
   cmp -s "$work/sgd_straight/weights.safetensors" "$work/sgd_second/weights.safetensors" &&
   cmp -s "$work/sgd_ema_straight.st" "$work/sgd_ema_second.st" &&
   [ -s "$work/ck_sgd/step-00000010/optim.safetensors" ] &&
   ! grep -q "exp_avg" "$work/ck_sgd/step-00000010/optim.safetensors"; then
  echo "ok: exact resume of SGD with ZeRO-1 and the EMA (momentum_buffer only): weights and EMA byte-identical"
else echo "FAIL: exact resume of SGD with ZeRO-1 and the EMA differs"; fail=1; fi
# LARS with LARC's clipping (timm's nlarc: the momentum buffer alone, each rank its shard under
# ZeRO-1, the trust ratios from whole tensors): exact resume; a resume with another --opt, even
# LARS without the clipping, is refused by name.
lars=(--tp 2 --pp 2 --zero 1 --opt nlarc --momentum 0.9 --lr 0.5 --clip-grad 5)
must run lars_straight 8 "${lars[@]}"
must run lars_first 8 "${lars[@]}" --save "$work/ck_lars" --save-interval 10 --run-steps 10
must run lars_second 8 "${lars[@]}" --save "$work/ck_lars" --resume auto
if resumed lars_second 00000010 &&
   cmp -s "$work/lars_straight/weights.safetensors" "$work/lars_second/weights.safetensors" &&
   grep -q "^lars 4$" "$work/ck_lars/step-00000010/manifest.txt" &&
   ! grep -q "exp_avg" "$work/ck_lars/step-00000010/optim.safetensors" &&
   out=$(timeout 300 mpirun -np 8 --oversubscribe "$vit3d" "${common[@]}" --tp 2 --pp 2 --zero 1 \
           --opt nlars --resume "$work/ck_lars/step-00000010" 2>&1 < /dev/null); [ $? -eq 2 ] &&
   grep -q "was trained with --opt nlarc; resume it with --opt nlarc" <<<"$out"; then
  echo "ok: exact resume of LARC (nlarc) with ZeRO-1 (momentum_buffer only): weights byte-identical; --opt nlars refused"
else echo "FAIL: LARC checkpoint resume"; fail=1; fi
# A frozen prefix (the embeddings and blocks 0-2, on stage 0 of 2) with ZeRO-1 and the EMA: the
# optimizer keeps no state for it and shards the rest; the optimizer file leaves the prefix out
# and each DP rank writes a slice of its weights and EMA (its weights) beside its shard. Exact resume; the files hold that;
# and the step-10 checkpoint continued on one rank (no ZeRO, the prefix the whole run's) matches
# one rank's uninterrupted run.
frz=(--freeze '^(patch_embed|pos_embed|cls_token|blocks\.[0-2]\.)' --model-ema 0.99)
must run frz_straight 8 --tp 2 --pp 2 --zero 1 "${frz[@]}" --final-ema "$work/frz_ema_straight.st"
must run frz_first 8 --tp 2 --pp 2 --zero 1 "${frz[@]}" --save "$work/ck_frz" --save-interval 10 --run-steps 10
must run frz_second 8 --tp 2 --pp 2 --zero 1 "${frz[@]}" --save "$work/ck_frz" --resume auto \
  --final-ema "$work/frz_ema_second.st"
must run frz_ref1 1 "${frz[@]}"
must run frz_res1 1 "${frz[@]}" --resume "$work/ck_frz/step-00000010"
if resumed frz_second 00000010 && resumed frz_res1 00000010 &&
   cmp -s "$work/frz_straight/weights.safetensors" "$work/frz_second/weights.safetensors" &&
   cmp -s "$work/frz_ema_straight.st" "$work/frz_ema_second.st" &&
   PYTHONPATH="$here" "$py" - "$work/ck_frz/step-00000010" <<'PY'
import re, sys
from compare_runs import load_safetensors
d = sys.argv[1]
w, o, e = (load_safetensors(f"{d}/{f}.safetensors") for f in ("model", "optim", "ema"))
frozen = [n for n in w if re.search(r"^(patch_embed|pos_embed|cls_token|blocks\.[0-2]\.)", n)]
assert frozen and all("exp_avg." + n not in o and "exp_avg_sq." + n not in o
                      and e[n].tobytes() == w[n].tobytes() for n in frozen), "frozen state"
assert all(o["exp_avg_sq." + n].any() for n in w if n not in frozen), "trained state"
assert len(o) == 2 * (len(w) - len(frozen)), sorted(o)
assert "optim_from_layer 4\n" in open(f"{d}/manifest.txt").read(), "manifest: optim_from_layer 4"
print(f"ok: the checkpoint holds no moments for the {len(frozen)} frozen tensors (the embeddings "
      f"and blocks 0-2: optim_from_layer 4) and their EMA = weights, moments for the other "
      f"{len(w) - len(frozen)}")
PY
then echo "ok: exact resume with a frozen prefix, ZeRO-1 and the EMA: weights and EMA byte-identical"
else echo "FAIL: exact resume with a frozen prefix, ZeRO-1 and the EMA"; fail=1; fi
"$py" "$here/compare_runs.py" "$work/frz_ref1" "$work/frz_res1" \
  "2x2x2 ZeRO-1 frozen step 10 -> 1x1x1" || fail=1
# Each DP rank writes a slice of the frozen prefix beside its shard: world rank 0 writes at most
# its eighth of the checkpoint (it wrote the whole prefix of its TP shard: 0.9 of 5.1 MiB).
share=$(grep -o "this rank wrote [0-9.]* of the checkpoint's [0-9.]* MiB" "$work/frz_first.log" |
        head -1 | awk '{print $4, $8}')
if [ -n "$share" ] && awk -v s="$share" 'BEGIN {split(s, a, " "); exit !(a[1] <= a[2] / 8)}'; then
  echo "ok: ZeRO-1 with a frozen prefix: rank 0 wrote $share (MiB, of the checkpoint's)"
else echo "FAIL: ZeRO-1 with a frozen prefix: rank 0 wrote '${share}' (MiB, of the checkpoint's)"
  fail=1; fi
# The start-up's checkpoint size (model, the optimizer file without the frozen prefix, EMA) is
# what the files take.
got=$(grep -o "checkpoints: [0-9.]* MiB each" "$work/frz_first.log" | grep -o "[0-9.]*")
want=$(cd "$work/ck_frz/step-00000010" && stat -c %s model.safetensors optim.safetensors ema.safetensors |
       awk '{s += $1} END {printf "%.1f", s / 1048576}')
if [ -n "$got" ] && [ "$got" = "$want" ]; then echo "ok: the start-up's checkpoint size $got MiB is the files'"
else echo "FAIL: the start-up said checkpoints of '$got' MiB, the files take $want MiB"; fail=1; fi
# The frozen layers' missing state reads as zeros: the step-10 checkpoint continued with nothing
# frozen (--resume-override 1) on 2 ranks gives the same bits as its copy with the zero moments
# written out (and optim_from_layer gone from the manifest: every layer's state in the file).
full=$work/ck_frz_full/step-00000010
mkdir -p "$full" && cp "$work/ck_frz/step-00000010/"* "$full/"
PYTHONPATH="$here" "$py" - "$full" <<'PY' || fail=1
import json, struct, sys, zlib
import numpy as np
from compare_runs import load_safetensors
d = sys.argv[1]
w, o = (load_safetensors(f"{d}/{f}.safetensors") for f in ("model", "optim"))
names = [n for n in w if "exp_avg." + n not in o]
assert names, "no tensor without moments"
o.update({f"{k}{n}": np.zeros_like(w[n]) for k in ("exp_avg.", "exp_avg_sq.") for n in names})
head, at = {}, 0
for n, t in o.items():
    head[n] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + t.nbytes]}
    at += t.nbytes
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
blob = struct.pack("<Q", len(h)) + h + b"".join(np.ascontiguousarray(t).tobytes() for t in o.values())
open(f"{d}/optim.safetensors", "wb").write(blob)
lines = [l for l in open(f"{d}/manifest.txt")  # (unsealed, as that layout's manifests were)
         if not l.startswith("optim_from_layer ") and not l.startswith("manifest_crc32 ")]
lines = [f"file optim.safetensors {len(blob)} {zlib.crc32(blob):08x}\n"
         if l.startswith("file optim.safetensors ") else l for l in lines]
open(f"{d}/manifest.txt", "w").write("".join(lines))
print(f"the frozen checkpoint with {2 * len(names)} zero moments written out")
PY
for ck in ck_frz ck_frz_full; do
  must run unfrz_$ck 2 --tp 2 --model-ema 0.99 --resume-override 1 \
    --resume "$work/$ck/step-00000010" --final-ema "$work/unfrz_ema_$ck.st"
done
if cmp -s "$work/unfrz_ck_frz/weights.safetensors" "$work/unfrz_ck_frz_full/weights.safetensors" &&
   cmp -s "$work/unfrz_ema_ck_frz.st" "$work/unfrz_ema_ck_frz_full.st" &&
   ! cmp -s "$work/unfrz_ck_frz/weights.safetensors" "$work/frz_res1/weights.safetensors"; then
  echo "ok: the frozen checkpoint continued with nothing frozen: weights and EMA byte-identical to its copy with the zero moments written out"
else echo "FAIL: the frozen checkpoint continued with nothing frozen differs from its full copy"; fail=1; fi
# A checkpoint written in the background (--async-save 1, the default: steps 3, 6 and 9 here; 10,
# the run's last, in place) holds its step's state although training went on while it was
# written: resumed from step 9 it continues as the straight run.
must run async_first 8 --tp 2 --pp 2 --save "$work/ck_async" --save-interval 3 --run-steps 10
must run async_second 8 --tp 2 --pp 2 --save "$work/ck_async2" --resume "$work/ck_async/step-00000009"
if cmp -s "$work/straight0/weights.safetensors" "$work/async_second/weights.safetensors" &&
   [ "$(cat "$work/ck_async/latest")" = step-00000010 ] && ls "$work/ck_async" | grep -q step-00000003; then
  echo "ok: resume from a checkpoint written in the background (step 9): weights byte-identical"
else echo "FAIL: resume from a checkpoint written in the background"; ls "$work/ck_async"; fail=1; fi
# RandAugment and repeated augmentation on an image folder: the loader's state is the stream
# position, its draws keyed by (epoch, image, copy); 20 steps of 16 cross four epochs of 64.
if "$py" "$here/make_images.py" "$work/imgs" 4 16 32; then
  aug=(--tp 2 --pp 2 --data "$work/imgs" --num-classes 4 --loader-threads 1 --aa rand-m9-mstd0.5-inc1
       --aug-repeats 3)
  must run aug_straight 8 "${aug[@]}"
  must run aug_first 8 "${aug[@]}" --save "$work/ck_aug" --save-interval 10 --run-steps 10
  must run aug_second 8 "${aug[@]}" --save "$work/ck_aug" --resume auto
  if resumed aug_second 00000010 &&
     cmp -s "$work/aug_straight/weights.safetensors" "$work/aug_second/weights.safetensors"; then
    echo "ok: exact resume with RandAugment and repeated augmentation: weights byte-identical"
  else echo "FAIL: exact resume with RandAugment and repeated augmentation differs"; fail=1; fi
else
  echo "FAIL: tests/make_images.py"; fail=1
fi
# The EMA from the checkpoint (export --use-ema 1) is the run's final EMA; without one, refused.
if "$vit3d" export --checkpoint "$work/ck1/step-00000020" --out "$work/ema_export.st" \
     --use-ema 1 > /dev/null &&
   "$py" "$here/same_tensors.py" "$work/ema_export.st" "$work/ema_second.st" &&
   ! out=$("$vit3d" export --checkpoint "$work/ck0/step-00000020" --out "$work/x.st" --use-ema 1 2>&1) &&
   grep -q "has no EMA weights (it was saved without --model-ema)" <<<"$out"; then
  echo "ok: export --use-ema 1 writes the checkpoint's EMA (the run's --final-ema); refused without one"
else
  echo "FAIL: export --use-ema 1"; fail=1
fi

for mesh in "1 1 1 1" "8 4 2 1" "8 1 4 2" "8 2 1 4" "8 2 2 2 interleaved"; do
  read -r np tp pp dp sched <<<"$mesh"
  name=m${tp}${pp}${dp}${sched}
  flags=(--tp "$tp" --pp "$pp" --dp "$dp" --pp-schedule "${sched:-1f1b}")
  must run ref_$name "$np" "${flags[@]}"
  must run res_$name "$np" "${flags[@]}" --resume "$work/ck0/step-00000010"
  "$py" "$here/compare_runs.py" "$work/ref_$name" "$work/res_$name" \
    "2x2x2 step 10 -> ${tp}x${pp}x${dp} ${sched}" || fail=1
done
# A rank reads its own part only: on 4 pipeline stages rank 0 (the embeddings and 2 of the 8
# blocks) reads well under half of the checkpoint, on tp 4 x pp 2 (its TP quarter of 4 blocks,
# and the replicated tensors whole) under a quarter; one rank reads all of it.
read_share() {
  sed -n "s/.*this rank read \([0-9.]*\) of the checkpoint's \([0-9.]*\) MiB.*/\1 \2/p" "$1" | head -n 1
}
read -r got all <<<"$(read_share "$work/res_m142.log")"
read -r got1 all1 <<<"$(read_share "$work/res_m111.log")"
read -r got4 all4 <<<"$(read_share "$work/res_m421.log")"
if [ -n "${got:-}" ] && [ -n "${got1:-}" ] && [ -n "${got4:-}" ] &&
   "$py" -c "import sys; g, a, g1, a1, g4, a4 = map(float, sys.argv[1:]); sys.exit(not (g < 0.5 * a and g1 == a1 and g4 < 0.25 * a4))" \
     "$got" "$all" "$got1" "$all1" "$got4" "$all4"; then
  echo "ok: resumed on pp 4, rank 0 read $got of the checkpoint's $all MiB; on tp 4 x pp 2, $got4; one rank $got1"
else
  echo "FAIL: checkpoint reads: pp 4 rank 0 read '${got:-?}' of '${all:-?}' MiB, tp 4 x pp 2 '${got4:-?}', one rank '${got1:-?}' of '${all1:-?}'"
  fail=1
fi

# Every rank writes its part of a save: on tp 2 x pp 2 x dp 2 rank 0 wrote under a quarter.
read -r got all <<<"$(sed -n "s/.*saved .*step-00000010 in [0-9.]* s: this rank wrote \([0-9.]*\) of the checkpoint's \([0-9.]*\) MiB.*/\1 \2/p" "$work/first0.log")"
if [ -n "${got:-}" ] && "$py" -c "import sys; g, a = map(float, sys.argv[1:]); sys.exit(not 0 < g < 0.25 * a)" "$got" "$all"; then
  echo "ok: saved on tp 2 x pp 2 x dp 2, rank 0 wrote $got of the checkpoint's $all MiB"
else echo "FAIL: checkpoint writes: rank 0 wrote '${got:-?}' of '${all:-?}' MiB"; fail=1; fi
# A write that fails on another rank (test-only fault: rank 3's part of step 5, written in the
# background) is said by rank 0 with that rank's message; the last save (step 6) commits.
VT_FAULT=save-io@3:5 timeout 300 mpirun -np 4 --oversubscribe "$vit3d" "${common[@]}" --tp 2 \
  --steps 6 --save "$work/io" --save-interval 5 > "$work/io.log" 2>&1
if grep -q "^\[rank 0.*checkpoint of step 5 (written in the background) failed, any earlier one is intact: rank 3: writing its part of .*Input/output error" "$work/io.log" &&
   [ "$(cat "$work/io/latest")" = step-00000006 ] && [ ! -e "$work/io/step-00000005" ] &&
   ! ls -A "$work/io" | grep -q tmp; then
  echo "ok: rank 3's failed write said by rank 0: $(grep -o 'checkpoint of step 5.*' "$work/io.log" | head -n 1 | cut -c1-150)"
else echo "FAIL: a failed write on rank 3"; tail -20 "$work/io.log"; fail=1; fi

# A --save folder that another rank does not see (rank 1 in a mount namespace of its own, an
# empty tmpfs over the folder, as on a node-local disk): refused at start-up, naming the rank.
mkdir -p "$work/unshared"
if unshare -m true 2>/dev/null; then
  cat > "$work/private.sh" <<'SH'
#!/usr/bin/env bash
# private.sh DIR COMMAND...: on world rank 1, COMMAND sees an empty tmpfs over DIR
dir=$1; shift
[ "$OMPI_COMM_WORLD_RANK" = 1 ] && exec unshare -m bash -c 'mount -t tmpfs tmpfs "$0" && exec "$@"' "$dir" "$@"
exec "$@"
SH
  out=$(timeout 300 mpirun -np 2 --oversubscribe bash "$work/private.sh" "$work/unshared" "$vit3d" \
    "${common[@]}" --dp 2 --steps 2 --save "$work/unshared" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -q "error: --save: rank 1 (host .*) cannot see .*--save must be a folder that all ranks share" <<<"$out" &&
     [ -z "$(ls -A "$work/unshared")" ]; then
    echo "ok: a --save folder rank 1 does not see: $(grep -o 'rank 1 (host.*' <<<"$out" | head -n 1 | cut -c1-150)"
  else echo "FAIL: unshared --save: rc $rc: $(grep -v '^\[rank' <<<"$out" | head -5)"; fail=1; fi
  # A --resume checkpoint that rank 1 does not see: rank 0 says rank 1's own message.
  out=$(timeout 300 mpirun -np 2 --oversubscribe bash "$work/private.sh" "$work/ck0" "$vit3d" \
    "${common[@]}" --dp 2 --steps 12 --resume "$work/ck0/step-00000010" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -q "cannot resume.*rank 1: .*ck0/step-00000010/.*No such file" <<<"$out"; then
    echo "ok: a --resume checkpoint rank 1 does not see: $(grep -o 'rank 1: .*' <<<"$out" | head -n 1 | cut -c1-150)"
  else echo "FAIL: unshared --resume: rc $rc: $(grep -v '^\[rank' <<<"$out" | head -5)"; fail=1; fi
else
  echo "skipped the unshared --save case: unshare -m is not allowed here"
fi

# kill -9 of one rank in the middle of a run: checkpoints every 5 steps, kill after step 10's.
timeout 300 mpirun -np 8 --oversubscribe "$vit3d" "${common[@]}" --tp 2 --pp 2 \
  --save "$work/kill" --save-interval 5 > "$work/kill1.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ -f "$work/kill/step-00000010/manifest.txt" ] && break; sleep 0.1; done
victim=$(pgrep -f "^$vit3d train.*$work/kill" | sed -n 3p)  # not another test's rank (ctest -j)
[ -n "$victim" ] && kill -9 "$victim"
wait $launcher
rc=$?
echo "killed rank pid $victim after step 10's checkpoint; mpirun exited with $rc"
must run kill2 8 --tp 2 --pp 2 --save "$work/kill" --save-interval 5 --resume auto
if [ -z "$victim" ] || [ $rc -eq 0 ]; then  # (nothing killed: only a plain resume was checked)
  echo "FAIL: kill -9 mid-run: no rank was found to kill, or the run was not ended by it"; fail=1
elif resumed kill2 '0000001[05]' &&  # (step 15's save may land before the kill)
     cmp -s "$work/straight0/weights.safetensors" "$work/kill2/weights.safetensors"; then
  echo "ok: relaunch after kill -9 mid-run equals the uninterrupted run"
else echo "FAIL: relaunch after kill -9 mid-run differs"; fail=1; fi

# kill -9 of rank 0 between every rank's writes of the step-15 save (in the background) and
# its commit (test-only fault switch): the relaunch recovers it from the ranks' marks, verified
# by its CRC-32s, and resumes there. A copy with one rank's mark gone (that rank still writing
# when the run died) is removed and the relaunch resumes from step 10.
VT_FAULT=kill-in-save@0:15 timeout 300 mpirun -np 8 --oversubscribe "$vit3d" "${common[@]}" \
  --tp 2 --pp 2 --save "$work/ksave" --save-interval 5 > "$work/ksave1.log" 2>&1
echo "killed in the middle of the step-15 save: mpirun exited with $?; left: $(ls -A "$work/ksave" | tr '\n' ' ')"
cp -r "$work/ksave" "$work/kpart" && rm -f "$work/kpart/.tmp-step-00000015/part-000005"
must run ksave2 8 --tp 2 --pp 2 --save "$work/ksave" --save-interval 5 --resume auto
grep -q "recovered .*step-00000015: every rank had written its part of step 15's save" "$work/ksave2.log" &&
  resumed ksave2 00000015 && ! ls -A "$work/ksave" | grep -q tmp &&
  [ "$(ls "$work/ksave/step-00000015" | tr '\n' ' ')" = "manifest.txt model.safetensors optim.safetensors " ] &&
  cmp -s "$work/straight0/weights.safetensors" "$work/ksave2/weights.safetensors" &&
  echo "ok: relaunch after kill -9 between the step-15 save's writes and its commit recovered it, resumed there, equals the uninterrupted run" ||
  { echo "FAIL: relaunch after kill -9 mid-save"; grep -i "resum\|tmp\|recover" "$work/ksave2.log"; ls -A "$work/ksave"/*; fail=1; }
must run kpart 8 --tp 2 --pp 2 --save "$work/kpart" --resume auto --run-steps 1
grep -q "removing .*step-00000015, left by an interrupted save: rank 5 of its 8 had not written its part" "$work/kpart.log" &&
  resumed kpart 00000010 && ! ls -A "$work/kpart" | grep -q tmp &&
  echo "ok: a save with one rank's part unmarked is removed, the relaunch resumes from step 10" ||
  { echo "FAIL: a save with one rank's part unmarked"; grep -i "resum\|tmp\|recover" "$work/kpart.log"; fail=1; }

# Ctrl-C: SIGINT to one rank (rank 0 slowed by the fault switch, so the run is still going):
# every rank stops at the same step boundary with a checkpoint and exit 130; a relaunch with
# --resume auto equals the uninterrupted run.
VT_FAULT=slow@0:1-1000000 timeout 300 mpirun -np 8 --oversubscribe "$vit3d" "${common[@]}" \
  --tp 2 --pp 2 --save "$work/intr" --save-interval 100 > "$work/intr1.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do grep -q "memory plan" "$work/intr1.log" && break; sleep 0.1; done
sleep 1
victim=$(pgrep -f "^$vit3d train.*$work/intr" | sed -n 5p)
[ -n "$victim" ] && kill -INT "$victim"
wait $launcher
rc=$?
at=$(grep -o "interrupted (SIGINT on some rank) at step [0-9]*" "$work/intr1.log" | grep -o "[0-9]*$")
must run intr2 8 --tp 2 --pp 2 --save "$work/intr" --save-interval 100 --resume auto
if [ $rc -eq 130 ] && [ -n "$at" ] && [ "$at" -lt 20 ] &&
   grep -q "resumed from .*step-0*$at:" "$work/intr2.log" &&
   cmp -s "$work/straight0/weights.safetensors" "$work/intr2/weights.safetensors"; then
  echo "ok: SIGINT stopped every rank at step $at with a checkpoint (exit 130); the relaunch equals the uninterrupted run"
else
  echo "FAIL: SIGINT: mpirun exit $rc, step '$at'"; grep -i "interrupt\|saved\|error" "$work/intr1.log" | head; fail=1
fi

# A damaged newest checkpoint: --resume auto uses the previous one and says so.
mkdir -p "$work/dmg" && cp -r "$work/kill/step-00000010" "$work/kill/step-00000015" "$work/dmg/" 2>/dev/null
echo step-00000015 > "$work/dmg/latest"
printf 'garbage' | dd of="$work/dmg/step-00000015/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
must run dmg 8 --tp 2 --pp 2 --save "$work/dmg" --resume auto --run-steps 1
grep -q "CRC-32" "$work/dmg.log" && grep -q "previous complete checkpoint" "$work/dmg.log" &&
  grep -q "resumed from .*step-00000010" "$work/dmg.log" &&
  echo "ok: damaged newest checkpoint refused (CRC), the previous one used" ||
  { echo "FAIL: damaged checkpoint fallback"; grep -i "damag\|resum" "$work/dmg.log"; fail=1; }
# A flipped byte near the end of optim.safetensors (the last stage's moments, which neither
# rank 0 nor any rank of the first stage reads): found by the CRC-32 shares of the ranks that
# read it, and the previous checkpoint used.
mkdir -p "$work/dmg2" && cp -r "$work/kill/step-00000010" "$work/kill/step-00000015" "$work/dmg2/" 2>/dev/null
echo step-00000015 > "$work/dmg2/latest"
size=$(stat -c %s "$work/dmg2/step-00000015/optim.safetensors")
printf '\x5a' | dd of="$work/dmg2/step-00000015/optim.safetensors" bs=1 seek=$((size - 1000)) conv=notrunc 2>/dev/null
must run dmg2 8 --tp 2 --pp 2 --save "$work/dmg2" --resume auto --run-steps 1
grep -q "step-00000015 is damaged: optim.safetensors has CRC-32" "$work/dmg2.log" &&
  grep -q "previous complete checkpoint" "$work/dmg2.log" &&
  grep -q "resumed from .*step-00000010" "$work/dmg2.log" &&
  echo "ok: a flipped byte in the last stage's moments found by the ranks' CRC shares, the previous checkpoint used" ||
  { echo "FAIL: damaged moments"; grep -i "damag\|resum" "$work/dmg2.log"; fail=1; }
exit $fail
