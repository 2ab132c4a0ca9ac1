#!/usr/bin/env bash
# test_train.sh VIT3D: `vit3d train --data synthetic` on a small model lowers the loss clearly
# within 50 steps, and two runs with the same seed write identical losses to metrics.jsonl.
set -euo pipefail
vit3d=$1
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
