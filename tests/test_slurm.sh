#!/usr/bin/env bash
# test_slurm.sh VIT3D: the launch scripts, end to end, on one host (label launch).
#  1. a real Slurm (tests/slurm_cluster.sh: munged, slurmctld, two slurmd "nodes"): the batch
#     script launch/slurm.sbatch runs a 2x2x2 mesh over 2 nodes x 4 tasks with srun --mpi=pmix;
#     SIGUSR1 to the batch shell in the middle (what --signal=B:USR1@T delivers) makes it
#     checkpoint, exit 75 and requeue itself; the requeued job resumes with --resume auto and
#     finishes; its final parameters equal, byte for byte, those of an uninterrupted run;
#  2. the same job without preemption through launch/slurm_mpirun.sbatch (mpirun inside the
#     allocation), slurm.sbatch with VIT3D_LAUNCHER=tcp (srun --mpi=none: no MPI, the ranks meet
#     over TCP; every axis has two ranks, whose sum any transport adds alike),
#     launch/mpirun_local.sh and launch/mpirun_hosts.sh (a localhost hostfile): the same final
#     parameters again.
# Skips (77) without root or without Slurm and munge installed. Cleans up after itself.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(cd "$here/.." && pwd)  # the repository: the scripts under launch/
export VIT3D_BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
export VIT3D_DIR=$dir  # sbatch scripts find launch/slurm_job.sh here
[ "$(id -u)" -eq 0 ] || { echo "SKIP: the single-host Slurm needs root"; exit 77; }
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged sbatch scontrol srun; do
  command -v "$b" > /dev/null || { echo "SKIP: $b is not installed (apt-get install slurmctld slurmd slurm-client munge)"; exit 77; }
done
source "$here/slurm_cluster.sh"
work=$(mktemp -d)
cleanup() { scancel --quiet --user=root 2> /dev/null; sleep 1; slurm_stop; rm -rf "$SLURM_DIR"; [ -n "${VT_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"; }
trap cleanup EXIT
# A fixed place for the daemons' state, so a run killed before its cleanup is cleaned next time.
slurm_start /tmp/vit3d-slurm-test || { echo "FAIL: could not start the test Slurm"; exit 1; }
echo "ok: Slurm up: $(sinfo -h -N -o '%N %T' | tr '\n' ' ')"

# 8 ranks on 2 cores: ranks must yield when idle; emulated nodes on one host need TCP between
# "nodes" (shared memory across slurmd's pmix namespaces crashes) - see docs/operations.md.
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
flags=(--model tiny --tp 2 --pp 2 --steps 120 --micro-batch-size 8 --global-batch-size 32
       --seed 3 --threads 1 --log-interval 10 --save-interval 40 --timeout-s 120)
fail=0

# wait_job ID SECONDS: until the job has left the queue (completed, failed or cancelled).
wait_job() {
  local i state
  for i in $(seq 1 "$2"); do
    state=$(scontrol show job "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case $state in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) echo "$state"; return 0 ;; esac
    sleep 1
  done
  echo "STILL-${state:-UNKNOWN}"
  return 1
}

submit() {  # submit SCRIPT NAME: prints the job id
  sbatch --parsable -D "$dir" -o "$work/$2.out" --export=ALL "$dir/launch/$1" "${flags[@]}" \
    --save "$work/$2" --final-weights "$work/$2.safetensors"
}

# 1. Preempted in the middle, requeued, resumed.
in_queue() { squeue -h -j "$1" 2> /dev/null | grep -q .; }
# started NAME JOB: waits until the job has logged step 20 (0), or has left the queue (1).
started() {
  for i in $(seq 1 120); do
    grep -q "^step    20/" "$work/$1.out" 2> /dev/null && return 0
    in_queue "$2" || return 1
    sleep 0.5
  done
}
job=$(submit slurm.sbatch pre) || { echo "FAIL: sbatch refused the job"; exit 1; }
# Under load Open MPI's TCP wire-up between srun's tasks has failed here once (a task's
# segmentation fault after "failed to TCP connect to a peer", before any step): that start,
# and only that, is tried once more, and said.
if ! started pre "$job" && ! grep -q "^step " "$work/pre.out" &&
   grep -q "failed to TCP connect" "$work/pre.out"; then
  echo "note: job $job died in Open MPI's start-up before its first step; submitting it again:"
  grep -m3 -E "failed to TCP connect|Segmentation fault" "$work/pre.out"
  mv "$work/pre.out" "$work/pre.first.out"
  job=$(submit slurm.sbatch pre) || { echo "FAIL: sbatch refused the job"; exit 1; }
  started pre "$job"
fi
scancel --batch --signal=USR1 "$job"
echo "sent SIGUSR1 to the batch shell of job $job after step 20"
requeued=0
for i in $(seq 1 120); do
  if scontrol show job "$job" | grep -q "Restarts=1"; then requeued=1; break; fi
  in_queue "$job" || break
  sleep 1
done
# start_requeued: a requeued job waits 120 s before it may start; start it as soon as the old
# job's slurmstepd processes are gone (a new step of the same id cannot start beside them).
start_requeued() {
  for i in $(seq 1 60); do
    pgrep -x slurmstepd > /dev/null || break
    sleep 1
  done
  scontrol update jobid="$job" StartTime=now
}
if [ $requeued = 1 ]; then
  start_requeued
  state=$(wait_job "$job" 300)
  # The same Open MPI wire-up failure as above, in the requeued start (seen once in CI): that
  # start, and only that, is requeued once more (restart 2, from the same checkpoint), and said.
  since=$(awk '/restart 1$/ {n = NR} END {print n + 0}' "$work/pre.out")
  if [ "$state" = FAILED ] && ! tail -n +"$((since + 1))" "$work/pre.out" | grep -q "^step " &&
     tail -n +"$((since + 1))" "$work/pre.out" | grep -q "failed to TCP connect"; then
    echo "note: job $job's requeued start died in Open MPI's start-up before its first step;" \
      "requeueing it again:"
    tail -n +"$((since + 1))" "$work/pre.out" | grep -m3 -E "failed to TCP connect|Segmentation fault"
    scontrol requeue "$job" && start_requeued && state=$(wait_job "$job" 300)
  fi
else
  state="NOT-REQUEUED"
fi
if [ "$state" = COMPLETED ] && grep -q "preempted (signal SIGUSR1" "$work/pre.out" &&
   grep -q "requeueing job $job" "$work/pre.out" && grep -q "restart 1" "$work/pre.out" &&
   grep -q "resum.*step" "$work/pre.out" && grep -q "^step   120/120" "$work/pre.out"; then
  echo "ok: USR1 -> checkpoint at $(grep -o 'preempted (signal SIGUSR1 on some rank) at step [0-9]*' "$work/pre.out" | grep -o '[0-9]*$'), exit 75, requeue, resume, completed"
else
  echo "FAIL: preemption and requeue (job $job: $state)"
  tail -40 "$work/pre.out"
  fail=1
fi

# 2. The same job, uninterrupted, five ways.
job=$(submit slurm_mpirun.sbatch mpi) && state=$(wait_job "$job" 300) || state=FAILED
[ "$state" = COMPLETED ] || { echo "FAIL: slurm_mpirun.sbatch job $job: $state"; tail -20 "$work/mpi.out"; fail=1; }
job=$(VIT3D_LAUNCHER=tcp submit slurm.sbatch tcp) && state=$(wait_job "$job" 300) || state=FAILED
if [ "$state" = COMPLETED ] && grep -q "world rank 0 of 8 (tcp)" "$work/tcp.out"; then
  echo "ok: srun --mpi=none, ranks over TCP: $(grep -o 'ranks meet over TCP at .*' "$work/tcp.out")"
else
  echo "FAIL: slurm.sbatch with VIT3D_LAUNCHER=tcp, job $job: $state"
  tail -20 "$work/tcp.out"
  fail=1
fi
timeout 300 env NP=8 "$dir/launch/mpirun_local.sh" "${flags[@]}" --save "$work/local" \
  --final-weights "$work/local.safetensors" > "$work/local.out" 2>&1 ||
  { echo "FAIL: mpirun_local.sh"; tail -20 "$work/local.out"; fail=1; }
printf '  # the one host\nlocalhost slots=8  # its ranks\n' > "$work/hosts"  # (comments as Open MPI's)
timeout 300 env HOSTFILE="$work/hosts" "$dir/launch/mpirun_hosts.sh" "${flags[@]}" \
  --save "$work/hosts.ck" --final-weights "$work/hosts.safetensors" > "$work/hosts.out" 2>&1 ||
  { echo "FAIL: mpirun_hosts.sh"; tail -20 "$work/hosts.out"; fail=1; }
for f in mpi tcp local hosts; do
  if cmp -s "$work/pre.safetensors" "$work/$f.safetensors"; then
    echo "ok: preempted + requeued Slurm run == uninterrupted $f run (final weights byte-identical)"
  else
    echo "FAIL: preempted + requeued Slurm run differs from the uninterrupted $f run"
    fail=1
  fi
done
grep -h "^[a-z_]*: mpirun\|^vit3d slurm job: srun\|^vit3d slurm job: mpirun" "$work"/*.out | sed 's/^/  command: /' | cut -c1-200
[ $fail = 0 ] && echo "test_slurm: all passed" || echo "test_slurm: FAILED"
exit $fail
