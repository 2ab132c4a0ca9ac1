#!/usr/bin/env bash
# quickstart.sh: the README's main job on a fresh machine. Builds vit3d (installing what is
# missing), then trains a small ViT on the built-in synthetic image task on CPU and writes
# runs/quickstart/metrics.jsonl. Extra flags are passed to `vit3d train`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/launch/build.sh" "$root/build" > "$root/build.log" 2>&1 ||
  { tail -40 "$root/build.log"; echo "quickstart: the build failed (full log: build.log)"; exit 1; }
cmd=("$root/build/vit3d" train --model tiny --data synthetic --steps 100 --global-batch-size 64
     --micro-batch-size 32 --warmup-steps 10 --lr 2e-3 --log-dir "$root/runs/quickstart" "$@")
echo "quickstart: ${cmd[*]}"
"${cmd[@]}"
echo "quickstart: done; per-step metrics in runs/quickstart/metrics.jsonl"
