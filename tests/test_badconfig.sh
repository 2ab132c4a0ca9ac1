#!/usr/bin/env bash
# test_badconfig.sh VIT3D: every bad mesh configuration is refused under mpirun with 8 ranks by
# one clear message (printed once, by rank 0) and a clean exit of every rank with code 2, never
# a hang (each run has a time limit). Here tp 1, pp P and dp 8 / P unless the flags say.
set -uo pipefail
vit3d=$1
fail=0
base=(train --model tiny --heads 8 --depth 8 --global-batch-size 16 --micro-batch-size 2 --steps 2)
refuse() {  # refuse "expected message" flags...
  local want=$1; shift
  local out rc
  out=$(timeout 120 mpirun -np 8 --oversubscribe "$vit3d" "${base[@]}" "$@" 2>&1); rc=$?
  local times
  times=$(grep -cF -- "$want" <<<"$out")
  if [ "$rc" -eq 124 ]; then
    echo "FAIL: $* hung (killed after 120 s)"; fail=1
  elif [ "$rc" -ne 2 ] || [ "$times" -ne 1 ]; then
    echo "FAIL: $* -> rc $rc, message seen $times times (want rc 2, once): $out"; fail=1
  else
    echo "ok: $* -> $(grep -F -- "$want" <<<"$out")"
  fi
}
refuse "tp 2 x pp 2 x dp 3 = 12 ranks, but the job has 8" --tp 2 --pp 2 --dp 3
refuse "does not divide" --tp 3
refuse "--tp 8 does not divide the 4 attention heads" --tp 8 --heads 4
refuse "--tp 4 does not divide the MLP width 258" --tp 4 --heads 4 --mlp-ratio 4.03125
refuse "--tp 4 does not divide the MLP width 4302" --tp 4 --heads 4 --mlp-dim 4302
refuse "--pp 8 stages but only 4 blocks" --pp 8 --depth 4
refuse "--global-batch-size 12 is not a multiple of dp 8 x --micro-batch-size 2 = 16" \
       --global-batch-size 12
refuse "--pp-schedule: 'zb' is not one of 1f1b|gpipe|interleaved|zb-h1|zb-v" --pp-schedule zb
# The interleaved schedule takes micro-batches in groups of pp: 12 / (2 x 2) = 3 over 4 stages.
refuse "needs the micro-batches per step to be a multiple of the pipeline ranks" \
       --pp 4 --pp-schedule interleaved --global-batch-size 12
refuse "--pp 4 x --pp-chunks 4 = 16 virtual pipeline stages but only 8 blocks" \
       --pp 4 --pp-schedule interleaved --pp-chunks 4
refuse "--mesh-order" --mesh-order pp-dp-tp
exit $fail
