#!/usr/bin/env bash
# slurm_job.sh: the body of vit3d's Slurm batch jobs (slurm.sbatch, slurm_mpirun.sbatch,
# aws_pcluster.sbatch exec it); not submitted by itself. It starts one trainer rank per task of
# the allocation and turns preemption into a checkpoint and a requeue:
#   1. the trainer runs with --resume auto (after a requeue even when the job gives --resume DIR
#      for its first run: that DIR is then --resume-fallback, used while --save holds no
#      checkpoint), so a requeued job continues from the newest complete checkpoint in --save
#      (default runs/slurm-<job id>, the same after a requeue; --save and --resume are looked
#      for among the job's words and in its @FILEs);
#   2. SIGUSR1 (sbatch --signal=B:USR1@SECONDS before the time limit) or SIGTERM reaching this
#      shell is forwarded to the launcher as SIGUSR1; srun and mpirun pass it to every rank,
#      the ranks agree at the next step boundary, save a checkpoint and exit 75;
#   3. on exit 75 this shell runs `scontrol requeue $SLURM_JOB_ID` and exits 0 where the
#      newest checkpoint in --save moved on in this run and the signal was SIGUSR1, the time
#      limit's SIGTERM (Slurm's Reason=TimeLimit) or one that reached the ranks only (scancel
#      --signal=USR1 without B:); a SIGTERM of scancel (or of a preemption, which Slurm
#      requeues itself) leaves the checkpoint saved, not requeued; a run that saved nothing
#      newer exits 75, not requeued (a --time shorter than the signal's lead would requeue for
#      ever; a rank that failed at start, the others ended by srun, saved nothing either).
#      Other exit codes of the trainer (docs/operations.md "Exit codes") are passed through.
# Environment: VIT3D_LAUNCHER=srun (default: srun --mpi=pmix), mpirun (Open MPI inside the
# allocation) or tcp (srun --mpi=none: no MPI or PMIx at all; the ranks meet over TCP at the
# first node's address, MASTER_ADDR and MASTER_PORT override it); VIT3D_DIR (default: the
# submit directory); VIT3D_BIN (default: $VIT3D_DIR/build/vit3d); VIT3D_SRUN_ARGS /
# MPIRUN_ARGS add launcher flags.
set -uo pipefail
: "${SLURM_JOB_ID:?slurm_job.sh runs inside a Slurm job: submit slurm.sbatch with sbatch}"
dir=${VIT3D_DIR:-${SLURM_SUBMIT_DIR:-$(pwd)}}
source "$dir/launch/common.sh"
bin=${VIT3D_BIN:-$dir/build/vit3d}
args=("$@")
# The job's words as the trainer reads them: each @FILE (that exists) replaced by its words,
# '#' to the end of a line a comment, words split at white space (no quoting).
words=()
for a in "${args[@]}"; do
  if [[ $a == @?* && -f ${a#@} ]]; then
    read -ra fw <<< "$(sed 's/#.*//' "${a#@}" | tr -s '[:space:]' ' ')"
    words+=("${fw[@]}")
  else
    words+=("$a")
  fi
done
has_flag() {  # has_flag FLAG: whether FLAG is among the job's words
  local a
  for a in "${words[@]}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done
  return 1
}
flag_value() {  # flag_value FLAG: the job's FLAG (its last: the trainer takes the later flag)
  local a prev= found=
  for a in "${words[@]}"; do
    [ "$prev" = "$1" ] && found=$a
    [[ $a == "$1="* ]] && found=${a#"$1="}
    prev=$a
  done
  printf '%s\n' "$found"
}
newest_step() {  # the newest step-N in folder $1, or -1
  local d n newest=-1
  for d in "$1"/step-*; do
    [ -d "$d" ] || continue
    n=${d##*step-}
    [[ $n =~ ^[0-9]+$ ]] && [ $((10#$n)) -gt "$newest" ] && newest=$((10#$n))
  done
  echo "$newest"
}
if ! has_flag --save; then
  args+=(--save "$dir/runs/slurm-$SLURM_JOB_ID")
  words+=(--save "$dir/runs/slurm-$SLURM_JOB_ID")
fi
save=$(flag_value --save)
before=$(newest_step "$save")
# A --resume DIR of the job's own starts its first run; a requeued run continues from --save's
# newest checkpoint (the later flag counts), the one an interrupted save left recovered first,
# and from the job's DIR again only where --save holds none (--resume-fallback).
first=$(flag_value --resume)
again="the same --save"  # (what a resubmitted job needs to continue)
if [ -z "$first" ]; then  # (no --resume, or an empty one: the trainer's fresh start)
  args+=(--resume auto)
elif [ "$first" != auto ]; then
  again="the same --save and --resume auto --resume-fallback $first"
  if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
    echo "vit3d slurm job: restart ${SLURM_RESTART_COUNT}: --resume auto (the newest" \
      "checkpoint in --save) instead of the job's --resume, which is the fallback where --save" \
      "holds none"
    args+=(--resume auto --resume-fallback "$first")
  fi
fi
echo "vit3d slurm job $SLURM_JOB_ID: $SLURM_JOB_NUM_NODES nodes ($SLURM_JOB_NODELIST), $SLURM_NTASKS tasks, restart ${SLURM_RESTART_COUNT:-0}"
case ${VIT3D_LAUNCHER:-srun} in
  srun)
    # shellcheck disable=SC2206
    extra=(${VIT3D_SRUN_ARGS:-})
    cmd=(srun --mpi=pmix --kill-on-bad-exit=1 "${extra[@]}" "$bin" train "${args[@]}") ;;
  tcp)
    # Rank 0 runs on the step's first node: the ranks meet at its address (Slurm's NodeAddr),
    # on a port derived from the job id unless MASTER_PORT is set.
    first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    addr=$(scontrol show node "$first" 2>/dev/null | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
    export MASTER_ADDR=${MASTER_ADDR:-${addr:-$first}}
    # (20000-31999: below Linux's ephemeral ports, 32768 on, which other sockets may hold)
    export MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 12000))}
    echo "vit3d slurm job: ranks meet over TCP at $MASTER_ADDR:$MASTER_PORT"
    # shellcheck disable=SC2206
    extra=(${VIT3D_SRUN_ARGS:-})
    cmd=(srun --mpi=none --kill-on-bad-exit=1 "${extra[@]}" "$bin" train "${args[@]}") ;;
  mpirun)
    mapfile -t flags < <(vt_mpirun_flags)
    # shellcheck disable=SC2206
    extra=(${MPIRUN_ARGS:-})
    cmd=(mpirun -np "$SLURM_NTASKS" "${flags[@]}" "${extra[@]}" "$bin" train "${args[@]}") ;;
  *) echo "slurm_job.sh: VIT3D_LAUNCHER=$VIT3D_LAUNCHER: use srun, mpirun or tcp" >&2; exit 2 ;;
esac
printf 'vit3d slurm job: '
printf '%q ' "${cmd[@]}"
printf '\n'

pid= sig=
forward() {
  echo "vit3d slurm job: SIG$1 received; sending the trainer SIGUSR1 (checkpoint and stop)"
  sig=${sig:-$1}
  [ -n "$pid" ] && kill -USR1 "$pid" 2>/dev/null
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
"${cmd[@]}" &
pid=$!
# Polled, not waited for: a trapped signal interrupts `wait` (128 + the signal), and where the
# launcher ended as the signal came bash's interrupted `wait` lost its code (-1, or 127 on the
# next wait: the job then went unrequeued). Once it is gone, `wait` gives its code at once.
while kill -0 "$pid" 2>/dev/null; do
  sleep 0.2  # (a signal's trap runs when the sleep ends)
done
wait "$pid"
rc=$?
if [ "$rc" -eq 75 ]; then
  after=$(newest_step "$save")
  # The signal: this shell's (SIGUSR1, or SIGTERM: the time limit's is requeued, scancel's
  # (Reason=None) is the user's stop, a preemption's Slurm requeues itself), or none where it
  # reached the ranks only (scancel --signal=USR1 without B:, or srun's --kill-on-bad-exit
  # ending the others when a rank failed at start: its own message is above).
  reason=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -o 'Reason=[A-Za-z_]*' |
           head -n 1 | cut -d= -f2)
  what="SIG$sig"
  [ -z "$sig" ] && what="signal that reached the ranks only"
  if [ "$after" -le "$before" ]; then
    hint="give --time more than the --signal lead plus the start-up and a save"
    [ -z "$sig" ] && hint="a rank that failed to start has its message above"
    echo "vit3d slurm job: the trainer stopped on a $what (exit 75), and the newest checkpoint" \
      "in $save did not move on in this run (step $after): not requeued, or the job could" \
      "repeat it for ever ($hint)" >&2
    exit 75
  fi
  if [ "$sig" = TERM ] && [ "$reason" != TimeLimit ]; then
    echo "vit3d slurm job: stopped by SIGTERM (Reason=${reason:-unknown}: scancel, or a" \
      "preemption that Slurm requeues itself): checkpoint step $after saved in $save, not" \
      "requeued; resubmit with $again to continue"
    exit 0
  fi
  echo "vit3d slurm job: the trainer saved checkpoint step $after after a $what; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID" || { echo "vit3d slurm job: scontrol requeue failed; resubmit with $again to continue" >&2; exit 75; }
  exit 0
fi
echo "vit3d slurm job: the trainer exited with $rc"
exit "$rc"
