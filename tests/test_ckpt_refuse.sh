#!/usr/bin/env bash
# test_ckpt_refuse.sh VIT3D: checkpoints that must not be used are refused clearly:
#  - resuming with a model config whose shapes, head (--global-pool), LayerScale, register
#    tokens, QK-norm, parallel blocks or a pre-logits layer differ from the checkpoint's, or
#    with another optimizer;
#  - a LAMB run resumed with --opt lamb goes on as the uninterrupted run (--check-log), and an
#    SGD one (another --momentum refused);
#  - vit3d inspect prints the flags that resume a checkpoint (and they do), the regularisation,
#    loss, EMA and freeze settings among them (resumed without a warning, as the uninterrupted
#    run); a resume without those settings is warned about naming each, one without
#    --model-ema that the EMA is dropped; another EMA decay is refused; a manifest key this
#    vit3d does not know (a newer one's) is skipped, named in a warning; the normalisation and
#    evaluation transform among the settings: vit3d eval warns where its own differ, and an
#    older manifest without them has them said to be unknown (inspect, eval);
#  - another learning-rate schedule or optimizer setting is refused, naming each difference,
#    unless --resume-override 1 (said, and the run trains on with the new ones);
#  - another set of frozen tensors (--freeze, --trainable) is refused; other patterns that
#    freeze the same ones resume as the uninterrupted run;
#  - another --seed is allowed but warned about;
#  - --resume DIR of a damaged checkpoint (bad CRC) stops instead of training;
#  - a full disk during a save (a small tmpfs; skipped where it cannot be mounted), in place or in
#    the background, foretold by a start-up warning, gives an error at the save's step, and the previous checkpoint stays
#    complete and usable; where the failed save is the run's last, the run exits 1; a write that fails in the background (fault switch) is said a step
#    later, and the next save commits;
#  - an interrupted save (killed before its commit) is left alone by vit3d eval (inspect names
#    it), refused to a fresh run, kept by a --resume that fails, removed by a run resuming
#    another checkpoint, recovered by --resume auto (or naming the --save folder, or with
#    --resume-fallback, which is used only where --save holds no checkpoint); a recovery
#    that cannot write its manifest (no free inode) stops the run (exit 1) and keeps it;
#  - the start-up disk plan counts --keep-last's checkpoints with --keep-every's milestones;
#    a checkpoint path that does not exist, and an export into a missing folder, are named;
#  - output paths that are not files (a pipe, a directory) refused, not replaced;
#  - a fresh run into a --save with checkpoints, and a second run into one another trains in,
#    refused; --resume auto takes the newest complete checkpoint over a stale `latest`, resumes
#    a seed of 2^63, and is refused where every checkpoint is damaged; a rollback sets the old
#    line's checkpoint of its step aside.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
work=$(mktemp -d)
cleanup() { mountpoint -q "$work/disk" && umount "$work/disk"; rm -rf "$work"; }
trap cleanup EXIT
fail=0
args=(train --model tiny --steps 4 --global-batch-size 8 --micro-batch-size 8 --threads 1)
"$vit3d" "${args[@]}" --save "$work/ck" > "$work/a.log" 2>&1 || { echo "FAIL: first run"; fail=1; }
out=$("$vit3d" "${args[@]}" --width 96 --heads 4 --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds a model of img 32 patch 8 width 64" <<<"$out"; then
  echo "ok: another width refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: config mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --mlp-dim 200 --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "heads 4 MLP 256 classes 10; pass the same sizes to resume it (--img-size 32 --patch-size 8 --width 64 --depth 4 --heads 4 --mlp-dim 256 --num-classes 10; vit3d inspect $work/ck/step-[0-9]* prints every flag)" <<<"$out"; then
  echo "ok: another MLP width refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: MLP width mismatch: rc $rc: $out"; fail=1; fi
# vit3d eval takes the model's flags it is not given from the checkpoint: without any, it
# evaluates as with inspect's line (whose --global-batch-size an evaluation does not use: any
# --micro-batch-size goes); a size given that differs is refused naming the sizes.
out=$("$vit3d" eval --checkpoint "$work/ck" --val-data "$work/no_val" --width 96 --threads 1 2>&1); rc=$?
flags=$("$vit3d" inspect "$work/ck" | sed -n 's/^resume with: //p')
${VT_REF_PYTHON:-/usr/bin/python3} "$(dirname "$0")/make_images.py" "$work/ev_imgs" 10 1 32
out3=$("$vit3d" eval --checkpoint "$work/ck" --val-data "$work/ev_imgs" --threads 1 2>&1)
if [ $rc -eq 2 ] && grep -q "pass the same sizes to evaluate it (--img-size 32 " <<<"$out" &&
   out2=$(eval "\"\$vit3d\" eval ${flags/--resume /--checkpoint } --val-data \"\$work/ev_imgs\" --micro-batch-size 3 --threads 1" 2>&1) &&
   grep -q "^eval: .*(10 images)" <<<"$out2" &&
   [ "$(grep "^eval:" <<<"$out2")" = "$(grep "^eval:" <<<"$out3")" ] &&
   grep -q "leaves out are the checkpoint's" <<<"$out3" && ! grep -q warning <<<"$out3"; then
  echo "ok: vit3d eval takes the model from the checkpoint, as inspect's line (with --micro-batch-size 3); another --width refused"
else echo "FAIL: vit3d eval without or with inspect's flags: rc $rc: $out / $out2 / $out3"; fail=1; fi
# Its flags taken from the newest checkpoint of a --save folder, which is damaged (the load
# takes an older one): refused, naming it, where the older one records other flags (here
# another normalisation); evaluated, as where the damage showed in a file's size, where it
# records the same (it was refused as well).
gb=$(sed -n 's/^global_batch //p' "$work/ck/step-00000004/manifest.txt")
for f in ev_fold ev_same; do
  mkdir -p "$work/$f" && cp -r "$work/ck/step-00000004" "$work/$f/" &&
    cp -r "$work/ck/step-00000004" "$work/$f/step-00000009" &&
    ${VT_REF_PYTHON:-/usr/bin/python3} "$(dirname "$0")/manifest_edit.py" \
      "$work/$f/step-00000009/manifest.txt" step=9 stream_position=$((9 * gb)) \
      $([ $f = ev_fold ] && echo mean_r=0.5) &&
    printf 'x' | dd of="$work/$f/step-00000009/model.safetensors" bs=1 seek=2000 conv=notrunc 2>/dev/null
done
out=$("$vit3d" eval --checkpoint "$work/ev_fold" --val-data "$work/ev_imgs" --threads 1 2>&1); rc=$?
out2=$("$vit3d" eval --checkpoint "$work/ev_same" --val-data "$work/ev_imgs" --threads 1 2>&1); rc2=$?
if [ $rc -eq 2 ] && grep -q "took the model's and the normalisation's flags it was not given from .*ev_fold/step-00000009, which is damaged" <<<"$out" &&
   [ $rc2 -eq 0 ] && grep -q "using the previous complete checkpoint .*ev_same/step-00000004" <<<"$out2" &&
   [ "$(grep "^eval:" <<<"$out2")" = "$(grep "^eval:" <<<"$out3")" ]; then
  echo "ok: vit3d eval refuses where the damaged checkpoint that gave its flags records others than the one loaded, and evaluates where they are the same"
else echo "FAIL: vit3d eval of a folder whose newest is damaged: rc $rc: $out / rc $rc2: $out2"; fail=1; fi
out=$("$vit3d" "${args[@]}" --global-pool avg --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds a model with the class-token head and a class token; resume it with --global-pool token --class-token 1" <<<"$out"; then
  echo "ok: another head refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: head mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --layer-scale 1e-6 --reg-tokens 4 --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds a model without LayerScale, with 0 register tokens and positions on every token; resume it with --layer-scale 0 --reg-tokens 0 --no-embed-class 0" <<<"$out"; then
  echo "ok: LayerScale and registers refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: LayerScale mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --qk-norm 1 --qkv-bias 0 --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds a model without QK-norm, with a qkv bias, sequential blocks and the erf GELU; resume it with --qk-norm 0 --qkv-bias 1 --parallel-blocks 0 --act gelu" <<<"$out"; then
  echo "ok: QK-norm refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: QK-norm mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --parallel-blocks 1 --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q ", sequential blocks and the erf GELU; resume it with .* --parallel-blocks 0" <<<"$out"; then
  echo "ok: parallel blocks refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: parallel blocks mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --act gelu_tanh --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "and the erf GELU; resume it with .* --act gelu\b" <<<"$out"; then
  echo "ok: the tanh GELU refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: GELU form mismatch: rc $rc: $out"; fail=1; fi
# (sin-cos positions need them on the patch tokens only: a checkpoint of such a model first)
"$vit3d" "${args[@]}" --no-embed-class 1 --save "$work/ck_pos" > /dev/null 2>&1 ||
  { echo "FAIL: the run with --no-embed-class 1"; fail=1; }
out=$("$vit3d" "${args[@]}" --pos-embed sincos2d --no-embed-class 1 --steps 6 \
  --save "$work/ck_pos" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds a model with learned positions; resume it with --pos-embed learn" <<<"$out"; then
  echo "ok: fixed sin-cos positions refused: $(grep -o 'holds a model with learned.*' <<<"$out")"
else echo "FAIL: position kind mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --pre-logits 32 --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds a model without a pre-logits layer; resume it with --pre-logits 0" <<<"$out"; then
  echo "ok: a pre-logits layer refused: $(grep -o 'holds a model without a pre.*' <<<"$out")"
else echo "FAIL: pre-logits mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --pre-norm 1 --norm-eps 1e-5 --act quick_gelu --steps 6 \
  --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "and the erf GELU; resume it with .* --act gelu\b" <<<"$out"; then
  echo "ok: the quick GELU refused: $(grep -o 'holds a model.*' <<<"$out")"
else echo "FAIL: quick GELU mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --pre-norm 1 --norm-eps 1e-5 --steps 6 --save "$work/ck" \
  --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds a model without norm_pre and LayerNorm eps 1e-06; resume it with --pre-norm 0 --norm-eps 1e-06" <<<"$out"; then
  echo "ok: norm_pre and another LayerNorm eps refused: $(grep -o 'holds a model without norm.*' <<<"$out")"
else echo "FAIL: norm_pre mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --opt lamb --steps 6 --save "$work/ck" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "was trained with --opt adamw; resume it with --opt adamw" <<<"$out"; then
  echo "ok: another optimizer refused: $(grep -o 'was trained with.*' <<<"$out")"
else echo "FAIL: optimizer mismatch: rc $rc: $out"; fail=1; fi
# resumes NAME FLAGS...: a run of FLAGS stopped at step 3 and resumed logs the uninterrupted
# run's steps 4-6 bit for bit (--check-log).
resumes() {
  local name=$1
  shift
  if "$vit3d" "$@" --log-dir "$work/${name}_all" > "$work/${name}_all.log" 2>&1 &&
     "$vit3d" "$@" --run-steps 3 --save "$work/ck_$name" > "$work/${name}_a.log" 2>&1 &&
     "$vit3d" "$@" --save "$work/ck_$name" --resume auto \
       --check-log "$work/${name}_all/metrics.jsonl" > "$work/${name}_b.log" 2>&1 &&
     grep -q "resumed from" "$work/${name}_b.log"; then
    echo "ok: $name resumed at step 3 logs the uninterrupted run's steps 4-6 (--check-log)"
  else echo "FAIL: $name resume:"; tail -5 "$work/${name}_b.log"; fail=1; fi
}
lamb=(train --model tiny --steps 6 --global-batch-size 8 --micro-batch-size 4 --threads 1
      --opt lamb --lr 5e-3 --warmup-steps 1)
resumes lamb "${lamb[@]}"
# The same for SGD with Nesterov momentum (its momentum buffer in the checkpoint), weight decay
# and layer decay on; and a resume with another --momentum is refused by name.
sgd=(train --model tiny --steps 6 --global-batch-size 8 --micro-batch-size 4 --threads 1
     --opt sgd --momentum 0.8 --lr 2e-2 --warmup-steps 1 --weight-decay 1e-3 --layer-decay 0.8)
resumes sgd "${sgd[@]}"
# Its state is the momentum buffer alone, under torch.optim.SGD's name; a checkpoint in the
# twentieth session's layout (the buffer as exp_avg beside a zero exp_avg_sq) still resumes.
ck3="$work/ck_sgd/step-00000003"
if /usr/bin/python3 - "$ck3" <<'PY'
import json, struct, sys, zlib
d = sys.argv[1]
raw = open(f"{d}/optim.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
names = sorted(k for k in head if k != "__metadata__")
assert names and all(k.startswith("momentum_buffer.") for k in names), names[:3]
# The old layout: exp_avg.<name> (the buffer) and exp_avg_sq.<name> (zeros).
tensors, out, off = {}, b"", 0
for k in names:
    e = head[k]
    blob = data[e["data_offsets"][0]:e["data_offsets"][1]]
    for new, b in ((k.replace("momentum_buffer.", "exp_avg.", 1), blob),
                   (k.replace("momentum_buffer.", "exp_avg_sq.", 1), bytes(len(blob)))):
        tensors[new] = dict(dtype=e["dtype"], shape=e["shape"], data_offsets=[off, off + len(b)])
        out += b
        off += len(b)
h = json.dumps(tensors).encode()
h += b" " * (-len(h) % 8)
blob = struct.pack("<Q", len(h)) + h + out
open(f"{d}/optim.safetensors", "wb").write(blob)
man = [l if not l.startswith("file optim.safetensors ") else
       f"file optim.safetensors {len(blob)} {zlib.crc32(blob):08x}"
       for l in open(f"{d}/manifest.txt").read().splitlines()
       if not l.startswith("manifest_crc32 ")]  # (unsealed, as that layout's manifests were)
open(f"{d}/manifest.txt", "w").write("\n".join(man) + "\n")
PY
then
  if "$vit3d" "${sgd[@]}" --resume "$ck3" --check-log "$work/sgd_all/metrics.jsonl" \
       > "$work/sgd_old.log" 2>&1 && grep -q "resumed from" "$work/sgd_old.log"; then
    echo "ok: SGD's optim.safetensors holds momentum_buffer.* only; the older layout (exp_avg, zero exp_avg_sq) resumes as the uninterrupted run"
  else echo "FAIL: SGD's older checkpoint layout:"; tail -3 "$work/sgd_old.log"; fail=1; fi
else echo "FAIL: SGD's optim.safetensors is not momentum_buffer.* alone"; fail=1; fi
out=$("$vit3d" "${sgd[@]}" --momentum 0.9 --steps 7 --save "$work/ck_sgd" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "with --steps 6 --momentum 0.8, and this one has --steps 7 --momentum 0.9" <<<"$out"; then
  echo "ok: another SGD momentum refused"
else echo "FAIL: SGD momentum change: rc $rc: $out"; fail=1; fi
# Another learning-rate schedule or optimizer setting: refused, every difference named, unless
# --resume-override 1 (then said, and the run goes on with this command's).
out=$("$vit3d" "${args[@]}" --lr 2e-3 --steps 6 --clip-grad 0.5 --save "$work/ck_sched" \
      --resume "$work/ck/step-00000004" 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q "was saved by a run with --lr 0.001 --steps 4 --clip-grad 1, and this one has --lr 0.002 --steps 6 --clip-grad 0.5; the learning-rate schedule or the optimizer would change mid-run.*--resume-override 1" <<<"$out" &&
   [ ! -e "$work/ck_sched/latest" ] && ! grep -q "resumed from" <<<"$out"; then
  echo "ok: another schedule refused (rc $rc): $(grep -o 'was saved by a run with --lr.*this one has[^;]*' <<<"$out")"
else echo "FAIL: schedule change: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --sched linear --save "$work/ck_lin" --resume "$work/ck/step-00000004" 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q "was saved by a run with --sched cosine, and this one has --sched linear" <<<"$out"; then
  echo "ok: another decay refused (rc $rc)"
else echo "FAIL: --sched mismatch: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --lr 2e-3 --steps 6 --clip-grad 0.5 --save "$work/ck_sched" \
      --resume "$work/ck/step-00000004" --resume-override 1 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "and this one has --lr 0.002 --steps 6 --clip-grad 0.5: --resume-override 1, so training goes on with this run's" <<<"$out" &&
   grep -q "^step     6/6" <<<"$out"; then
  echo "ok: --resume-override 1 trains on with the new schedule to step 6"
else echo "FAIL: --resume-override 1: rc $rc: $out"; fail=1; fi
# Frozen tensors (--freeze, --trainable) are part of the optimizer's settings: a resume that
# freezes others is refused, one with other patterns that freeze the same tensors goes on as
# the uninterrupted run (--check-log).
frz=(--freeze '^blocks\.0\.' --trainable '^(blocks|head|norm)')
"$vit3d" "${args[@]}" --steps 6 "${frz[@]}" --log-dir "$work/frz_full" > "$work/frz_full.log" 2>&1 &&
  "$vit3d" "${args[@]}" --steps 6 --run-steps 4 "${frz[@]}" --save "$work/ck_frz" \
    > "$work/frz_a.log" 2>&1 || { echo "FAIL: the runs with frozen tensors"; fail=1; }
out=$("$vit3d" "${args[@]}" --steps 6 --save "$work/ck_frz" --resume auto 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -qF "was saved by a run with --freeze/--trainable freezing 16 tensors (names " <<<"$out" &&
   grep -qF "): --freeze '^blocks\.0\.' --trainable '^(blocks|head|norm)', and this one has --freeze/--trainable freezing 0 tensors" <<<"$out" &&
   "$vit3d" inspect "$work/ck_frz" | grep -qF -- "--freeze '^blocks\.0\.' --trainable '^(blocks|head|norm)'"; then
  echo "ok: a resume that freezes other tensors refused (rc $rc), the patterns named; vit3d inspect gives them"
else echo "FAIL: --freeze change: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --steps 6 --freeze '^(blocks\.0\.|cls_token|pos_embed|patch_embed)' \
      --save "$work/ck_frz" --resume auto --check-log "$work/frz_full/metrics.jsonl" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "resumed from" <<<"$out" && grep -q "^step     6/6" <<<"$out"; then
  echo "ok: other patterns freezing the same tensors resume, as the uninterrupted run"
else echo "FAIL: resuming with the same frozen tensors: rc $rc: $out"; fail=1; fi
# vit3d inspect prints the flags that resume a checkpoint (the model's, the optimizer's and the
# schedule's): with them even another --model preset resumes it; a folder without a checkpoint
# is refused.
flags=$("$vit3d" inspect "$work/ck" 2>&1 | sed -n 's/^resume with: //p')
# (eval: the line quotes its text flags for the shell, as a user pastes it)
if [ -n "$flags" ] &&
   eval "\"\$vit3d\" train --model vit-ti16 $flags --micro-batch-size 8 --threads 1" \
     > "$work/inspect.log" 2>&1 && grep -q "resumed from" "$work/inspect.log"; then
  echo "ok: vit3d inspect's flags resume the checkpoint (even after --model vit-ti16): $flags"
else echo "FAIL: resuming with vit3d inspect's flags ($flags):"; tail -5 "$work/inspect.log"; fail=1; fi
# The regularisation, loss, EMA and freeze settings are recorded too: vit3d inspect's line
# resumes such a run without a warning and as the uninterrupted run (--check-log); a resume
# without them warns naming each (the EMA dropped among them), another EMA decay is refused as
# the optimizer's settings are.
reg=(--drop-path 0.1 --drop-path-uniform 1 --proj-drop 0.05 --attn-drop 0.02 --pos-drop 0.03
     --drop 0.04 --mixup 0.8 --cutmix 1.0 --mix-prob 0.9 --mix-switch-prob 0.3 --reprob 0.25
     --remode rand --label-smoothing 0.2 --bce-loss 1 --bce-target-thresh 0.2 --hflip 0.3
     --crop-scale-min 0.5 --mean 0.5,0.4,0.3 --std 0.2,0.25,0.3 --eval-crop-pct 0.9
     --eval-crop-mode squash --eval-interpolation bicubic)
ema=(--model-ema 0.99 --model-ema-warmup 1)
rfrz=(--freeze "^blocks\\.0\\. 'x" --trainable '^(blocks|head|norm)')
${VT_REF_PYTHON:-/usr/bin/python3} "$(dirname "$0")/make_images.py" "$work/reg_imgs" 10 1 32
"$vit3d" "${args[@]}" --steps 6 "${reg[@]}" "${ema[@]}" "${rfrz[@]}" --log-dir "$work/reg_full" \
  --val-data "$work/reg_imgs" > "$work/reg_full.log" 2>&1 &&
  "$vit3d" "${args[@]}" --steps 6 --run-steps 3 "${reg[@]}" "${ema[@]}" "${rfrz[@]}" \
    --val-data "$work/reg_imgs" --save "$work/ck_reg" > "$work/reg_a.log" 2>&1 ||
  { echo "FAIL: the regularised runs"; fail=1; }
flags=$("$vit3d" inspect "$work/ck_reg/step-00000003" 2>&1 | sed -n 's/^resume with: //p')
if [ -n "$flags" ] &&
   eval "\"\$vit3d\" train --model vit-ti16 $flags --micro-batch-size 8 --threads 1 \
     --save \"\$work/ck_reg2\" --check-log \"\$work/reg_full/metrics.jsonl\"" \
     > "$work/reg_b.log" 2>&1 && grep -q "resumed from" "$work/reg_b.log" &&
   ! grep -q "warning" "$work/reg_b.log" && grep -q "^step     6/6" "$work/reg_b.log"; then
  echo "ok: vit3d inspect's line resumes a regularised run with its EMA and freeze patterns, no warning, as the uninterrupted run: $flags"
else echo "FAIL: inspect's line of a regularised run ($flags):"; tail -5 "$work/reg_b.log"; fail=1; fi
# vit3d eval of it: with other normalisation and evaluation flags than the run's a warning
# names them (its figures are not the run's); with inspect's line, none, and without them the
# checkpoint's are taken: no warning, inspect's line's figures.
out=$("$vit3d" eval --model tiny --checkpoint "$work/ck_reg/step-00000003" --val-data "$work/reg_imgs" --threads 1 \
      --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 --eval-crop-pct 0.875 --eval-crop-mode center \
      --eval-interpolation sample 2>&1)
out2=$(eval "\"\$vit3d\" eval $flags --checkpoint \"\$work/ck_reg/step-00000003\" --val-data \"\$work/reg_imgs\" --threads 1" 2>&1)
out4=$("$vit3d" eval --model tiny --checkpoint "$work/ck_reg/step-00000003" --val-data "$work/reg_imgs" --threads 1 2>&1)
if [ "$(grep "^eval:" <<<"$out2")" = "$(grep "^eval:" <<<"$out4")" ] && ! grep -q warning <<<"$out4" &&
   grep -q "warning: .*step-00000003 was trained with --mean 0.5,0.4,0.3 --std 0.2,0.25,0.3 --eval-crop-pct 0.9 --eval-crop-mode squash --eval-interpolation bicubic and this evaluation has --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225 --eval-crop-pct 0.875 --eval-crop-mode center --eval-interpolation sample: its figures are not those of that run's evaluations" <<<"$out" &&
   grep -q "top-1" <<<"$out2" && ! grep -q "warning" <<<"$out2"; then
  echo "ok: vit3d eval warns where its normalisation and evaluation transform differ from the run's, not with inspect's flags"
else echo "FAIL: vit3d eval's normalisation warning: $out"; echo "$out2" | tail -3; fail=1; fi
# Of a run that never evaluated only the normalisation is compared: there are no evaluations
# whose transform to repeat. A run that resumes one that evaluated, and evaluates nothing
# itself, records that run's evaluation (its own flags' defaults are not how the line of
# training was evaluated).
"$vit3d" "${args[@]}" --steps 1 --mean 0.5,0.4,0.3 --save "$work/ck_noeval" > /dev/null 2>&1
out=$("$vit3d" eval --model tiny --checkpoint "$work/ck_noeval" --val-data "$work/reg_imgs" --eval-crop-pct 0.9 \
      --mean 0.485,0.456,0.406 --threads 1 2>&1)
"$vit3d" "${args[@]}" --steps 6 --run-steps 1 "${reg[@]:0:${#reg[@]}-6}" "${ema[@]}" "${rfrz[@]}" \
  --resume "$work/ck_reg/step-00000003" --save "$work/ck_sticky" > "$work/sticky.log" 2>&1
man=$work/ck_sticky/step-00000004/manifest.txt
if grep -q "step-00000001 was trained with --mean 0.5,0.4,0.3 and this evaluation has --mean 0.485,0.456,0.406: the images are not normalised as in its training" <<<"$out" &&
   ! grep -q -- "--eval-crop" <<<"$out" && grep -q "^evaluated 1$" "$man" &&
   grep -q "^eval_crop_pct 0.9" "$man" && grep -q "^eval_squash 1$" "$man" &&
   grep -q "^eval_interp 2$" "$man" && grep -q "^evaluated 0$" "$work/ck_noeval/step-00000001/manifest.txt"; then
  echo "ok: vit3d eval of a run that never evaluated compares its normalisation only; a resume that does not evaluate keeps the evaluated run's transform"
else echo "FAIL: evaluated: $out"; cat "$man" "$work/sticky.log"; fail=1; fi
# A manifest of a vit3d before these were recorded (their keys taken out): inspect leaves them
# out and says so, vit3d eval warns that they are not known instead of comparing defaults.
cp -a "$work/ck_reg/step-00000003" "$work/ck_old"
sed -i '/^mean_\|^std_\|^eval_\|^evaluated\|^manifest_crc32/d' "$work/ck_old/manifest.txt"
out=$("$vit3d" inspect "$work/ck_old" 2>&1)
out2=$("$vit3d" eval --model tiny --checkpoint "$work/ck_old" --val-data "$work/reg_imgs" --threads 1 2>&1)
if grep -q "normalisation and evaluation transform are not recorded" <<<"$out" &&
   ! grep "^resume with:" <<<"$out" | grep -q -- "--mean " &&
   grep -q "ck_old does not record its run's normalisation or evaluation transform (an older vit3d wrote it); this evaluation has --mean 0.485,0.456,0.406" <<<"$out2"; then
  echo "ok: an older manifest's normalisation is said to be unknown (inspect, eval), not taken for the defaults"
else echo "FAIL: an older manifest's normalisation: $out"; echo "$out2" | grep -i warn; fail=1; fi
out=$("$vit3d" "${args[@]}" --steps 6 "${ema[@]}" "${rfrz[@]}" --resume "$work/ck_reg/step-00000003" \
      --save "$work/ck_reg3" --val-data "$work/reg_imgs" 2>&1)
rc=$?
want="was saved by a run with --drop-path 0.1 --drop-path-uniform 1 --proj-drop 0.05 --attn-drop 0.02 --pos-drop 0.03 --drop 0.04 --mixup 0.8 --cutmix 1 --mix-prob 0.9 --mix-switch-prob 0.3 --reprob 0.25 --remode rand --label-smoothing 0.2 --bce-loss 1 --bce-target-thresh 0.2 --hflip 0.3 --crop-scale-min 0.5 --mean 0.5,0.4,0.3 --std 0.2,0.25,0.3 and this one has --drop-path 0 --drop-path-uniform 0 --proj-drop 0 --attn-drop 0 --pos-drop 0 --drop 0 --mixup 0 --cutmix 0 --mix-prob 1 --mix-switch-prob 0.5 --reprob 0 --remode pixel --label-smoothing 0.1 --bce-loss 0 --bce-target-thresh -1 --hflip 0.5 --crop-scale-min 0.08 --mean 0.485,0.456,0.406 --std 0.229,0.224,0.225: from here the training differs"
want_e="was saved by a run with --eval-crop-pct 0.9 --eval-crop-mode squash --eval-interpolation bicubic and this one has --eval-crop-pct 0.875 --eval-crop-mode center --eval-interpolation sample: from here its evaluations differ"
if [ $rc -eq 0 ] && grep -q "warning: .*$want" <<<"$out" && grep -q "warning: .*$want_e" <<<"$out"; then
  echo "ok: a resume without the regularisation, normalisation and evaluation settings warns, naming each"
else echo "FAIL: resume without the regularisation settings: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --steps 6 "${reg[@]}" "${rfrz[@]}" --resume "$work/ck_reg/step-00000003" \
      --save "$work/ck_reg4" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "warning: .*has EMA weights; this run has no --model-ema, so they are dropped and its checkpoints hold none: give --model-ema 0.99 --model-ema-warmup 1 to keep them" <<<"$out"; then
  echo "ok: a resume without --model-ema warns that the EMA is dropped"
else echo "FAIL: resume without --model-ema: rc $rc: $out"; fail=1; fi
out=$("$vit3d" "${args[@]}" --steps 6 "${reg[@]}" --model-ema 0.995 "${rfrz[@]}" \
      --resume "$work/ck_reg/step-00000003" --save "$work/ck_reg5" 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "was saved by a run with --model-ema 0.99 --model-ema-warmup 1, and this one has --model-ema 0.995 --model-ema-warmup 0; the learning-rate schedule or the optimizer would change" <<<"$out"; then
  echo "ok: another EMA decay refused (rc $rc)"
else echo "FAIL: another EMA decay: rc $rc: $out"; fail=1; fi
# A manifest key this vit3d does not know (a newer one's): skipped, the checkpoint resumes and
# inspects with one warning naming it.
cp -r "$work/ck_reg/step-00000003" "$work/ck_newer"
${VT_REF_PYTHON:-/usr/bin/python3} "$(dirname "$0")/manifest_edit.py" \
  "$work/ck_newer/manifest.txt" fancy_regulariser=0.5
out=$(eval "\"\$vit3d\" train --model vit-ti16 ${flags% --resume *} --micro-batch-size 8 \
      --threads 1 --resume \"\$work/ck_newer\" --save \"\$work/ck_newer_s\"" 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c "warning" <<<"$out")" = 1 ] &&
   grep -q "warning: .*ck_newer's manifest has 1 key this vit3d does not know (fancy_regulariser): a newer vit3d wrote it" <<<"$out" &&
   "$vit3d" inspect "$work/ck_newer" | grep -q "1 key this vit3d does not know, written by a newer one: fancy_regulariser;"; then
  echo "ok: a manifest key this vit3d does not know is skipped, named in one warning"
else echo "FAIL: an unknown manifest key: rc $rc: $out"; fail=1; fi
out=$("$vit3d" inspect "$work" 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds no complete checkpoint" <<<"$out"; then
  echo "ok: vit3d inspect of a folder without a checkpoint: $out"
else echo "FAIL: vit3d inspect of a folder without a checkpoint: rc $rc: $out"; fail=1; fi
# Another seed or --aug-repeats: allowed (reshuffling after a loss spike), but said.
out=$("$vit3d" "${args[@]}" --seed 9 --steps 5 --save "$work/ck_seed" --resume "$work/ck/step-00000004" \
      --resume-override 1 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "was saved by a run with --seed 0 and this one has --seed 9" <<<"$out"; then
  echo "ok: another seed warned: $(grep -o 'was saved by a run with --seed.*' <<<"$out")"
else echo "FAIL: seed change: rc $rc: $out"; fail=1; fi
cp -r "$work/ck/step-00000004" "$work/bad"
printf 'xx' | dd of="$work/bad/optim.safetensors" bs=1 seek=300 conv=notrunc 2>/dev/null
out=$("$vit3d" "${args[@]}" --steps 6 --resume "$work/bad" 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "is damaged: optim.safetensors has CRC-32" <<<"$out"; then
  echo "ok: damaged --resume DIR refused: $(grep -o 'is damaged.*' <<<"$out")"
else echo "FAIL: damaged checkpoint: rc $rc: $out"; fail=1; fi
# vit3d eval reads the weights alone: that checkpoint evaluates as the intact one (and one whose
# model.safetensors is damaged is refused).
out=$("$vit3d" eval --checkpoint "$work/bad" --val-data "$work/ev_imgs" --threads 1 2>&1); rc=$?
cp -r "$work/ck/step-00000004" "$work/bad_w"
printf 'xx' | dd of="$work/bad_w/model.safetensors" bs=1 seek=300 conv=notrunc 2>/dev/null
out2=$("$vit3d" eval --checkpoint "$work/bad_w" --val-data "$work/ev_imgs" --threads 1 2>&1); rc2=$?
if [ $rc -eq 0 ] && [ "$(grep "^eval:" <<<"$out")" = "$(grep "^eval:" <<<"$out3")" ] &&
   grep -q "bad is damaged: optim.safetensors has CRC-32 .*; its model.safetensors verifies (size and CRC-32), and is what is evaluated" <<<"$out" &&
   [ $rc2 -eq 2 ] && grep -q "is damaged: model.safetensors has CRC-32" <<<"$out2"; then
  echo "ok: vit3d eval of a checkpoint whose optimizer state alone is damaged evaluates its weights"
else echo "FAIL: eval with a damaged optim.safetensors: rc $rc: $out / rc $rc2: $out2"; fail=1; fi
# --jpeg-reduce 0 is the run's: inspect's line gives it, vit3d eval of the checkpoint takes it.
"$vit3d" "${args[@]}" --jpeg-reduce 0 --save "$work/ck_jr" > /dev/null 2>&1
out=$("$vit3d" eval --checkpoint "$work/ck_jr" --val-data "$work/ev_imgs" --threads 1 2>&1)
if grep -q "JPEGs decoded at full size (--jpeg-reduce 0" <<<"$out" &&
   "$vit3d" inspect "$work/ck_jr" | grep -q "^resume with: .* --jpeg-reduce 0"; then
  echo "ok: --jpeg-reduce 0 recorded: in inspect's line, taken by vit3d eval of the checkpoint"
else echo "FAIL: --jpeg-reduce 0 not carried: $out"; fail=1; fi
# ... and by vit3d eval of its export (the file's metadata), where not given otherwise.
"$vit3d" export --checkpoint "$work/ck_jr" --out "$work/jr.safetensors" > /dev/null 2>&1
out=$("$vit3d" eval --init-from "$work/jr.safetensors" --val-data "$work/ev_imgs" --threads 1 2>&1)
out2=$("$vit3d" eval --init-from "$work/jr.safetensors" --val-data "$work/ev_imgs" --threads 1 \
       --jpeg-reduce 1 2>&1)
if grep -q "JPEGs decoded at full size (--jpeg-reduce 0" <<<"$out" &&
   ! grep -q "JPEGs decoded at full size" <<<"$out2" &&
   "$vit3d" inspect "$work/jr.safetensors" | grep -q "^  vit3d_jpeg_reduce: 0$"; then
  echo "ok: --jpeg-reduce 0 in an export's metadata, taken by vit3d eval --init-from of it"
else echo "FAIL: --jpeg-reduce 0 not carried by the export: $out / $out2"; fail=1; fi
# --color-jitter without 3-Augment (timm's) changes the training crops, is said at start-up,
# recorded (inspect's line gives it) and a resume without it is told.
jargs=(train --model tiny --steps 2 --global-batch-size 8 --micro-batch-size 8 --threads 1
       --data "$work/ev_imgs" --num-classes 10)
out=$("$vit3d" "${jargs[@]}" --color-jitter 0.4 --save "$work/ck_cj" 2>&1)
"$vit3d" "${jargs[@]}" --save "$work/ck_nocj" > /dev/null 2>&1
out2=$("$vit3d" "${jargs[@]}" --resume "$work/ck_cj" 2>&1)
if grep -q "colour jitter 0.4 of training crops" <<<"$out" &&
   "$vit3d" inspect "$work/ck_cj" | grep -q "^resume with: .* --color-jitter 0.4" &&
   ! cmp -s "$work/ck_cj/step-00000002/model.safetensors" \
         "$work/ck_nocj/step-00000002/model.safetensors" &&
   [ -s "$work/ck_nocj/step-00000002/model.safetensors" ] &&
   grep -q -- "saved by a run with --color-jitter 0.4 and this one has --color-jitter 0:" <<<"$out2"; then
  echo "ok: --color-jitter alone: applied, said, recorded, and a resume without it told"
else echo "FAIL: --color-jitter alone: $out / $out2"; fail=1; fi
# The start-up disk plan counts what --keep-last K really keeps at once: the newest K, the
# older --keep-every milestones and the one being written (steps 1-12, K 3, every 4th: 9, 10,
# 11, the milestones 4 and 8, and 12 being written), and no more than the run saves.
out=$("$vit3d" "${args[@]}" --steps 12 --save-interval 1 --keep-last 3 --keep-every 4 \
      --save "$work/ck_plan" 2>&1)
out1=$("$vit3d" "${args[@]}" --steps 1 --keep-last 5 --save "$work/ck_plan1" 2>&1)
if grep -q "this run saves 12, --keep-last 3 keeps the newest 3 and the older multiples of 4 (2 of them while the last save is written), at most 6 at once with the one being written (0 there now)" <<<"$out" &&
   [ "$(ls "$work/ck_plan" | grep -c '^step-')" = 5 ] &&
   grep -q "this run saves 1, --keep-last 5 keeps the newest 5, at most 1 at once" <<<"$out1"; then
  echo "ok: the disk plan counts --keep-last's checkpoints with --keep-every's milestones"
else echo "FAIL: the disk plan: $(grep 'checkpoints:' <<<"$out") / $(grep 'checkpoints:' <<<"$out1")"; fail=1; fi
# A checkpoint path that does not exist is said so (not "not a complete checkpoint"); an export
# into a folder that does not exist makes it (as a run's output files), one below a file names
# the path, and a path ending in '/' is refused (it made the folder, then failed to write).
out=$("$vit3d" "${args[@]}" --resume "$work/no_such_ckpt" 2>&1)
rc=$?
out2=$("$vit3d" inspect "$work/no_such_ckpt" 2>&1)
out3=$("$vit3d" export --checkpoint "$work/ck" --out "$work/no_such_dir/x.safetensors" 2>&1) &&
  [ -s "$work/no_such_dir/x.safetensors" ] && touch "$work/a_file" &&
  out3=$("$vit3d" export --checkpoint "$work/ck" --out "$work/a_file/x.safetensors" 2>&1)
out4=$("$vit3d" export --checkpoint "$work/ck" --out "$work/a_dir/" 2>&1)
if [ $rc -eq 2 ] && grep -q "$work/no_such_ckpt does not exist (No such file or directory)" <<<"$out" &&
   grep -q "$work/no_such_ckpt does not exist" <<<"$out2" &&
   grep -q "cannot make files in $work/a_file (Not a directory)" <<<"$out3" &&
   grep -q "names a folder (it ends with '/'): give the path of a file" <<<"$out4" && [ ! -e "$work/a_dir" ]; then
  echo "ok: a missing checkpoint is named; an export makes its folder, or names the path where it cannot"
else echo "FAIL: missing paths: rc $rc: $out / $out2 / $out3"; fail=1; fi
# Full disk: room for one checkpoint (~2.6 MB) but not two.
mkdir -p "$work/disk"
if mount -t tmpfs -o size=4m tmpfs "$work/disk" 2>/dev/null; then
  out=$("$vit3d" "${args[@]}" --steps 2 --save "$work/disk" --save-interval 1 2>&1)
  rc=$?
  again=$("$vit3d" "${args[@]}" --steps 2 --save "$work/disk" --resume auto --run-steps 1 2>&1)
  if [ $rc -eq 1 ] && grep -q "checkpoint of step 2 failed, any earlier one is intact" <<<"$out" &&
     grep -q "disk full\|No space" <<<"$out" &&
     grep -q "warning: --save $work/disk: 2 more checkpoints of 2.5 MiB need 4.9 MiB and the disk has 4.0 MiB free" <<<"$out" &&
     [ "$(cat "$work/disk/latest")" = "step-00000001" ] && ! ls -A "$work/disk" | grep -q tmp &&
     grep -q "resumed from .*step-00000001" <<<"$again"; then
    echo "ok: full disk, foretold at start-up ($(grep -o '2 more checkpoints of [^:]*' <<<"$out")): $(grep -o 'checkpoint of step 2 failed.*' <<<"$out" | cut -c1-160)"
  else echo "FAIL: full disk: rc $rc: $out"; ls -la "$work/disk"; fail=1; fi
  # With --async-save (the default) too: the files' space is reserved when they are created,
  # so step 2's save fails at its step, before any rank writes; so does step 3's; step 1 stays.
  umount "$work/disk" && mount -t tmpfs -o size=4m tmpfs "$work/disk"
  # (the run's --final-weights on another disk are still written: the one copy of step 3)
  out=$("$vit3d" "${args[@]}" --steps 3 --save "$work/disk" --save-interval 1 \
        --final-weights "$work/final3.safetensors" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] &&
     grep -q "checkpoint of step 2 failed, any earlier one is intact: cannot write .*(the disk is full)" <<<"$out" &&
     grep -q "checkpoint of step 3 failed, any earlier one is intact" <<<"$out" &&
     [ "$(cat "$work/disk/latest")" = "step-00000001" ] && ! ls -A "$work/disk" | grep -q tmp &&
     [ -s "$work/final3.safetensors" ]; then
    echo "ok: full disk with --async-save, the final weights written elsewhere: $(grep -o 'checkpoint of step 2 failed.*' <<<"$out" | cut -c1-160)"
  else echo "FAIL: full disk with --async-save: rc $rc: $out"; ls -la "$work/disk"; fail=1; fi
  # The other outputs on a full disk: each failure is exit 1, leaves an earlier file of that
  # name as it was and no temporary file (--final-weights, vit3d eval --predictions, vit3d
  # prepare shards).
  umount "$work/disk" && mount -t tmpfs -o size=4m tmpfs "$work/disk"
  echo old > "$work/disk/final.safetensors"
  echo old > "$work/disk/pred.csv"
  head -c 5M /dev/zero > "$work/disk/filler" 2>/dev/null
  out=$("$vit3d" "${args[@]}" --steps 1 --final-weights "$work/disk/final.safetensors" 2>&1)
  rc=$?
  out2=$("$vit3d" eval --checkpoint "$work/ck" --val-data "$work/ev_imgs" --threads 1 \
         --predictions "$work/disk/pred.csv" 2>&1)
  rc2=$?
  out3=$("$vit3d" prepare shards "$work/ev_imgs" "$work/disk/shards" 2>&1)
  rc3=$?
  if [ $rc -eq 1 ] && [ $rc2 -eq 1 ] && [ $rc3 -eq 1 ] &&
     [ "$(cat "$work/disk/final.safetensors")" = old ] && [ "$(cat "$work/disk/pred.csv")" = old ] &&
     grep -q "No space left on device" <<<"$out" &&
     grep -q "predictions: writing .*pred.csv failed: No space left on device (the disk is full" <<<"$out2" &&
     grep -q "(the disk is full: free space and run prepare again)" <<<"$out3" &&
     ! ls -A "$work/disk" | grep -q "tmp\|shards"; then
    echo "ok: --final-weights, --predictions and prepare shards on a full disk: exit 1, the earlier files kept"
  else echo "FAIL: outputs on a full disk: rc $rc $rc2 $rc3: $out / $out2 / $out3"; ls -la "$work/disk"; fail=1; fi
else
  echo "skipped the full-disk case: cannot mount a tmpfs here"
fi
# An interrupted save (rank 0 killed between step 2's writes and its commit: test-only fault
# switch) belongs to the run that continues the folder: vit3d eval --checkpoint auto leaves it
# (it may be a live run's), a fresh run is refused, a run resuming from another checkpoint
# removes it (another line of training), --resume auto recovers it; where its manifest cannot
# be written (a tmpfs without a free inode) it is left in place and the run stops.
VT_FAULT=kill-in-save@0:2 "$vit3d" "${args[@]}" --steps 3 --save "$work/rec" --save-interval 1 > "$work/rec.log" 2>&1
if [ -d "$work/rec/.tmp-step-00000002" ] && [ -d "$work/rec/step-00000001" ]; then
  for c in eval other auto named; do cp -a "$work/rec" "$work/rec_$c"; done
  mkdir -p "$work/rec_fresh" && cp -a "$work/rec/.tmp-step-00000002" "$work/rec_fresh/"
  ${VT_REF_PYTHON:-/usr/bin/python3} "$(dirname "$0")/make_images.py" "$work/rec_imgs" 10 1 32
  out_e=$("$vit3d" eval --model tiny --checkpoint auto --save "$work/rec_eval" --val-data "$work/rec_imgs" --threads 1 2>&1)
  rc_e=$?
  out_i=$("$vit3d" inspect "$work/rec_eval" 2>&1)
  out_f=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_fresh" 2>&1)
  rc_f=$?
  out_m=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_other" --resume "$work/rec_other/step-00000002" 2>&1)
  rc_m=$?
  kept_m=$(ls -A "$work/rec_other" | grep -c tmp)
  out_o=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_other" --resume "$work/rec_other/step-00000001" 2>&1)
  rc_o=$?
  out_a=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_auto" --resume auto 2>&1)
  rc_a=$?
  out_n=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_named" --resume "$work/rec_named/" 2>&1)
  rc_n=$?
  if [ $rc_e -eq 0 ] && [ -d "$work/rec_eval/.tmp-step-00000002" ] &&
     grep -q "loaded .*step-00000001" <<<"$out_e" &&
     grep -q "rec_eval also holds an interrupted save of step 2 (.tmp-step-00000002), not checked here" <<<"$out_i" &&
     [ $rc_f -eq 2 ] && grep -q "holds an interrupted save of an earlier run (.tmp-step-00000002), which --resume auto recovers" <<<"$out_f" &&
     [ $rc_m -eq 2 ] && [ "$kept_m" = 1 ] &&
     [ $rc_o -eq 0 ] && grep -q "removing .*tmp-step-00000002, left by an interrupted save: this run resumed from .*step-00000001, another line of training" <<<"$out_o" &&
     [ $rc_a -eq 0 ] && grep -q "recovered .*step-00000002: every rank had written its part of step 2's save" <<<"$out_a" &&
     grep -q "resumed from .*step-00000002" <<<"$out_a" && ! ls -A "$work/rec_auto" | grep -q tmp &&
     [ $rc_n -eq 0 ] && grep -q "resumed from .*rec_named/*/step-00000002" <<<"$out_n"; then
    echo "ok: an interrupted save left by eval (named by inspect), refused to a fresh run, kept by a --resume that fails, removed by a resume from step 1, recovered by --resume auto and by --resume naming the --save folder"
  else
    echo "FAIL: an interrupted save: eval rc $rc_e, fresh rc $rc_f, missing rc $rc_m (kept $kept_m), other rc $rc_o, auto rc $rc_a, named rc $rc_n"
    printf '%s\n' "$out_e" "$out_f" "$out_m" "$out_o" "$out_a" "$out_n" | grep -i "error\|recover\|remov\|resum\|load" | head; fail=1
  fi
  # --resume auto --resume-fallback BASE (what slurm_job.sh gives a requeued job of its own
  # --resume BASE): the interrupted save of --save recovered before the fallback is looked at;
  # BASE where --save holds nothing; refused without --resume auto.
  mkdir -p "$work/rec_fb" "$work/rec_fb0" && cp -a "$work/rec/.tmp-step-00000002" "$work/rec_fb/"
  fb=(--resume auto --resume-fallback "$work/rec/step-00000001")
  out_b=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_fb" "${fb[@]}" 2>&1)
  rc_b=$?
  out_b0=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_fb0" "${fb[@]}" 2>&1)
  rc_b0=$?
  out_bx=$("$vit3d" "${args[@]}" --steps 3 --save "$work/rec_fbx" --resume-fallback "$work/rec" 2>&1)
  rc_bx=$?
  if [ $rc_b -eq 0 ] && grep -q "recovered .*rec_fb/step-00000002" <<<"$out_b" &&
     grep -q "resumed from .*rec_fb/step-00000002" <<<"$out_b" &&
     [ $rc_b0 -eq 0 ] && grep -q "no checkpoint in .*rec_fb0; starting from --resume-fallback .*rec/step-00000001" <<<"$out_b0" &&
     grep -q "resumed from .*rec/step-00000001: 1 steps done" <<<"$out_b0" &&
     [ -d "$work/rec_fb0/step-00000003" ] &&
     [ $rc_bx -eq 2 ] && grep -q "give --resume auto, or drop --resume-fallback" <<<"$out_bx"; then
    echo "ok: --resume auto --resume-fallback: the interrupted save recovered first, the fallback where --save holds none, refused without --resume auto"
  else
    echo "FAIL: --resume-fallback: rc $rc_b, $rc_b0, $rc_bx"
    printf '%s\n' "$out_b" "$out_b0" "$out_bx" | grep -i "error\|recover\|fallback\|resum" | head; fail=1
  fi
  # Refused before anything runs: an empty value, auto, --save itself, vit3d eval; a fallback
  # that cannot be resumed is named as the fallback.
  for c in "--resume-fallback=|give a DIR (an empty value names nothing)" \
           "--resume-fallback auto|not auto" \
           "--resume-fallback $work/rec_fbs/|names --save itself" \
           "--resume-fallback $work/none|cannot resume: --resume-fallback: .*none does not exist"; do
    read -ra extra <<< "${c%%|*}"
    out=$("$vit3d" "${args[@]}" --save "$work/rec_fbs" --resume auto "${extra[@]}" 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "${c#*|}" <<<"$out" ||
      { echo "FAIL: ${c%%|*}: rc $rc: $(tail -1 <<<"$out")"; fail=1; }
  done
  out=$("$vit3d" eval --model tiny --checkpoint "$work/rec" --val-data "$work/rec_imgs" --resume-fallback "$work/rec" 2>&1)
  [ $? -eq 2 ] && grep -q "vit3d eval does not take --resume-fallback" <<<"$out" &&
    echo "ok: --resume-fallback refused empty, as auto, as --save itself, to vit3d eval; a missing one named" ||
    { echo "FAIL: eval --resume-fallback: $out"; fail=1; }
  mountpoint -q "$work/disk" && umount "$work/disk"
  if mount -t tmpfs -o size=16m tmpfs "$work/disk" 2>/dev/null; then
    cp -a "$work/rec/step-00000001" "$work/rec/.tmp-step-00000002" "$work/disk/"
    # room for the start-up's probe file and the run's lock, none for the manifest
    used=$(df --output=iused "$work/disk" | tail -1)
    mount -o remount,nr_inodes=$((used + 1)) "$work/disk"
    out=$("$vit3d" "${args[@]}" --steps 3 --save "$work/disk" --resume auto 2>&1)
    rc=$?
    mount -o remount,nr_inodes=10000 "$work/disk"
    again=$("$vit3d" "${args[@]}" --steps 3 --save "$work/disk" --resume auto 2>&1)
    if [ $rc -eq 1 ] && grep -q "cannot recover the interrupted save .*tmp-step-00000002: cannot write .*manifest.txt: No space left on device. It is left in place" <<<"$out" &&
       grep -q "resumed from .*step-00000002" <<<"$again"; then
      echo "ok: a recovery that cannot write its manifest stops and leaves the save, recovered on the next try: $(grep -o 'cannot recover.*' <<<"$out" | cut -c1-140)"
    else echo "FAIL: a recovery on a full disk: rc $rc: $out"; echo "$again" | tail -3; fail=1; fi
    umount "$work/disk"
  else
    echo "skipped the recovery on a full disk: cannot mount a tmpfs here"
  fi
else
  echo "FAIL: the kill in step 2's save left no interrupted save"; tail -5 "$work/rec.log"; fail=1
fi
# A write that fails in the background (test-only fault: an I/O error in step 2's save) is
# said when the save is finished, a step later; step 3's save, the last, commits.
out=$(VT_FAULT=save-io@0:2 "$vit3d" "${args[@]}" --steps 3 --save "$work/io" --save-interval 1 2>&1)
rc=$?
if [ $rc -eq 0 ] &&
   grep -q "checkpoint of step 2 (written in the background) failed, any earlier one is intact: rank 0: writing its part of .*Input/output error" <<<"$out" &&
   [ "$(cat "$work/io/latest")" = "step-00000003" ] && [ -d "$work/io/step-00000001" ] &&
   [ ! -e "$work/io/step-00000002" ] && ! ls -A "$work/io" | grep -q tmp; then
  echo "ok: a failed background write: $(grep -o 'checkpoint of step 2 (written.*' <<<"$out" | cut -c1-160)"
else echo "FAIL: failed background write: rc $rc: $out"; ls -la "$work/io"; fail=1; fi
# A preemption whose save fails: the advice names the older checkpoint --resume auto takes, or
# that there is none (it advised --resume auto as after a save).
out=$(VT_FAULT=save-io@0:2,usr1@0:2 "$vit3d" "${args[@]}" --save "$work/io2" --save-interval 1 2>&1)
rc=$?
out2=$(VT_FAULT=save-io@0:1,usr1@0:1 "$vit3d" "${args[@]}" --save "$work/io3" 2>&1)
rc2=$?
out3=$(VT_FAULT=save-io@0:3,usr1@0:3 "$vit3d" "${args[@]}" --save "$work/io4" --save-interval 10 \
       --resume "$work/io2/step-00000001" 2>&1)  # (started from a checkpoint outside --save)
if [ $rc -eq 1 ] && [ $rc2 -eq 1 ] &&
   grep -q "at step 2: the checkpoint FAILED (see above); exiting with 1. --resume auto continues from the newest complete checkpoint in --save" <<<"$out" &&
   grep -q "at step 1: the checkpoint FAILED (see above); exiting with 1. Nothing was saved to resume from: run it again." <<<"$out2" &&
   grep -q "at step 3: the checkpoint FAILED (see above); exiting with 1. Nothing of this run was saved: go on from where it started, with --resume auto --resume-fallback .*io2/step-00000001" <<<"$out3"; then
  echo "ok: a preemption whose save failed says what --resume auto would take"
else echo "FAIL: a preemption whose save failed: rc $rc $out / rc $rc2 $out2 / $out3"; fail=1; fi
# Output paths that are not regular files (a pipe, a directory; /dev/null is one too) are
# refused before training, and vit3d export refuses them, instead of renaming a new file over
# them; the pipe and the directory stay as they were.
mkfifo "$work/pipe" && mkdir "$work/adir"
out=$("$vit3d" "${args[@]}" --steps 1 --final-weights "$work/pipe" 2>&1)
rc=$?
out2=$("$vit3d" "${args[@]}" --steps 1 --model-ema 0.9 --final-ema "$work/adir" 2>&1)
rc2=$?
out3=$("$vit3d" export --checkpoint "$work/ck/$(cat "$work/ck/latest")" --out "$work/pipe" 2>&1)
rc3=$?
if [ $rc -eq 2 ] && grep -q "final-weights .*pipe is a pipe, not a file" <<<"$out" &&
   [ $rc2 -eq 2 ] && grep -q "final-ema .*adir is a directory, not a file" <<<"$out2" &&
   [ $rc3 -ne 0 ] && grep -q "pipe is a pipe, not a file" <<<"$out3" &&
   [ -p "$work/pipe" ] && [ -d "$work/adir" ]; then
  echo "ok: outputs that are not files refused: $(grep -o 'final-weights .*' <<<"$out")"
else echo "FAIL: non-file outputs: rc $rc $rc2 $rc3: $out $out2 $out3"; fail=1; fi

# Whose checkpoints, and which: a run that does not resume is refused a --save holding
# checkpoints (it would replace and rotate them away), and so is a second run while another
# trains there (rank 0's lock); --resume auto takes the newest complete step-N even where
# `latest` names an older one (a save whose `latest` update failed); a seed of 2^63 or more
# resumes; where every checkpoint is damaged --resume auto is refused instead of starting over
# (whose first save would retire them); a rollback sets the old line's checkpoint of the step it
# saves aside, as those past it, instead of deleting it.
own=(train --model tiny --steps 6 --global-batch-size 8 --micro-batch-size 8 --threads 1
     --save-interval 2)
"$vit3d" "${own[@]}" --save "$work/own" --run-steps 4 > "$work/own1.log" 2>&1 &&
  grep -q "stopped after step 4 of 6 (--run-steps 4): continue with --resume auto" "$work/own1.log" ||
  { echo "FAIL: the first run into own (--run-steps 4)"; tail -3 "$work/own1.log"; fail=1; }
out=$("$vit3d" "${own[@]}" --save "$work/own" 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "holds checkpoints of an earlier run (the newest: step-00000004) and this run does not resume" <<<"$out" &&
   [ -d "$work/own/step-00000002" ]; then
  echo "ok: a fresh run into a --save with checkpoints refused"
else echo "FAIL: a fresh run into a used --save: rc $rc: $out"; fail=1; fi
# (the first run holds the folder for 10 s more after its last commit, its save hook's: a second
# run that starts once the first logs a step finds it there however loaded the machine is)
VT_FAULT=slow@0:1-6 "$vit3d" "${own[@]}" --save "$work/own" --resume auto --save-hook 'sleep 10' \
  > "$work/slow.log" 2>&1 &
slow=$!
for _ in $(seq 600); do grep -q "^step " "$work/slow.log" 2>/dev/null && break; sleep 0.1; done
out=$("$vit3d" "${own[@]}" --save "$work/own" --resume auto 2>&1)
rc=$?
wait $slow; rc_slow=$?
if [ $rc -eq 2 ] && grep -q "another vit3d run (host .*, pid $slow, since .*) is training with --save" <<<"$out" &&
   [ $rc_slow -eq 0 ]; then
  echo "ok: a second run in a --save another trains in refused: $(grep -o 'another vit3d run ([^)]*)' <<<"$out")"
else echo "FAIL: two runs in one --save: rc $rc (the first: $rc_slow): $out"; fail=1; fi
echo step-00000004 > "$work/own/latest"
out=$("$vit3d" "${own[@]}" --steps 8 --resume-override 1 --save "$work/own" --resume auto 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "latest names step-00000004, but step-00000006 is newer and complete: taking it" <<<"$out" &&
   grep -q "resumed from .*step-00000006" <<<"$out"; then
  echo "ok: --resume auto takes the newest complete checkpoint over a stale latest"
else echo "FAIL: a stale latest: rc $rc: $out"; fail=1; fi
"$vit3d" "${own[@]}" --seed 9223372036854775808 --save "$work/seed" --run-steps 2 > /dev/null 2>&1
out=$("$vit3d" "${own[@]}" --seed 9223372036854775808 --save "$work/seed" --resume auto 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "resumed from .*step-00000002" <<<"$out"; then
  echo "ok: a seed of 2^63 resumes"
else echo "FAIL: a seed of 2^63: rc $rc: $out"; fail=1; fi
for d in "$work"/seed/step-*; do echo "garbage" >> "$d/manifest.txt"; done  # (2, 4 and 6)
out=$("$vit3d" "${own[@]}" --seed 9223372036854775808 --save "$work/seed" --resume auto 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "none of the 3 checkpoints in .* can be resumed" <<<"$out" &&
   [ -d "$work/seed/step-00000002" ]; then
  echo "ok: every checkpoint damaged: --resume auto refused, not a fresh start"
else echo "FAIL: every checkpoint damaged: rc $rc: $out"; fail=1; fi
old20=$(md5sum < "$work/own/step-00000006/model.safetensors")
out=$("$vit3d" "${own[@]}" --steps 8 --resume-override 1 --lr 5e-4 --save "$work/own" \
      --resume "$work/own/step-00000004" --run-steps 2 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ -d "$work/own/abandoned-step-00000006" ] &&
   [ "$(md5sum < "$work/own/abandoned-step-00000006/model.safetensors")" = "$old20" ] &&
   [ -d "$work/own/abandoned-step-00000008" ] && [ -d "$work/own/step-00000006" ]; then
  echo "ok: a rollback sets the old line's checkpoint of its step aside, and those past it"
else echo "FAIL: a rollback: rc $rc: $(ls "$work/own") $out"; fail=1; fi
# Another --precision on resume is warned about (it changed the run without a word).
"$vit3d" "${own[@]}" --save "$work/prec" --run-steps 2 > /dev/null 2>&1
out=$("$vit3d" "${own[@]}" --save "$work/prec" --resume auto --precision bf16 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "prec/step-00000002 was saved by a run with --precision fp32 and this one has --precision bf16: from here the training differs" <<<"$out" &&
   "$vit3d" inspect "$work/prec" | grep -q "^resume with: .* --precision bf16"; then
  echo "ok: a resume in another --precision warns; inspect's line gives the precision"
else echo "FAIL: a resume in another --precision: rc $rc: $out"; fail=1; fi
# Damage --resume auto passes over: a lost optimizer file, and a manifest whose one value was
# changed (its seal, the last line's CRC-32, no longer matches; a step-N folder whose manifest
# is of another step likewise). The run's save of that step sets the damaged one aside as
# damaged-step-N (it was deleted without a word); inspect says which of its files verify, and
# export and eval take its weights.
"$vit3d" "${own[@]}" --save "$work/dmg" > /dev/null 2>&1
cp -a "$work/dmg" "$work/dmg2"
rm "$work/dmg/step-00000006/optim.safetensors"
sed -i 's/^adam_t 6$/adam_t 9/' "$work/dmg2/step-00000006/manifest.txt"
cp -a "$work/dmg2/step-00000004" "$work/dmg2/step-00000005"  # (no save interval ends at 5)
out=$("$vit3d" "${own[@]}" --save "$work/dmg" --resume auto 2>&1); rc=$?
out2=$("$vit3d" "${own[@]}" --save "$work/dmg2" --resume auto 2>&1); rc2=$?
out3=$("$vit3d" inspect "$work/dmg/damaged-step-00000006" 2>&1); rc3=$?
out4=$("$vit3d" export --checkpoint "$work/dmg/damaged-step-00000006" --out "$work/dmg6.safetensors" 2>&1); rc4=$?
out5=$("$vit3d" eval --checkpoint "$work/dmg/damaged-step-00000006" --val-data "$work/ev_imgs" --threads 1 2>&1); rc5=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "resumed from .*dmg/step-00000004" <<<"$out" &&
   grep -q "renamed .*dmg/step-00000006 to .*dmg/damaged-step-00000006: .*optim.safetensors" <<<"$out" &&
   grep -q "dmg2/step-00000006: the manifest's text after its manifest_crc32 line has CRC-32 .* and that line says" <<<"$out2" &&
   grep -q "dmg2/step-00000005 is damaged: its manifest says step 4" <<<"$out2" &&
   grep -q "resumed from .*dmg2/step-00000004" <<<"$out2" &&
   [ -d "$work/dmg2/damaged-step-00000006" ] &&
   [ $rc3 -eq 2 ] && grep -q "^  model.safetensors    intact (size and CRC-32 verified)" <<<"$out3" &&
   grep -q "^  optim.safetensors    cannot open" <<<"$out3" &&
   [ $rc4 -eq 0 ] && grep -q "its model.safetensors verifies (size and CRC-32), and is what is exported" <<<"$out4" &&
   "$vit3d" inspect "$work/dmg6.safetensors" | grep -q "vit3d_step: 6" &&
   [ $rc5 -eq 0 ] && grep -q "^eval: " <<<"$out5" &&
   grep -q "damaged-step-00000006 is damaged: cannot open .*optim.safetensors.*; its model.safetensors verifies (size and CRC-32), and is what is evaluated" <<<"$out5"; then
  echo "ok: a lost optimizer file and a changed manifest are passed over as damaged, set aside as damaged-step-N, their weights still exported and evaluated"
else echo "FAIL: damaged checkpoints: rc $rc $out / rc $rc2 $out2 / rc $rc3 $out3 / rc $rc4 $out4 / rc $rc5 $out5"; ls "$work/dmg" "$work/dmg2"; fail=1; fi
# A linear probe resumed with its blocks unfrozen (--resume-override 1): their Adam moments
# start at zero under the checkpoint's step count 20, whose bias correction would make their
# first steps about 6 times the rate; the optimizer starts afresh instead, said: Adam's first
# step moves every element by the rate exactly (no weight decay, no clipping), Adam's bias
# corrections counting from the restart (adam_t0 in the manifest) while its step count goes on.
lp=(train --model tiny --img-size 16 --patch-size 4 --num-classes 4 --data synthetic
    --micro-batch-size 4 --global-batch-size 4 --threads 1 --lr 1e-3 --min-lr 1e-3
    --warmup-steps 0 --weight-decay 0 --clip-grad 0 --steps 30 --save "$work/lp")
"$vit3d" "${lp[@]}" --trainable '^head\.' --save-interval 20 --run-steps 20 \
  --final-weights "$work/lp20.safetensors" > "$work/lp1.log" 2>&1
out=$("$vit3d" "${lp[@]}" --resume auto --resume-override 1 --run-steps 1 \
      --final-weights "$work/lp21.safetensors" --log-dir "$work/lp21" 2>&1)
rc=$?
step=$(cd "$(dirname "$0")" && "${VT_REF_PYTHON:-/usr/bin/python3}" -c '
import sys, numpy as np
from compare_runs import load_safetensors
a, b = load_safetensors(sys.argv[1]), load_safetensors(sys.argv[2])
k = "blocks.0.mlp.fc1.weight"
print("%.3f" % np.median(np.abs(b[k] - a[k]) / 1e-3))' "$work/lp20.safetensors" "$work/lp21.safetensors" 2>&1)
# (the step count goes on: no step counts as skipped; the restart's count is in the checkpoint)
if [ $rc -eq 0 ] && grep -q "tensors that .*step-00000020 froze train from here .*every moment starts afresh" <<<"$out" &&
   [ "$step" = "1.000" ] && grep -q '"skipped_steps": 0' "$work/lp21/metrics.jsonl" &&
   grep -q "^adam_t0 20$" "$work/lp/step-00000021/manifest.txt"; then
  echo "ok: blocks unfrozen on a resume: the optimizer starts afresh, their first step the rate ($step x)"
else echo "FAIL: blocks unfrozen on a resume: rc $rc, first step $step x the rate: $out"; fail=1; fi
exit $fail
