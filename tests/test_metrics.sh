#!/usr/bin/env bash
# test_metrics.sh VIT3D: what --log-dir's metrics.jsonl holds when things go wrong (launch/
# metrics_log.c, launch/report.c), on one rank:
#  1. a full disk (a tmpfs nearly filled; skipped where none can be mounted): every line stays
#     whole JSON, the first line left out is warned about once, and when a save hook frees the
#     space the log goes on, saying which steps it lacks;
#  2. a resume from an older checkpoint into the same folder (after a cut last line): the log
#     holds each step once, the resumed run's figures from the checkpoint on;
#  3. --check-log leaves out a reference's cut last line instead of refusing the file;
#  4. a new run in an old run's folder removes its trace.json and comm.rank<R>.json; a resumed
#     one keeps them;
#  5. an evaluation that scored no image (every validation file bad): null figures, not 0, and
#     each bad file warned about once in the run, not at every evaluation;
#  6. bad_images counts each bad training image in the step that uses it, whether or not the
#     next step's first micro-batch is loaded ahead (with and without an evaluation each step).
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
py=${VT_REF_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
cleanup() { umount "$work/full" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
base=(train --model tiny --img-size 32 --patch-size 8 --num-classes 10 --micro-batch-size 4
      --global-batch-size 8 --threads 1 --data synthetic --tensorboard 0 --lr 1e-3)
steps() { "$py" -c 'import json, sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1])))' "$1"; }

# 1. A full disk.
mkdir -p "$work/full"
if mount -t tmpfs -o size=64k tmpfs "$work/full" 2>/dev/null; then
  head -c 57344 /dev/zero > "$work/full/filler"  # two 4 KiB pages left: one for each file
  timeout 300 "$vit3d" "${base[@]}" --steps 60 --log-dir "$work/full" --save "$work/ck_full" \
    --save-interval 30 --save-hook "rm -f $work/full/filler" --tensorboard 1 > "$work/full.log" 2>&1
  rc=$?
  # (the TensorBoard file too: whole records, its own gap said once, events again with room)
  if [ $rc -eq 0 ] && "$py" - "$work/full/metrics.jsonl" "$work/full.log" "$work/full" "$(dirname "$0")" <<'PY'
import glob, json, re, sys
sys.path.insert(0, sys.argv[4])
from tfevents_check import own_scalars
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]  # every line whole JSON
log = open(sys.argv[2]).read()
for what, cut in (("metrics.jsonl", r"cannot write step (\d+)'s line"),
                  ("TensorBoard", r"cannot write step (\d+)'s event")):
    left = re.findall(cut + r" \(No space left on device\)", log)
    again = re.findall(("TensorBoard events .*: " if what == "TensorBoard" else r"metrics.jsonl: ") +
                       r"written again from step (\d+) \(steps (\d+)-(\d+) are not in it\)", log)
    assert len(left) == 1 and len(again) == 1, (what, left, again)
    a, b = int(left[0]), int(again[0][0])
    assert again[0][1:] == (str(a), str(b - 1)), again
    if what == "TensorBoard":
        got = sorted(own_scalars(glob.glob(sys.argv[3] + "/events.out.tfevents.*"))[0]["train/loss"])
    else:
        got = steps
    assert got == list(range(1, a)) + list(range(b, 61)), (what, got)
    assert 30 < b <= 60, b
    print("%s: steps 1-%d and %d-60 logged; %d-%d left out whole" % (what, a - 1, b, a, b - 1))
PY
  then ok "a full disk: metrics.jsonl and the TensorBoard file keep whole records, say the gap once, go on with room"
  else bad "full disk (rc $rc):"; grep -i "metrics" "$work/full.log" | head -5; fi
  umount "$work/full"
else
  echo "skipped the full-disk case: cannot mount a tmpfs here"
fi

# 2. A resume from an older checkpoint, into the log of a run that went further.
timeout 300 "$vit3d" "${base[@]}" --steps 10 --log-dir "$work/r" --save "$work/ck" \
  --save-interval 4 > "$work/r1.log" 2>&1 || bad "the first run of the resume case"
printf '{"step": 11, "loss": 2.3' >> "$work/r/metrics.jsonl"  # a line cut by a kill
cp "$work/r/metrics.jsonl" "$work/ref.jsonl"
timeout 300 "$vit3d" "${base[@]}" --steps 7 --lr 5e-4 --resume-override 1 --log-dir "$work/r" \
  --resume "$work/ck/step-00000004" --check-log "$work/ref.jsonl" > "$work/r2.log" 2>&1
rc=$?
got=$(steps "$work/r/metrics.jsonl")
lr5() { "$py" -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[4])["lr"])' "$1"; }
if [ "$got" = "1 2 3 4 5 6 7" ] &&
   grep -q "resumed at step 4: 6 lines of later steps dropped" "$work/r2.log" &&
   [ "$(lr5 "$work/r/metrics.jsonl")" != "$(lr5 "$work/ref.jsonl")" ]; then
  ok "a resume from step 4 of a 10-step log: steps 1-7 once each, 5-7 the resumed run's"
else bad "resume into an old log: steps '$got'"; grep -i "metrics" "$work/r2.log"; fi

# 3. The reference's cut last line, left out (the resumed run differs in lr: exit 5, compared).
if [ $rc -eq 5 ] && grep -q "ref.jsonl:11: a line cut short, left out" "$work/r2.log"; then
  ok "--check-log leaves out a cut last line (and compares the rest: rc 5 for another --lr)"
else bad "--check-log with a cut last line: rc $rc"; grep -i "check-log" "$work/r2.log"; fi

# 3a. With --eval-interval 0 a --run-steps invocation evaluates only after the run's last step
# (each invocation's last step was evaluated: the points depended on how the job was split).
"$py" "$(dirname "$0")/make_images.py" "$work/ev" 2 4 32 > /dev/null
ev=("${base[@]}" --data "$work/ev" --val-data "$work/ev" --num-classes 2 --steps 4 --save "$work/ck_ev")
first=$(timeout 300 "$vit3d" "${ev[@]}" --run-steps 2 2>&1 | grep -c "^eval after")
last=$(timeout 300 "$vit3d" "${ev[@]}" --resume auto 2>&1 | grep "^eval after" | cut -d: -f1)
[ "$first" = 0 ] && [ "$last" = "eval after step 4" ] &&
  ok "--eval-interval 0 with --run-steps: evaluated after step 4 only" ||
  bad "--eval-interval 0 with --run-steps: $first evaluations in the first part, then '$last'"

# 3b. A cut last line that the resume cannot drop (its rewrite refused: a folder in the way)
# stays, and the resumed run's first line starts on a line of its own (it was glued to it).
mkdir -p "$work/g" && cp "$work/ref.jsonl" "$work/g/metrics.jsonl" && mkdir "$work/g/metrics.jsonl.tmp"
timeout 300 "$vit3d" "${base[@]}" --steps 6 --log-dir "$work/g" --resume "$work/ck/step-00000004" \
  --resume-override 1 > "$work/g.log" 2>&1
whole=$("$py" -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
cut = [i for i, l in enumerate(lines) if not l.startswith("{") or not l.endswith("}")]
print(len(cut), [json.loads(l)["step"] for l in lines[-2:]])' "$work/g/metrics.jsonl")
if grep -q "cannot drop the lines past step 4" "$work/g.log" && [ "$whole" = "1 [5, 6]" ]; then
  ok "a cut line that stays: the resumed run's lines start on lines of their own"
else bad "a cut line that stays: $whole"; grep -i "metrics" "$work/g.log"; fi

# 4. A new run removes the previous run's timeline and traffic files; a resume keeps them.
mkdir -p "$work/s"
touch "$work/s/trace.json" "$work/s/comm.rank5.json" "$work/s/comm.rank.json" "$work/s/notes"
timeout 300 "$vit3d" "${base[@]}" --steps 4 --run-steps 2 --log-dir "$work/s" --save "$work/ck_s" \
  > "$work/s1.log" 2>&1 || bad "the run in an old folder"
left=$(cd "$work/s" && ls | tr '\n' ' ')
touch "$work/s/trace.json"
timeout 300 "$vit3d" "${base[@]}" --steps 4 --log-dir "$work/s" --resume auto --save "$work/ck_s" \
  > "$work/s2.log" 2>&1 || bad "the resumed run in its folder"
if [ "$left" = "comm.rank.json metrics.jsonl notes " ] && [ -f "$work/s/trace.json" ]; then
  ok "a new run removed trace.json and comm.rank5.json (not other files); a resume kept trace.json"
else bad "the old run's files: left '$left'"; fi

# 5. An evaluation of only bad files, and 6. bad training images counted in their step.
"$py" - "$work/img" <<'PY' || bad "making the images"
import os, sys, zlib, struct
root = sys.argv[1]
def png(v):  # an 8x8 grey PNG
    raw = b"".join(b"\x00" + bytes([v]) * 8 for _ in range(8))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for c in range(2):
    os.makedirs(f"{root}/train/c{c}"), os.makedirs(f"{root}/badval/c{c}")
    for i in range(12):  # every third file of the training set bad
        data = png(40 + 150 * c + i) if i % 3 else b"not an image"
        open(f"{root}/train/c{c}/{i:02d}.png", "wb").write(data)
    open(f"{root}/badval/c{c}/00.png", "wb").write(b"not an image either")
PY
img=(train --model tiny --img-size 16 --patch-size 8 --num-classes 2 --data "$work/img/train"
     --micro-batch-size 2 --global-batch-size 4 --steps 6 --threads 1 --loader-threads 1
     --tensorboard 0)
timeout 300 "$vit3d" "${img[@]}" --val-data "$work/img/badval" --eval-interval 3 \
  --log-dir "$work/ev" > "$work/ev.log" 2>&1 || bad "the run evaluating bad files"
if "$py" - "$work/ev/metrics.jsonl" <<'PY'
import json, sys
ev = [r for r in map(json.loads, open(sys.argv[1])) if "eval_loss" in r]
assert len(ev) == 2 and all(r["eval_loss"] is None and r["eval_top1"] is None and
                            r["eval_top5"] is None and r["eval_images"] == 0 and
                            r["eval_bad_images"] == 2 for r in ev), ev
PY
then ok "an evaluation that scored no image: eval_loss, eval_top1 and eval_top5 null"
else bad "the evaluation of bad files: $(grep eval_loss "$work/ev/metrics.jsonl" | head -1)"; fi
warned=$(grep -c "bad image left out of the evaluation" "$work/ev.log")
if [ "$warned" = 2 ]; then ok "2 bad validation files, 2 evaluations: each file warned about once"
else bad "2 bad validation files over 2 evaluations gave $warned warnings (want 2)"; fi
timeout 300 "$vit3d" "${img[@]}" --log-dir "$work/b0" > "$work/b0.log" 2>&1 &&
  timeout 300 "$vit3d" "${img[@]}" --val-data "$work/img/train" --eval-interval 1 \
    --log-dir "$work/b1" > "$work/b1.log" 2>&1 || bad "the bad-image runs"
c0=$("$py" -c 'import json, sys; print([json.loads(l)["bad_images"] for l in open(sys.argv[1])])' "$work/b0/metrics.jsonl")
c1=$("$py" -c 'import json, sys; print([json.loads(l)["bad_images"] for l in open(sys.argv[1])])' "$work/b1/metrics.jsonl")
if [ -n "$c0" ] && [ "$c0" = "$c1" ] && [ "${c0##*, }" = "8]" ]; then
  ok "bad_images $c0 per step, the same with an evaluation after every step"
else bad "bad_images per step: $c0 without evaluations, $c1 with"; fi
# A wait for the decoders counts in the step whose time it took: a micro-batch of large PNGs
# loaded ahead at a step's end waits in that step, not the next (which made the last step's
# wait many times its own time, "data wait 424%").
"$py" "$(dirname "$0")/make_images.py" "$work/big" 2 4 1200 > /dev/null || bad "make_images.py"
timeout 300 "$vit3d" train --model tiny --img-size 16 --patch-size 4 --num-classes 2 \
  --data "$work/big" --micro-batch-size 2 --global-batch-size 2 --steps 6 --threads 1 \
  --loader-threads 1 --log-dir "$work/wait" > "$work/wait.log" 2>&1 || bad "the large-image run"
over=$("$py" -c 'import json, sys
d = [json.loads(l) for l in open(sys.argv[1])]
print(len(d), [x["step"] for x in d if x["data_wait_ms"] > x["step_ms"] + 1])' "$work/wait/metrics.jsonl")
if [ "$over" = "6 []" ]; then ok "each step's data wait within its own time (large images)"
else bad "steps whose data wait exceeds their time (of how many): $over"; fi
exit $fail
