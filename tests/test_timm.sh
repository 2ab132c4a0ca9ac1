#!/usr/bin/env bash
# test_timm.sh VIT3D CACHE_DIR: vit3d against timm itself (tests/timm_check.py): for sixteen
# variants of timm's VisionTransformer (defaults; the mean-pooled head; DeiT III's LayerScale
# with positions on the patch tokens only; 2 registers with LayerScale; 3 registers with class
# positions and the mean-pooled head; the gap head without a class token, with registers, with a
# class token; the mean-pooled head without a class token; SigLIP's MAP head without a class
# token, and with one and registers; the tanh GELU; the CLIP towers' norm_pre, LayerNorm eps
# 1e-5 and quick GELU; QK-norm without the qkv bias;
# ParallelScalingBlock with and without its qkv bias, converted by launch/convert_weights.py)
# timm's random weights go in through --init-from and
# `vit3d eval --logits-out` must give timm's logits on the same inputs; the other way, vit3d's
# weights of a CLIP tower after 2 steps load strictly into timm and give its logits. Also
# ref_vit.py's LAMB,
# which the ref test holds vit3d's to, against timm.optim.Lamb, --sched-on epochs against
# timm's CosineLRScheduler, and --weight-init jax's initial weights against timm's
# weight_init='jax' (tensor by tensor: zeros, constants, std, kurtosis, bound).
# timm: an importable one, else timm 1.0.9 from PyPI unpacked once into CACHE_DIR (pure Python,
# --no-deps; it needs Debian's python3-torchvision). Exits 77 (skip) when neither is possible,
# saying why.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
cache=$2
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
skip() { echo "SKIP: $*"; exit 77; }
"$py" -c "import torch, torchvision, numpy, PIL" 2>/dev/null ||
  skip "$py cannot import torch, torchvision, numpy and PIL (Debian: python3-torch python3-torchvision)"
source "$here/pypi_wheel.sh"
pypi_wheel "$py" timm timm==1.0.9 "$cache" || skip "$pypi_why"
echo "timm $("$py" -c 'import timm; print(timm.__version__, timm.__file__)')"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" "$here/make_images.py" "$work/val" 10 3 40 || { echo "FAIL: make_images.py"; exit 1; }
fail=0
# Every variant's weights in one Python run (importing torch and timm takes seconds), then
# vit3d's evaluation of each, then every check in one more run.
"$py" "$here/timm_check.py" write_all "$work" || { echo "FAIL: timm could not build the variants"; exit 1; }
evaluated=()
for v in vit avg deit3 reg reg_avg gap gap_reg gap_cls avg_nocls map map_cls tanh clip qk_norm \
    parallel parallel_nb; do
  mapfile -t flags < <("$py" "$here/timm_check.py" flags $v)
  if "$py" "$here/timm_check.py" converts $v; then  # timm's names, through the user's converter
    mv "$work/$v.safetensors" "$work/$v.timm.safetensors"
    if ! "$py" "$here/../launch/convert_weights.py" "$work/$v.timm.safetensors" \
        "$work/$v.safetensors" > "$work/$v.conv.log" 2>&1; then
      echo "FAIL: convert_weights.py on $v:"; cat "$work/$v.conv.log"; fail=1; continue
    fi
    grep -q "ParallelScalingBlocks (timm) split" "$work/$v.conv.log" ||
      { echo "FAIL: $v: $(cat "$work/$v.conv.log")"; fail=1; }
  fi
  if ! "$vit3d" eval --model tiny "${flags[@]}" --val-data "$work/val" --init-from "$work/$v.safetensors" \
      --micro-batch-size 8 --threads 1 --logits-out "$work/$v.dump.safetensors" > "$work/$v.log" 2>&1; then
    echo "FAIL: vit3d eval of $v:"; tail -5 "$work/$v.log"; fail=1; continue
  fi
  evaluated+=("$v")
done
"$py" "$here/timm_check.py" check_all "$work" "${evaluated[@]}" || fail=1
[ ${#evaluated[@]} -eq 16 ] || { echo "FAIL: ${#evaluated[@]} of 16 variants evaluated"; fail=1; }
# The other way: vit3d's own weights of a CLIP tower after 2 training steps load strictly into
# timm's layout and give timm's logits.
mapfile -t flags < <("$py" "$here/timm_check.py" flags clip)
if "$vit3d" train --model tiny "${flags[@]}" --data synthetic --steps 2 --micro-batch-size 4 \
     --global-batch-size 8 --threads 1 --final-weights "$work/clip_trained.safetensors" \
     > "$work/clip_train.log" 2>&1 &&
   "$vit3d" eval --model tiny "${flags[@]}" --val-data "$work/val" --micro-batch-size 8 \
     --init-from "$work/clip_trained.safetensors" --threads 1 \
     --logits-out "$work/clip_trained.dump.safetensors" > "$work/clip_eval.log" 2>&1; then
  "$py" "$here/timm_check.py" check clip "$work/clip_trained.safetensors" \
    "$work/clip_trained.dump.safetensors" || fail=1
else echo "FAIL: vit3d's trained CLIP tower:"; tail -3 "$work/clip_train.log" "$work/clip_eval.log"; fail=1; fi
# A file without a class token into a model with one: refused with the flags that fit the file.
out=$("$vit3d" eval --model tiny $("$py" "$here/timm_check.py" flags vit) --val-data "$work/val" \
      --init-from "$work/gap.safetensors" --micro-batch-size 8 --threads 1 2>&1)
if grep -q "has no class token (cls_token); pass --class-token 0 and --global-pool gap" <<<"$out"; then
  echo "ok: gap weights into a class-token model refused: $(grep -o 'has no class token.*' <<<"$out" | head -1)"
else echo "FAIL: gap weights into a class-token model: $out"; fail=1; fi
# A MAP head's file into a model with another head: refused, naming --global-pool map.
out=$("$vit3d" eval --model tiny $("$py" "$here/timm_check.py" flags gap) --val-data "$work/val" \
      --init-from "$work/map.safetensors" --micro-batch-size 8 --threads 1 2>&1)
if grep -q "has a MAP head (attn_pool.*pass --global-pool map" <<<"$out"; then
  echo "ok: MAP weights into a gap model refused: $(grep -o 'has a MAP head.*' <<<"$out" | head -1)"
else echo "FAIL: MAP weights into a gap model: $out"; fail=1; fi
# The other way: a gap and a MAP model vit3d trained (2 steps) and exported load strictly into
# timm's and give its logits.
for v in gap map; do
  mapfile -t gflags < <("$py" "$here/timm_check.py" flags $v)
  if "$vit3d" train --model tiny "${gflags[@]}" --data "$work/val" --steps 2 --micro-batch-size 6 \
       --global-batch-size 6 --threads 1 --loader-threads 1 --log-dir "$work/${v}_train" \
       --final-weights "$work/${v}_trained.safetensors" > "$work/${v}_train.log" 2>&1 &&
     "$vit3d" eval --model tiny "${gflags[@]}" --val-data "$work/val" \
       --init-from "$work/${v}_trained.safetensors" --micro-batch-size 8 --threads 1 \
       --logits-out "$work/${v}_trained.dump.safetensors" > "$work/${v}_eval.log" 2>&1; then
    echo -n "vit3d-trained: "
    "$py" "$here/timm_check.py" check $v "$work/${v}_trained.safetensors" \
      "$work/${v}_trained.dump.safetensors" || fail=1
  else
    echo "FAIL: vit3d train/eval of the $v model:"
    tail -5 "$work/${v}_train.log" "$work/${v}_eval.log"; fail=1
  fi
done
# --weight-init jax against timm's weight_init='jax': vit3d's initial weights (one step at lr 0)
# tensor by tensor, with the class token, without it (gap) and with the MAP head.
for v in vit gap map; do
  mapfile -t iflags < <("$py" "$here/timm_check.py" init_flags $v)
  if "$vit3d" train --model tiny "${iflags[@]}" --weight-init jax --data synthetic --steps 1 \
       --lr 0 --min-lr 0 --micro-batch-size 2 --threads 1 --seed 4 \
       --final-weights "$work/init_$v.safetensors" > "$work/init_$v.log" 2>&1; then
    "$py" "$here/timm_check.py" init $v "$work/init_$v.safetensors" || fail=1
  else echo "FAIL: vit3d --weight-init jax ($v):"; tail -3 "$work/init_$v.log"; fail=1; fi
done
"$py" "$here/timm_check.py" lars || fail=1  # the reference's LARS (the ref test's) is timm's
"$py" "$here/timm_check.py" lamb || fail=1  # the reference's LAMB (the ref test's) is timm's
"$py" "$here/timm_check.py" ema || fail=1  # so is its EMA warmup (--model-ema-warmup)
"$py" "$here/timm_check.py" npz "$work" || fail=1  # Google's .npz through convert_weights.py
# --sched-on epochs against timm's CosineLRScheduler stepped once an epoch: 30 images at 4 per
# step (epochs end inside steps); the warmup in epochs, then in steps (2/3 of an epoch); then
# --sched linear against timm's PolyLRScheduler with power 1 (--sched poly --decay-rate 1); then
# with --drop-last 1, timm's training loader's epochs of whole batches (7 steps, 2 images left
# out).
for run in "6 2 1e-5 cosine 0 --warmup-epochs 2" "5 20/30 1e-6 cosine 0 --warmup-steps 5" \
           "6 2 1e-5 linear 0 --warmup-epochs 2" "6 2 1e-5 cosine 1 --warmup-epochs 2"; do
  read -r epochs warm wlr kind drop wflag wval <<<"$run"
  rm -rf "$work/sched"
  if ! "$vit3d" train --model tiny --num-classes 10 --img-size 32 --patch-size 8 --data "$work/val" \
      --micro-batch-size 4 --global-batch-size 4 --threads 1 --loader-threads 1 --sched-on epochs \
      --epochs "$epochs" "$wflag" "$wval" --warmup-lr "$wlr" --lr 1e-3 --min-lr 1e-5 --sched "$kind" \
      --drop-last "$drop" --log-dir "$work/sched" > "$work/sched.log" 2>&1; then
    echo "FAIL: vit3d train --sched-on epochs:"; tail -5 "$work/sched.log"; fail=1; continue
  fi
  "$py" "$here/timm_check.py" sched "$work/sched/metrics.jsonl" 30 4 "$epochs" "$warm" 1e-3 1e-5 \
    "$wlr" "$kind" "$drop" || fail=1
done
exit $fail
