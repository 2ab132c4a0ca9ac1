#!/usr/bin/env bash
# test_convert.sh VIT3D: launch/convert_weights.py against checkpoints written in other projects'
# conventions. vit3d trains two small layouts one step (DeiT III's: LayerScale, positions on the
# patch tokens; DINOv2's: LayerScale and 2 register tokens) and exports them; Python rewrites each
# export as the checkpoint another project saves (DeiT III: {"model": ...} with gamma_1/gamma_2;
# DINOv2: {"teacher": ...} with "backbone." names, register_tokens, mask_token and a DINO head,
# and with registers as its repository lays them out (the class token's position in pos_embed);
# MAE: {"model": ...} beside a decoder; a DDP {"state_dict": ...} with "module." names and a
# torch.compile "_orig_mod." layer) with torch.save. The conversion must give back the export
# bit for bit, print the flags of the layout, and the file must start a vit3d run through
# --init-from. big_vision's .npz of its "Better plain ViT baselines" layout (fixed sin-cos
# positions it does not store, the gap head, the pre-logits layer) converts to the export too. A
# CLIP tower's file prints its flags. A SwiGLU block is refused by name.
set -uo pipefail
vit3d=$1
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
conv="$here/../launch/convert_weights.py"
"$py" -c "import torch, numpy" 2>/dev/null || { echo "SKIP: $py cannot import torch and numpy"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
base=(train --model tiny --img-size 32 --patch-size 8 --num-classes 5 --steps 1 --threads 1
      --global-batch-size 4 --micro-batch-size 4)
deit3=(--layer-scale 0.1 --no-embed-class 1)
dino=(--layer-scale 0.1 --reg-tokens 2)
dinoreg=(--layer-scale 0.1 --reg-tokens 2 --no-embed-class 1)
"$vit3d" "${base[@]}" "${deit3[@]}" --final-weights "$work/deit3.safetensors" > "$work/a.log" 2>&1 &&
  "$vit3d" "${base[@]}" "${dino[@]}" --final-weights "$work/dino.safetensors" > "$work/b.log" 2>&1 &&
  "$vit3d" "${base[@]}" "${dinoreg[@]}" --final-weights "$work/dinoreg.safetensors" > "$work/c.log" 2>&1 ||
  { echo "FAIL: the exports"; tail -3 "$work/a.log" "$work/b.log"; exit 1; }
"$py" - "$work" "$here" <<'PY' || exit 1
import sys, torch
work, here = sys.argv[1:]
sys.path.insert(0, here)
from ref_vit import read_safetensors
t = lambda d: {k: torch.as_tensor(v).clone() for k, v in d.items()}
d3, dn = t(read_safetensors(f"{work}/deit3.safetensors")), t(read_safetensors(f"{work}/dino.safetensors"))
# DeiT III (models_v2): LayerScale as gamma_1 / gamma_2, under "model".
deit3 = {k.replace(".ls1.gamma", ".gamma_1").replace(".ls2.gamma", ".gamma_2"): v for k, v in d3.items()}
torch.save({"model": deit3, "epoch": 799}, f"{work}/deit3.pth")
# DINOv2 training checkpoint: the teacher's backbone, its registers, mask token and DINO head.
dino = {("backbone." + k.replace("reg_token", "register_tokens")): v for k, v in dn.items()}
dino["backbone.mask_token"] = torch.zeros(1, 64)
dino["dino_head.mlp.0.weight"] = torch.zeros(8, 64)
torch.save({"teacher": dino, "iteration": 5}, f"{work}/dino.pth")
# DINOv2 with registers as its repository saves it: positions for the class token and the
# patches, none for the registers (the class token's here is the class token itself, the
# saved class token zero, so that adding them back is exact).
dr = t(read_safetensors(f"{work}/dinoreg.safetensors"))
dr["pos_embed"] = torch.cat([dr["cls_token"], dr["pos_embed"]], 1)
dr["cls_token"] = torch.zeros_like(dr["cls_token"])
dr["register_tokens"] = dr.pop("reg_token")
torch.save({"model": dr}, f"{work}/dinoreg.pth")
# MAE pre-training: the encoder beside a decoder and the mask token; its training checkpoint
# also pickles the run's argparse arguments.
import argparse
mae = dict(d3)
mae.update({"mask_token": torch.zeros(1, 1, 32), "decoder_embed.weight": torch.zeros(32, 64),
            "decoder_blocks.0.norm1.weight": torch.ones(32)})
torch.save({"model": mae}, f"{work}/mae.pth")
torch.save({"model": mae, "args": argparse.Namespace(lr=1e-3), "epoch": 3}, f"{work}/mae_args.pth")
# DDP and torch.compile wrappers.
torch.save({"state_dict": {"module._orig_mod." + k: v for k, v in d3.items()}}, f"{work}/ddp.pth")
# SwiGLU's fused MLP: not a layout vit3d builds.
bad = dict(d3)
bad["blocks.0.mlp.w12.weight"] = torch.zeros(4, 4)
torch.save(bad, f"{work}/swiglu.pth")
PY
for c in "deit3|deit3|--layer-scale 1e-6 --no-embed-class 1" "dino|dino|--reg-tokens 2" \
         "dinoreg|dinoreg|--reg-tokens 2 --no-embed-class 1" \
         "mae|deit3|--no-embed-class 1" "ddp|deit3|--no-embed-class 1"; do
  IFS='|' read -r name ref want <<<"$c"
  out=$("$py" "$conv" "$work/$name.pth" "$work/$name.conv.safetensors" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q -- "--img-size 32 --patch-size 8 --width 64 --depth 4 --mlp-ratio 4 --num-classes 5 .*$want" <<<"$out" ||
     ! "$py" - "$work/$name.conv.safetensors" "$work/$ref.safetensors" "$here" <<'PY'; then
import sys
sys.path.insert(0, sys.argv[3])
from ref_vit import read_safetensors
a, b = read_safetensors(sys.argv[1]), read_safetensors(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
assert all((a[k] == b[k]).all() for k in a), [k for k in a if not (a[k] == b[k]).all()]
PY
    echo "FAIL: converting the $name checkpoint (rc $rc): $out"; fail=1
  else
    echo "ok: $name checkpoint -> the export bit for bit; $(tail -1 <<<"$out")"
  fi
done
flags=$("$py" "$conv" "$work/dino.pth" "$work/x.safetensors" | sed -n 's/^vit3d flags: \(.*\) --heads.*/\1/p')
if "$vit3d" train --model tiny $flags --steps 1 --threads 1 --global-batch-size 4 --micro-batch-size 4 \
     --init-from "$work/dino.conv.safetensors" > "$work/init.log" 2>&1 &&
   grep -q "init-from .*dino.conv.safetensors: the model's weights loaded" "$work/init.log"; then
  echo "ok: vit3d starts from the converted DINOv2 checkpoint with the printed flags ($flags)"
else echo "FAIL: --init-from the converted file with $flags:"; tail -3 "$work/init.log"; fail=1; fi
# A CLIP image tower in timm's names (norm_pre, no patch-embedding bias): the converter names
# --pre-norm 1 --norm-eps 1e-5, says the activation is not in the weights, and vit3d starts from
# it with those flags and OpenAI's quick GELU.
if "$vit3d" "${base[@]}" --pre-norm 1 --norm-eps 1e-5 --act quick_gelu \
     --final-weights "$work/clip.safetensors" > "$work/clip.log" 2>&1 &&
   out=$("$py" "$conv" "$work/clip.safetensors" "$work/clip.conv.safetensors" 2>&1) &&
   grep -q -- "--pre-norm 1 --norm-eps 1e-5 --heads H" <<<"$out" &&
   grep -q "add --act quick_gelu for OpenAI's weights" <<<"$out" &&
   flags=$(sed -n 's/^vit3d flags: \(.*\) --heads.*/\1/p' <<<"$out") &&
   "$vit3d" train --model tiny $flags --act quick_gelu --steps 1 --threads 1 \
     --global-batch-size 4 --micro-batch-size 4 --init-from "$work/clip.conv.safetensors" \
     > "$work/clip_init.log" 2>&1 &&
   grep -q "init-from .*clip.conv.safetensors: the model's weights loaded" "$work/clip_init.log"; then
  echo "ok: a CLIP tower's file converts with $flags and starts a run with --act quick_gelu"
else echo "FAIL: the CLIP tower's conversion: ${out:-}"; tail -3 "$work/clip_init.log" 2>/dev/null; fail=1; fi
# A pickle of more than tensors is not unpickled unless asked (where torch has weights_only).
if "$py" -c "import inspect, torch, sys; sys.exit('weights_only' not in inspect.signature(torch.load).parameters)"; then
  out=$("$py" "$conv" "$work/mae_args.pth" "$work/args.safetensors" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && grep -q "pickles objects other than tensors.*--unsafe-pickle" <<<"$out" &&
     "$py" "$conv" --unsafe-pickle "$work/mae_args.pth" "$work/args.safetensors" > /dev/null; then
    echo "ok: a checkpoint with pickled arguments needs --unsafe-pickle, then converts"
  else echo "FAIL: the checkpoint with pickled arguments: rc $rc: $out"; fail=1; fi
fi
# big_vision's "Better plain ViT baselines" layout (vit_s16_i1k.py): fixed sin-cos positions,
# which its .npz does not store, the gap head without a class token, the pre-logits layer
# (rep_size) before the head. vit3d trains one step of it and exports; Python writes the
# export as big_vision's scanned .npz (tests/timm_check.py's to_flax, without pos_embedding);
# the conversion must give back every other tensor bit for bit and the flags, and two steps
# from the converted file must log the losses and gradient norms of two from the export.
bv=(--pos-embed sincos2d --global-pool gap --class-token 0 --pre-logits 48)
if "$vit3d" "${base[@]}" "${bv[@]}" --final-weights "$work/bv.safetensors" > "$work/bv.log" 2>&1 &&
   "$py" - "$work" "$here" <<'PY'
import sys
import numpy as np
work, here = sys.argv[1:]
sys.path.insert(0, here)
from ref_vit import read_safetensors
from timm_check import to_flax
sd = {k: np.asarray(v) for k, v in read_safetensors(f"{work}/bv.safetensors").items()}
w = to_flax(sd, 4, big_vision=True)
w.pop("params/pos_embedding")  # big_vision computes its sin-cos table, never stores it
w["params/pre_logits/kernel"] = sd["pre_logits.fc.weight"].T
w["params/pre_logits/bias"] = sd["pre_logits.fc.bias"]
np.savez(f"{work}/bv.npz", **w)
PY
then
  out=$("$py" "$conv" "$work/bv.npz" "$work/bv.conv.safetensors" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q -- "--pos-embed sincos2d .*--global-pool gap --class-token 0 --pre-logits 48 --heads 4" <<<"$out" &&
     "$py" - "$work/bv.conv.safetensors" "$work/bv.safetensors" "$here" <<'PY' &&
import sys
sys.path.insert(0, sys.argv[3])
from ref_vit import read_safetensors
a, b = read_safetensors(sys.argv[1]), read_safetensors(sys.argv[2])
assert sorted(a) == sorted(k for k in b if k != "pos_embed"), sorted(set(a) ^ set(b))
assert all((a[k] == b[k]).all() for k in a), [k for k in a if not (a[k] == b[k]).all()]
PY
     "$vit3d" "${base[@]}" "${bv[@]}" --steps 2 --init-from "$work/bv.safetensors" \
       --log-dir "$work/bv_a" > "$work/bv_eval.log" 2>&1 &&
     "$vit3d" "${base[@]}" "${bv[@]}" --steps 2 --init-from "$work/bv.conv.safetensors" \
       --log-dir "$work/bv_b" > "$work/bv_eval2.log" 2>&1 &&
     "$py" - "$work/bv_a/metrics.jsonl" "$work/bv_b/metrics.jsonl" <<'PY'; then
import json, sys
a, b = ([(r["loss"], r["grad_norm"]) for r in map(json.loads, open(p))] for p in sys.argv[1:])
assert a == b and len(a) == 2, (a, b)
PY
    echo "ok: big_vision's S/16 layout (sin-cos positions, gap, pre-logits) from its .npz: the export bit for bit, 2 steps from it as from the export; $(tail -2 <<<"$out" | head -1)"
  else
    echo "FAIL: big_vision's sin-cos, gap, pre-logits .npz (rc $rc): $out"; tail -n 3 "$work/bv_eval.log" "$work/bv_eval2.log"; fail=1
  fi
else echo "FAIL: the big_vision-layout export:"; tail -3 "$work/bv.log"; fail=1; fi
# --drop-head leaves the classifier out (the ViT paper's fine-tuning): the model starts without
# the pre-logits layer and with a fresh head, zero under --weight-init jax.
out=$("$py" "$conv" --drop-head "$work/bv.npz" "$work/bv.nohead.safetensors" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "dropped 4: head.bias, head.weight, pre_logits.fc.bias, pre_logits.fc.weight" <<<"$out" &&
   "$vit3d" "${base[@]}" --pos-embed sincos2d --global-pool gap --class-token 0 --weight-init jax \
     --num-classes 7 --init-from "$work/bv.nohead.safetensors" --log-interval 1 > "$work/nohead.log" 2>&1 &&
   grep -q "has no head.weight, head.bias; they start fresh" "$work/nohead.log" &&
   grep -q "^step     1/1 | loss 1.9459 " "$work/nohead.log"; then  # ln 7: a zero head's loss
  echo "ok: --drop-head: the classifier left out, a fresh zero head (loss ln 7 at step 1)"
else echo "FAIL: --drop-head (rc $rc): $out"; tail -n 3 "$work/nohead.log"; fail=1; fi
# Its pre-logits layer into a model without one is refused with the flag; a file without one
# into a model with one starts the layer and the head fresh.
out=$("$vit3d" "${base[@]}" --pos-embed sincos2d --global-pool gap --class-token 0 \
        --init-from "$work/bv.conv.safetensors" 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "has a pre-logits layer of width 48 .*pass --pre-logits 48" <<<"$out"; then
  echo "ok: pre-logits weights into a model without the layer refused"
else echo "FAIL: pre-logits weights into a model without: rc $rc: $(tail -n 2 <<<"$out")"; fail=1; fi
out=$("$vit3d" "${base[@]}" "${dinoreg[@]}" --pre-logits 16 --init-from "$work/dinoreg.safetensors" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "has no pre-logits layer; it and the head start fresh" <<<"$out"; then
  echo "ok: weights without a pre-logits layer start it and the head fresh"
else echo "FAIL: weights without pre-logits into --pre-logits 16: rc $rc: $(tail -n 2 <<<"$out")"; fail=1; fi
# Weights of another size say which flag fits them: the MLP's width, the depth, the width.
for wrong in "--mlp-dim 200:has an MLP 256 wide (blocks.N.mlp.fc1), this model 200; pass --mlp-dim 256" \
             "--depth 3:holds 4 blocks (blocks.0 to blocks.3), this model 3; pass --depth 4" \
             "--width 96 --heads 4:holds a model of width 64 and patch 8 (patch_embed.proj); pass --width 64 --patch-size 8"; do
  out=$("$vit3d" "${base[@]}" "${dinoreg[@]}" ${wrong%%:*} --init-from "$work/dinoreg.safetensors" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "${wrong#*:}" <<<"$out"; then
    echo "ok: weights into ${wrong%%:*} refused: ${wrong#*:}"
  else echo "FAIL: weights into ${wrong%%:*}: rc $rc: $(tail -n 2 <<<"$out")"; fail=1; fi
done
out=$("$py" "$conv" "$work/swiglu.pth" "$work/bad.safetensors" 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "not a ViT layout vit3d builds: blocks.0.mlp.w12.weight" <<<"$out" &&
   [ ! -e "$work/bad.safetensors" ]; then
  echo "ok: a SwiGLU block refused: $out"
else echo "FAIL: the SwiGLU checkpoint: rc $rc: $out"; fail=1; fi
exit $fail
