#!/usr/bin/env bash
# test_slurm_job.sh: launch/slurm_job.sh's own logic with a stand-in srun and scontrol (no Slurm
# needed; test_slurm.sh runs the real thing):
#  1. --save and --resume: the job's own kept (among its words or in an @FILE), --resume auto
#     added otherwise, and after a requeue (SLURM_RESTART_COUNT 1) added after the job's own;
#  2. SIGUSR1 to the job shell and the launcher at once (as when both get it), the launcher
#     exiting 75 at once: requeued every time, 10 times (SLURM_JOB_TRIES=N: N; an interrupted
#     `wait` whose launcher was already gone used to leave exit 138 or -1, and no requeue: under
#     load about one time in ten).
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
# The stand-in launcher: writes its arguments, then exits 75 on SIGUSR1 (mode usr1) or 0.
printf '%s\n' "$@" > "$FAKE_ARGS"
if [ "${FAKE_MODE:-}" = usr1 ]; then  # (a trap interrupts `wait` at once)
  trap 'exit 75' USR1
  sleep 10 &
  echo $$ > "$FAKE_READY"
  wait $!
fi
exit 0
SH
printf '#!/usr/bin/env bash\necho "$@" >> "$FAKE_SCONTROL"\n' > "$work/bin/scontrol"
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
SLURM_RESTART_COUNT=1 job --save /x/s --resume /x/old/step-00000010
[[ "$(words)" == *"--resume /x/old/step-00000010 --resume auto" ]] &&
  grep -q "restart 1: --resume auto" "$work/job.log" || bad "own --resume, requeued: $(words)"
printf -- '--lr 1e-3\n--save /x/fromfile\n' > "$work/rec.args"
job "@$work/rec.args" --save-hook "cp --save x"
[[ "$(words)" == *"cp --save x --resume auto" ]] || bad "--save in an @FILE: $(words)"
[ $fail -eq 0 ] && echo "ok: --save and --resume: the job's own kept (words and @FILE), --resume auto otherwise and after a requeue"
# 2. Preemption with a launcher that exits at once: requeued every time.
requeued=0
for i in $(seq ${SLURM_JOB_TRIES:-10}); do
  rm -f "$work/ready" "$work/scontrol"
  FAKE_MODE=usr1 bash "$repo/launch/slurm_job.sh" --lr 1 > "$work/pre$i.log" 2>&1 &
  shell=$!
  for _ in $(seq 100); do [ -s "$work/ready" ] && break; sleep 0.05; done
  kill -USR1 $shell "$(cat "$work/ready")"
  wait $shell
  rc=$?
  [ $rc -eq 0 ] && grep -q "requeue 77" "$work/scontrol" 2>/dev/null && requeued=$((requeued + 1))
done
[ $requeued -eq ${SLURM_JOB_TRIES:-10} ] && echo "ok: SIGUSR1, the launcher gone at once with 75: requeued $requeued of ${SLURM_JOB_TRIES:-10}" ||
  { bad "SIGUSR1: requeued $requeued of ${SLURM_JOB_TRIES:-10}"; tail -n 3 "$work"/pre*.log; }
[ $fail -eq 0 ] && echo "test_slurm_job: all passed" || echo "test_slurm_job: FAILED"
exit $fail
