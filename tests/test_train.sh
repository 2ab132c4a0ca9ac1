#!/usr/bin/env bash
# test_train.sh VIT3D: `vit3d train --data synthetic` on a small model lowers the loss clearly
# within 50 steps, and two runs with the same seed write identical losses to metrics.jsonl.
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
"$vit3d" "${args[@]}" --log-dir "$work/b" > /dev/null
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
