#!/usr/bin/env bash
# test_cli.sh VIT3D: bad flags and impossible values are refused with exit code 2 and a message
# that names the problem; --help explains every flag; @FILE arguments files.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
fail=0
refuse() {  # refuse "what the message must contain" args...
  local want=$1; shift
  local out rc
  out=$("$vit3d" "$@" 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: vit3d $* -> rc $rc, output: $out (wanted rc 2 and '$want')"; fail=1
  else
    echo "ok: vit3d $* -> $out"
  fi
}
refuse "unknown flag '--bogus'" train --bogus 1
refuse "--lr: 'abc' is not a valid number" train --lr abc
refuse "--steps: 0 is out of range" train --steps 0
refuse "an empty path (\"\", argument 2 after prepare)" prepare fashion-mnist ""
refuse "an empty path (\"\", argument 3 after prepare)" prepare shards data ""
refuse "--final-weights and --final-ema name one file, w.safetensors: the second would overwrite the first" train --model-ema 0.99 --final-weights w.safetensors --final-ema w.safetensors
quoted=$(mktemp)  # an @FILE word with quotes (no quoting there: refused, not kept literally)
printf -- '--log-dir "runs/q"\n' > "$quoted"
refuse "holds a quote: the file's words are split at white space, with no quoting" train "@$quoted"
printf -- '--steps 2\0\n--tp 2\n' > "$quoted"  # (the words after the NUL were dropped)
refuse "holds a NUL byte (at byte 9): it is not a text file of flags" train "@$quoted"
printf -- '--steps 2 @other.args\n' > "$quoted"
refuse "names another, '@other.args': an arguments file cannot include one" train "@$quoted"
rm -f "$quoted"
refuse "--comm-stats writes LOG_DIR/comm.rank<R>.json: give --log-dir DIR too" train --comm-stats 1
refuse "dp 65536 x --micro-batch-size 65536 = 4294967296 images a step, more than 16777216" plan --model tiny --dp 65536 --micro-batch-size 65536
refuse "tp 4096 x pp 4096 x dp 256 = 4294967296 ranks: at most 16777216" plan --model tiny --tp 4096 --pp 4096 --dp 256
"$vit3d" train --model tiny --steps 1 --lr 5e-6 --sched constant --threads 1 > /dev/null 2>&1 &&
  echo "ok: --lr below the default --min-lr runs under --sched constant (which has no minimum)" ||
  { echo "FAIL: --lr 5e-6 --sched constant refused"; fail=1; }
"$vit3d" inspect --help | grep -q "^usage: vit3d inspect DIR" && echo "ok: vit3d inspect --help" ||
  { echo "FAIL: vit3d inspect --help"; fail=1; }
refuse "--device: 'tpu' is not one of cpu|cuda" train --device tpu
refuse "width 1024 over 4 heads is a head dim of 256: the CUDA attention kernels take up to 128 in bf16; use more heads (--heads 8)" train --device cuda --model tiny --width 1024 --heads 4
refuse "--global-batch-size 10 is not a multiple of dp 1 x --micro-batch-size 4 = 4" train --global-batch-size 10 --micro-batch-size 4
refuse "--sequence-parallel 1 in bf16 gathers the bf16 rows two to a float: it needs an even --width (have 27)" plan --model tiny --width 27 --heads 3 --depth 2 --tp 3 --sequence-parallel 1 --device cuda
refuse "--log-dir is a training run's: an evaluation prints its figures and writes no log" eval --val-data x --init-from w.safetensors --log-dir runs/a
refuse "width 100 is not a multiple of heads 3" train --width 100
refuse "--mean 0.5,0.5: give three numbers below 1e6 in size, separated by commas" train --mean 0.5,0.5
refuse "--std 0.5,0,0.5: give three numbers below 1e6 in size and at least 1e-6" train --std 0.5,0,0.5
refuse "--std 1e-40,1,1: give three numbers below 1e6 in size and at least 1e-6" train --std 1e-40,1,1
refuse "--mean 0.5,0.5,0.5,: give three numbers" train --mean 0.5,0.5,0.5,
# Evaluation flags of a training run without --val-data do nothing: a warning says so.
out=$("$vit3d" train --model tiny --steps 1 --eval-interval 1 --eval-hflip 1 --threads 1 2>&1)
grep -q "warning: --eval-interval --eval-hflip without --val-data: this run evaluates nothing" <<<"$out" &&
  echo "ok: --eval-interval without --val-data warned about" ||
  { echo "FAIL: --eval-interval without --val-data: $out"; fail=1; }
# --threads 0 counts the CPUs this process may run on (taskset, a Slurm task's CPUs, a cpuset),
# not the host's.
if command -v taskset > /dev/null; then
  out=$(taskset -c 0 "$vit3d" train --model tiny --steps 1 2>&1)
  grep -q "device cpu, 1 CPU threads" <<<"$out" && echo "ok: --threads 0 under taskset -c 0: 1 thread" ||
    { echo "FAIL: --threads 0 under taskset -c 0: $out"; fail=1; }
fi
# The model's name is its preset's only where the flags kept the preset's shape.
for want in "custom:--depth 6" "vit-b16:--img-size 384 --num-classes 10"; do
  out=$("$vit3d" plan --model vit-b16 ${want#*:} 2>&1 | head -1)
  grep -q "^memory plan of ${want%%:*} (" <<<"$out" && echo "ok: vit-b16 ${want#*:} is ${want%%:*}" ||
    { echo "FAIL: vit-b16 ${want#*:} should be named ${want%%:*}: $out"; fail=1; }
done
# Spaces around the numbers are taken wherever they are (a leading one was, a trailing one not).
"$vit3d" plan --model tiny --mean " 0.5 , 0.5,0.5 " --std "0.2, 0.2 ,0.2" > /dev/null 2>&1 &&
  echo "ok: --mean and --std take spaces around their numbers" ||
  { echo "FAIL: --mean ' 0.5 , 0.5,0.5 ' refused"; fail=1; }
refuse "img-size 225 is not a multiple of patch-size 16" train --img-size 225
refuse "width 1152 x mlp-ratio 3.73611 is not a whole number: give the MLP's hidden width with --mlp-dim" plan --width 1152 --heads 16 --mlp-ratio 3.73611
refuse "--check-tol is --check-log's tolerance: give --check-log FILE too" train --check-tol 0.01
refuse "--color-jitter 0.4 with --aa: timm applies no colour jitter where RandAugment is on (nor does vit3d): drop --color-jitter, or --aa" train --color-jitter 0.4 --aa rand-m9 --data /tmp
# (in double, as timm's int(width * mlp_ratio): 100 x 2.01 is 200.99999999999997, which float
# arithmetic rounded to 201 and took, a model of 201 where timm's config makes 200)
refuse "width 100 x mlp-ratio 2.01 is not a whole number" plan --width 100 --heads 4 --mlp-ratio 2.01
refuse "unknown model 'vit-q'" train --model vit-q
refuse "--freeze 'blocks.(' is not a regular expression" train --model tiny --freeze 'blocks.('
refuse "--freeze '^block\\.' freezes no tensor of this model; the patterns match timm's names" train --model tiny --freeze '^block\.'
refuse "--trainable '^heads' freezes all 56 tensors of this model: nothing would train" train --model tiny --trainable '^heads'

refuse "--seed: '-1' is not a valid whole number" train --seed -1
refuse "needs a value" train --lr
refuse "unknown command 'trian'" trian
refuse "--warmup-steps 20 is longer than --steps 10" train --steps 10 --warmup-steps 20
refuse "--warmup-lr 0.01 is above --lr 0.001" train --warmup-lr 0.01 --lr 1e-3
refuse "--drop-path: 1 is out of range" train --drop-path 1
refuse "--layer-decay: 0 is out of range" train --layer-decay 0
refuse "--final-ema writes the weights' EMA: give --model-ema DECAY too" train --final-ema x.safetensors
refuse "--use-ema is for vit3d eval --checkpoint DIR" train --use-ema 1
# Files written at a run's end are checked at its start (their folders made where missing): a
# folder that cannot take them would lose them.
refuse "--final-weights /dev/null/w.safetensors: cannot make files in /dev/null (Not a directory); give a path in a writable folder" train --final-weights /dev/null/w.safetensors
refuse "--micro-batch-size must be even (have 3)" train --mixup 0.8 --micro-batch-size 3 --global-batch-size 6
refuse "--drop-path works on micro-batches of at most 4096 images (have 5000)" train --drop-path 0.1 --micro-batch-size 5000
refuse "--proj-drop: 1 is out of range" train --proj-drop 1
refuse "--model-ema-warmup warms up the weights' EMA: give --model-ema DECAY too" train --model-ema-warmup 1
refuse "--pos-embed sincos2d gives positions to the patch tokens only: add --no-embed-class 1" train --pos-embed sincos2d
refuse "--pos-embed sincos2d splits the width into 4 quarters" train --pos-embed sincos2d --no-embed-class 1 --width 66 --heads 3
refuse "--pos-embed: 'sincos' is not one of learn|sincos2d" train --pos-embed sincos
refuse "--aa 'rand-m9-w0': unknown key 'w0'" train --aa rand-m9-w0
refuse "--aa 'autoaug': only RandAugment is built" train --aa autoaug
refuse "--aa, --three-augment, --color-jitter, --simple-crop, --aug-repeats and --drop-last act on the image loader's crops and epochs; --data synthetic has none" train --aa rand-m9
refuse "--aa, --three-augment, --color-jitter, --simple-crop, --aug-repeats and --drop-last act on the image loader's crops and epochs; --data synthetic has none" train --drop-last 1
refuse "--aa, --three-augment, --color-jitter, --simple-crop, --aug-repeats and --drop-last act on the image loader's crops and epochs; --data synthetic has none" train --color-jitter 0.4
refuse "--simple-crop resizes the whole image as torchvision's Resize does: it needs --train-interpolation bilinear or bicubic" train --simple-crop 1 --data /tmp
refuse "--aa and --three-augment are two augmentation policies" train --aa rand-m9 --three-augment 1 --data /tmp
refuse "--opt: 'adam' is not one of adamw|lamb|sgd|momentum" train --opt adam
refuse "--save-hook-timeout limits the --save-hook command: give --save-hook CMD too" train --save-hook-timeout 60
refuse "--epochs, --warmup-epochs, --eval-epochs and --save-epochs count passes over a dataset; --data synthetic has no size" train --epochs 3
refuse "--sched-on epochs steps the learning rate once per pass over a dataset; --data synthetic has no size" train --sched-on epochs
refuse "--label-key '.cls': give the label member's extension without its dot" train --label-key .cls
refuse "--bce-target-thresh 0 makes binary targets for --bce-loss 1, which is off" train --bce-target-thresh 0
refuse "--aug-repeats: 0 is out of range" train --aug-repeats 0
refuse "--aa-interpolation: 'nearest' is not one of bicubic|bilinear" train --aa-interpolation nearest
refuse "vit3d plan: --tp 3 does not divide the 4 attention heads" plan --model tiny --tp 3
refuse "more than one model chunk per pipeline rank needs the interleaved or zb-v schedule" plan --model tiny --pp 2 --pp-chunks 2
refuse "the interleaved schedule needs at least 2 pipeline ranks" train --pp-schedule interleaved
refuse "the zb-v schedule needs at least 2 pipeline ranks" train --pp-schedule zb-v
refuse "--pp-pass-times 1:0:2: give auto, equal or F:B:W" plan --model tiny --pp 2 --pp-schedule zb-v --pp-pass-times 1:0:2
refuse "--pp-pass-times 1:1:0.3: only --pp-schedule zb-v builds its order" plan --model tiny --pp 2 --pp-pass-times 1:1:0.3
refuse "--pp-schedule zb-v holds exactly 2 model chunks per stage (its V): drop --pp-chunks 3" plan --model tiny --depth 8 --pp 2 --pp-schedule zb-v --pp-chunks 3
refuse "--pp-schedule zb-v splits the backward into input and weight gradients" plan --model tiny --pp 2 --pp-schedule zb-v --recompute-blocks 1
refuse "--pp 4 x --pp-chunks 2 = 8 virtual pipeline stages but only 4 blocks" plan --model tiny --pp 4 --pp-schedule zb-v
# The plan says what a schedule's activations buy: pp 4, m 16 (global 128 / 8): 3/35 against 3/19.
out=$("$vit3d" plan --model tiny --depth 8 --pp 4 --micro-batch-size 8 --global-batch-size 128 \
      --pp-schedule interleaved 2>&1)
if grep -q "pipeline: interleaved schedule, ideal idle fraction (p-1)/(v\*m+p-1) = 0.086 .*(1f1b and gpipe: 0.158)" <<<"$out"; then
  echo "ok: vit3d plan --pp-schedule interleaved: $(grep '^pipeline:' <<<"$out")"
else echo "FAIL: vit3d plan's pipeline line: $out"; fail=1; fi
# The host memory of a checkpoint save: stage 1 of ViT-B/16 on tp 2 x pp 2 holds 84.1 MiB of
# weights per rank; each of dp 2 ranks snapshots half of them and of the two moments.
out=$("$vit3d" plan --model vit-b16 --tp 2 --pp 2 --dp 2 --global-batch-size 64 --micro-batch-size 8 2>&1)
if grep -q "^host memory at each checkpoint save (--save): at most 126.2 MiB per rank (stage 1;" <<<"$out"; then
  echo "ok: vit3d plan's save line: $(grep '^host memory at each checkpoint' <<<"$out" | cut -c1-100)"
else echo "FAIL: vit3d plan's save line: $out"; fail=1; fi
# SGD keeps one state buffer: weights and momentum, two thirds of that.
out=$("$vit3d" plan --model vit-b16 --tp 2 --pp 2 --dp 2 --global-batch-size 64 --micro-batch-size 8 --opt sgd 2>&1)
if grep -q "^host memory at each checkpoint save (--save): at most 84.1 MiB per rank (stage 1; a rank's 1/dp slice of its stage's weights and momentum" <<<"$out"; then
  echo "ok: vit3d plan's save line with SGD: 84.1 MiB"
else echo "FAIL: vit3d plan's save line with SGD: $out"; fail=1; fi
# ZeRO-1 with a frozen prefix (a linear probe): each DP rank writes a 1/dp slice of the prefix's
# weights and EMA beside its shard (DP rank 0 wrote the whole prefix: 656.1 MiB)
out=$("$vit3d" plan --model vit-b16 --dp 8 --zero 1 --model-ema 0.99 --trainable '^head\.' \
      --global-batch-size 16 --micro-batch-size 2 2>&1)
if grep -q "^host memory at each checkpoint save (--save): at most 83.3 MiB per rank (stage 0; a rank's 1/dp slice of the frozen prefix and ZeRO-1 shard of the rest" <<<"$out"; then
  echo "ok: vit3d plan's save line under ZeRO-1 with a frozen prefix: 83.3 MiB"
else echo "FAIL: vit3d plan's save line under ZeRO-1 with a frozen prefix: $out"; fail=1; fi
# A linear probe of ViT-B/16 on tp 2 x pp 2 x dp 2 holds the head's gradients alone (the
# totals 280.2 and 258.0 MiB); --recompute-blocks of frozen blocks recomputes nothing and holds
# no buffer for it (it held 9.2 MiB more).
for r in 0 6; do
  out=$("$vit3d" plan --model vit-b16 --tp 2 --pp 2 --dp 2 --precision bf16 --micro-batch-size 16 \
        --trainable '^head\.' --recompute-blocks $r 2>&1)
  if grep -qE "^ +0 +0-5 +1 +0 +84.0 +0.0 +0.0 +196.2 +280.2$" <<<"$out" &&
     grep -qE "^ +1 +6-11 +1 +0 +84.1 +2.9 +6.6 +164.4 +258.0$" <<<"$out"; then
    echo "ok: vit3d plan of a linear probe, --recompute-blocks $r: 280.2 and 258.0 MiB"
  else echo "FAIL: vit3d plan of a linear probe, --recompute-blocks $r: $out"; fail=1; fi
done
# ZB-H1: 3/51 against 3/19; it refuses what it cannot run well or at all.
out=$("$vit3d" plan --model tiny --depth 8 --pp 4 --micro-batch-size 8 --global-batch-size 128 \
      --pp-schedule zb-h1 2>&1)
if grep -q "pipeline: zb-h1 schedule, ideal idle fraction (p-1)/(3m+p-1) = 0.059 .*(1f1b and gpipe: 0.158)" <<<"$out" &&
   grep -qE "^ +3 +6-7 +4\+4w " <<<"$out"; then
  echo "ok: vit3d plan --pp-schedule zb-h1: $(grep '^pipeline:' <<<"$out"); stage 3 keeps 4 units and 4 weight-pass input sets"
else echo "FAIL: vit3d plan's zb-h1 lines: $out"; fail=1; fi
# The host memory of the input batches: ViT-B's 128 images of 224 px are 73.5 MiB; the training
# loader keeps --prefetch 2 + 1 of them, the evaluation loader as many and one more mirrored;
# with the TP decode split a rank holds only its share.
out=$("$vit3d" plan --model vit-b16 --micro-batch-size 128 --global-batch-size 128 --device cuda \
      --data train_dir --val-data val_dir --eval-hflip 1 2>&1)
if grep -q "^host memory for input batches: stage 0's ranks 220.5 MiB (3 micro-batches of 128 images: --prefetch + 1, pinned), 294.0 MiB more while evaluating" <<<"$out"; then
  echo "ok: vit3d plan's host input batches: $(grep '^host memory' <<<"$out")"
else echo "FAIL: vit3d plan's host memory line: $out"; fail=1; fi
# A checkpoint on disk: ViT-B/16's weights (330.2 MiB), Adam's two moments and the EMA; a
# linear probe (--trainable '^head\.') with LARS keeps the head's momentum alone.
out=$("$vit3d" plan --model vit-b16 --micro-batch-size 32 --global-batch-size 256 --model-ema 0.9999 2>&1)
out2=$("$vit3d" plan --model vit-b16 --micro-batch-size 32 --global-batch-size 256 --opt lars \
       --trainable '^head\.' 2>&1)
if grep -q "^disk per checkpoint (--save): 1321.0 MiB (weights 330.2, optimizer state 660.5, EMA 330.2)" <<<"$out" &&
   grep -q "^disk per checkpoint (--save): 333.2 MiB (weights 330.2, optimizer state 2.9 without the frozen layers', EMA 0.0)" <<<"$out2"; then
  echo "ok: vit3d plan's disk per checkpoint: 1321.0 MiB with Adam and the EMA, 333.2 MiB for a LARS linear probe"
else echo "FAIL: vit3d plan's disk line: $(grep '^disk' <<<"$out") / $(grep '^disk' <<<"$out2")"; fail=1; fi
# A save's host buffers leave the frozen layers' momentum out as the file does: the probe's
# rank holds its weights and the head's momentum, 333.2 MiB (660.4 with the zeros).
if grep -q "^host memory at each checkpoint save (--save): at most 333.2 MiB per rank (stage 0;" <<<"$out2"; then
  echo "ok: vit3d plan's save line for a LARS linear probe: 333.2 MiB"
else echo "FAIL: vit3d plan's save line for a LARS linear probe: $(grep '^host memory at each' <<<"$out2")"; fail=1; fi
# With TP 4 (and --decode-split 1, the default) each first-stage rank holds its quarter.
out=$("$vit3d" plan --model vit-b16 --micro-batch-size 128 --global-batch-size 128 --device cuda \
      --data train_dir --val-data val_dir --eval-hflip 1 --tp 4 2>&1)
if grep -q "^host memory for input batches: stage 0's ranks 55.1 MiB (3 micro-batches of 32 (each TP rank's share of 128) images: --prefetch + 1, pinned), 73.5 MiB more while evaluating" <<<"$out"; then
  echo "ok: vit3d plan's host input batches with TP 4: $(grep '^host memory' <<<"$out")"
else echo "FAIL: vit3d plan's host memory line with TP 4: $out"; fail=1; fi
# vit3d plan --gpus N: every mesh of N GPUs. ViT-B/16 (86,567,656 parameters: 330.2 MiB) fits
# on every GPU as pure DP, whose ring all-reduce puts 2 x 15/16 of its gradients on the wire
# (619.2 MiB); TP 8 does not divide its 12 heads.
out=$("$vit3d" plan --model vit-b16 --gpus 16 --global-batch-size 4096 --micro-batch-size 64 \
      --precision bf16 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -qE "^ +1 +1 +16 +[0-9.]+ GiB +yes +0.000 +0.0 +0.0 +619.2$" <<<"$out" &&
   grep -q "^   8   1    2  not possible: --tp 8 does not divide the 12 attention heads" <<<"$out" &&
   grep -q "^suggested: --tp 1 --pp 1 --dp 16 " <<<"$out"; then
  echo "ok: vit3d plan --gpus 16 (ViT-B/16): pure DP, 619.2 MiB of gradients on the wire per GPU; tp 8 not possible"
else echo "FAIL: vit3d plan --gpus 16: rc $rc: $out"; fail=1; fi
# ViT-H/14 on 8 GPUs of 18 GiB: no DP-only or TP-2 mesh fits; TP 4 does and is suggested over
# pipelines of as many GPUs per copy. 1 GiB: none fits, exit 1 with what to change.
out=$("$vit3d" plan --model vit-h14 --gpus 8 --global-batch-size 4096 --micro-batch-size 64 \
      --precision bf16 --gpu-mem 18 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -qE "^ +1 +1 +8 +[0-9.]+ GiB +no " <<<"$out" &&
   grep -qE "^ +4 +1 +2 +[0-9.]+ GiB +yes " <<<"$out" &&
   grep -q "^suggested: --tp 4 --pp 1 --dp 2 " <<<"$out"; then
  echo "ok: vit3d plan --gpus 8 --gpu-mem 18 (ViT-H/14): $(grep '^suggested' <<<"$out" | cut -c1-40)"
else echo "FAIL: vit3d plan --gpus 8 --gpu-mem 18: rc $rc: $out"; fail=1; fi
out=$("$vit3d" plan --model vit-b16 --gpus 4 --global-batch-size 4096 --micro-batch-size 64 --gpu-mem 1 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "^no mesh fits: try --recompute-blocks, --zero 1" <<<"$out"; then
  echo "ok: vit3d plan --gpus 4 --gpu-mem 1: no mesh fits (exit 1)"
else echo "FAIL: vit3d plan --gpu-mem 1: rc $rc: $out"; fail=1; fi
# GPUs' default precision (bf16) without --precision; the remedies the flags leave open (not
# --zero 1 once given, nor --recompute-blocks under zb-h1); a batch no mesh can split is said
# as such; a search over 1024 GPUs stays quick (a pipeline deeper than the model is refused
# before its schedule's check).
out=$("$vit3d" plan --model vit-b16 --gpus 4 --global-batch-size 4096 --micro-batch-size 64 \
      --gpu-mem 1 --zero 1 --pp-schedule zb-h1 2>&1)
out2=$("$vit3d" plan --model tiny --gpus 4 --global-batch-size 4 --micro-batch-size 8 2>&1)
t0=$SECONDS
out3=$("$vit3d" plan --model tiny --gpus 1024 --global-batch-size 8192 --micro-batch-size 8 2>&1)
if grep -q "^model vit-b16 .*), bf16," <<<"$out" &&
   grep -q "^no mesh fits: try a smaller --micro-batch-size, more GPUs" <<<"$out" &&
   grep -q "^no mesh of 4 GPUs is possible with these flags: each line says why" <<<"$out2" &&
   grep -q "^suggested: --tp 1 --pp 1 --dp 1024" <<<"$out3" && [ $((SECONDS - t0)) -lt 20 ]; then
  echo "ok: vit3d plan --gpus: bf16 by default, remedies left open, no possible mesh said, 1024 GPUs in $((SECONDS - t0)) s"
else echo "FAIL: vit3d plan --gpus defaults and remedies: $out $out2"; fail=1; fi
# A TP group is consecutive ranks: on 8-GPU nodes tp 6 would span two nodes (12 heads allow
# it; it was suggested), so 24 GPUs take tp 4 and a pipeline.
out=$("$vit3d" plan --model vit-h14 --width 1536 --heads 12 --depth 24 --gpus 24 --gpu-mem 5 \
      --global-batch-size 384 --micro-batch-size 16 2>&1)
grep -q "^suggested: --tp 4 --pp 2 --dp 3" <<<"$out" &&
  echo "ok: vit3d plan --gpus keeps TP inside a node (tp divides --node-gpus)" ||
  { echo "FAIL: vit3d plan --gpus 24 of 12 heads: $(tail -1 <<<"$out")"; fail=1; }
refuse "vit3d plan: --gpus N tries every --tp, --pp and --dp: drop --tp" plan --gpus 8 --global-batch-size 64 --tp 2
refuse "vit3d plan: --gpus N compares meshes at one global batch: give --global-batch-size" plan --gpus 8
refuse "vit3d plan: --gpu-mem and --node-gpus size the search of --gpus N: give --gpus" plan --gpu-mem 40
refuse "vit3d train: --gpus, --gpu-mem and --node-gpus are for vit3d plan" train --gpus 8
refuse "it does not go with --recompute-blocks" train --pp-schedule zb-h1 --recompute-blocks 2
refuse "arguments file /nonexistent/recipe.args: No such file or directory" train @/nonexistent/recipe.args
# An arguments file: its words are flags (comments and line breaks aside); later flags win.
args=$(mktemp)
printf -- '# tiny recipe\n--model tiny --steps 2   # overridden below\n--micro-batch-size 2\n--global-batch-size 2 --log-interval 1\n' > "$args"
out=$("$vit3d" train @"$args" --steps 3 --threads 1 2>&1)
if grep -q "^step     3/3" <<<"$out" && grep -q "model tiny" <<<"$out"; then
  echo "ok: vit3d train @FILE --steps 3: the file's flags, the later --steps"
else
  echo "FAIL: vit3d train @FILE: $out"; fail=1
fi
rm -f "$args"
# The recipes of launch/recipes parse and train (their model, data and length overridden; a
# small image folder, as their RandAugment needs the image loader).
imgs=$(mktemp -d)
trap 'rm -rf "$imgs"' EXIT
${VT_REF_PYTHON:-/usr/bin/python3} "$(dirname "$0")/make_images.py" "$imgs" 4 4 40 ||
  { echo "FAIL: tests/make_images.py"; fail=1; }
for recipe in "$(dirname "$0")"/../launch/recipes/*.args; do
  out=$("$vit3d" train @"$recipe" --model tiny --num-classes 4 --img-size 32 --patch-size 8 \
        --data "$imgs" --micro-batch-size 4 --global-batch-size 8 --steps 2 --warmup-steps 1 \
        --log-interval 1 --threads 1 --loader-threads 1 2>&1)
  if grep -q "^step     2/2" <<<"$out"; then echo "ok: recipe $(basename "$recipe") trains"
  else echo "FAIL: recipe $recipe: $out"; fail=1; fi
  # vit3d plan takes a recipe as it stands (its data flags do not matter to a plan)
  if out=$("$vit3d" plan @"$recipe" --tp 2 --pp 2 --dp 2 --micro-batch-size 8 2>&1) &&
     grep -q "^largest: stage" <<<"$out"; then echo "ok: vit3d plan @$(basename "$recipe")"
  else echo "FAIL: vit3d plan @$recipe: $out"; fail=1; fi
done
# Loader threads beyond what the micro-batches in flight hold are said at start-up (they wait).
out=$("$vit3d" train --model tiny --num-classes 4 --img-size 32 --patch-size 8 --data "$imgs" \
      --micro-batch-size 2 --global-batch-size 2 --steps 1 --threads 1 --loader-threads 8 \
      --prefetch 1 2>&1)
out2=$("$vit3d" train --model tiny --num-classes 4 --img-size 32 --patch-size 8 --data "$imgs" \
       --micro-batch-size 4 --global-batch-size 4 --steps 1 --threads 1 --loader-threads 8 \
       --prefetch 1 2>&1)
if grep -q "warning: 8 loader threads (--loader-threads, or --threads where not given): at most 4 decode at once here (--prefetch 1 + 1 micro-batches of 2 images this rank decodes); the others wait: raise --prefetch to use them" <<<"$out" &&
   ! grep -q "decode at once" <<<"$out2"; then echo "ok: idle loader threads said"
else echo "FAIL: idle loader threads: $out / $out2"; fail=1; fi
# --epochs and --warmup-epochs become steps once the training set (16 images) is open; of a
# length in epochs and one in steps the later flag counts (a recipe's epochs, then --steps).
small=(train --model tiny --num-classes 4 --img-size 32 --patch-size 8 --data "$imgs"
       --micro-batch-size 8 --global-batch-size 8 --threads 1 --loader-threads 1 --log-interval 1)
out=$("$vit3d" "${small[@]}" --epochs 1.5 --warmup-epochs 0.5 --eval-epochs 0.5 --val-data "$imgs" 2>&1)
if grep -q "1.5 epochs of 16 images at 8 per step: 3 steps, 1 of warmup; evaluation every 1," <<<"$out" &&
   grep -q "^step     3/3" <<<"$out" && [ "$(grep -c "^eval after step" <<<"$out")" = 3 ] &&
   "$vit3d" "${small[@]}" --epochs 1.5 --steps 2 2>&1 | grep -q "^step     2/2"; then
  echo "ok: --epochs 1.5 --warmup-epochs 0.5 --eval-epochs 0.5 of 16 images at 8 per step: 3 steps, 1 of warmup, 3 evaluations; --epochs then --steps 2: 2 steps"
else echo "FAIL: --epochs: $out"; fail=1; fi
# (per epoch, warmup epochs are whole: epochs 0 and 1 of a 1.5-epoch warmup, 4 steps of 2 a
# epoch, not round(1.5 x 2) = 3)
out=$("$vit3d" "${small[@]}" --epochs 7 --warmup-epochs 1.5 --sched-on epochs --run-steps 1 2>&1)
grep -q "7 epochs of 16 images at 8 per step: 14 steps, 4 of warmup;" <<<"$out" &&
  echo "ok: --sched-on epochs counts whole warmup epochs' steps" ||
  { echo "FAIL: --sched-on epochs' warmup steps: $out"; fail=1; }
help=$("$vit3d" train --help)
for flag in --model --img-size --patch-size --width --depth --heads --mlp-ratio --mlp-dim --num-classes --global-pool \
            --data --label-key --micro-batch-size --global-batch-size --steps --epochs --eval-epochs --save-epochs --lr --min-lr --warmup-steps --warmup-epochs --warmup-lr --sched-on --sched \
            --opt --momentum --opt-eps --weight-decay --eval-crop-mode --clip-grad --label-smoothing --bce-target-thresh --drop-path --proj-drop --attn-drop --pos-drop --drop --pos-embed --pre-logits --pre-norm --norm-eps --weight-init --save-hook --save-hook-timeout --gpus --gpu-mem --node-gpus --layer-decay --freeze --trainable --model-ema --model-ema-warmup --final-ema --mixup --cutmix --mix-prob --mix-switch-prob --reprob --remode --aa --simple-crop --three-augment --color-jitter --aa-interpolation --aug-repeats --recompute-blocks --seed --device --threads --log-dir; do
  grep -qF -- "$flag" <<<"$help" || { echo "FAIL: train --help does not explain $flag"; fail=1; }
done
"$vit3d" --help | grep -q "vit3d train" || { echo "FAIL: vit3d --help"; fail=1; }
# Validation subsets: a list without the last class (numbered: its labels as they are), and
# class folders named by numbers without a middle one (named: labelled by name).
sub=$(mktemp -d)
classes=$(ls "$imgs")
k=0
for c in $classes; do
  mkdir -p "$sub/num/$k" && cp "$imgs/$c"/* "$sub/num/$k/"
  for f in "$imgs/$c"/*; do printf '%s\t%d\n' "$f" $k >> "$sub/train.txt"; done
  [ $k -lt 3 ] && for f in "$imgs/$c"/*; do printf '%s\t%d\n' "$f" $k >> "$sub/val.txt"; done
  [ $k -ne 1 ] && mkdir -p "$sub/valnum/$k" && cp "$imgs/$c"/* "$sub/valnum/$k/"
  k=$((k + 1))
done
for pair in "$sub/train.txt $sub/val.txt" "$sub/num $sub/valnum"; do
  set -- $pair
  out=$("$vit3d" "${small[@]}" --steps 1 --data "$1" --val-data "$2" 2>&1)
  if grep -q "^eval after step 1: .*(12 images)" <<<"$out"; then
    echo "ok: a validation subset of $(basename "$2") (3 of 4 classes) evaluates"
  else echo "FAIL: the validation subset $2: $out"; fail=1; fi
done
grep -q "labelled by name" <<<"$out" || { echo "FAIL: numbered class folders not matched by name"; fail=1; }
# A list (numbered classes 0-11) with validation folders named 0-11 (sorted as text: 10 comes
# third): each folder takes the label its name is, so it scores as the list itself does.
${VT_REF_PYTHON:-/usr/bin/python3} "$(dirname "$0")/make_images.py" "$sub/src12" 12 2 16 > /dev/null
k=0
for c in $(ls "$sub/src12"); do
  mkdir -p "$sub/val12/$k" && cp "$sub/src12/$c"/* "$sub/val12/$k/"
  for f in "$sub/src12/$c"/*; do printf '%s\t%d\n' "$f" $k >> "$sub/train12.txt"; done
  k=$((k + 1))
done
n12=(train --model tiny --img-size 16 --patch-size 8 --num-classes 12 --micro-batch-size 4
     --global-batch-size 4 --steps 6 --lr 3e-3 --threads 1 --loader-threads 1 --eval-interval 6
     --data "$sub/train12.txt")
by_list=$("$vit3d" "${n12[@]}" --val-data "$sub/train12.txt" 2>&1 | grep "^eval after")
by_folders=$("$vit3d" "${n12[@]}" --val-data "$sub/val12" 2>&1 | grep "^eval after")
if [ -n "$by_list" ] && [ "$by_list" = "$by_folders" ]; then
  echo "ok: validation folders named 0-11 beside a numbered list score as the list: $by_list"
else echo "FAIL: folders named by numbers: '$by_folders', the list: '$by_list'"; fail=1; fi
rm -rf "$sub"
exit $fail
