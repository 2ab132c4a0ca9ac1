#!/usr/bin/env bash
# test_export.sh VIT3D: export and import. Trains a small model on a generated image folder on a
# 2x2x2 mesh with a checkpoint, exports it (`vit3d export`), and checks that
#  - PyTorch loads the file into a ViT with timm's parameter names (strict) and reproduces the
#    validation logits of `vit3d eval` on the same inputs (tests/export_check.py);
#  - with --eval-hflip 1 the logits are the mean over each image and its mirror image, on one
#    rank (against PyTorch) and on the 2x2x2 mesh (the same figures);
#  - the exported file holds the checkpoint's tensors and metadata (the model flags, the
#    normalisation); `vit3d inspect FILE` prints the command that evaluates it as the checkpoint;
#  - `vit3d eval --init-from` the exported file gives the same evaluation as the checkpoint,
#    on one rank and on the 2x2x2 mesh; `vit3d eval` and `export` given the --save folder take
#    its newest checkpoint, and the evaluation's memory plan has no gradients or optimizer;
#  - --init-from at another image size resamples pos_embed and at another class count renews
#    the head, and says so; the resampled pos_embed equals timm's resample_abs_pos_embed
#    (PyTorch bicubic interpolation with antialias=True) for a larger, a smaller and a
#    non-integer-ratio grid (4x4 to 6x6, 2x2, 3x3);
#  - with LayerScale and 2 register tokens (positions on every token, then on the patch tokens
#    only) --init-from keeps every tensor at the same size and resamples the grid behind the
#    prefix rows at another; a file of another variant (LayerScale, registers, positions,
#    QK-norm, parallel blocks) is refused naming the flag that matches it;
#  - --init-from into fixed sin-cos positions keeps the table, not the file's pos_embed;
#  - --init-from of a file of no timm ViT (module.-prefixed names, a checkpoint's
#    optim.safetensors) says so, not a flag to pass; of a checkpoint folder, its weights' file;
#  - --init-from reads F16 and BF16 files (widened exactly) and F64 (rounded); an integer tensor
#    is refused;
#  - tied logits rank in class order, a NaN logit is no hit and its loss is null in metrics.jsonl;
#  - vit3d eval --predictions writes each image's top-5 (1 rank: as its logits say; a 2x2 model
#    split and two DP replicas: the same);
#  - a --val-data lacking a training class is labelled by class name (its evaluation scores
#    the predictions of the other classes' images); one with a class --data lacks is refused;
#  - a resume on another training set is warned about (the checkpoint holds the set's size).
set -uo pipefail
vit3d=$1
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
"$py" -c "import torch, PIL" 2>/dev/null || { echo "SKIP: $py cannot import torch and PIL"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" - "$work" <<'PY'
import os, random, sys
from PIL import Image
random.seed(3)
for split, n in (("train", 24), ("val", 10)):
    for c in range(3):
        os.makedirs(f"{sys.argv[1]}/{split}/c{c}")
        for i in range(n):
            img = Image.new("RGB", (20, 20), tuple(random.randrange(256) for _ in range(3)))
            for _ in range(30):
                img.putpixel((random.randrange(20), random.randrange(20)), (60 * c, 255 - 60 * c, 90))
            img.save(f"{sys.argv[1]}/{split}/c{c}/{i:03d}.png")
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
model=(--model tiny --img-size 16 --patch-size 4 --width 32 --heads 4 --depth 4 --num-classes 3)
fail=0
step() { echo "== $*"; "$@" > "$work/last.log" 2>&1 || { echo "FAIL: $*"; tail -15 "$work/last.log"; fail=1; }; }
step timeout 300 mpirun -np 8 --oversubscribe "$vit3d" train "${model[@]}" --tp 2 --pp 2 \
  --data "$work/train" --micro-batch-size 4 --global-batch-size 16 --steps 8 --threads 1 \
  --loader-threads 1 --lr 3e-3 --save "$work/ck"
ck=$work/ck/step-00000008
step "$vit3d" export --checkpoint "$ck" --out "$work/w.safetensors"
step timeout 300 mpirun -np 1 "$vit3d" eval "${model[@]}" --val-data "$work/val" --checkpoint "$ck" \
  --micro-batch-size 4 --logits-out "$work/dump.safetensors"
grep "^eval:" "$work/last.log" > "$work/eval_ckpt.txt"
# The --save folder in place of the checkpoint: its newest one (eval, export); an evaluation
# holds no gradients or optimizer state.
step timeout 300 mpirun -np 1 "$vit3d" eval "${model[@]}" --val-data "$work/val" \
  --checkpoint "$work/ck" --micro-batch-size 4
grep "^eval:" "$work/last.log" | cmp -s - "$work/eval_ckpt.txt" &&
  grep -q "loaded $work/ck/step-00000008: 8 steps done" "$work/last.log" &&
  grep -q "memory plan (cpu): .*gradients 0.0 MiB, optimizer 0.0 MiB" "$work/last.log" &&
  echo "ok: eval --checkpoint SAVE_FOLDER evaluated its step 8, without gradients or optimizer" ||
  { echo "FAIL: eval --checkpoint SAVE_FOLDER"; cat "$work/last.log"; fail=1; }
step "$vit3d" export --checkpoint "$work/ck" --out "$work/w_folder.safetensors"
cmp -s "$work/w.safetensors" "$work/w_folder.safetensors" ||
  { echo "FAIL: export --checkpoint SAVE_FOLDER wrote other bytes than its step 8"; fail=1; }
# The file holds the checkpoint's tensors, byte for byte, and metadata naming the run's
# normalisation (no crop keys: the run never evaluated); vit3d eval --init-from it with another
# normalisation warns; an --out onto the checkpoint's own file is refused, the file kept.
step "$py" - "$work/w.safetensors" "$ck/model.safetensors" <<'PY'
import json, struct, sys
def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}, meta
(t, meta), (t0, meta0) = load(sys.argv[1]), load(sys.argv[2])
want = {"format": "pt", "vit3d_step": "8", "vit3d_weights": "model", "input_size": "3,16,16",
        "num_classes": "3", "mean": "0.485,0.456,0.406", "std": "0.229,0.224,0.225"}
assert t == t0 and len(t) > 0, "the tensors differ from the checkpoint's"
flags = meta.pop("vit3d_model_flags", "")
assert meta == want and meta0 is None, f"metadata {meta}, the checkpoint's {meta0}"
assert flags.startswith("--img-size 16 --patch-size 4 --width 32 --depth 4 --heads 4 "), flags
PY
# vit3d inspect of the file prints the command that evaluates it: it does, as the checkpoint.
cmd=$("$vit3d" inspect "$work/w.safetensors" | sed -n 's/^evaluate with: vit3d //p')
if [ -n "$cmd" ] &&
   out=$(eval "timeout 300 mpirun -np 1 \"\$vit3d\" ${cmd/--val-data DIR/--val-data \"\$work/val\"} --micro-batch-size 4" 2>&1) &&
   grep "^eval:" <<<"$out" | cmp -s - "$work/eval_ckpt.txt" && ! grep -q warning <<<"$out"; then
  echo "ok: vit3d inspect FILE's command evaluates the export as the checkpoint: $cmd"
else echo "FAIL: vit3d inspect FILE's command ($cmd): $out"; fail=1; fi
# Without any of those flags vit3d eval takes them from the file's metadata: the same figures.
out=$(timeout 300 mpirun -np 1 "$vit3d" eval --init-from "$work/w.safetensors" \
      --val-data "$work/val" --micro-batch-size 4 2>&1)
grep "^eval:" <<<"$out" | cmp -s - "$work/eval_ckpt.txt" &&
  grep -q "leaves out are the --init-from file's" <<<"$out" &&
  echo "ok: vit3d eval --init-from FILE alone takes the model and normalisation from its metadata" ||
  { echo "FAIL: vit3d eval --init-from FILE without flags: $out"; fail=1; }
# Of a file without vit3d's metadata it says what the tensors say; of a checkpoint's weights, the
# checkpoint; a damaged file is refused.
cp "$ck/model.safetensors" "$work/plain.safetensors"
head -c 300 "$ck/model.safetensors" > "$work/cut.safetensors"
out=$("$vit3d" inspect "$work/plain.safetensors" 2>&1)
out2=$("$vit3d" inspect "$ck/model.safetensors" 2>&1)
out3=$("$vit3d" inspect "$work/cut.safetensors" 2>&1); rc3=$?
# A file's metadata is shown with its control bytes as '?', never put into a command; a file
# without ViT tensors is said to be none.
"$py" - "$work" <<'PY'
import json, struct, sys
for name, meta in (("odd", {"vit3d_model_flags": "--width 32; echo PWNED", "note": "\x1b[31mred"}),
                   ("nonvit", None), ("heads5", {"vit3d_model_flags": "--width 32 --heads 5"}),
                   ("size64", {"vit3d_model_flags": "--img-size 32 --width 32 --heads 5",
                               "input_size": "3,64,64"})):
    head = {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    if meta:
        head["__metadata__"] = meta
    head = json.dumps(head).encode()
    head += b" " * (-len(head) % 8)
    open(f"{sys.argv[1]}/{name}.safetensors", "wb").write(struct.pack("<Q", len(head)) + head + b"\0" * 4)
PY
out4=$("$vit3d" inspect "$work/odd.safetensors" 2>&1)
out5=$("$vit3d" inspect "$work/nonvit.safetensors" 2>&1)
if grep -q "^  note: ?\[31mred$" <<<"$out4" &&
   grep -q "^evaluate with: vit3d eval --init-from '$work/odd.safetensors' --val-data DIR$" <<<"$out4" &&
   grep -q "no patch_embed.proj.weight: not a ViT of timm's layout" <<<"$out5"; then
  echo "ok: vit3d inspect shows a file's metadata harmless, keeps it out of the command it prints, and names a file of no ViT"
else echo "FAIL: vit3d inspect of odd files: $out4 / $out5"; fail=1; fi
if grep -q "no vit3d metadata .*: its tensors say width 32, depth 4, patch 4, MLP 128, 3 classes, 17 positions" <<<"$out" &&
   grep -q "the weights of the checkpoint $ck: vit3d inspect '$ck' prints" <<<"$out2" &&
   [ $rc3 -eq 2 ] && grep -q "vit3d inspect: .*cut.safetensors" <<<"$out3"; then
  echo "ok: vit3d inspect of another tool's file, a checkpoint's and a damaged one"
else echo "FAIL: vit3d inspect FILE: $out / $out2 / rc $rc3 $out3"; fail=1; fi
# A metadata value refused is said to be the file's (the user gave no such flag).
out=$("$vit3d" eval --init-from "$work/heads5.safetensors" --val-data "$work/val" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "width 32 is not a multiple of heads 5 (--width and --heads are from the metadata of $work/heads5.safetensors" <<<"$out" &&
  grep -q "size64.safetensors: its metadata's vit3d_model_flags say --img-size 32 and its input_size 3,64,64: the model flags' is used" \
    <<<"$("$vit3d" eval --init-from "$work/size64.safetensors" --val-data "$work/val" 2>&1)" &&
  echo "ok: a refused metadata value is named the file's; an input_size that contradicts --img-size warned" ||
  { echo "FAIL: eval --init-from a file whose metadata is refused: rc $rc $out"; fail=1; }
out=$(timeout 300 mpirun -np 1 "$vit3d" eval "${model[@]}" --val-data "$work/val" \
      --init-from "$work/w.safetensors" --micro-batch-size 4 --mean 0.5,0.5,0.5 2>&1)
grep -q "w.safetensors was trained with --mean 0.485,0.456,0.406 and this evaluation has --mean 0.5,0.5,0.5: the images are not normalised as in its training" <<<"$out" &&
  echo "ok: the exported file's metadata names its normalisation; eval --init-from warns of another" ||
  { echo "FAIL: eval --init-from with another --mean: $out"; fail=1; }
# A fine-tune from the file takes its model flags the command line leaves out (a 16 px tiny with
# 4 heads; the default model's sizes were refused); one given that the shapes do not show
# (--heads, --act) is warned about.
out=$("$vit3d" train --init-from "$work/w.safetensors" --data "$work/train" --steps 1 \
      --micro-batch-size 4 --threads 1 2>&1); rc=$?
out2=$("$vit3d" train "${model[@]}" --heads 2 --act quick_gelu --init-from "$work/w.safetensors" \
       --data "$work/train" --steps 1 --micro-batch-size 4 --threads 1 2>&1); rc2=$?
out3=$("$vit3d" plan --init-from "$work/w.safetensors" --global-batch-size 8 2>&1)
if [ $rc -eq 0 ] && grep -q "the model's flags the command line leaves out are the --init-from file's" <<<"$out" &&
   grep -q "model custom: img 16 patch 4 width 32 depth 4 heads 4 mlp 128 classes 3" <<<"$out" &&
   grep -q "^memory plan of custom (img 16 patch 4 width 32 depth 4 heads 4 mlp 128, 3 classes)" <<<"$out3" &&
   [ $rc2 -eq 0 ] && grep -q "warning: --init-from .*w.safetensors holds a model of --heads 4 --act gelu and this run's has --heads 2 --act quick_gelu" <<<"$out2"; then
  echo "ok: train --init-from (and its plan) takes the file's model flags; other heads and activation warned about"
else echo "FAIL: train --init-from's model flags: rc $rc $out / rc $rc2 $out2"; fail=1; fi
out=$("$vit3d" export --checkpoint "$ck" --out "$ck/model.safetensors" 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "is in the checkpoint folder" <<<"$out" &&
  "$vit3d" export --checkpoint "$ck" --out "$work/w_again.safetensors" > /dev/null &&
  cmp -s "$work/w.safetensors" "$work/w_again.safetensors" &&
  echo "ok: export onto the checkpoint's own file refused, the checkpoint intact" ||
  { echo "FAIL: export onto the checkpoint's file: rc $rc: $out"; fail=1; }
step "$py" "$here/export_check.py" "$work/w.safetensors" "$work/dump.safetensors" 32 4 4
cat "$work/last.log"
# --jpeg-reduce 0: a 640x480 JPEG resized to 18 px (a DCT-scaled decode at 1/8 by default) is
# decoded at full size, so the evaluation's input is torchvision's Resize(18, bicubic) +
# CenterCrop(16) of Pillow's decode byte for byte; the default stays near it, not equal.
mkdir -p "$work/jpg/c0" "$work/jpg/c1" "$work/jpg/c2"
"$py" - "$work/jpg" <<'PY'
import sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(5)
for i in range(3):
    y, x = np.mgrid[0:480, 0:640]
    a = np.stack([(x * 0.4 + y * 0.1) % 256, (y * 0.5) % 256, (x * y * 0.001) % 256], -1)
    a = np.clip(a + rng.normal(0, 20, a.shape), 0, 255).astype(np.uint8)
    Image.fromarray(a).save(f"{sys.argv[1]}/c{i}/{i}.jpg", quality=90)
PY
for r in 0 1; do
  step timeout 300 mpirun -np 1 "$vit3d" eval --init-from "$work/w.safetensors" --val-data "$work/jpg" \
    --eval-interpolation bicubic --jpeg-reduce $r --logits-out "$work/jpg$r.safetensors"
done
"$py" - "$work" "$here" <<'PY' || fail=1
import sys
import numpy as np
from PIL import Image
sys.path.insert(0, sys.argv[2])
from ref_vit import read_safetensors
mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
want = []
for i in range(3):
    im = Image.open(f"{sys.argv[1]}/jpg/c{i}/{i}.jpg").convert("RGB").resize((24, 18), Image.BICUBIC)
    a = np.asarray(im)[1:17, 4:20].astype(np.float32) / 255.0
    want.append(((a - mean) / std).transpose(2, 0, 1))
want = np.stack(want)
full = np.asarray(read_safetensors(sys.argv[1] + "/jpg0.safetensors")["images"])
reduced = np.asarray(read_safetensors(sys.argv[1] + "/jpg1.safetensors")["images"])
d_full = np.abs(full - want).max() * 0.229 * 255
d_red = np.abs(reduced - want).max() * 0.229 * 255
ok = d_full < 0.01 and 0.5 < d_red < 40
print(f"--jpeg-reduce 0: evaluation input vs Pillow + torchvision: {d_full:.4f} levels at most; "
      f"the reduced decode: {d_red:.1f} levels: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
step timeout 300 mpirun -np 1 "$vit3d" eval "${model[@]}" --val-data "$work/val" --checkpoint "$ck" \
  --micro-batch-size 4 --eval-hflip 1 --logits-out "$work/dump_flip.safetensors"
grep "^eval:" "$work/last.log" > "$work/eval_flip.txt"
step "$py" "$here/export_check.py" "$work/w.safetensors" "$work/dump_flip.safetensors" 32 4 4 --hflip
cat "$work/last.log"
step timeout 300 mpirun -np 8 --oversubscribe "$vit3d" eval "${model[@]}" --tp 2 --pp 2 \
  --val-data "$work/val" --checkpoint "$ck" --micro-batch-size 4 --threads 1 --eval-hflip 1
grep "^eval:" "$work/last.log" > "$work/eval_flip_mesh.txt"
step timeout 300 mpirun -np 1 "$vit3d" eval "${model[@]}" --val-data "$work/val" \
  --init-from "$work/w.safetensors" --micro-batch-size 4
grep "^eval:" "$work/last.log" > "$work/eval_init.txt"
step timeout 300 mpirun -np 8 --oversubscribe "$vit3d" eval "${model[@]}" --tp 2 --pp 2 \
  --val-data "$work/val" --init-from "$work/w.safetensors" --micro-batch-size 4 --threads 1
grep "^eval:" "$work/last.log" > "$work/eval_mesh.txt"
# The interleaved layout: each stage holds 2 chunks of the 4 blocks; a batch goes round the ring
# of stages twice.
step timeout 300 mpirun -np 8 --oversubscribe "$vit3d" eval "${model[@]}" --tp 2 --pp 2 \
  --pp-schedule interleaved --val-data "$work/val" --init-from "$work/w.safetensors" \
  --micro-batch-size 4 --threads 1
grep "^eval:" "$work/last.log" > "$work/eval_mesh_il.txt"
echo "checkpoint: $(cat "$work/eval_ckpt.txt")"
echo "init-from:  $(cat "$work/eval_init.txt")"
echo "2x2x2 mesh: $(cat "$work/eval_mesh.txt")"
echo "2x2x2 mesh, interleaved: $(cat "$work/eval_mesh_il.txt")"
echo "mirror, 1 rank:     $(cat "$work/eval_flip.txt")"
echo "mirror, 2x2x2 mesh: $(cat "$work/eval_flip_mesh.txt")"
grep -q "each with its mirror" "$work/eval_flip.txt" && ! cmp -s "$work/eval_flip.txt" "$work/eval_ckpt.txt" ||
  { echo "FAIL: --eval-hflip 1 did not change the evaluation"; fail=1; }
cmp -s "$work/eval_ckpt.txt" "$work/eval_init.txt" ||
  { echo "FAIL: --init-from evaluates differently from the checkpoint"; fail=1; }
same_eval() {  # same_eval A B WHAT: the eval lines of A and B agree to 1e-4
  "$py" - "$work/$1" "$work/$2" <<'PY' || { echo "FAIL: $3 differs"; fail=1; }
import re, sys
a, b = (list(map(float, re.findall(r"[\d.]+", open(p).read()))) for p in sys.argv[1:])
sys.exit(0 if len(a) == len(b) and all(abs(x - y) <= 1e-4 * max(1, abs(x)) for x, y in zip(a, b)) else 1)
PY
}
same_eval eval_ckpt.txt eval_mesh.txt "the mesh evaluation"
same_eval eval_ckpt.txt eval_mesh_il.txt "the interleaved mesh evaluation"
same_eval eval_flip.txt eval_flip_mesh.txt "the mesh evaluation with mirrors"
step timeout 300 mpirun -np 1 "$vit3d" train --model tiny --img-size 24 --patch-size 4 --width 32 \
  --heads 4 --depth 4 --num-classes 5 --steps 1 --micro-batch-size 2 --init-from "$work/w.safetensors"
grep -q "pos_embed resampled from a 4x4 to a 6x6 patch grid" "$work/last.log" &&
  grep -q "the head has another class count" "$work/last.log" &&
  echo "ok: --init-from at 24 px and 5 classes resampled pos_embed and renewed the head" ||
  { echo "FAIL: --init-from resampling messages"; cat "$work/last.log"; fail=1; }
# A pretraining checkpoint (MAE's: no head, and no fc_norm for the mean-pooled head) starts its
# head (here with MAE's --head-init-std 2e-5) and fc_norm fresh and takes the rest (lr 0 keeps the
# weights as --init-from made them); a file missing any other tensor is refused.
"$py" - "$work/w.safetensors" "$work" "$here" <<'PY' || { echo "FAIL: writing the stripped files"; fail=1; }
import json, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from ref_vit import read_safetensors
def write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = np.ascontiguousarray(t, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
w = {n: np.asarray(t) for n, t in read_safetensors(sys.argv[1]).items()}
write(sys.argv[2] + "/pretrain.safetensors", {n: t for n, t in w.items() if not n.startswith("head.")})
write(sys.argv[2] + "/holed.safetensors", {n: t for n, t in w.items() if n != "blocks.1.norm1.weight"})
write(sys.argv[2] + "/holed3.safetensors", {n: t for n, t in w.items() if n != "blocks.3.mlp.fc2.bias"})
write(sys.argv[2] + "/headT.safetensors", dict(w, **{"head.weight": np.ascontiguousarray(w["head.weight"].T)}))
write(sys.argv[2] + "/ddp.safetensors", {"module." + n: t for n, t in w.items()})
pe = w["pos_embed"]
write(sys.argv[2] + "/pos21.safetensors", dict(w, pos_embed=np.concatenate([pe, pe[:, 1:5]], 1)))
write(sys.argv[2] + "/distilled.safetensors",
      dict(w, dist_token=pe[:, :1].copy(), **{"head_dist.weight": w["head.weight"],
           "head_dist.bias": w["head.bias"], "pos_embed": np.concatenate([pe[:, :1], pe], 1)}))
PY
step timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --global-pool avg --steps 1 --lr 0 \
  --min-lr 0 --micro-batch-size 2 --init-from "$work/pretrain.safetensors" --head-init-std 2e-5 \
  --final-weights "$work/finetune0.safetensors"
grep -q "has no head.weight, head.bias, fc_norm.weight, fc_norm.bias; they start fresh" \
  "$work/last.log" &&
  grep -q "2 of its tensors are not used by this model (norm.weight, norm.bias)" "$work/last.log" ||
  { echo "FAIL: --init-from of a pretraining checkpoint did not say the head starts fresh and" \
      "the final norm is unused"; fail=1; }
# vit3d eval scores no layer that would start fresh; nor does it take two sources of weights.
out=$(timeout 300 mpirun -np 1 "$vit3d" eval "${model[@]}" --global-pool avg --val-data "$work/val" \
  --init-from "$work/pretrain.safetensors" 2>&1)
rc=$?
out2=$("$vit3d" eval "${model[@]}" --val-data "$work/val" --init-from "$work/w.safetensors" \
  --checkpoint "$ck" 2>&1)
if [ $rc -eq 2 ] && grep -q "head.weight, head.bias, fc_norm.weight, fc_norm.bias would start fresh, and vit3d eval takes every tensor" <<<"$out" &&
   grep -q "takes its weights from --checkpoint DIR or --init-from FILE: give one" <<<"$out2"; then
  echo "ok: vit3d eval refuses a file without the head, and --checkpoint with --init-from"
else echo "FAIL: vit3d eval of a pretraining checkpoint: rc $rc: $out $out2"; fail=1; fi
"$py" - "$work/pretrain.safetensors" "$work/finetune0.safetensors" "$here" <<'PY' || fail=1
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from ref_vit import read_safetensors
src, got = (read_safetensors(p) for p in sys.argv[1:3])
same = all(np.array_equal(np.asarray(src[n]), np.asarray(got[n])) for n in got if n in src)
fresh = (np.all(np.asarray(got["fc_norm.weight"]) == 1) and np.all(np.asarray(got["fc_norm.bias"]) == 0)
         and "norm.weight" not in got and "head.weight" in got)
hw = np.asarray(got["head.weight"], dtype=np.float64)  # 96 draws of N(0, 2e-5)
head = 1.4e-5 < hw.std() < 2.6e-5 and abs(hw.mean()) < 1e-5 and np.all(np.asarray(got["head.bias"]) == 0)
print(f"--init-from a pretraining checkpoint with --global-pool avg: shared tensors equal {same}, "
      f"fc_norm fresh and no norm {fresh}, fresh head std {hw.std():.3g} (--head-init-std 2e-5) {head}")
sys.exit(0 if same and fresh and head else 1)
PY
# init_from FILE [FLAGS...]: one step from FILE's weights on one rank; its output in out, its
# exit code returned.
init_from() {
  local file=$1
  shift
  out=$(timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --steps 1 --micro-batch-size 2 \
        --init-from "$file" "$@" 2>&1)
}
init_from "$work/holed.safetensors"
if grep -q "blocks.1.norm1.weight" <<<"$out"; then echo "ok: a missing block tensor is refused: $(grep -m1 blocks.1.norm1 <<<"$out")"
else echo "FAIL: a file without blocks.1.norm1.weight was not refused: $out"; fail=1; fi
# On pp 2 the tensor is the last stage's: rank 0 says that rank's message.
out=$(timeout 300 mpirun -np 2 --oversubscribe "$vit3d" train "${model[@]}" --pp 2 --steps 1 \
      --micro-batch-size 2 --threads 1 --init-from "$work/holed3.safetensors" 2>&1)
if grep -q "error: --init-from: .*blocks.3.mlp.fc2.bias" <<<"$out"; then
  echo "ok: a missing last-stage tensor is named on pp 2: $(grep -m1 'error: --init-from' <<<"$out")"
else echo "FAIL: a file without blocks.3.mlp.fc2.bias on pp 2: $out"; fail=1; fi
# A distilled DeiT (dist_token, a pos_embed row more) is said as such, not as a grid that does
# not fit --no-embed-class.
init_from "$work/distilled.safetensors"
if [ $? -eq 2 ] && grep -q "is a distilled DeiT (dist_token, head_dist)" <<<"$out"; then
  echo "ok: a distilled DeiT file is refused as such"
else echo "FAIL: a distilled DeiT file: $out"; fail=1; fi
# A file of no timm ViT is said as such, its first names shown, with where timm-named weights
# come from (not a missing QK-norm and qkv bias); a checkpoint folder points to its weights.
init_from "$work/ddp.safetensors"
if [ $? -eq 2 ] && grep -q "ddp.safetensors holds no timm ViT tensors: no patch_embed.proj.weight or blocks.0.attn.qkv.weight among its [0-9]* (the first: module\.[a-z_]*.*) (timm's names under the prefix 'module.')\. --init-from takes timm-named weights: .*launch/convert_weights.py" <<<"$out" &&
   ! grep -q "QK-norm" <<<"$out"; then
  echo "ok: a file of module.-prefixed names is refused as such"
else echo "FAIL: a module.-prefixed file: $out"; fail=1; fi
init_from "$ck/optim.safetensors"
if [ $? -eq 2 ] && grep -q "optim.safetensors holds no timm ViT tensors: .*(the first: exp_avg\..*a vit3d checkpoint's optimizer state: its weights are the model.safetensors beside it" <<<"$out"; then
  echo "ok: a checkpoint's optim.safetensors is refused as such"
else echo "FAIL: --init-from optim.safetensors: $out"; fail=1; fi
init_from "$ck"
if [ $? -eq 2 ] && grep -qF "$ck is a folder; --init-from takes a safetensors file: pass this checkpoint's weights, $ck/model.safetensors" <<<"$out"; then
  echo "ok: --init-from a checkpoint folder names its model.safetensors"
else echo "FAIL: --init-from a checkpoint folder: $out"; fail=1; fi
# A head stored transposed (a JAX kernel) is another shape, not another class count.
init_from "$work/headT.safetensors"
if [ $? -eq 2 ] && grep -q "head.weight" <<<"$out" && ! grep -q "another class count" <<<"$out"; then
  echo "ok: a transposed head is refused: $(grep -m1 -o 'tensor head.weight.*' <<<"$out" | cut -c1-90)"
else echo "FAIL: a transposed head: $out"; fail=1; fi
# The resampled pos_embed itself: lr 0 keeps the weights as --init-from made them.
for px in 24 8 12; do
  step timeout 300 mpirun -np 1 "$vit3d" train --model tiny --img-size $px --patch-size 4 --width 32 \
    --heads 4 --depth 4 --num-classes 3 --steps 1 --lr 0 --min-lr 0 --micro-batch-size 2 \
    --init-from "$work/w.safetensors" --final-weights "$work/pos$px.safetensors"
done
"$py" - "$work" "$here" <<'PY' || fail=1
import sys
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[2])
from ref_vit import read_safetensors
src = torch.as_tensor(read_safetensors(sys.argv[1] + "/w.safetensors")["pos_embed"]).double()
C, g0 = src.shape[2], 4
bad = 0
for px in (24, 8, 12):
    g1 = px // 4
    got = torch.as_tensor(read_safetensors(f"{sys.argv[1]}/pos{px}.safetensors")["pos_embed"]).double()
    grid = src[:, 1:].reshape(1, g0, g0, C).permute(0, 3, 1, 2)
    want = F.interpolate(grid, size=(g1, g1), mode="bicubic", align_corners=False, antialias=True)
    want = torch.cat([src[:, :1], want.permute(0, 2, 3, 1).reshape(1, g1 * g1, C)], dim=1)
    err = ((got - want).abs().max() / want.abs().max()).item()
    ok = got.shape == want.shape and err <= 1e-5
    bad += not ok
    print(f"pos_embed {g0}x{g0} -> {g1}x{g1}: max |vit3d - torch antialiased bicubic| / max = "
          f"{err:.2e} (tol 1e-05) {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
PY
# Fixed sin-cos positions (--pos-embed sincos2d) keep their table: --init-from does not load
# the file's pos_embed (a learned one, positions on the patch tokens only) and says so; the
# table after a step at lr 0 is tests/ref_vit.py's sincos_table to float rounding.
small=(--model tiny --img-size 16 --patch-size 4 --width 32 --heads 4 --depth 4 --num-classes 3
       --micro-batch-size 2 --no-embed-class 1)
step timeout 300 mpirun -np 1 "$vit3d" train "${small[@]}" --steps 1 \
  --final-weights "$work/nec.safetensors"
step timeout 300 mpirun -np 1 "$vit3d" train "${small[@]}" --steps 1 --lr 0 --min-lr 0 \
  --pos-embed sincos2d --init-from "$work/nec.safetensors" --final-weights "$work/sc.safetensors"
grep -q "pos_embed not loaded: --pos-embed sincos2d keeps its fixed table for the 4x4 patch grid" \
  "$work/last.log" || { echo "FAIL: --init-from into sin-cos positions: no message"; fail=1; }
"$py" - "$work" "$here" <<'PY' || fail=1
import sys
import torch
sys.path.insert(0, sys.argv[2])
from ref_vit import read_safetensors, sincos_table
got = read_safetensors(sys.argv[1] + "/sc.safetensors")["pos_embed"].double()
err = (got - sincos_table(4, 4, 32)).abs().max().item()
print(f"--init-from into --pos-embed sincos2d: pos_embed is the 4x4 sin-cos table within {err:.1e} "
      f"(tol 1e-7) {'ok' if err <= 1e-7 else 'FAIL'}")
sys.exit(0 if err <= 1e-7 else 1)
PY
# LayerScale and register tokens: pos_embed holds the 3 prefix tokens' rows (none with
# --no-embed-class 1) ahead of the grid. The same size loads every tensor as it is; 24 px
# resamples the grid behind them.
variant=(--model tiny --img-size 16 --patch-size 4 --width 32 --heads 4 --depth 4 --num-classes 3
         --layer-scale 0.1 --reg-tokens 2)
for nec in 0 1; do
  step timeout 300 mpirun -np 1 "$vit3d" train "${variant[@]}" --no-embed-class $nec --steps 2 \
    --micro-batch-size 2 --final-weights "$work/ls$nec.safetensors"
  for px in 16 24; do
    step timeout 300 mpirun -np 1 "$vit3d" train "${variant[@]}" --img-size $px --no-embed-class $nec \
      --steps 1 --lr 0 --min-lr 0 --micro-batch-size 2 --init-from "$work/ls$nec.safetensors" \
      --final-weights "$work/ls${nec}_$px.safetensors"
  done
done
"$py" - "$work" "$here" <<'PY' || fail=1
import sys
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[2])
from ref_vit import read_safetensors
bad = 0
for nec in (0, 1):
    src = read_safetensors(f"{sys.argv[1]}/ls{nec}.safetensors")
    same = read_safetensors(f"{sys.argv[1]}/ls{nec}_16.safetensors")
    big = read_safetensors(f"{sys.argv[1]}/ls{nec}_24.safetensors")
    equal = sorted(src) == sorted(same) and all(np.array_equal(src[n], same[n]) for n in src)
    pr = 0 if nec else 3
    pos = torch.as_tensor(src["pos_embed"]).double()
    grid = pos[:, pr:].reshape(1, 4, 4, -1).permute(0, 3, 1, 2)
    want = F.interpolate(grid, size=(6, 6), mode="bicubic", align_corners=False, antialias=True)
    want = torch.cat([pos[:, :pr], want.permute(0, 2, 3, 1).reshape(1, 36, -1)], dim=1)
    got = torch.as_tensor(big["pos_embed"]).double()
    err = ((got - want).abs().max() / want.abs().max()).item() if got.shape == want.shape else 1.0
    rest = all(np.array_equal(src[n], big[n]) for n in src if n != "pos_embed")
    ok = equal and err <= 1e-5 and rest and "blocks.3.ls2.gamma" in src and src["reg_token"].shape == (1, 2, 32)
    bad += not ok
    print(f"LayerScale, 2 registers, no_embed_class {nec}: same size loads every tensor as it is "
          f"{equal}; 24 px: pos_embed ({pr} prefix rows kept, 4x4 -> 6x6) vs torch {err:.2e} "
          f"(tol 1e-05), the other tensors as they are {rest}: {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
PY
refused() {  # refused FILE HINT FLAGS...: --init-from FILE with FLAGS exits 2 naming HINT
  local file=$1 hint=$2
  shift 2
  init_from "$work/$file" "$@"
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$hint" <<<"$out"; then echo "ok: refused: $(grep -m1 -- "$hint" <<<"$out")"
  else echo "FAIL: --init-from $file $* was not refused naming $hint (rc $rc): $out"; fail=1; fi
}
refused ls0.safetensors "pass --layer-scale G"
refused ls0.safetensors "pass --reg-tokens 2" --layer-scale 1e-6
refused w.safetensors "pass --layer-scale 0" --layer-scale 1e-6
refused ls0.safetensors "pass --no-embed-class 0" --layer-scale 1e-6 --reg-tokens 2 --no-embed-class 1
refused ls1.safetensors "pass --no-embed-class 1" --layer-scale 1e-6 --reg-tokens 2
refused ls0.safetensors "pass --qk-norm 0 --qkv-bias 1" --layer-scale 1e-6 --reg-tokens 2 --qk-norm 1
# (21 positions: 1 + 4 x 5, square neither with nor without the class token: no --no-embed-class
# to try, which sent each answer to the other)
refused pos21.safetensors "pos_embed of 21 tokens is not 1 prefix token plus a square grid; vit3d's models have square grids"
step timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --parallel-blocks 1 --steps 1 \
  --micro-batch-size 2 --final-weights "$work/par.safetensors"
refused par.safetensors "holds parallel blocks (norm1 but no norm2); pass --parallel-blocks 1"
refused w.safetensors "holds sequential blocks (norm1 and norm2); pass --parallel-blocks 0" --parallel-blocks 1
# The CLIP towers' norm_pre (and no patch-embedding bias), either way round.
step timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --pre-norm 1 --norm-eps 1e-5 \
  --act quick_gelu --steps 1 --micro-batch-size 2 --final-weights "$work/clip.safetensors"
refused clip.safetensors "has a norm_pre (a LayerNorm before the blocks: the CLIP image towers); pass --pre-norm 1 (with --norm-eps 1e-5"
refused w.safetensors "has no norm_pre .*; pass --pre-norm 0" --pre-norm 1
# Half-precision and double files (as published weights often are): --init-from widens F16 and
# BF16 exactly and rounds F64; lr 0 keeps the weights as loaded. An integer tensor is refused.
"$py" - "$work/w.safetensors" "$work" "$here" <<'PY' || { echo "FAIL: writing F16/BF16/F64 files"; fail=1; }
import json, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from ref_vit import read_safetensors
w = {n: np.asarray(t, dtype=np.float32) for n, t in read_safetensors(sys.argv[1]).items()}
def bf16_bits(a):  # round to nearest even, as torch does
    u = a.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
ENCODE = {"F16": lambda t: t.astype("<f2").tobytes(), "BF16": lambda t: bf16_bits(t).astype("<u2").tobytes(),
          "F64": lambda t: t.astype("<f8").tobytes(), "I32": lambda t: t.astype("<i4").tobytes()}
def write(path, dtype):  # "I32": the sixth tensor an integer one, the others F64
    header, blobs, off = {}, [], 0
    for i, (name, t) in enumerate(w.items()):
        kind = ("I32" if i == 5 else "F64") if dtype == "I32" else dtype
        b = ENCODE[kind](t)
        header[name] = {"dtype": kind, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
for d in ("F16", "BF16", "F64", "I32"):
    write(f"{sys.argv[2]}/w_{d}.safetensors", d)
PY
for d in F16 BF16 F64; do
  step timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --steps 1 --lr 0 --min-lr 0 \
    --micro-batch-size 2 --init-from "$work/w_$d.safetensors" --final-weights "$work/got_$d.safetensors"
done
"$py" - "$work" "$here" <<'PY' || fail=1
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from ref_vit import read_safetensors
src = {n: np.asarray(t, dtype=np.float32) for n, t in read_safetensors(sys.argv[1] + "/w.safetensors").items()}
def bf16(a):
    u = a.view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
want = {"F16": lambda a: a.astype(np.float16).astype(np.float32), "BF16": bf16, "F64": lambda a: a}
bad = 0
for d, conv in want.items():
    got = read_safetensors(f"{sys.argv[1]}/got_{d}.safetensors")
    same = all(np.array_equal(np.asarray(got[n]), conv(src[n])) for n in src)
    bad += not same
    print(f"--init-from a {d} file: every tensor as the file's values widened to F32: {same}")
sys.exit(1 if bad else 0)
PY
refused w_I32.safetensors "of another dtype; the model needs the config's shape in F32, F16, BF16 or F64"
# Ties and NaN in the scores: a head of zeros gives every class the same logit, ranked in class
# order (top-1 the 10 of 30 images of class 0, top-5 of 3 classes all). --init-from refuses a
# NaN head, naming it; a checkpoint made to hold one (its CRC redone) scores no image a hit,
# and metrics.jsonl says the loss as null.
"$py" - "$work" "$here" "$ck" <<'PY' || { echo "FAIL: writing the zero and NaN heads"; fail=1; }
import json, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from ref_vit import read_safetensors
w = {n: np.asarray(t, dtype=np.float32) for n, t in read_safetensors(sys.argv[1] + "/w.safetensors").items()}
for kind in ("zero", "nan"):
    v = dict(w, **{"head.weight": np.zeros_like(w["head.weight"]),
                   "head.bias": np.full_like(w["head.bias"], 0.0 if kind == "zero" else np.nan)})
    header, blobs, off = {}, [], 0
    for name, t in v.items():
        b = t.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    open(f"{sys.argv[1]}/w_{kind}.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
import os, shutil, zlib
d = sys.argv[1] + "/cknan/step-00000008"
shutil.copytree(sys.argv[3], d)
blob = bytearray(open(d + "/model.safetensors", "rb").read())
n = struct.unpack("<Q", blob[:8])[0]
lo, hi = json.loads(blob[8:8 + n])["head.bias"]["data_offsets"]
blob[8 + n + lo:8 + n + hi] = np.full((hi - lo) // 4, np.nan, dtype="<f4").tobytes()
open(d + "/model.safetensors", "wb").write(blob)
man = [l if not l.startswith("file model.safetensors ") else
       f"file model.safetensors {len(blob)} {zlib.crc32(blob):08x}"
       for l in open(d + "/manifest.txt").read().splitlines()]
open(d + "/manifest.txt", "w").write("\n".join(man) + "\n")
PY
step "$py" "$here/manifest_edit.py" "$work/cknan/step-00000008/manifest.txt"  # (sealed again)
step timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --steps 1 --lr 0 --min-lr 0 \
  --data "$work/train" --val-data "$work/val" --eval-interval 1 --micro-batch-size 2 \
  --init-from "$work/w_zero.safetensors"
cp "$work/last.log" "$work/zero.log"
out=$(timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --steps 1 --data "$work/train" \
  --micro-batch-size 2 --init-from "$work/w_nan.safetensors" 2>&1)
rc=$?
step timeout 300 mpirun -np 2 --oversubscribe "$vit3d" train "${model[@]}" --pp 2 --steps 9 \
  --resume-override 1 --data "$work/train" --val-data "$work/val" --eval-interval 1 \
  --micro-batch-size 4 --global-batch-size 16 --lr 3e-3 --threads 1 --loader-threads 1 \
  --resume "$work/cknan/step-00000008" --log-dir "$work/log_nan"
cp "$work/last.log" "$work/nan.log"
if grep -q "eval after step 1: loss 1.0986.* | top-1 33.33% | top-5 100.00%" "$work/zero.log" &&
   [ $rc -eq 2 ] && grep -q "head.bias holds a value that is not finite (element 0)" <<<"$out" &&
   grep -q "eval after step 9: loss nan | top-1 0.00% | top-5 0.00%" "$work/nan.log" &&
   "$py" -c 'import json, sys; r = json.loads(open(sys.argv[1]).read().splitlines()[-1]); sys.exit(r["eval_loss"] is not None or r["eval_top1"] != 0)' "$work/log_nan/metrics.jsonl"; then
  echo "ok: tied logits ranked in class order (top-1 33.33%); a NaN head refused by --init-from, and in a checkpoint no hit (eval_loss null)"
else echo "FAIL: ties or NaN in the scores (rc $rc: $out)"; grep "eval after" "$work/zero.log" "$work/nan.log"; fail=1; fi
# --predictions: one CSV line per validation image with its top-5 classes and probabilities,
# on one rank (against the logits --logits-out wrote), on a 2x2 model split and on two DP
# replicas (their interleaved batches gathered in the set's order; each the same classes,
# probabilities within 1e-5).
step timeout 300 mpirun -np 1 "$vit3d" eval "${model[@]}" --val-data "$work/val" --checkpoint "$ck" \
  --micro-batch-size 4 --predictions "$work/pred1.csv"
step timeout 300 mpirun -np 4 --oversubscribe "$vit3d" eval "${model[@]}" --tp 2 --pp 2 \
  --val-data "$work/val" --checkpoint "$ck" --micro-batch-size 4 --threads 1 \
  --predictions "$work/pred4.csv"
step timeout 300 mpirun -np 2 --oversubscribe "$vit3d" eval "${model[@]}" --val-data "$work/val" \
  --checkpoint "$ck" --micro-batch-size 4 --threads 1 --predictions "$work/pred2.csv"
"$py" - "$work" "$here" <<'PY' || fail=1
import csv, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from ref_vit import read_safetensors
rows = [list(csv.reader(open(f"{sys.argv[1]}/pred{n}.csv"))) for n in (1, 4, 2)]
z = np.asarray(read_safetensors(sys.argv[1] + "/dump.safetensors")["logits"], dtype=np.float64)
names = ["c0", "c1", "c2"]  # the val folder's classes, in order
head, body = rows[0][0], rows[0][1:]
ok = head[:5] == ["index", "path", "label", "top1", "p1"] and len(body) == len(z) == 30
ok = ok and all(len(r) == 13 and r[9:] == ["", "", "", ""] for r in body)  # (3 classes: 4 empty)
for i, r in enumerate(body):
    p = np.exp(z[i] - z[i].max()); p /= p.sum()
    order = sorted(range(3), key=lambda k: (-z[i][k], k))
    ok = ok and int(r[0]) == i and r[1].endswith(".png") and r[2] in names
    ok = ok and [r[3], r[5], r[7]] == [names[k] for k in order]
    ok = ok and all(abs(float(r[4 + 2 * q]) - p[order[q]]) <= 2e-6 for q in range(3))
same = [len(other) == len(rows[0]) and all(
    a[:4] == b[:4] and a[5] == b[5] and all(abs(float(a[c]) - float(b[c])) <= 1e-5 for c in (4, 6, 8))
    for a, b in zip(rows[0][1:], other[1:])) for other in rows[1:]]
print(f"--predictions: {len(body)} images, classes and probabilities as the logits say: {ok}; "
      f"the 2x2 model split writes the same: {same[0]}; two DP replicas: {same[1]}")
sys.exit(0 if ok and all(same) else 1)
PY
# A --val-data lacking a class (c0, the first) beside --data: its labels go by class name, so
# the evaluation (lr 0 keeps the exported weights) scores pred1.csv's c1 and c2 rows (it was
# refused before: fewer classes than the model). A validation class that --data lacks is
# refused (it was paired with a training class by its folder's position).
mkdir "$work/val_c12" && cp -r "$work/val/c1" "$work/val/c2" "$work/val_c12/"
step timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --data "$work/train" --steps 1 --lr 0 \
  --min-lr 0 --micro-batch-size 4 --init-from "$work/w.safetensors" --val-data "$work/val_c12"
"$py" - "$work/pred1.csv" "$work/last.log" <<'PY' || fail=1
import csv, re, sys
rows = [r for r in list(csv.reader(open(sys.argv[1])))[1:] if r[2] != "c0"]
want = 100.0 * sum(r[3] == r[2] for r in rows) / len(rows)
log = open(sys.argv[2]).read()
got = re.search(r"eval after step 1: .*top-1 ([\d.]+)% .*\((\d+) images\)", log)
ok = got and abs(float(got[1]) - want) < 0.01 and int(got[2]) == len(rows) and \
    "holds 2 of the 3 classes of --data" in log
print(f"--val-data without c0: top-1 {got and got[1]}% of {got and got[2]} images, "
      f"{want:.2f}% of {len(rows)} by pred1.csv's rows: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
mv "$work/val_c12/c2" "$work/val_c12/c9"
out=$(timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --data "$work/train" --steps 1 \
      --micro-batch-size 4 --val-data "$work/val_c12" 2>&1)
if grep -q -- "--val-data $work/val_c12 has a class 'c9' that --data $work/train lacks" <<<"$out"
then echo "ok: a validation class the training set lacks refused"
else echo "FAIL: a validation class the training set lacks: $out"; fail=1; fi
# A numbered validation label past the training set's classes is named with its file (it said
# to pass --num-classes 8); named validation classes beside a numbered training set (paired by
# position) of another count are told how to pair them (it said --num-classes too).
printf 'c0/%s\t0\nc1/%s\t7\n' "$(ls "$work/train/c0" | head -1)" "$(ls "$work/train/c1" | head -1)" \
  > "$work/train/val_oor.txt"
(cd "$work/train" && for c in c0 c1 c2; do for f in $(ls $c | head -2); do
  printf '%s/%s\t%s\n' $c "$f" "${c#c}"; done; done) > "$work/train/list.txt"
out=$(timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --data "$work/train" --steps 1 \
      --micro-batch-size 4 --val-data "$work/train/val_oor.txt" 2>&1)
out2=$(timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --data "$work/train/list.txt" \
       --steps 1 --micro-batch-size 4 --val-data "$work/val_c12" 2>&1)
if grep -q "val_oor.txt: .*/c1/.* has label 7, and --data $work/train has 3 classes (labels 0 to 2)" <<<"$out" &&
   grep -q "val_c12 names 2 classes and --data .*list.txt numbers its 3: classes paired by position need the same count" <<<"$out2"
then echo "ok: a validation label past the classes named with its file; named classes beside numbered ones told how to pair"
else echo "FAIL: validation class counts: $out / $out2"; fail=1; fi
# A resume on another training set: allowed, with a warning naming both sets' sizes.
out=$(timeout 300 mpirun -np 1 "$vit3d" train "${model[@]}" --data "$work/val" --steps 9 \
      --micro-batch-size 4 --global-batch-size 16 --lr 3e-3 --resume "$ck" --resume-override 1 \
      2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "^step *9/9" <<<"$out" &&
   grep -q "saved by a run whose --data held 72 images (class names .*) and this one's holds 30" \
   <<<"$out"; then echo "ok: a resume on another training set warned, and trained on"
else echo "FAIL: a resume on another training set: $out"; fail=1; fi
exit $fail

