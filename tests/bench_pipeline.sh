#!/usr/bin/env bash
# bench_pipeline.sh VIT3D: pipeline bubble, measured. Runs 4 pipeline stages (1F1B) with
# m = 4, 8 and 16 micro-batches per step and prints each stage's idle fraction (1 - time in
# forward/backward / step time, steps after the first) beside the ideal (p-1)/(m+p-1).
# Conditions matter: with more ranks than cores, a stage also waits for a core, so the measured
# idle is an upper bound there; the script says how many cores it had.
set -uo pipefail
vit3d=$1
cores=$(nproc)
echo "bench_pipeline: 4 ranks (pp 4, 1F1B), 1 thread each, $cores cores; model tiny, depth 8"
[ "$cores" -lt 4 ] && echo "bench_pipeline: fewer cores than ranks: stages also wait for a core"
for m in 4 8 16; do
  mpirun -np 4 --oversubscribe "$vit3d" train --model tiny --depth 8 --pp 4 \
    --micro-batch-size 4 --global-batch-size $((4 * m)) --steps 8 --threads 1 2>&1 |
    grep "pipeline idle" | sed 's/^\[[^]]*\] //'
done
