#!/usr/bin/env bash
# test_tensorboard.sh VIT3D CACHE_DIR: the TensorBoard event files `--log-dir` writes beside
# metrics.jsonl (launch/tfevents.c). A 12-step run on an image folder, evaluated every 4 steps
# with the weights' EMA, is the reference; the same run stopped after step 10 (checkpoints at 4
# and 8) and resumed from step 8 into the same log folder leaves two event files, the second
# starting with a SessionLog START at step 9. tests/tfevents_check.py reads them with its own
# reader (every TFRecord CRC-32C checked, TensorBoard's restart rule applied) and with
# TensorBoard's EventAccumulator, and both must give the reference's loss, lr, grad norm and
# evaluation figures at every step, steps 9 and 10 once; a flipped byte must be refused. A new
# 6-step run in the first run's folder leaves TensorBoard the new run's 6 steps only.
# TensorBoard: an importable one, else tensorboard 2.14.0 from PyPI unpacked once into CACHE_DIR
# (pure Python, --no-deps; it needs Debian's python3-protobuf and python3-absl); without it the
# own reader's check still runs. --tensorboard 0 writes no event file.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
cache=$2
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
"$py" -c "import numpy, PIL" 2>/dev/null || { echo "SKIP: $py cannot import numpy and PIL"; exit 77; }
source "$here/pypi_wheel.sh"
pypi_wheel "$py" tensorboard tensorboard==2.14.0 "$cache" ||
  echo "TensorBoard's own reader will be skipped: $pypi_why"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" "$here/make_images.py" "$work/img" 3 8 32 || { echo "FAIL: make_images.py"; exit 1; }
args=(train --model tiny --img-size 32 --patch-size 8 --num-classes 3 --data "$work/img"
      --val-data "$work/img" --micro-batch-size 4 --global-batch-size 8 --steps 12
      --eval-interval 4 --model-ema 0.9 --threads 1 --loader-threads 1 --seed 3)
fail=0
"$vit3d" "${args[@]}" --log-dir "$work/a" > "$work/a.log" 2>&1 &&
  "$vit3d" "${args[@]}" --log-dir "$work/r" --save "$work/ck" --save-interval 4 --run-steps 10 \
    > "$work/r1.log" 2>&1 &&
  "$vit3d" "${args[@]}" --log-dir "$work/r" --save "$work/ck2" --resume "$work/ck/step-00000008" \
    > "$work/r2.log" 2>&1 ||
  { echo "FAIL: the runs:"; tail -3 "$work"/*.log; exit 1; }
[ "$(ls "$work/r" | grep -c '^events.out.tfevents\.')" = 2 ] ||
  { echo "FAIL: want two event files in the resumed run's log folder: $(ls "$work/r")"; fail=1; }
"$py" "$here/tfevents_check.py" "$work/a" "$work/a/metrics.jsonl" || fail=1
"$py" "$here/tfevents_check.py" "$work/r" "$work/a/metrics.jsonl" --corrupt || fail=1
# A new run in the folder of an old one: TensorBoard then holds the new run's 6 steps only, as
# its rewritten metrics.jsonl does.
"$vit3d" "${args[@]}" --steps 6 --eval-interval 3 --log-dir "$work/a" > "$work/again.log" 2>&1 &&
  "$py" "$here/tfevents_check.py" "$work/a" "$work/a/metrics.jsonl" || fail=1
"$vit3d" "${args[@]}" --steps 2 --log-dir "$work/off" --tensorboard 0 > "$work/off.log" 2>&1
if ls "$work/off" | grep -q tfevents || [ ! -s "$work/off/metrics.jsonl" ]; then
  echo "FAIL: --tensorboard 0: $(ls "$work/off")"; fail=1
else
  echo "--tensorboard 0: metrics.jsonl only"
fi
exit $fail
