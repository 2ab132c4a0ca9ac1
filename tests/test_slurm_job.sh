#!/usr/bin/env bash
# test_slurm_job.sh: launch/slurm_job.sh's own logic with a stand-in srun and scontrol (no Slurm
# needed; test_slurm.sh runs the real thing):
#  1. --save and --resume: the job's own kept (among its words or in an @FILE), --resume auto
#     added otherwise, and after a requeue (SLURM_RESTART_COUNT 1) added after the job's own,
#     which becomes --resume-fallback;
#  2. SIGUSR1 to the job shell and the launcher at once (as when both get it), the launcher
#     exiting 75 at once: requeued every time, 10 times (SLURM_JOB_TRIES=N: N; an interrupted
#     `wait` whose launcher was already gone used to leave exit 138 or -1, and no requeue: under
#     load about one time in ten);
#  3. SIGTERM: scancel's (Reason=None) not requeued, the time limit's (Reason=TimeLimit)
#     requeued; a run whose checkpoint did not move on not requeued (a --time shorter than the
#     signal's lead requeued for ever); a signal that reached the ranks only requeued where they
#     saved, and exit 75 with nothing saved exits 75; after a requeue with no checkpoint in --save yet, the
#     job's own --resume is the fallback of --resume auto; '#' comments of an @FILE are no
#     flags.
# Label launch.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
mkdir -p "$work/bin"
cat > "$work/bin/srun" <<'SH'
#!/usr/bin/env bash
# The stand-in launcher: writes its arguments, then on SIGUSR1 (mode usr1) saves a checkpoint
# in --save (a step-N folder one past the newest; none with FAKE_NO_SAVE) and exits 75, or 0.
printf '%s\n' "$@" > "$FAKE_ARGS"
save= prev=
for a in "$@"; do [ "$prev" = --save ] && save=$a; prev=$a; done
saved() {
  [ -n "${FAKE_NO_SAVE:-}" ] && return
  mkdir -p "$save/step-$(printf %08d $(($(ls "$save" 2>/dev/null | wc -l) + 1)))"
}
if [ "${FAKE_MODE:-}" = usr1 ]; then  # (a trap interrupts `wait` at once)
  trap 'saved; exit 75' USR1 TERM  # (the trainer takes both as a stop with a checkpoint)
  sleep 10 &
  echo $$ > "$FAKE_READY"
  wait $!
fi
exit 0
SH
cat > "$work/bin/scontrol" <<'SH'
#!/usr/bin/env bash
echo "$@" >> "$FAKE_SCONTROL"
[ "$1" = show ] && echo "JobId=77 JobState=COMPLETING Reason=${FAKE_REASON:-None} Dependency=(null)"
exit 0
SH
chmod +x "$work/bin/srun" "$work/bin/scontrol"
export PATH="$work/bin:$PATH" VIT3D_DIR=$repo SLURM_JOB_ID=77 SLURM_JOB_NUM_NODES=1
export SLURM_JOB_NODELIST=n1 SLURM_NTASKS=1 FAKE_ARGS=$work/args FAKE_SCONTROL=$work/scontrol
export FAKE_READY=$work/ready
job() { bash "$repo/launch/slurm_job.sh" "$@" > "$work/job.log" 2>&1; }
words() { tr '\n' ' ' < "$work/args" | sed 's/ $//'; }
# 1. The flags the trainer gets.
job --lr 1e-3
[[ "$(words)" == *"--lr 1e-3 --save $repo/runs/slurm-77 --resume auto" ]] ||
  bad "defaults: $(words)"
job --save /x/s --resume /x/old/step-00000010
[[ "$(words)" == *"--save /x/s --resume /x/old/step-00000010" ]] || bad "own --resume: $(words)"
mkdir -p "$work/s/step-00000010"  # (a requeue continues from --save's checkpoint where it has one)
SLURM_RESTART_COUNT=1 job --save "$work/s" --resume /x/old/step-00000010
[[ "$(words)" == *"--resume /x/old/step-00000010 --resume auto --resume-fallback /x/old/step-00000010" ]] &&
  grep -q "restart 1: --resume auto" "$work/job.log" || bad "own --resume, requeued: $(words)"
printf -- '--lr 1e-3\r\n--resume\r\n/x/fromfile# the base\r\n' > "$work/res.args"
SLURM_RESTART_COUNT=1 job --save "$work/s" "@$work/res.args"
[[ "$(words)" == *"--resume auto --resume-fallback /x/fromfile" ]] ||
  bad "own --resume in an @FILE, its value on the next line, requeued: $(words)"
SLURM_RESTART_COUNT=1 job --save "$work/s" --resume=auto
[[ "$(words)" == *"--save $work/s --resume=auto" ]] || bad "--resume=auto, requeued: $(words)"
printf -- '--lr 1e-3\n--save /x/fromfile\n' > "$work/rec.args"
job "@$work/rec.args" --save-hook "cp --save x"
[[ "$(words)" == *"cp --save x --resume auto" ]] || bad "--save in an @FILE: $(words)"
[ $fail -eq 0 ] && echo "ok: --save and --resume: the job's own kept (words and @FILE), --resume auto otherwise and after a requeue"
# 2. Preemption with a launcher that exits at once: requeued every time.
requeued=0
for i in $(seq ${SLURM_JOB_TRIES:-10}); do
  rm -f "$work/ready" "$work/scontrol"
  FAKE_MODE=usr1 bash "$repo/launch/slurm_job.sh" --lr 1 --save "$work/pre" > "$work/pre$i.log" 2>&1 &
  shell=$!
  for _ in $(seq 100); do [ -s "$work/ready" ] && break; sleep 0.05; done
  kill -USR1 $shell "$(cat "$work/ready")"
  wait $shell
  rc=$?
  [ $rc -eq 0 ] && grep -q "requeue 77" "$work/scontrol" 2>/dev/null && requeued=$((requeued + 1))
done
[ $requeued -eq ${SLURM_JOB_TRIES:-10} ] && echo "ok: SIGUSR1, the launcher gone at once with 75: requeued $requeued of ${SLURM_JOB_TRIES:-10}" ||
  { bad "SIGUSR1: requeued $requeued of ${SLURM_JOB_TRIES:-10}"; tail -n 3 "$work"/pre*.log; }
# 3. Which stops are requeued.
stop() {  # stop SIGNAL SAVE [env...]: a job stopped by SIGNAL; its exit code (JOB_FLAGS: more)
  local sig=$1 save=$2
  shift 2
  rm -f "$work/ready" "$work/scontrol"
  # shellcheck disable=SC2086
  env FAKE_MODE=usr1 "$@" bash "$repo/launch/slurm_job.sh" --lr 1 --save "$save" \
    ${JOB_FLAGS:-} > "$work/stop.log" 2>&1 &
  local shell=$!
  for _ in $(seq 100); do [ -s "$work/ready" ] && break; sleep 0.05; done
  if [ -n "${RANKS_ONLY:-}" ]; then kill "-$sig" "$(cat "$work/ready")"  # (not this shell)
  else kill "-$sig" $shell "$(cat "$work/ready")"; fi
  wait $shell
}
stop TERM "$work/c1"
rc=$?
[ $rc -eq 0 ] && ! grep -q "requeue" "$work/scontrol" &&
  grep -q "Reason=None: scancel, or a preemption .*not requeued" "$work/stop.log" &&
  echo "ok: scancel's SIGTERM: checkpoint saved, not requeued" ||
  { bad "scancel's SIGTERM: rc $rc"; cat "$work/stop.log"; }
JOB_FLAGS="--resume /x/base" stop TERM "$work/c1b"
grep -q "not requeued; resubmit with the same --save and --resume auto --resume-fallback /x/base to continue" "$work/stop.log" &&
  echo "ok: scancel's SIGTERM of a job with its own --resume: the resubmission's flags named" ||
  { bad "scancel's SIGTERM with --resume DIR"; cat "$work/stop.log"; }
stop TERM "$work/c2" FAKE_REASON=TimeLimit
rc=$?
[ $rc -eq 0 ] && grep -q "requeue 77" "$work/scontrol" &&
  echo "ok: the time limit's SIGTERM: requeued" || { bad "the time limit's SIGTERM: rc $rc"; cat "$work/stop.log"; }
mkdir -p "$work/c3/step-00000040"
stop USR1 "$work/c3" FAKE_NO_SAVE=1
rc=$?
[ $rc -eq 75 ] && ! grep -qs "requeue" "$work/scontrol" &&
  grep -q "did not move on in this run (step 40): not requeued" "$work/stop.log" &&
  echo "ok: a run whose checkpoint did not move on: not requeued (exit 75)" ||
  { bad "no progress: rc $rc"; cat "$work/stop.log"; }
# A signal that reached the ranks only (scancel --signal=USR1 without B:): requeued where they
# saved (it was taken for scancel's SIGTERM: COMPLETED, unfinished); a launcher that exits 75
# with nothing saved (srun ending the others as a rank failed at start) exits 75, not 0 and
# "checkpoint step -1 saved".
RANKS_ONLY=1 stop USR1 "$work/c4"
rc=$?
[ $rc -eq 0 ] && grep -q "requeue 77" "$work/scontrol" &&
  grep -q "saved checkpoint step 1 after a signal that reached the ranks only; requeueing" "$work/stop.log" &&
  echo "ok: a SIGUSR1 that reached the ranks only: requeued" ||
  { bad "a signal to the ranks only: rc $rc"; cat "$work/stop.log"; }
RANKS_ONLY=1 stop TERM "$work/c5" FAKE_NO_SAVE=1
rc=$?
[ $rc -eq 75 ] && ! grep -qs "requeue" "$work/scontrol" &&
  grep -q "did not move on in this run (step -1): not requeued.*a rank that failed to start" "$work/stop.log" &&
  ! grep -q "saved in" "$work/stop.log" &&
  echo "ok: exit 75 with nothing saved and no signal here: exit 75, nothing claimed saved" ||
  { bad "exit 75, nothing saved: rc $rc"; cat "$work/stop.log"; }
SLURM_RESTART_COUNT=1 job --save "$work/empty" --resume /x/old/step-00000010
[[ "$(words)" == *"--resume auto --resume-fallback /x/old/step-00000010" ]] &&
  echo "ok: requeued before the first save: the job's own --resume is the fallback" ||
  bad "requeued before the first save: $(words)"
printf -- '--lr 1e-3\n# the job adds --save runs/slurm-<id> by itself\n' > "$work/c.args"
job "@$work/c.args"
[[ "$(words)" == *"--save $repo/runs/slurm-77 --resume auto" ]] &&
  echo "ok: a comment of an @FILE that names --save is no flag" || bad "@FILE comment: $(words)"
[ $fail -eq 0 ] && echo "test_slurm_job: all passed" || echo "test_slurm_job: FAILED"
exit $fail
