#!/usr/bin/env bash
# quickstart.sh: the README's main job on a fresh machine. Builds vit3d (installing what is
# missing), converts Debian's Fashion-MNIST into PNG folders, then trains a small ViT on it on
# 8 CPU ranks arranged as a 2 x 2 x 2 mesh (tensor x pipeline x data parallel), evaluating on
# the validation set at the end. Writes runs/quickstart/metrics.jsonl. Extra flags are passed
# to `vit3d train` (later flags win).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/launch/build.sh" "$root/build" > "$root/build.log" 2>&1 ||
  { tail -40 "$root/build.log"; echo "quickstart: the build failed (full log: build.log)"; exit 1; }
data=$root/data/fashion-mnist
"$root/build/vit3d" prepare fashion-mnist "$data"
# Open MPI refuses to run as root unless told, and with more ranks than cores it must yield
# instead of spinning, or collectives crawl.
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
# The recipe of docs/recipes.md: patch 7 (16 tokens), no random zoom (Fashion-MNIST items are
# centred and small), flips, evaluation without zoom. A shorter run (--steps N below 1000) warms
# up over a tenth of it instead of 100 steps (a later --warmup-steps still wins).
warmup=100
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  steps=
  case ${args[i]} in
    --steps) steps=${args[i + 1]:-} ;;
    --steps=*) steps=${args[i]#--steps=} ;;
  esac
  if [[ "$steps" =~ ^[0-9]+$ ]] && [ "$steps" -lt 1000 ]; then warmup=$((10#$steps / 10)); fi
done
cmd=(mpirun -np 8 --oversubscribe "$root/build/vit3d" train --tp 2 --pp 2 --dp 2
     --model tiny --img-size 28 --patch-size 7 --width 64 --heads 4 --depth 4 --num-classes 10
     --data "$data/train" --val-data "$data/val" --mean 0.286,0.286,0.286 --std 0.353,0.353,0.353
     --crop-scale-min 1 --hflip 0.5 --eval-crop-pct 1 --micro-batch-size 128
     --global-batch-size 256 --steps 1800 --lr 4e-3 --warmup-steps "$warmup" --eval-interval 600
     --log-interval 100 --loader-threads 1 --log-dir "$root/runs/quickstart" "$@")
printf 'quickstart: '
printf '%q ' "${cmd[@]}"  # (quoted: it pastes back into a shell, spaces in paths included)
printf '\n'
"${cmd[@]}"
echo "quickstart: done; per-step metrics in metrics.jsonl of the --log-dir (runs/quickstart unless given)"
