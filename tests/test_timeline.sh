#!/usr/bin/env bash
# test_timeline.sh VIT3D [VIT3D_EMU]: --trace-steps (launch/timeline.c), checked by
# tests/timeline_check.py:
#  1. pp 2 x dp 2 under zb-h1, steps 2-4 of 5: every rank's row, each step's forward, backward
#     and weight passes of its 4 micro-batches, stages in causal order on the shared clock, the
#     steps' durations against metrics.jsonl; tp 2 x pp 2 in the world without MPI (spawn.sh);
#  2. tp 2 x pp 2 interleaved (2 chunks) on an image folder, evaluating and saving at step 3:
#     the evaluation's and the save's ranges in the timeline;
#  3. one rank, a one-step run: that step; a resumed run's window starts after its first step;
#  4. --trace-steps without --log-dir is refused (exit 2) with what to add;
#  5. with VIT3D_EMU (vit3d on the CPU emulation of CUDA), pp 2 under zb-h1 on two emulated
#     GPUs: each row's device track (the passes' timing events) holds every pass of each step,
#     one after another, the stages' device passes in causal order.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
emu=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
fail=0
tiny=(train --model tiny --threads 1 --seed 4)
run() {  # run NAME NP flags...: the run's output in NAME.log
  local name=$1 np=$2
  shift 2
  if ! mpirun -np "$np" --oversubscribe "$vit3d" "${tiny[@]}" "$@" > "$work/$name.log" 2>&1
  then
    echo "FAIL: run $name:"; tail -5 "$work/$name.log"; fail=1; return 1
  fi
}
check() {  # check NAME ARGS...: timeline_check.py on NAME's trace
  local name=$1
  shift
  "$py" "$here/timeline_check.py" "$work/$name/trace.json" "$work/$name/metrics.jsonl" "$@" ||
    fail=1
}

run zbh1 4 --data synthetic --pp 2 --dp 2 --pp-schedule zb-h1 --micro-batch-size 4 \
  --global-batch-size 32 --steps 5 --trace-steps 3 --log-dir "$work/zbh1" &&
  check zbh1 4 4 1 1 0
grep -q "timeline of steps 2-4 on 4 ranks" "$work/zbh1.log" ||
  { echo "FAIL: zbh1: no line naming the timeline"; fail=1; }

# The same gathered over the world without MPI (launch/spawn.sh: ranks meet over TCP).
if VT_WORLD=tcp bash "$here/../launch/spawn.sh" 4 "$vit3d" "${tiny[@]}" --data synthetic \
    --tp 2 --pp 2 --micro-batch-size 4 --global-batch-size 16 --steps 4 --trace-steps 2 \
    --log-dir "$work/tcp" > "$work/tcp.log" 2>&1; then
  check tcp 4 4 1 0 0
else
  echo "FAIL: the TCP run:"; tail -5 "$work/tcp.log"; fail=1
fi

"$py" "$here/make_images.py" "$work/img" 3 8 32 || { echo "FAIL: make_images.py"; exit 1; }
run inter 4 --img-size 32 --patch-size 8 --num-classes 3 --data "$work/img" \
  --val-data "$work/img" --loader-threads 1 --tp 2 --pp 2 --pp-schedule interleaved \
  --micro-batch-size 2 --global-batch-size 4 --steps 4 --eval-interval 3 --save "$work/ck" \
  --save-interval 3 --trace-steps 2 --log-dir "$work/inter" &&
  check inter 4 2 2 0 0 evaluation "checkpoint save"

run one 1 --data synthetic --micro-batch-size 4 --global-batch-size 4 --steps 1 \
  --trace-steps 5 --log-dir "$work/one" && check one 1 1 1 0 0
one=(--data synthetic --micro-batch-size 4 --global-batch-size 4 --save "$work/ck1")
run first 1 "${one[@]}" --steps 4 --run-steps 2 &&
  run resumed 1 "${one[@]}" --steps 4 --resume auto --trace-steps 1 --log-dir "$work/resumed" &&
  check resumed 1 1 1 0 0
grep -q "timeline of steps 4-4 on 1 ranks" "$work/resumed.log" ||
  { echo "FAIL: the resumed run's timeline is not of step 4 alone"; fail=1; }

"$vit3d" "${tiny[@]}" --data synthetic --steps 2 --trace-steps 2 > "$work/refused.log" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q -- "--trace-steps.*give --log-dir" "$work/refused.log"; then
  echo "ok: --trace-steps without --log-dir refused"
else
  echo "FAIL: --trace-steps without --log-dir: exit $rc"; cat "$work/refused.log"; fail=1
fi
if [ -n "$emu" ] && [ -x "$emu" ]; then
  if EMU_GPUS=2 timeout 600 mpirun -np 2 --oversubscribe -x EMU_GPUS "$emu" "${tiny[@]}" \
      --device cuda --data synthetic --pp 2 --pp-schedule zb-h1 --micro-batch-size 2 \
      --global-batch-size 8 --steps 4 --trace-steps 2 --log-dir "$work/gpu" > "$work/gpu.log" 2>&1
  then
    check gpu 2 4 1 1 1
  else
    echo "FAIL: the emulated GPU run:"; tail -5 "$work/gpu.log"; fail=1
  fi
fi

[ "$fail" = 0 ] && echo "all timeline checks passed"
exit "$fail"
