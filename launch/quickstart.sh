#!/usr/bin/env bash
# quickstart.sh: the README's main job on a fresh machine. Builds vit3d (installing what is
# missing), then trains a small ViT on the built-in synthetic image task on 8 CPU ranks arranged
# as a 2 x 2 x 2 mesh (tensor x pipeline x data parallel) and writes
# runs/quickstart/metrics.jsonl. Extra flags are passed to `vit3d train`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/launch/build.sh" "$root/build" > "$root/build.log" 2>&1 ||
  { tail -40 "$root/build.log"; echo "quickstart: the build failed (full log: build.log)"; exit 1; }
# Open MPI refuses to run as root unless told, and with more ranks than cores it must yield
# instead of spinning, or collectives crawl.
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
cmd=(mpirun -np 8 --oversubscribe "$root/build/vit3d" train --tp 2 --pp 2 --dp 2
     --model tiny --data synthetic --steps 100 --global-batch-size 64 --micro-batch-size 8
     --lr 2e-3 --log-dir "$root/runs/quickstart" "$@")
echo "quickstart: ${cmd[*]}"
"${cmd[@]}"
echo "quickstart: done; per-step metrics in runs/quickstart/metrics.jsonl"
