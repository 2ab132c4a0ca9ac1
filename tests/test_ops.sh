#!/usr/bin/env bash
# test_ops.sh VIT3D: operations, with the test-only fault switch VT_FAULT (launch/fault.h).
#  1. watchdog, stalled rank: rank 5 of a 2x2x2 mesh stops at step 6; every rank exits within
#     --timeout-s + 30 s with exit 3 and one report: each rank's step, phase, collective, axis
#     and sequence number, and the verdict naming rank 5;
#  2. watchdog, rank hung hard (SIGSTOP, its watchdog thread too): exit 3, "no answer" for it;
#  3. a crashed rank (abort at step 6) ends the job instead of hanging it;
#  4. NaN gradients on one rank: the steps are skipped and counted (parameters untouched: the
#     weights after a skipped step 5 equal those after step 4); K in a row stop the run with
#     exit 4 and a message naming the steps; finite loss and gradient-norm spikes skipped under
#     --skip-spike-z, also after a resume, whose count of skipped steps goes on; one rank that
#     refuses its flags (its own @FILE) ends every rank with its message; a preemption notice
#     saves before a due evaluation, and at the last step ends the run normally;
#  5. stragglers: a rank slowed by 0.3 s per step is named by the rank report, which also puts
#     per-rank busy times and memory in metrics.jsonl;
#  6. metrics and plot: mfu, model_tflops, skipped_steps, bad_images, data_wait_ms in metrics.jsonl of a real
#     Fashion-MNIST run with evaluation (of the weights and of their EMA; vit3d eval --use-ema 1
#     of its checkpoint agrees); launch/plot_metrics.py draws it to a PNG.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2> /dev/null; rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
common=(train --model tiny --steps 40 --micro-batch-size 8 --global-batch-size 32 --threads 1
        --log-interval 1 --seed 2)
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

# start NAME NP FAULT flags...: mpirun in the background, log in NAME.log, pid in $launcher.
# The ranks' --log-dir under $work tells them from other tests' ranks (ctest -j): mine().
start() {
  local name=$1 np=$2 fault=$3
  shift 3
  VT_FAULT=$fault timeout 300 mpirun -np "$np" --oversubscribe "$vit3d" "${common[@]}" "$@" \
    --log-dir "$work/$name" > "$work/$name.log" 2>&1 &
  launcher=$!
}
mine() { pgrep -f "^$vit3d train.*$work/" "$@"; }  # this test's ranks still running
# mpirun may return while the ranks it killed are still being torn down: 0 when none of this
# test's ranks is left within 10 s.
all_gone() {
  local i
  for i in $(seq 20); do
    mine > /dev/null || return 0
    sleep 0.5
  done
  return 1
}
wait_for() {  # wait_for FILE PATTERN SECONDS
  local i
  for i in $(seq 1 $((2 * $3))); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.5; done
  return 1
}

# 1. A stalled rank.
timeout_s=10
start stall 8 stall@5:6 --tp 2 --pp 2 --timeout-s $timeout_s
wait_for "$work/stall.log" "stalling this rank at step 6" 120 || bad "the stall fault never fired"
t0=$(date +%s)
wait $launcher
rc=$?
elapsed=$(($(date +%s) - t0))
report=$(sed -n '/^watchdog report/,/^watchdog verdict/p' "$work/stall.log")
nranks=$(echo "$report" | grep -c "^  rank [0-7] (host .*step 6")
nwait=$(echo "$report" | grep -c "waiting in [a-z_]* #[0-9]* on axis \(tp\|pp\|dp\|world\)")
if [ $rc -eq 3 ] && [ $elapsed -le $((timeout_s + 30)) ] && [ "$nranks" -eq 8 ] && [ "$nwait" -eq 7 ] &&
   echo "$report" | grep -q "^  rank 5 .*not in a collective" &&
   echo "$report" | grep -q "verdict: stalled: rank 5 (host [^,]*, tp 1 pp 1 dp 0).*; run it again (no --save: nothing was saved)" &&
   all_gone; then
  ok "stalled rank 5: every rank gone ${elapsed} s after the stall (limit ${timeout_s} + 30), exit 3, report of 8 ranks (7 waiting in numbered collectives), verdict names rank 5"
else
  bad "stalled rank: rc $rc, ${elapsed} s, $nranks ranks in the report, $nwait waiting, ranks left 10 s later: $(mine | wc -l)"
  tail -25 "$work/stall.log"
fi
echo "$report" | sed 's/^/    /' | head -12

# 2. A rank hung hard: SIGSTOP stops its watchdog thread as well.
start sigstop 4 "" --tp 2 --steps 400 --timeout-s $timeout_s
wait_for "$work/sigstop.log" "^step    10/" 120 || bad "the run did not reach step 10"
pid=$(sed -n 's/.*pid \([0-9]*\), world rank 3 .*/\1/p' "$work/sigstop.log" | head -1)
kill -STOP "$pid"
t0=$(date +%s)
wait $launcher
rc=$?
elapsed=$(($(date +%s) - t0))
if [ $rc -eq 3 ] && [ $elapsed -le $((timeout_s + 30)) ] && grep -q "^  rank 3: no answer" "$work/sigstop.log" &&
   grep -q "verdict: stalled: rank 3 (no answer)" "$work/sigstop.log"; then
  ok "rank 3 stopped with SIGSTOP: exit 3 after ${elapsed} s, reported as not answering"
else
  bad "SIGSTOP rank: rc $rc after ${elapsed} s"
  tail -20 "$work/sigstop.log"
fi
kill -KILL "$pid" 2> /dev/null

# 3. A crashed rank.
t0=$(date +%s)
start crash 8 crash@3:6 --tp 2 --pp 2 --timeout-s 60
wait $launcher
rc=$?
elapsed=$(($(date +%s) - t0))
left=1
all_gone && left=0
said=0
grep -q "crashing this rank at step 6" "$work/crash.log" && said=1
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $elapsed -lt 60 ] && [ $said -eq 1 ] && [ $left -eq 0 ]; then
  ok "crashed rank 3: the job ended by itself (mpirun exit $rc) after ${elapsed} s, no rank left"
else
  bad "crashed rank: rc $rc after ${elapsed} s, crash announced: $said, ranks still there 10 s later: $left"
  mine -a | head -5
  tail -20 "$work/crash.log"
fi

# 4. Non-finite steps.
run() {  # run NAME NP FAULT flags...
  local name=$1 np=$2 fault=$3
  shift 3
  VT_FAULT=$fault timeout 300 mpirun -np "$np" --oversubscribe "$vit3d" "${common[@]}" "$@" \
    --log-dir "$work/$name" > "$work/$name.log" 2>&1
}
# same_weights A B RUN PATTERN OK-MESSAGE FAIL-MESSAGE: the final weights of runs A and B are
# byte-identical and RUN's log has PATTERN.
same_weights() {
  if cmp -s "$work/$1.safetensors" "$work/$2.safetensors" && grep -q "$4" "$work/$3.log"; then
    ok "$5"
  else
    bad "$6"
    tail -8 "$work/$3.log"
  fi
}
run clean4 4 "" --tp 2 --run-steps 4 --final-weights "$work/clean4.safetensors"
run nan5 4 nan@3:5 --tp 2 --run-steps 5 --final-weights "$work/nan5.safetensors"
same_weights clean4 nan5 nan5 "step 5: non-finite gradient norm; the step is skipped" \
  "NaN in rank 3's gradients at step 5 (a TP rank that holds replicated tensors): step skipped, weights equal those after step 4" \
  "a skipped step changed the weights or was not reported"
# A NaN loss (rank 0 holds a share of it) skips the step before the optimizer: the DP reductions
# its backward started must still complete, and the next step must reduce as usual, so its
# weights equal those of a run whose step 5 was skipped for a NaN gradient.
run nanloss6 4 nan@0:5 --tp 2 --run-steps 6 --final-weights "$work/nanloss6.safetensors"
run nangrad6 4 nan@3:5 --tp 2 --run-steps 6 --final-weights "$work/nangrad6.safetensors"
same_weights nanloss6 nangrad6 nanloss6 "step 5: non-finite loss; the step is skipped" \
  "NaN loss at step 5: step skipped before the optimizer, step 6 as after a skipped NaN-gradient step (same weights)" \
  "a NaN loss step: weights after step 6 differ from the NaN-gradient run, or no report"
run nan3 4 nan@3:5-7 --tp 2
rc=$?
skipped=$("$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(r[-1]['skipped_steps'], r[-1]['step'])" "$work/nan3/metrics.jsonl")
[ $rc -eq 0 ] && [ "$skipped" = "3 40" ] && ok "3 NaN steps skipped and counted (skipped_steps 3), run completed" ||
  { bad "NaN steps: rc $rc, skipped/last step: $skipped"; tail -5 "$work/nan3.log"; }
run nank 4 nan@3:5-100 --tp 2 --max-nonfinite-steps 4
rc=$?
if [ $rc -eq 4 ] && grep -q "steps 5-8: 4 non-finite steps in a row (--max-nonfinite-steps 4); stopping" "$work/nank.log"; then
  ok "4 non-finite steps in a row: exit 4, message names steps 5-8"
else
  bad "K non-finite steps: rc $rc"
  tail -5 "$work/nank.log"
fi

# 4b. Spikes (--skip-spike-z): at step 12 a finite gradient-norm spike on a first-stage rank (no
# loss share) and a loss spike on a last-stage one are skipped, the weights those after step
# 11; without the guard the spike changes them. A run saved at step 10 and resumed skips the
# step-14 spike as the uninterrupted run does (the statistics travel in the checkpoint: with
# none the window would not be full again until step 18).
spk=(--pp 2 --skip-spike-z 6 --spike-window 8)
run sclean11 4 "" --pp 2 --run-steps 11 --final-weights "$work/sclean11.safetensors"
run sgrad12 4 spike@1:12 "${spk[@]}" --run-steps 12 --final-weights "$work/sgrad12.safetensors"
same_weights sclean11 sgrad12 sgrad12 "step 12: gradient norm .* is a spike, .* skipped" \
  "a gradient-norm spike at step 12 skipped: the weights those after step 11" \
  "a gradient-norm spike: not skipped, or the weights changed"
run sloss12 4 spike@2:12 "${spk[@]}" --run-steps 12 --final-weights "$work/sloss12.safetensors"
same_weights sclean11 sloss12 sloss12 "step 12: loss .* is a spike, .* skipped" \
  "a loss spike at step 12 skipped: the weights those after step 11" \
  "a loss spike: not skipped, or the weights changed"
# A NaN loss right after a spike step is a non-finite step, not a second spike.
run sthen 4 spike@1:12,nan@2:13 "${spk[@]}" --run-steps 13
if grep -q "step 12: gradient norm .* is a spike" "$work/sthen.log" &&
   grep -q "step 13: non-finite loss; the step is skipped (1 in a row, 2 in all" "$work/sthen.log" &&
   ! grep -q "step 13: .* is a spike" "$work/sthen.log"; then
  ok "a NaN loss after a spike step: reported as non-finite only (2 skipped in all)"
else
  bad "a NaN loss after a spike step: misreported"
  grep -E "step 1[23]:" "$work/sthen.log"
fi
run soff12 4 spike@1:12 --pp 2 --run-steps 12 --final-weights "$work/soff12.safetensors"
cmp -s "$work/sclean11.safetensors" "$work/soff12.safetensors" &&
  bad "the planted spike without --skip-spike-z left the weights alone: the test plants nothing"
run sfull 4 nan@1:7,spike@1:14 "${spk[@]}" --run-steps 16 --final-weights "$work/sfull.safetensors"
run shalf 4 nan@1:7,spike@1:14 "${spk[@]}" --run-steps 10 --save "$work/sck"
run sresumed 4 nan@1:7,spike@1:14 "${spk[@]}" --run-steps 6 --save "$work/sck" --resume auto \
  --final-weights "$work/sresumed.safetensors"
same_weights sfull sresumed sresumed "step 14: gradient norm .* is a spike" \
  "resumed at step 10, the step-14 spike skipped as without the stop (the same weights)" \
  "resumed at step 10: the step-14 spike was not skipped as in the uninterrupted run"
# The count of skipped steps goes on from the checkpoint's (step 7's NaN before it).
skipped=$(for r in sfull sresumed; do
  "$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(r[-1]['skipped_steps'], r[-1]['step'])" "$work/$r/metrics.jsonl"
done | tr '\n' ' ')
[ "$skipped" = "2 16 2 16 " ] && ok "skipped_steps after the resume as without the stop (2 at step 16)" ||
  bad "skipped_steps: uninterrupted and resumed runs' last lines: $skipped"

# 4c. One rank refuses its flags (its own @FILE, as on a node-local disk): every rank exits 2
# and rank 0 says that rank's message, where the others waited for ever in the first collective.
mkdir -p "$work/args_a" "$work/args_b"
echo "--steps 3" > "$work/args_a/run.args"
echo "--bogus 1" > "$work/args_b/run.args"
two_args() {  # two ranks, each reading its own folder's run.args: out and rc
  out=$(timeout 120 mpirun --oversubscribe -np 1 -wdir "$work/args_a" "$vit3d" "${common[@]}" \
        --dp 2 @run.args : -np 1 -wdir "$work/args_b" "$vit3d" "${common[@]}" --dp 2 @run.args 2>&1)
  rc=$?
}
two_args
if [ $rc -eq 2 ] && grep -q "vit3d train (world rank 1): unknown flag '--bogus'" <<<"$out"; then
  ok "one rank's own @FILE refused: exit 2 on every rank, rank 0 saying rank 1's message"
else bad "one rank refusing its flags: rc $rc: $(tail -3 <<<"$out")"; fi
# Both read, but of other contents (a rank would finish early and the others wait for it until
# the watchdog, or fail on an internal check of the mesh): refused at start, naming the rank.
echo "--steps 4" > "$work/args_b/run.args"
two_args
if [ $rc -eq 2 ] && grep -q "vit3d train: world rank 1 was started with another command or other flags than rank 0" <<<"$out"; then
  ok "ranks started with other flags refused at start, naming the rank"
else bad "ranks with other flags: rc $rc: $(tail -3 <<<"$out")"; fi
# ... and with another command (a plan beside a train hung: plan has no collectives after).
common_flags=("${common[@]:1}")
out=$(timeout 120 mpirun --oversubscribe -np 1 "$vit3d" train "${common_flags[@]}" --dp 2 : \
      -np 1 "$vit3d" plan "${common_flags[@]}" --dp 2 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "world rank 1 was started with another command" <<<"$out"; then
  ok "a train rank beside a plan rank refused at start"
else bad "train beside plan: rc $rc: $(tail -3 <<<"$out")"; fi

# 4d. A preemption notice (VT_FAULT=usr1 on a rank) at step 3 with an evaluation due: the
# checkpoint is saved before the evaluation, exit 75; at the run's last step (6) the run ends as
# it would have, its final weights written, exit 0.
"$py" "$(dirname "$0")/make_images.py" "$work/imgs" 4 8 32 || bad "tests/make_images.py"
ev=(--steps 6 --dp 2 --data "$work/imgs" --val-data "$work/imgs" --num-classes 4 --eval-interval 3
    --save "$work/usr1ck")
run usr1 2 usr1@1:3 "${ev[@]}"
rc=$?
saved=$(grep -n "saved .*step-00000003" "$work/usr1.log" | head -1 | cut -d: -f1)
evald=$(grep -n "eval after step 3" "$work/usr1.log" | head -1 | cut -d: -f1)
if [ $rc -eq 75 ] && [ -n "$saved" ] && [ -n "$evald" ] && [ "$saved" -lt "$evald" ] &&
   grep -q "preempted (signal SIGUSR1 or SIGTERM on some rank) at step 3" "$work/usr1.log"; then
  ok "a preemption notice at step 3 (rank 1's): the checkpoint before the evaluation, exit 75"
else bad "usr1 at step 3: rc $rc, saved at line '$saved', evaluation at '$evald'"
  tail -5 "$work/usr1.log"; fi
run usr1last 2 usr1@1:6 "${ev[@]}" --save "$work/usr1lastck" \
  --final-weights "$work/usr1last.safetensors"
rc=$?
if [ $rc -eq 0 ] && [ -f "$work/usr1last.safetensors" ] && ! grep -q "preempted" "$work/usr1last.log"; then
  ok "a preemption notice at the last step: the run ends as it would have (exit 0, final weights)"
else bad "usr1 at the last step: rc $rc"; tail -5 "$work/usr1last.log"; fi

# 5. A straggler.
run slow 4 slow@2:1-1000 --dp 4 --steps 20 --straggler-interval 10
if grep -q "ranks over steps 11-20: busy .*slower than 1.2 x the other ranks' median: .*rank 2 (tp 0 pp 0 dp 2)" "$work/slow.log" &&
   "$py" - "$work/slow/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in rows if "rank_busy_ms" in x]
assert [x["step"] for x in r] == [10, 20], r
b = r[-1]["rank_busy_ms"]
assert len(b) == 4 and max(range(4), key=lambda i: b[i]) == 2 and b[2] > 250, b
assert len(r[-1]["rank_host_mib"]) == 4 and min(r[-1]["rank_host_mib"]) > 1, r[-1]
PY
then
  ok "rank 2 slowed by 0.3 s per step: named by the rank report; per-rank busy ms and memory in metrics.jsonl"
  grep "ranks over steps 11-20" "$work/slow.log" | sed 's/^/    /'
else
  bad "straggler report"
  grep "ranks over" "$work/slow.log"
fi
# With two ranks the slow one is measured against the other (the median of both capped it
# near 2x): 0.3 s a step over a few ms reads far above 2x.
run slow2 2 slow@1:1-1000 --dp 2 --steps 10 --straggler-interval 10
if grep -Eq "slower than 1.2 x the other ranks' median: rank 1 \(tp 0 pp 0 dp 1\) ([3-9]|[1-9][0-9]+)\.[0-9]+x" "$work/slow2.log"; then
  ok "two ranks: the slow one measured against the other: $(grep -o 'rank 1 (tp 0 pp 0 dp 1) [0-9.]*x' "$work/slow2.log")"
else
  bad "straggler report of two ranks"; grep "ranks over" "$work/slow2.log"
fi

# 6. Metrics of a real run and the plot.
# (skipped only where Debian's dataset-fashion-mnist is not installed; a failing prepare fails)
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  echo "SKIP part 6: no /usr/share/datasets/fashion-mnist (dataset-fashion-mnist)"
  echo "test_ops: $([ $fail = 0 ] && echo all passed || echo FAILED)"; exit $fail
fi
"$vit3d" prepare fashion-mnist "$work/fm" > "$work/prepare.log" 2>&1 ||
  { bad "vit3d prepare fashion-mnist: $(tail -1 "$work/prepare.log")"; exit 1; }
run fm 2 "" --dp 2 --zero 1 --img-size 28 --patch-size 7 --width 32 --heads 2 --depth 2 --steps 60 \
  --micro-batch-size 64 --global-batch-size 128 --lr 3e-3 --data "$work/fm/train" \
  --val-data "$work/fm/val" --eval-interval 20 --eval-crop-pct 1 --crop-scale-min 1 \
  --peak-tflops 0.05 --log-interval 20 --model-ema 0.95 --save "$work/fm_ck" --save-interval 60
if "$py" - "$work/fm/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 60
for r in rows:
    for k in ("loss", "img_per_s", "model_tflops", "mfu", "skipped_steps", "bad_images",
              "data_wait_ms"):
        assert k in r, (k, r)
    assert abs(r["mfu"] - r["model_tflops"] / (0.05 * 2)) <= 1e-4 * r["mfu"], r
    assert r["data_wait_ms"] >= 0, r
ev = [r for r in rows if "eval_top1" in r]
assert [r["step"] for r in ev] == [20, 40, 60] and ev[-1]["eval_top1"] > 0.3, ev
assert all(r["eval_ema_top1"] > 0.2 and r["eval_ema_top1"] != r["eval_top1"] for r in ev), ev
PY
then ok "metrics.jsonl: mfu = model_tflops / (peak x ranks), skipped_steps, bad_images, data_wait_ms, evaluation of the weights and of their EMA"
else bad "metrics of the Fashion-MNIST run"; tail -5 "$work/fm.log"
fi
# The EMA saved with the checkpoint of step 60, evaluated by vit3d eval on one rank, scores as
# the run's own evaluation of its EMA after step 60 (under ZeRO-1 each rank holds half of the
# EMA: the evaluation and the checkpoint gather it).
"$vit3d" eval --model tiny --img-size 28 --patch-size 7 --width 32 --heads 2 --depth 2 \
  --micro-batch-size 64 --checkpoint "$work/fm_ck/step-00000060" --use-ema 1 \
  --val-data "$work/fm/val" --eval-crop-pct 1 --threads 1 > "$work/fm_ema_eval.log" 2>&1
if "$py" - "$work/fm/metrics.jsonl" "$work/fm_ema_eval.log" <<'PY'
import json, re, sys
want = [json.loads(l) for l in open(sys.argv[1])][-1]["eval_ema_top1"]
got = float(re.search(r"^eval: .*top-1 ([0-9.]+)%", open(sys.argv[2]).read(), re.M).group(1))
assert abs(got - 100 * want) < 1e-3, (got, 100 * want)
print(f"    EMA top-1 {got:.2f}% from the checkpoint, {100 * want:.2f}% in the run")
PY
then ok "vit3d eval --use-ema 1 of the step-60 checkpoint scores as the run's EMA evaluation"
else bad "vit3d eval --use-ema 1"; tail -3 "$work/fm_ema_eval.log"
fi
# Evaluation between steps uses the training slots, so the next step's batch is not loaded
# ahead into them then (launch/train.c): the same run without --val-data logs the same losses
# (the EMA, evaluated there by swapping it into the weights, changes nothing either).
run fm_noval 2 "" --dp 2 --zero 1 --img-size 28 --patch-size 7 --width 32 --heads 2 --depth 2 --steps 60 \
  --micro-batch-size 64 --global-batch-size 128 --lr 3e-3 --data "$work/fm/train" \
  --eval-crop-pct 1 --crop-scale-min 1 --peak-tflops 0.05 --log-interval 20 --model-ema 0.95
if "$py" - "$work/fm/metrics.jsonl" "$work/fm_noval/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 60 and a == b, [(i + 1, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y][:3]
PY
then ok "evaluations every 20 steps leave the training losses unchanged (60 steps, bitwise)"
else bad "the run with evaluations logs other losses than the run without"
fi
if "$py" "$here/../launch/plot_metrics.py" "$work/fm/metrics.jsonl" "$work/nan3/metrics.jsonl" -o "$work/curves.png" &&
   "$py" - "$work/curves.png" <<'PY'
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("L")
assert im.size[0] >= 1000 and im.size[1] >= 400, im.size
lo, hi = im.getextrema()
assert hi - lo > 100 and len(set(im.getdata())) > 20  # drawn, not blank
PY
then ok "plot_metrics.py wrote a PNG of loss, accuracy and throughput from the run's metrics.jsonl"
else bad "plot_metrics.py"
fi
echo "test_ops: $([ $fail = 0 ] && echo all passed || echo FAILED)"
exit $fail
