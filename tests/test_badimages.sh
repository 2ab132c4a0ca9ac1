#!/usr/bin/env bash
# test_badimages.sh VIT3D: a corpus of bad files (empty, truncated, corrupt, a text file, an
# unsupported format, a decompression bomb; a cut WebP and a WebP whose frame header claims
# 16000 x 16000 pixels) inside an ImageFolder passes through one epoch of
# training on a 2-rank TP mesh under --bad-image skip without a crash, with every bad file counted
# once in metrics.jsonl, files that are no images by their extension (README.txt, Thumbs.db)
# left out of the dataset with one warning, and two folders below a class folder taken (as
# torchvision does); under --bad-image fail the run stops (exit 1) with a
# message naming a bad file, after saving the steps before it (a resume under skip then ends as
# the skip run does), and a bad validation file stops it after saving the step evaluated.
# As validation data the bad files are left out: `vit3d eval` of the folder on TP 2 (the
# decoding split), PP 2 and DP 2 scores exactly what it scores on a copy without them (the same
# figures and predictions, the 8 counted as left out).
set -uo pipefail
vit3d=$1
py=${VT_REF_PYTHON:-/usr/bin/python3}
"$py" -c "import PIL" 2>/dev/null || { echo "SKIP: $py cannot import PIL"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" - "$work/data" <<'PY'
import os, random, struct, sys, zlib
from PIL import Image
root = sys.argv[1]
random.seed(1)
for c in ("a_dark", "b_light"):
    os.makedirs(f"{root}/{c}")
    for i in range(10):
        v = 40 if c == "a_dark" else 200
        img = Image.new("RGB", (16, 16), (v, v, v))
        img.putpixel((i, i), (255 - v, 0, 0))
        img.save(f"{root}/{c}/{i:02d}.png" if i % 2 else f"{root}/{c}/{i:02d}.jpg")
good = open(f"{root}/a_dark/01.png", "rb").read()
open(f"{root}/a_dark/zz_empty.png", "wb").close()
open(f"{root}/a_dark/zz_truncated.png", "wb").write(good[: len(good) // 2])
bad = bytearray(good); bad[60:70] = b"\xff" * 10
open(f"{root}/b_light/zz_corrupt.png", "wb").write(bytes(bad))
open(f"{root}/b_light/zz_text.png", "w").write("this is not an image\n")
open(f"{root}/b_light/zz_format.jpg", "wb").write(b"\x00\x01\x02\x03" * 64)
# Not images by their extension: left out of the dataset (said once), not bad images.
open(f"{root}/b_light/README.txt", "w").write("notes\n")
open(f"{root}/a_dark/Thumbs.db", "wb").write(b"\x00" * 32)
# Folders below a class folder: their images are the class's, as in torchvision.
os.makedirs(f"{root}/a_dark/more/deeper")
open(f"{root}/a_dark/more/00.png", "wb").write(good)
open(f"{root}/a_dark/more/deeper/01.png", "wb").write(good)
# A valid PNG header that claims 60000 x 60000 pixels: refused before any allocation.
ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
open(f"{root}/b_light/zz_bomb.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr))
import io
webp = io.BytesIO()
Image.new("RGB", (16, 16), (90, 90, 90)).save(webp, "WEBP", quality=80)
webp = bytearray(webp.getvalue())
open(f"{root}/a_dark/zz_truncated.webp", "wb").write(webp[: len(webp) // 2])
assert webp[12:16] == b"VP8 " and webp[23:26] == b"\x9d\x01\x2a", webp[:30]
webp[26:30] = struct.pack("<HH", 16000, 16000)  # the VP8 frame header's width and height
open(f"{root}/b_light/zz_bomb.webp", "wb").write(bytes(webp))
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
# 30 files: 22 good, 8 bad. 15 steps of 2 images are exactly one epoch.
args=(train --model tiny --img-size 16 --patch-size 4 --num-classes 2 --data "$work/data"
      --micro-batch-size 2 --global-batch-size 2 --steps 15 --seed 4 --threads 1 --loader-threads 2
      --max-image-pixels 1000000 --tp 2)
fail=0
cp -r "$work/data" "$work/clean" && rm "$work"/clean/*/zz_*
# A class whose every file is bad stops the run under skip too (nothing can replace them),
# the steps before it kept, with what to mend.
mkdir -p "$work/allbad/a" "$work/allbad/b" && cp "$work"/clean/a_dark/*.png "$work/allbad/a/" &&
  cp "$work"/data/b_light/zz_corrupt.png "$work"/data/b_light/zz_text.png "$work/allbad/b/"
timeout 300 "$vit3d" "${args[@]/$work\/data/$work/allbad}" --tp 1 --save "$work/allbad_ck" \
  > "$work/allbad.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "every image of class 'b' is bad" "$work/allbad.log" &&
   grep -q "a class whose every file is bad .*: the run stops \(after\|before\) step" "$work/allbad.log"; then
  echo "ok: a class of bad files only stops the run, saying what to mend"
else echo "FAIL: a class of bad files only: rc $rc"; tail -3 "$work/allbad.log"; fail=1; fi
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --log-dir "$work/skip" \
  --save "$work/ckpt" --save-interval 5 --final-weights "$work/skip/weights.safetensors" \
  > "$work/skip.log" 2>&1 || { echo "FAIL: the skip run did not complete"; tail -20 "$work/skip.log"; fail=1; }
bad=$("$py" -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['bad_images'])" \
      "$work/skip/metrics.jsonl" 2>/dev/null)
if [ "$bad" != "8" ]; then echo "FAIL: bad_images after one epoch is '$bad', want 8"; fail=1; fi
for f in zz_empty zz_truncated.png zz_corrupt zz_text zz_format zz_bomb.png zz_truncated.webp zz_bomb.webp; do
  grep -q "$f" "$work/skip.log" || { echo "FAIL: no warning names $f"; fail=1; }
done
echo "skip: one epoch, bad_images = $bad; warnings:"; grep -h "zz_" "$work/skip.log" | sort -u | head -12
# A resume goes on counting from its checkpoint's total (the same figures as the whole run).
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --log-dir "$work/skip10" \
  --resume "$work/ckpt/step-00000010" --final-weights "$work/skip10/weights.safetensors" \
  > "$work/skip10.log" 2>&1 && "$py" "$(dirname "$0")/compare_runs.py" "$work/skip" "$work/skip10" ||
  { echo "FAIL: the resume from step 10 is not the skip run"; tail -5 "$work/skip10.log"; fail=1; }
bad10=$("$py" -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['bad_images'])" \
        "$work/skip10/metrics.jsonl" 2>/dev/null)
if [ "$bad10" != "$bad" ]; then echo "FAIL: the resume from step 10 counts '$bad10' bad images"; fail=1
else echo "ok: the resume from step 10 ends counting $bad10 bad images, as the whole run"; fi
if grep -q "2 files in the class folders are not images by their extension" \
     "$work/skip.log" && ! grep -q "README.txt:\|Thumbs.db:" "$work/skip.log"; then
  echo "ok: README.txt and Thumbs.db left out of the dataset (said once), not bad images"
else echo "FAIL: the non-image files were not left out with a warning"; fail=1; fi
grep -q "the images of 2 folders below the class folders are their class's" \
  "$work/skip.log" || { echo "FAIL: the folders below a class folder were not taken"; fail=1; }
# --bad-image fail: the run stops (exit 1) naming the file, keeping the steps before the one
# that met it (seed 4 meets the first bad file in step 3): their checkpoint, which a resume under
# skip takes to the skip run's own end, loss for loss and weight for weight.
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --bad-image fail \
  --save "$work/fail_ckpt" > "$work/fail.log" 2>&1
rc=$?
kept=$(sed -n 's/.*the run stops after step \([0-9]*\); checkpoint step-.*/\1/p' "$work/fail.log")
if [ $rc -ne 1 ] || ! grep -q "zz_.*, in step [0-9]*'s data: the run stops before the first step that met such a file" "$work/fail.log" ||
   [ -z "$kept" ] || [ "$kept" -lt 1 ] || [ ! -d "$work/fail_ckpt/step-$(printf %08d "$kept")" ]; then
  echo "FAIL: --bad-image fail gave rc $rc, kept '$kept'; log:"; tail -10 "$work/fail.log"; fail=1
else
  echo "fail: stopped with rc $rc after step $kept, saved: $(grep -h "zz_" "$work/fail.log" | head -1)"
  timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --save "$work/fail_ckpt" \
    --resume auto --log-dir "$work/resumed" --final-weights "$work/resumed/weights.safetensors" \
    > "$work/resumed.log" 2>&1 &&
    grep -q "resumed from .*step-$(printf %08d "$kept")" "$work/resumed.log" &&
    "$py" "$(dirname "$0")/compare_runs.py" "$work/skip" "$work/resumed" ||
    { echo "FAIL: the resume under skip is not the skip run"; tail -5 "$work/resumed.log"; fail=1; }
fi
# A bad validation file under fail: the run saves the step whose evaluation met it and stops;
# the file is named as an error (not as a warning that it was left out).
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]/$work\/data/$work/clean}" \
  --val-data "$work/data" --eval-interval 3 --bad-image fail --save "$work/val_ckpt" \
  > "$work/val_fail.log" 2>&1
rc=$?
if [ $rc -ne 1 ] || [ ! -d "$work/val_ckpt/step-00000003" ] ||
   ! grep -q "bad validation file .*stops after step 3; checkpoint" "$work/val_fail.log" ||
   ! grep -q "error: bad image in the validation set under --bad-image fail" "$work/val_fail.log" ||
   grep -q "warning: bad image left out" "$work/val_fail.log"; then
  echo "FAIL: a bad validation file under fail gave rc $rc; log:"; tail -5 "$work/val_fail.log"
  fail=1
else echo "fail: a bad validation file stopped the run after saving step 3"; fi
eargs=(eval --model tiny --img-size 16 --patch-size 4 --num-classes 2 --data "$work/data"
       --checkpoint "$work/ckpt" --micro-batch-size 4 --threads 1 --loader-threads 2
       --max-image-pixels 1000000)
for mesh in "--tp 2" "--pp 2" "--dp 2"; do
  for v in data clean; do
    # shellcheck disable=SC2086
    timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${eargs[@]}" $mesh --val-data "$work/$v" \
      --predictions "$work/pred_$v.csv" > "$work/eval_$v.log" 2>&1 ||
      { echo "FAIL: eval of $v ($mesh)"; tail -5 "$work/eval_$v.log"; fail=1; }
  done
  got=$(grep "^eval:" "$work/eval_data.log"); want=$(grep "^eval:" "$work/eval_clean.log")
  echo "eval $mesh, with the bad files: $got"
  echo "eval $mesh, without them:       $want"
  if [ "${got%% (*}" != "${want%% (*}" ] || [[ "$got" != *"(22 images, 8 bad left out)"* ]] ||
     [[ "$want" != *"(22 images)"* ]]; then
    echo "FAIL: the bad validation files were not left out exactly ($mesh)"; fail=1
  fi
  # The predictions without the index column and the folder (the copy numbers its images
  # differently).
  for v in data clean; do
    cut -d, -f2- "$work/pred_$v.csv" | sed "s|^$work/$v/||" > "$work/p_$v"
  done
  if ! cmp -s "$work/p_data" "$work/p_clean" || [ "$(wc -l < "$work/p_data")" != 23 ]; then
    echo "FAIL: predictions differ ($mesh)"; diff "$work/p_data" "$work/p_clean" | head -5; fail=1
  fi
  grep -q "bad image left out of the evaluation: .*zz_" "$work/eval_data.log" ||
    { echo "FAIL: no warning names a bad validation file ($mesh)"; fail=1; }
done
# An image of 10000000 x 1 under a filtered evaluation resize at 224 px: its resized side would
# overflow int (it came out black), so it is a bad image, named; one of 1000000 x 1 is scored.
"$py" - "$work/wide" <<'PY'
import os, sys
from PIL import Image
for c, v in (("a", 60), ("b", 200)):
    os.makedirs(f"{sys.argv[1]}/{c}")
    Image.new("RGB", (40, 30), (v, v, v)).save(f"{sys.argv[1]}/{c}/ok.png")
Image.new("RGB", (1000000, 1), (90, 90, 90)).save(f"{sys.argv[1]}/a/wide1m.png")
Image.new("RGB", (10000000, 1), (90, 90, 90)).save(f"{sys.argv[1]}/b/wide10m.png")
PY
timeout 300 "$vit3d" train --model tiny --img-size 224 --patch-size 32 --num-classes 2 \
  --data "$work/wide" --val-data "$work/wide" --eval-interpolation bicubic --steps 1 \
  --micro-batch-size 4 --global-batch-size 4 --threads 1 > "$work/wide.log" 2>&1
if grep -q "wide10m.png: an image of 10000000x1 .* is too elongated" "$work/wide.log" &&
   grep -q "eval after step 1: .*(3 images, 1 bad left out)" "$work/wide.log"; then
  echo "ok: an image too elongated for the filtered resize is a bad image, named"
else echo "FAIL: the elongated images:"; tail -3 "$work/wide.log"; fail=1; fi
exit $fail
