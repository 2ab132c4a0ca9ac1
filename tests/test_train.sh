#!/usr/bin/env bash
# test_train.sh VIT3D: `vit3d train --data synthetic` on a small model lowers the loss clearly
# within 50 steps, and two runs with the same seed write identical losses to metrics.jsonl (the
# second on 1 thread instead of 2: the bits do not depend on the thread count; also at small
# GEMMs, 1, 2 and 3 threads, the final weights byte for byte).
# --check-log (end of the file) compares runs with a logged one.
# Then --precision bf16 (the CPU twin of the CUDA bf16 GEMMs): two runs identical, and the loss
# curve follows the fp32 run's (relative difference per step: 1e-3 at step 1, one forward from the
# same weights where only the GEMM operands' rounding differs (measured 2e-5); 1e-2 for steps
# 2-20 and 3e-2 after, as the differences feed back through AdamW (measured at most 5e-4 over
# 100 steps); the mean of the last 10 losses within 1e-2).
set -euo pipefail
vit3d=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(train --model tiny --data synthetic --steps 50 --global-batch-size 32 --micro-batch-size 16
      --warmup-steps 5 --lr 2e-3 --seed 7 --threads 2 --log-interval 10)
"$vit3d" "${args[@]}" --log-dir "$work/a"
"$vit3d" "${args[@]}" --threads 1 --log-dir "$work/b" > /dev/null
# (GEMMs of a few hundred thousand multiply-adds, where a band per thread fell below OpenBLAS's
# small-matrix kernels, which round otherwise: threads 2 and 3 differed from 1 at step 1)
small=(train --model tiny --img-size 32 --patch-size 8 --width 32 --heads 4 --depth 4
       --num-classes 4 --global-batch-size 16 --micro-batch-size 4 --steps 3 --warmup-steps 1)
for t in 1 2 3; do "$vit3d" "${small[@]}" --threads $t --final-weights "$work/t$t.st" > /dev/null; done
cmp "$work/t1.st" "$work/t2.st" && cmp "$work/t1.st" "$work/t3.st" ||
  { echo "FAIL: the final weights depend on the thread count"; exit 1; }
# (and at ViT-Ti/16's GEMMs, of 2^20 multiply-adds or more a band: merged to one band per thread,
# their bits differed by thread count under OpenBLAS's Haswell and Zen kernels)
ti=(train --model vit-ti16 --num-classes 10 --global-batch-size 8 --micro-batch-size 8 --steps 1
    --warmup-steps 0)
# Also under OpenBLAS's Haswell kernel (AMD's and AVX2-only Intel's, where a dynamic OpenBLAS
# has it), whose rounding depends on a split that this CPU's may not.
for core in "" Haswell; do
  for t in 1 2 3; do
    OPENBLAS_CORETYPE=$core "$vit3d" "${ti[@]}" --threads $t --final-weights "$work/ti$t.st" \
      > /dev/null
  done
  cmp "$work/ti1.st" "$work/ti2.st" && cmp "$work/ti1.st" "$work/ti3.st" ||
    { echo "FAIL: ViT-Ti/16's final weights depend on the thread count (${core:-default} kernel)"
      exit 1; }
done
echo "ok: 1, 2 and 3 threads train the very same weights (a tiny model and ViT-Ti/16)"
python3 - "$work/a/metrics.jsonl" "$work/b/metrics.jsonl" <<'PY'
import json, sys
runs = [[json.loads(line) for line in open(p)] for p in sys.argv[1:]]
a, b = runs
assert len(a) == 50 and len(b) == 50, "expected 50 metric lines per run"
for key in ("step", "loss", "lr", "grad_norm", "img_per_s", "step_ms"):
    assert key in a[0], f"metrics.jsonl lacks {key}"
la, lb = [r["loss"] for r in a], [r["loss"] for r in b]
if la != lb:
    s = next(i for i in range(50) if la[i] != lb[i])
    sys.exit(f"FAIL: same seed, different losses from step {s + 1}: {la[s]} vs {lb[s]}")
first, last = sum(la[:5]) / 5, sum(la[-5:]) / 5
print(f"mean loss of steps 1-5: {first:.4f}, of steps 46-50: {last:.4f}; runs identical")
if not last < 0.7 * first:
    sys.exit(f"FAIL: the loss did not fall clearly ({first:.4f} -> {last:.4f}, want < 70%)")
PY
"$vit3d" "${args[@]}" --precision bf16 --log-dir "$work/c" > "$work/c.log" 2>&1
grep -q "bf16 GEMMs" "$work/c.log" || { echo "FAIL: the bf16 run does not say bf16 GEMMs"; exit 1; }
"$vit3d" "${args[@]}" --precision bf16 --log-dir "$work/d" > /dev/null
python3 "$here/compare_curves.py" "$work/c/metrics.jsonl" "$work/a/metrics.jsonl" --same "$work/d/metrics.jsonl" \
  --label "cpu bf16 vs cpu fp32" --bands 1-1:1e-3,2-20:1e-2,21-50:3e-2 --tail-tol 1e-2
cmp -s <(grep -o '"loss": [^,]*' "$work/a/metrics.jsonl") <(grep -o '"loss": [^,]*' "$work/c/metrics.jsonl") &&
  { echo "FAIL: --precision bf16 logged the very losses of fp32: no rounding happened"; exit 1; }
echo "bf16 losses differ from fp32 ones, within the bands"

# --check-log: a run resumed at step 30 repeats the first run's steps 31-50 bit for bit as
# printed (exit 0, 20 steps compared); a run with another seed differs (exit 5, the first step
# named); another precision stays within --check-tol 3e-2 (the bf16 bands above); a reference
# that is not a metrics log stops the run before it starts (exit 2). The resumed run appends to
# its --log-dir's metrics.jsonl, after dropping a line cut in the middle (as a killed run leaves
# it): the file then holds the 50 steps of the uninterrupted run.
"$vit3d" "${args[@]}" --save "$work/ck" --save-interval 30 --run-steps 30 --log-dir "$work/r" \
  > /dev/null 2>&1
printf '{"step": 31, "loss": 2.' >> "$work/r/metrics.jsonl"
"$vit3d" "${args[@]}" --resume "$work/ck/step-00000030" --check-log "$work/a/metrics.jsonl" \
  --log-dir "$work/r" > "$work/e.log" 2>&1 ||
  { echo "FAIL: the resumed run with --check-log exited $?"; tail -5 "$work/e.log"; exit 1; }
grep -q -- "--check-log: 20 steps equal .* bit for bit" "$work/e.log" ||
  { echo "FAIL: no verdict of 20 equal steps"; grep -- "--check-log" "$work/e.log"; exit 1; }
python3 - "$work/a/metrics.jsonl" "$work/r/metrics.jsonl" <<'PY'
import json, sys
a, r = ([{k: v for k, v in json.loads(l).items() if k in ("step", "loss", "grad_norm", "lr")}
         for l in open(p)] for p in sys.argv[1:])
if a != r:
    sys.exit(f"FAIL: the resumed run's appended log ({len(r)} lines) is not the uninterrupted run's")
PY
set +e
"$vit3d" "${args[@]}" --seed 8 --steps 3 --warmup-steps 1 --check-log "$work/a/metrics.jsonl" \
  --final-weights "$work/f.safetensors" > "$work/f.log" 2>&1
rc_seed=$?
"$vit3d" "${args[@]}" --precision bf16 --check-log "$work/a/metrics.jsonl" --check-tol 3e-2 \
  > "$work/g.log" 2>&1
rc_tol=$?
printf 'not a metrics line\n' > "$work/junk.jsonl"
"$vit3d" "${args[@]}" --check-log "$work/junk.jsonl" > "$work/h.log" 2>&1
rc_junk=$?
set -e
[ $rc_seed -eq 5 ] && grep -q -- "--check-log: 3 of 3 steps differ .* the first at step 1" "$work/f.log" &&
  [ -s "$work/f.safetensors" ] ||
  { echo "FAIL: another seed gave rc $rc_seed"; grep -- "--check-log" "$work/f.log"; exit 1; }
[ $rc_tol -eq 0 ] && grep -q -- "--check-log: 50 steps equal .* within --check-tol" "$work/g.log" ||
  { echo "FAIL: bf16 within 3e-2 gave rc $rc_tol"; grep -- "--check-log" "$work/g.log"; exit 1; }
[ $rc_junk -eq 2 ] && grep -q "junk.jsonl:1: not a metrics.jsonl line" "$work/h.log" ||
  { echo "FAIL: a junk reference gave rc $rc_junk"; tail -3 "$work/h.log"; exit 1; }
echo "check-log: a resume repeats steps 31-50 bit for bit and completes the log; another seed exits 5 at step 1; bf16 within 3e-2; a junk reference exits 2"
