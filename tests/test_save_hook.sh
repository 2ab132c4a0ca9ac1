#!/usr/bin/env bash
# test_save_hook.sh VIT3D: --save-hook CMD, the command run after each committed checkpoint.
#  1. one rank, a save every 2 steps, --keep-last 1, a hook that sleeps and then copies
#     $VT_CKPT_DIR: every checkpoint's copy is complete (the next commit waited for the hook
#     before rotating its checkpoint away: said in the log), a resume from the copy of step 4
#     ends as the uninterrupted run, the variables are absolute paths and the step (an inherited
#     VT_CKPT_DIR replaced), the output lands in SAVE_DIR/save-hook.log, the hook holds no
#     descriptor of the trainer's but 0-2;
#  2. a hook failing at step 2 only: reported with its exit status, the run goes on, exit 0; a
#     hook failing at the last checkpoint: exit 1 with a summary; a hook killed by SIGUSR1 (its
#     signal handling is the default one, not the trainer's): reported with the signal;
#  3. a preemption (SIGUSR1 to the trainer): the preemption's checkpoint is copied before the
#     exit with 75;
#  4. two ranks under mpirun: the hook runs once per checkpoint;
#  5. --save-hook without --save is refused;
#  6. --save-hook-timeout: a hook (and the child it waits for) past its limit is stopped with
#     SIGTERM to its process group and training goes on; one that ignores SIGTERM is killed;
#  7. without a limit a hung hook holds the next commit until the watchdog ends the job (exit
#     3), naming the wait, and the hook does not outlive the trainer.
set -uo pipefail
vit3d=$1
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2> /dev/null; rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
args=(train --model tiny --data synthetic --micro-batch-size 4 --threads 1 --log-interval 1
      --seed 3)
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
last_loss() { grep -o "^step *$1/[0-9]* | loss [0-9.]*" "$2" | tail -1 | grep -o "loss .*"; }

# 1. Copies of every checkpoint, complete although --keep-last 1 rotates them away.
copy='sleep 1; echo "dir=$VT_CKPT_DIR step=$VT_CKPT_STEP save=$VT_SAVE_DIR"; printf "fds "; ls -m /proc/$$/fd; cp -r "$VT_CKPT_DIR" '"$work/dest/"
mkdir -p "$work/dest"
VT_CKPT_DIR=/nowhere "$vit3d" "${args[@]}" --steps 6 --save "$work/s1" --save-interval 2 \
  --keep-last 1 --save-hook "$copy" > "$work/1.log" 2>&1
rc=$?
[ $rc -eq 0 ] || bad "run 1 exited $rc: $(tail -5 "$work/1.log")"
copies=$(cd "$work/dest" && echo step-*)
[ "$copies" = "step-00000002 step-00000004 step-00000006" ] || bad "copies: $copies"
[ "$(cd "$work/s1" && echo step-*)" = "step-00000006" ] || bad "--keep-last 1 kept $(ls "$work/s1")"
for s in 2 4 6; do
  "$vit3d" inspect "$work/dest/step-0000000$s" > /dev/null 2>&1 || bad "the copy of step $s is not a complete checkpoint"
done
grep -q "waiting for the save hook of step 2 .* before committing step 4" "$work/1.log" ||
  bad "the commit of step 4 did not wait for step 2's hook"
grep -q "dir=$work/s1/step-00000004 step=4 save=$work/s1$" "$work/s1/save-hook.log" ||
  bad "the hook's variables: $(grep dir= "$work/s1/save-hook.log")"
[ "$(grep -c '^fds 0, 1, 2$' "$work/s1/save-hook.log")" = 3 ] ||
  bad "the hook holds more than stdin, stdout and stderr: $(grep '^fds' "$work/s1/save-hook.log")"
[ "$(grep -c '^=== .* step [246]: sleep 1' "$work/s1/save-hook.log")" = 3 ] || bad "save-hook.log: $(cat "$work/s1/save-hook.log")"
grep -q "save hooks: all 3 finished" "$work/1.log" || bad "no summary of 3 hooks"
"$vit3d" "${args[@]}" --steps 6 --resume "$work/dest/step-00000004" > "$work/1r.log" 2>&1 ||
  bad "resume from the copy failed: $(tail -3 "$work/1r.log")"
want=$(last_loss 6 "$work/1.log") got=$(last_loss 6 "$work/1r.log")
[ -n "$want" ] && [ "$want" = "$got" ] || bad "resumed from the copy: step 6 $got, uninterrupted $want"
[ $fail -eq 0 ] && ok "3 hooks copied 3 complete checkpoints under --keep-last 1 (commit waited for the hook), resume from the copy: step 6 $got as uninterrupted"

# 2. Failures.
"$vit3d" "${args[@]}" --steps 4 --save "$work/s2" --save-interval 2 \
  --save-hook '[ "$VT_CKPT_STEP" = 2 ] && exit 7; true' > "$work/2.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "save hook of step 2 FAILED with exit status 7 .*training goes on" "$work/2.log" &&
  grep -q "save hooks: 1 of 2 FAILED (see $work/s2/save-hook.log)" "$work/2.log"; then
  ok "a failed middle hook is reported and the run ends with 0"
else bad "middle hook failing: rc $rc: $(grep -i hook "$work/2.log")"; fi
"$vit3d" "${args[@]}" --steps 4 --save "$work/s3" --save-interval 2 \
  --save-hook 'echo uploading; exit 5' > "$work/3.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "save hook of step 4 FAILED with exit status 5" "$work/3.log" &&
  grep -q "save hooks: 2 of 2 FAILED, the last checkpoint's among them" "$work/3.log" &&
  [ "$(grep -c "^uploading$" "$work/s3/save-hook.log")" = 2 ]; then
  ok "the last checkpoint's hook failing exits 1"
else bad "last hook failing: rc $rc: $(grep -i hook "$work/3.log")"; fi
"$vit3d" "${args[@]}" --steps 2 --save "$work/s4" --save-hook 'kill -USR1 $$; sleep 5' \
  > "$work/4.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "save hook of step 2 was killed by signal $(kill -l USR1 2> /dev/null || echo 10)" "$work/4.log"; then
  ok "a hook killed by SIGUSR1 (default disposition) reported"
else bad "hook killed: rc $rc: $(grep -i hook "$work/4.log")"; fi

# 3. Preemption: the last checkpoint's hook ends before the exit.
"$vit3d" "${args[@]}" --steps 1000000 --save "$work/s5" --save-interval 1000 \
  --save-hook "sleep 1; cp -r \"\$VT_CKPT_DIR\" $work/pre" > "$work/5.log" 2>&1 &
pid=$!
for i in $(seq 100); do grep -q "^step *20/" "$work/5.log" && break; sleep 0.2; done
kill -USR1 $pid
wait $pid
rc=$?
step=$(grep -o "preempted (signal SIGUSR1 on some rank) at step [0-9]*" "$work/5.log" | grep -o "[0-9]*$")
if [ $rc -eq 75 ] && [ -n "$step" ] && "$vit3d" inspect "$work/pre" > /dev/null 2>&1 &&
  grep -q "save hook of step $step finished" "$work/5.log"; then
  ok "preempted at step $step: its checkpoint copied by the hook before exit 75"
else bad "preemption: rc $rc step '$step': $(grep -i "hook\|preempt" "$work/5.log")"; fi

# 4. Two ranks: one hook per checkpoint.
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --tp 2 --steps 4 \
  --save "$work/s6" --save-interval 2 --save-hook 'echo "hook $VT_CKPT_STEP"' \
  < /dev/null > "$work/6.log" 2>&1
rc=$?
n=$(grep -c "^hook [24]$" "$work/s6/save-hook.log" 2> /dev/null)
if [ $rc -eq 0 ] && [ "$n" = 2 ]; then ok "tp 2: the hook ran once per checkpoint"
else bad "tp 2: rc $rc, $n hook runs: $(tail -5 "$work/6.log")"; fi

# 5. Refused without --save.
out=$("$vit3d" "${args[@]}" --steps 2 --save-hook true 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "give --save DIR too" <<< "$out"; then ok "--save-hook without --save refused"
else bad "--save-hook without --save: rc $rc: $out"; fi

# 6. --save-hook-timeout.
"$vit3d" "${args[@]}" --steps 4 --save "$work/s7" --save-interval 2 --save-hook-timeout 1 \
  --save-hook 'if [ "$VT_CKPT_STEP" = 2 ]; then sleep 61.25 & wait; fi; echo "done $VT_CKPT_STEP"' \
  > "$work/7.log" 2>&1
rc=$?
sleep 0.2
if [ $rc -eq 0 ] &&
   grep -q "save hook of step 2 ran past --save-hook-timeout 1 s: stopped (SIGTERM to its process group; its output is in $work/s7/save-hook.log); training goes on" "$work/7.log" &&
   grep -q "^done 4$" "$work/s7/save-hook.log" && ! grep -q "^done 2$" "$work/s7/save-hook.log" &&
   ! pgrep -f "sleep 61.25" > /dev/null; then
  ok "--save-hook-timeout 1: step 2's hook and its child stopped, training went on, step 4's hook ran"
else bad "--save-hook-timeout: rc $rc: $(grep -i hook "$work/7.log"; pgrep -af "sleep 61.25")"; fi
"$vit3d" "${args[@]}" --steps 2 --save "$work/s8" --save-hook-timeout 1 \
  --save-hook 'trap "" TERM; sleep 62.25' > "$work/8.log" 2>&1
rc=$?
sleep 0.2
if [ $rc -eq 1 ] && grep -q "save hook of step 2 ran past --save-hook-timeout 1 s: stopped (SIGTERM, then SIGKILL" "$work/8.log" &&
   ! pgrep -f "sleep 62.25" > /dev/null; then
  ok "a hook that ignores SIGTERM is killed; the last checkpoint's hook failing exits 1"
else bad "a hook ignoring SIGTERM: rc $rc: $(grep -i hook "$work/8.log"; pgrep -af "sleep 62.25")"; fi

# 7. No limit: the watchdog (--timeout-s 0.5: 5 s for a commit) ends the job that waits.
"$vit3d" "${args[@]}" --steps 4 --save "$work/s9" --save-interval 2 --timeout-s 0.5 \
  --save-hook '[ "$VT_CKPT_STEP" = 2 ] && sleep 63.25; true' < /dev/null > "$work/9.log" 2>&1
rc=$?
sleep 0.2
if [ $rc -eq 3 ] && grep -q "step 4 (waiting for the save hook) for 5" "$work/9.log" &&
   ! pgrep -f "sleep 63.25" > /dev/null; then
  ok "a hung hook without a limit: the watchdog ended the job (exit 3) naming the wait; the hook stopped with it"
else bad "hung hook: rc $rc: $(grep -i "hook\|watchdog" "$work/9.log"; pgrep -af "sleep 63.25")"; fi
exit $fail
