#!/usr/bin/env bash
# test_shards.sh VIT3D: datasets in tar shards end to end. Python's tarfile (a writer independent
# of vit3d's) packs a small ImageFolder into three shards, in GNU (long names), pax (long and
# non-ASCII names) and ustar (folder entries) formats, with other members beside the samples.
# The images are PNG, JPEG and (where the build has libwebp) WebP: every one must decode
# (--bad-image fail). Training on them (a numbered pattern, and a folder of shards for --val-data) on a 2-rank DP mesh
# logs the very losses, norms and validation figures of the run on the folder and ends with the
# same weights, byte for byte, which --check-log also confirms on 2 ranks (and exits 5 for a run
# of another seed, after its export), also with both indexes read from an --index-cache entry.
# Shards whose labels are in KEY.label (beside a decoy KEY.target of other classes, and KEY.json
# with the label as a top-level field and a nested decoy) are refused without --label-key,
# naming the flag, and with --label-key label or json:label log the folder run's figures bit for
# bit, as does json:meta.label (a field of a nested object), and KEY.txt and json:name holding
# class names with --label-names (vit3d prepare's classes.txt); an index cache keeps the keys'
# indexes apart (--label-key target is another run), and a folder extracted again from another
# version of its archive with the same times is indexed again (not its stale cache entry).
# `vit3d prepare shards` writes shards that Python's tarfile
# reads back to the source's bytes and labels, each sample once; a second prepare into a folder
# one holds is refused, and a stopped one's staging folder cleared by the next. A damaged shard stops every rank at
# start with exit 2 and a message naming the shard and the byte.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
"$py" -c "import PIL, numpy" 2>/dev/null || { echo "SKIP: $py cannot import PIL and numpy"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# 36 images, every third one a JPEG; with libwebp in the build another third WebP (so a WebP that
# did not decode would stop the run: --bad-image fail)
webp=
"$vit3d" --version | grep -q "WebP libwebp" && webp=webp
"$py" "$here/make_images.py" "$work/folder" 3 12 32 $webp
"$py" - "$work" <<'PY'
import io, os, sys, tarfile
root = sys.argv[1]
src = f"{root}/folder"
classes = sorted(os.listdir(src))
samples = [(f"{src}/{c}/{f}", k) for k, c in enumerate(classes) for f in sorted(os.listdir(f"{src}/{c}"))]
os.makedirs(f"{root}/shards")
def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))
formats = [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]
per = 12
for s in range(3):
    with tarfile.open(f"{root}/shards/train-{s:02d}.tar", "w", format=formats[s]) as tf:
        if s == 2:
            d = tarfile.TarInfo("d")
            d.type = tarfile.DIRTYPE
            tf.addfile(d)
        for i, (path, label) in enumerate(samples[s * per:(s + 1) * per]):
            key = ["long/" + "x" * 120, "p\u00e4x/" + "y" * 150, "d"][s] + f"/{i:04d}"
            if i % 4 == 0:
                add(tf, key + ".json", b"{}")
            add(tf, f"{key}.{path.rsplit('.', 1)[1]}", open(path, "rb").read())
            add(tf, key + ".cls", str(label).encode())
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
fail=0
args=(train --model tiny --img-size 32 --patch-size 8 --num-classes 3 --micro-batch-size 2
      --global-batch-size 8 --steps 12 --threads 1 --loader-threads 2 --eval-interval 6
      --seed 3 --log-interval 6 --bad-image fail)
for r in "folder|$work/folder|$work/folder" "shards|$work/shards/train-{00..02}.tar|$work/shards"; do
  IFS='|' read -r name data val <<<"$r"
  if ! timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --data "$data" \
      --val-data "$val" --log-dir "$work/run_$name" --final-weights "$work/run_$name/w.safetensors" \
      > "$work/run_$name.log" 2>&1; then
    echo "FAIL: the run on the $name did not complete"; tail -15 "$work/run_$name.log"; fail=1
  fi
done
# Every logged figure but the timings; then the weights.
"$py" - "$work/run_folder/metrics.jsonl" "$work/run_shards/metrics.jsonl" <<'PY' || fail=1
import json, sys
timing = ("img_per_s", "step_ms", "model_tflops", "mfu", "data_wait_ms")
rows = [[{k: v for k, v in json.loads(l).items() if k not in timing and not k.startswith("rank")}
         for l in open(p)] for p in sys.argv[1:]]
if len(rows[0]) != 12 or rows[0] != rows[1]:
    print("FAIL: the runs on the folder and on the shards logged different figures")
    for a, b in zip(*rows):
        if a != b: print(" folder", a, "\n shards", b); break
    sys.exit(1)
val = [k for k in rows[0][-1] if k.startswith("eval")]
print(f"shards = folder: 12 steps, loss {rows[0][-1]['loss']}, {', '.join(f'{k} {rows[0][-1][k]}' for k in val)}")
if not val:
    print("FAIL: no validation figures logged"); sys.exit(1)
PY
cmp -s "$work/run_folder/w.safetensors" "$work/run_shards/w.safetensors" ||
  { echo "FAIL: the final weights differ"; fail=1; }

# --check-log on 2 ranks: the shard run repeats the folder run's log bit for bit, its two
# evaluations included (exit 0); a run of another seed differs (exit 5) and still writes its
# final weights (a collective export). The first writes both shard indexes to an index cache;
# a second run reads them from it (world rank 0 unpacks the entry as the others do) and logs the
# same steps again.
for k in 1 2; do
  if ! timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --data "$work/shards" \
      --val-data "$work/shards/train-{00..02}.tar" --check-log "$work/run_folder/metrics.jsonl" \
      --index-cache "$work/cache" > "$work/check_same$k.log" 2>&1 ||
     ! grep -q -- "--check-log: 12 steps equal .* 2 of them with their evaluation" \
       "$work/check_same$k.log"; then
    echo "FAIL: --check-log of the shard run ($k) against the folder run"
    grep -- "--check-log" "$work/check_same$k.log" | head -3; fail=1
  fi
done
hits=$(grep -c "index from the cache" "$work/check_same2.log")
writes=$(grep -c "written to the cache" "$work/check_same1.log")
if [ "$hits" -ne 2 ] || [ "$writes" -ne 2 ]; then
  echo "FAIL: the index cache: $writes entries written by the first run (want 2), $hits read by the second (want 2)"
  grep "dataset" "$work/check_same1.log" "$work/check_same2.log"; fail=1
else
  echo "index cache: the first run wrote both shard indexes, the second read them and logged the same 12 steps"
fi
# A folder replaced by another version of it with the same times (an archive extracted, as tar
# and cp -a keep them) is indexed again, not taken from the cache: its change times are new.
mkdir -p "$work/v1" "$work/ext"
cp -r "$work/folder" "$work/v1/ds"
tar -C "$work/v1" --mtime=@1600000000 -cf "$work/v1.tar" ds
mv "$work/v1/ds/c0/$(ls "$work/v1/ds/c0" | head -1)" "$work/v1/ds/c0/zz_renamed.png"
tar -C "$work/v1" --mtime=@1600000000 -cf "$work/v2.tar" ds
one=(train --model tiny --img-size 32 --patch-size 8 --num-classes 3 --micro-batch-size 2
     --global-batch-size 2 --steps 1 --threads 1 --loader-threads 1 --index-cache "$work/cache_v")
tar -C "$work/ext" -xf "$work/v1.tar" && "$vit3d" "${one[@]}" --data "$work/ext/ds" \
  > "$work/v1.log" 2>&1
rm -rf "$work/ext/ds" && tar -C "$work/ext" -xf "$work/v2.tar" &&
  "$vit3d" "${one[@]}" --data "$work/ext/ds" > "$work/v2.log" 2>&1
if grep -q "written to the cache" "$work/v1.log" && grep -q "written to the cache" "$work/v2.log" &&
   ! grep -q "index from the cache" "$work/v2.log"; then
  echo "index cache: a folder extracted again from another archive with the same times is indexed again"
else
  echo "FAIL: the index cache took a replaced folder's stale entry"; grep "dataset" "$work/v2.log"
  fail=1
fi
# The weights' EMA evaluations too: another EMA decay trains the same steps (loss and grad norm
# equal) but evaluates other averaged weights, which --check-log names (exit 5); the same decay
# repeats them (exit 0).
for run in "ref 0.9" "other 0.8" "same 0.9"; do
  set -- $run
  check=()
  [ "$1" != ref ] && check=(--check-log "$work/ema_ref/metrics.jsonl")
  timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --data "$work/shards" \
    --val-data "$work/shards" --model-ema "$2" --log-dir "$work/ema_$1" "${check[@]}" \
    > "$work/ema_$1.log" 2>&1
  echo "$1 $?" >> "$work/ema_rc"
done
if [ "$(tr '\n' ' ' < "$work/ema_rc")" = "ref 0 other 5 same 0 " ] &&
   grep -q "EMA evaluation loss .* against" "$work/ema_other.log" &&
   grep -q "2 of them with their evaluation and 2 with the EMA's" "$work/ema_same.log"; then
  echo "check-log of EMA evaluations: another --model-ema decay exits 5 at its EMA evaluation, the same decay repeats both"
else
  echo "FAIL: --check-log of EMA evaluations: exit codes $(tr '\n' ' ' < "$work/ema_rc")"
  grep -- "--check-log" "$work/ema_other.log" "$work/ema_same.log" | head -6; fail=1
fi
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --data "$work/shards" --seed 4 \
  --check-log "$work/run_folder/metrics.jsonl" --final-weights "$work/seed4.safetensors" \
  > "$work/check_seed.log" 2>&1
rc=$?
if [ $rc -ne 5 ] || [ ! -s "$work/seed4.safetensors" ]; then
  echo "FAIL: --check-log of another seed on 2 ranks gave rc $rc (want 5) or no final weights"
  tail -5 "$work/check_seed.log"; fail=1
else
  echo "check-log on 2 ranks: the shard run equals the folder run's 12 steps; another seed exits 5 after its export"
fi

# --label-key: the shards again with each label in KEY.label and a decoy KEY.target.
"$py" - "$work/shards" "$work/shards_lbl" <<'PY'
import io, os, sys, tarfile
src, out = sys.argv[1:]
os.makedirs(out)
for name in sorted(os.listdir(src)):
    with tarfile.open(f"{src}/{name}") as tin, tarfile.open(f"{out}/{name}", "w") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isfile() else None
            if m.name.endswith(".json"):  # the shards' decoy {} members: KEY.json holds the label now
                continue
            if m.name.endswith(".cls"):
                obj = {"key": m.name, "nested": {"label": 99}, "label": int(data),
                       "meta": {"id": 7, "label": int(data)}, "name": f"c{int(data)}"}
                for kind, text in (("label", data), ("target", str((int(data) + 1) % 3).encode()),
                                   ("json", __import__("json").dumps(obj).encode()),
                                   ("txt", f"c{int(data)}\n".encode())):
                    ti = tarfile.TarInfo(m.name[:-3] + kind)
                    ti.size = len(text)
                    tout.addfile(ti, io.BytesIO(text))
            else:
                tout.addfile(m, io.BytesIO(data) if data is not None else None)
PY
lbl=("${args[@]}" --data "$work/shards_lbl" --val-data "$work/folder" --index-cache "$work/cache_lbl")
timeout 120 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" > "$work/lbl_none.log" 2>&1
rc_none=$?
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" --label-key label \
  --check-log "$work/run_folder/metrics.jsonl" > "$work/lbl_label.log" 2>&1
rc_label=$?
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" --label-key target \
  --check-log "$work/run_folder/metrics.jsonl" > "$work/lbl_target.log" 2>&1
rc_target=$?
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" --label-key json:label \
  --check-log "$work/run_folder/metrics.jsonl" > "$work/lbl_json.log" 2>&1
rc_json=$?
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" --label-key json:meta.label \
  --check-log "$work/run_folder/metrics.jsonl" > "$work/lbl_meta.log" 2>&1
rc_meta=$?
# Class names (vit3d prepare's classes.txt form): KEY.txt and the JSON field "name" hold them.
printf '0\tc0\n1\tc1\n2\tc2\n' > "$work/classes.txt"
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" --label-key txt \
  --label-names "$work/classes.txt" --check-log "$work/run_folder/metrics.jsonl" \
  > "$work/lbl_txt.log" 2>&1
rc_txt=$?
timeout 300 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" --label-key json:name \
  --label-names "$work/classes.txt" --check-log "$work/run_folder/metrics.jsonl" \
  > "$work/lbl_name.log" 2>&1
rc_name=$?
timeout 120 mpirun -np 2 --oversubscribe "$vit3d" "${lbl[@]}" --label-key txt \
  > "$work/lbl_nonames.log" 2>&1
rc_nonames=$?
if [ $rc_txt -eq 0 ] && grep -q -- "--check-log: 12 steps equal" "$work/lbl_txt.log" &&
   [ $rc_name -eq 0 ] && grep -q -- "--check-log: 12 steps equal" "$work/lbl_name.log" &&
   [ $rc_nonames -eq 2 ] && grep -q "holds 'c[0-2]', not a class number (class names need --label-names FILE)" "$work/lbl_nonames.log"; then
  echo "label names: KEY.txt and json:name holding class names, with --label-names classes.txt, log the folder run's 12 steps; without it refused naming the flag"
else
  echo "FAIL: --label-names: rc $rc_txt (want 0), $rc_name (want 0), $rc_nonames (want 2)"
  grep -h "label\|check-log" "$work"/lbl_txt.log "$work"/lbl_name.log "$work"/lbl_nonames.log | head -6; fail=1
fi
if [ $rc_none -eq 2 ] && grep -q "has no .cls label member.*--label-key" "$work/lbl_none.log" &&
   [ $rc_label -eq 0 ] && grep -q -- "--check-log: 12 steps equal" "$work/lbl_label.log" &&
   [ $rc_target -eq 5 ] && ! grep -q "shards_lbl: index from the cache" "$work/lbl_target.log" &&
   [ $rc_json -eq 0 ] && grep -q -- "--check-log: 12 steps equal" "$work/lbl_json.log" &&
   [ $rc_meta -eq 0 ] && grep -q -- "--check-log: 12 steps equal" "$work/lbl_meta.log"; then
  echo "label key: KEY.label shards refused without --label-key, with it the folder run's 12 steps; --label-key target (not from the label index's cache entry) another run; json:label (beside a nested label) and json:meta.label (a nested field) the folder run's steps"
else
  echo "FAIL: --label-key: rc $rc_none (want 2), $rc_label (want 0), $rc_target (want 5), $rc_json (want 0), $rc_meta (want 0)"
  grep -h "label member\|check-log\|cache" "$work"/lbl_*.log | head -8; fail=1
fi

# vit3d prepare shards, read back by Python's tarfile.
if ! "$vit3d" prepare shards "$work/folder" "$work/out/prep" 10 > "$work/prep.log" 2>&1 ||
   ! mv "$work/out/prep" "$work/prep"; then  # (parent folders made as needed)
  echo "FAIL: vit3d prepare shards"; cat "$work/prep.log"; fail=1
fi
"$py" - "$work/folder" "$work/prep" <<'PY' || fail=1
import glob, os, sys, tarfile
src, out = sys.argv[1:]
classes = sorted(os.listdir(src))
samples = [(f"{src}/{c}/{f}", k) for k, c in enumerate(classes) for f in sorted(os.listdir(f"{src}/{c}"))]
names = [l.rstrip("\n").split("\t") for l in open(f"{out}/classes.txt")]
assert names == [[str(k), c] for k, c in enumerate(classes)], names
seen, order = {}, []
for shard in sorted(glob.glob(f"{out}/*.tar")):
    with tarfile.open(shard) as tf:
        for m in tf.getmembers():
            key, kind = m.name.split(".", 1)
            data = tf.extractfile(m).read()
            i = int(key)
            if kind == "cls":
                assert int(data) == samples[i][1], (m.name, data)
                continue
            assert kind == samples[i][0].rsplit(".", 1)[1], m.name
            assert data == open(samples[i][0], "rb").read(), m.name
            assert i not in seen, m.name
            seen[i] = 1
            order.append(i)
shards = len(glob.glob(f"{out}/*.tar"))
assert len(seen) == len(samples) and shards == 4, (len(seen), shards)
assert order != sorted(order), "not shuffled"
print(f"prepare shards: {len(seen)} samples in {shards} shards, bytes and labels as the source's")
PY
"$vit3d" train --model tiny --img-size 32 --patch-size 8 --num-classes 3 --data "$work/prep" \
  --micro-batch-size 4 --global-batch-size 4 --steps 2 --threads 1 > "$work/prep_train.log" 2>&1 ||
  { echo "FAIL: training on prepared shards"; tail -5 "$work/prep_train.log"; fail=1; }

# A run saved on shards read by their numbers (no classes.txt, as before it named them) resumes
# on the same shards named by classes.txt without the warning that the data changed.
mkdir "$work/prep_num" && cp "$work/prep/"*.tar "$work/prep_num/"
num=(train --model tiny --img-size 32 --patch-size 8 --num-classes 3 --data "$work/prep_num"
     --micro-batch-size 4 --global-batch-size 4 --steps 4 --threads 1 --save "$work/ck_num")
"$vit3d" "${num[@]}" --run-steps 2 > /dev/null 2>&1 && cp "$work/prep/classes.txt" "$work/prep_num/"
out=$("$vit3d" "${num[@]}" --resume auto 2>&1)
if grep -q "resumed from" <<<"$out" && grep -q "prep_num: its classes are named by" <<<"$out" &&
   ! grep -q "the data stream holds other images" <<<"$out"; then
  echo "shards first read by numbers, then named by classes.txt: resumed without a data warning"
else echo "FAIL: shards named after a run read them by numbers: $out"; fail=1; fi

# A prepared folder missing one of its shards, or holding one cut short, is refused by its
# shards.txt (fewer images were read without a word).
cp -r "$work/prep" "$work/prep_gap" && rm "$work/prep_gap/shard-000001.tar"
cp -r "$work/prep" "$work/prep_cut" && truncate -s -512 "$work/prep_cut/shard-000002.tar"
out=$("$vit3d" train --model tiny --data "$work/prep_gap" --steps 1 --threads 1 2>&1)
out2=$("$vit3d" train --model tiny --data "$work/prep_cut" --steps 1 --threads 1 2>&1)
if grep -q "prep_gap lacks shard-000001.tar, one of the shards its shards.txt lists" <<<"$out" &&
   grep -q "prep_cut/shard-000002.tar has [0-9]* bytes and its shards.txt says" <<<"$out2"; then
  echo "a prepared folder with a shard missing or cut is refused"
else echo "FAIL: a prepared folder with a shard missing or cut: $out / $out2"; fail=1; fi
# A validation set of the last two classes only, prepared as shards: labelled by the class names
# in its classes.txt, as the same folder is (its shards number its classes 0 and 1, which were
# taken for the training set's first two: a wrong top-1 without a word), with --label-names (the
# training set's names) too.
mkdir -p "$work/val_sub" && cp -r "$work/folder/$(ls "$work/folder" | sed -n 2p)" \
  "$work/folder/$(ls "$work/folder" | sed -n 3p)" "$work/val_sub/" &&
  "$vit3d" prepare shards "$work/val_sub" "$work/val_sub_sh" 5 > /dev/null 2>&1 ||
  { echo "FAIL: prepare shards of the validation subset"; fail=1; }
sub=(train --model tiny --img-size 32 --patch-size 8 --num-classes 3 --data "$work/prep"
     --micro-batch-size 4 --global-batch-size 4 --steps 2 --threads 1 --eval-interval 2)
a=$("$vit3d" "${sub[@]}" --val-data "$work/val_sub" 2>&1 | grep "^eval")
b=$("$vit3d" "${sub[@]}" --val-data "$work/val_sub_sh" 2>&1)
c=$("$vit3d" "${sub[@]}" --val-data "$work/val_sub_sh" --label-names "$work/prep/classes.txt" 2>&1)
if [ -n "$a" ] && [ "$a" = "$(grep "^eval" <<<"$b")" ] && [ "$a" = "$(grep "^eval" <<<"$c")" ] &&
   grep -q "val_sub_sh/classes.txt (vit3d prepare shards', not --label-names" <<<"$c" &&
   grep -q "val_sub_sh: its classes are named by .*val_sub_sh/classes.txt" <<<"$b" &&
   grep -q "holds 2 of the 3 classes of --data .*: labelled by name" <<<"$b"; then
  echo "prepared validation shards of two classes are labelled by name: $a"
else echo "FAIL: validation shards of a class subset: '$a' against: $b"; fail=1; fi

# prepare shards of a source with files that are no images: exit 2 naming each, no shard, lock
# or folder of its own (OUT and the parents it made) left behind (the rerun after the fix must not be refused); a prepare
# that succeeded left no lock either.
cp -r "$work/folder" "$work/folder_bad"
echo "not an image" > "$work/folder_bad/c1/zz.png"
: > "$work/folder_bad/c0/zz_empty.png"
# a PNG and a JPEG cut short (decoded, as they do not end as their format ends: refused) and a
# PNG with bytes after its end (decoded: kept)
png=$(ls "$work/folder_bad/c2/"*.png | head -1)
jpg=$(ls "$work/folder_bad/c2/"*.jpg | head -1)
head -c $(($(stat -c %s "$png") / 2)) "$png" > "$work/folder_bad/c2/zz_cut.png"
head -c $(($(stat -c %s "$jpg") - 300)) "$jpg" > "$work/folder_bad/c2/zz_cut.jpg"
cat "$png" /dev/null > "$work/folder_bad/c2/zz_tail.png" && printf 'trailing bytes' >> "$work/folder_bad/c2/zz_tail.png"
"$vit3d" prepare shards "$work/folder_bad" "$work/prep_bad/a/b/" 10 > "$work/prep_bad.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "folder_bad/c1/zz.png" "$work/prep_bad.log" ||
   ! grep -q "folder_bad/c0/zz_empty.png" "$work/prep_bad.log" ||
   ! grep -q "folder_bad/c2/zz_cut.png does not end as a whole png file and does not decode" "$work/prep_bad.log" ||
   ! grep -q "folder_bad/c2/zz_cut.jpg does not end as a whole jpg file and does not decode" "$work/prep_bad.log" ||
   grep -q "zz_tail" "$work/prep_bad.log" ||
   ! grep -q "4 files of .*folder_bad cannot go into a shard (named above)" "$work/prep_bad.log" ||
   [ -e "$work/prep_bad" ] || [ -e "$work/prep/.vit3d-prepare.lock" ]; then
  echo "FAIL: prepare shards of a bad source: rc $rc, or shards left:"; cat "$work/prep_bad.log"
  ls "$work/prep_bad"; fail=1
else
  echo "prepare shards refused a source's bad files, each named, nothing left: $(cat "$work/prep_bad.log")"
fi

# A prepare into a folder another prepare holds is refused; a stopped prepare's staging folder
# (OUT/.partial: nothing of it in OUT itself) is cleared by the next one.
mkdir -p "$work/prep_busy" "$work/prep_left/.partial"
out=$("$vit3d" train --model tiny --data "$work/prep_left" --steps 1 --threads 1 2>&1)
grep -q "prep_left holds no shards, only the .partial folder of a vit3d prepare shards that was stopped: run that prepare again" <<<"$out" &&
  echo "training on a stopped prepare's folder says so" ||
  { echo "FAIL: training on a stopped prepare's folder: $out"; fail=1; }
touch "$work/prep_left/.partial/shard-000000.tar"
flock "$work/prep_busy/.vit3d-prepare.lock" sleep 5 &
holder=$!
sleep 0.5
"$vit3d" prepare shards "$work/folder" "$work/prep_busy" 10 > "$work/prep_busy.log" 2>&1
rc=$?
wait $holder
"$vit3d" prepare shards "$work/folder" "$work/prep_left" 10 > "$work/prep_left.log" 2>&1
rc2=$?
if [ $rc -eq 2 ] && grep -q "another vit3d prepare is writing into" "$work/prep_busy.log" &&
   ! ls "$work/prep_busy"/*.tar > /dev/null 2>&1 && [ $rc2 -eq 0 ] &&
   grep -q "removing .*prep_left/.partial, left by a prepare that was stopped" "$work/prep_left.log" &&
   [ ! -e "$work/prep_left/.partial" ] && [ "$(ls "$work/prep_left" | grep -c '\.tar$')" -ge 1 ]; then
  echo "prepare shards: a held folder refused; a stopped prepare's .partial cleared by the next"
else
  echo "FAIL: prepare shards with another prepare at work ($rc) or after a stopped one ($rc2)"
  cat "$work/prep_busy.log" "$work/prep_left.log"; ls -a "$work/prep_left"; fail=1
fi

# An OUT holding a folder (a run would then refuse the shards beside it) or inside the source
# (whose reading took OUT for an empty class) is refused, nothing written.
mkdir -p "$work/prep_sub/old"
out=$("$vit3d" prepare shards "$work/folder" "$work/prep_sub" 10 2>&1); rc=$?
out2=$("$vit3d" prepare shards "$work/folder" "$work/folder/shards" 10 2>&1); rc2=$?
if [ $rc -eq 2 ] && grep -q "prep_sub holds the folder old: a run reading the shards would find a folder beside them" <<<"$out" &&
   ! ls "$work/prep_sub"/*.tar > /dev/null 2>&1 && [ $rc2 -eq 2 ] &&
   grep -q "folder/shards lies inside the dataset .*folder, which would then take it for a part of itself" <<<"$out2" &&
   [ ! -e "$work/folder/shards" ]; then
  echo "prepare shards: an OUT holding a folder, or inside the source, refused"
else echo "FAIL: prepare shards into a folder with a subfolder (rc $rc: $out) or inside the source (rc $rc2: $out2)"; fail=1; fi

# A damaged shard: every rank stops at start with exit 2 and says which shard and where.
mkdir "$work/bad"
"$py" -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[1536 + 10] ^= 1; open(sys.argv[2], 'wb').write(b)" \
  "$work/shards/train-02.tar" "$work/bad/train-02.tar"
timeout 120 mpirun -np 2 --oversubscribe "$vit3d" "${args[@]}" --data "$work/bad" > "$work/bad.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "train-02.tar: the tar header at byte 1536 is damaged" "$work/bad.log"; then
  echo "FAIL: a damaged shard gave rc $rc:"; tail -5 "$work/bad.log"; fail=1
else
  echo "damaged shard: rc 2, $(grep -m1 -o 'train-02.tar: the tar header.*' "$work/bad.log")"
fi
exit $fail
