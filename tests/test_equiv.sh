#!/usr/bin/env bash
# test_equiv.sh VIT3D: every 8-rank layout (tp x pp x dp) computes the same training as one rank:
# the loss of each of 5 steps and every parameter after them (tests/compare_runs.py states the
# tolerances). Also 2x2x2 with ZeRO-1, with the GPipe schedule, three layouts with the interleaved
# schedule (one with drop path, one in bf16), ZB-H1 bit for bit as 1F1B (seven layouts, one more in
# bf16 as one rank), ZB-V bit for bit as 1F1B (five layouts, one more in bf16 as one rank), with
# the tp-pp-dp mesh order and
# with sequence parallelism (and tp 8, where the 34 token rows need padding); four layouts
# with drop path against one rank with drop path, two with Mixup, CutMix and random erasing, three
# with the mean-pooled head (one sequence parallel), three with dropout (one sequence parallel,
# ZB-H1 and recompute too), three each with the gap and MAP heads (one
# sequence parallel; MAP also under ZB-H1), three with LayerScale, register tokens,
# no_embed_class, QK-norm without qkv bias and drop path (one sequence parallel), three with
# parallel blocks (one sequence parallel, and ZB-H1 bit for bit as 1F1B), two with RandAugment and repeated
# augmentation on an image folder, two with 3-Augment and the simple random crop, the first stage's TP ranks decoding their
# shares of the images bit for bit as each decoding all (two cases), two with ZeRO-1 and
# layer-wise lr decay, six with frozen tensors (one ZeRO-1 with sequence parallelism, one
# ZB-H1, three on four stages, the first wholly frozen; the frozen tensors' bytes kept), three with LAMB (one ZeRO-1 with sequence parallelism), two whose EMA
# (sharded under ZeRO-1) must be one rank's; activation recompute (all blocks or some, 1 rank, 2x2x2,
# 8x1x1 sequence parallel, bf16) bit for bit against the same run without. Then bf16
# (--precision bf16, the CPU twin of the CUDA bf16 GEMMs): a pipeline computes every sample as
# one rank does, so pp 8 must log the very same losses and gradient norms; the 2x2x2 mesh sums
# the row-parallel GEMMs in another order, and an fp32 difference next to a bf16 rounding
# boundary rounds the other way (measured: step-1 loss 1.5e-6, later steps <= 1.7e-4 once AdamW
# has turned small gradient differences into update differences), so it gets bf16 bands (pp 4
# interleaved, like pp 8, must log the very numbers); with sequence parallelism (its gathers
# move bf16 rows) it logs the step-1 loss of 2x2x2 without and stays within 1e-5 after.
# The model has 8 heads and 8 blocks so that tp 8 and pp 8 are possible.
set -uo pipefail
vit3d=$1
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
py=${VT_REF_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: $py cannot import numpy"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model tiny --heads 8 --depth 8 --width 64 --steps 5 --global-batch-size 16
        --micro-batch-size 2 --lr 1e-3 --warmup-steps 1 --seed 11 --threads 1 --log-interval 5)
run() {  # run NAME NP flags...
  local name=$1 np=$2; shift 2
  if ! timeout 300 mpirun -np "$np" --oversubscribe "$vit3d" "${common[@]}" \
      --log-dir "$work/$name" --final-weights "$work/$name/weights.safetensors" "$@" \
      > "$work/$name.log" 2>&1; then
    echo "FAIL: run $name ($*) did not complete:"; tail -20 "$work/$name.log"; return 1
  fi
}
run base 1 || exit 1
fail=0
check() {  # check NAME tp pp dp [flags...]
  local name=$1 tp=$2 pp=$3 dp=$4; shift 4
  run "$name" 8 --tp "$tp" --pp "$pp" --dp "$dp" "$@" &&
    "$py" "$here/compare_runs.py" "$work/base" "$work/$name" "$name $tp x $pp x $dp $*" || fail=1
}
check dp8 1 1 8
check mix222 2 2 2
check tp2pp4 2 4 1
check tp4pp2 4 2 1
check tp8 8 1 1
check pp8 1 8 1
check pp2dp4 1 2 4
check tp2dp4 2 1 4
check zero 2 2 2 --zero 1
# plan_matches NAME LABEL FLAGS...: vit3d plan, from one process, sizes every stage as the ranks
# of run NAME (made with FLAGS) printed it: parameters, gradients, optimizer, activations and
# total (MiB).
plan_matches() {
  local name=$1 label=$2
  shift 2
  "$vit3d" plan "${common[@]:1}" "$@" > "$work/plan_$name.txt" 2>&1
  "$py" - "$work/plan_$name.txt" "$work/$name.log" "$label" <<'PY' || fail=1
import re, sys
# a plan row: stage, blocks, in flight, recomputed, parameters, gradients, optimizer, activations,
# total; a rank's line: the same blocks and amounts in MiB
rows = [l.split() for l in open(sys.argv[1]) if re.match(r"\s+\d+\s+\d+-", l)]
plan = {int(r[0]): [r[1]] + [float(x) for x in (r[4], r[5], r[6], r[7], r[8])] for r in rows}
ranks = re.findall(r"pp (\d+) dp \d+\] memory plan \(\w+\): blocks ([0-9,-]*[0-9]).*parameters "
                   r"([0-9.]+) MiB, gradients ([0-9.]+) MiB, optimizer ([0-9.]+) MiB, activations "
                   r"([0-9.]+) MiB .*total ([0-9.]+) MiB", open(sys.argv[2]).read())
assert len(plan) == 2 and len(ranks) == 8, (plan, ranks)
assert all(plan[int(r[0])] == [r[1]] + [float(x) for x in r[2:]] for r in ranks), (plan, ranks)
print(f"vit3d plan of {sys.argv[3]}: blocks, parameters, gradients, optimizer, activations and "
      f"total per stage {plan} (MiB), as its 8 ranks printed them")
PY
}
plan_matches zero "2x2x2 ZeRO-1" --tp 2 --pp 2 --dp 2 --zero 1
check gpipe 2 2 2 --pp-schedule gpipe
# The interleaved schedule: each stage holds 2 (or 4) model chunks of the 8 blocks, activations go
# round the ring of stages once per chunk; every chunk still sums its micro-batches in order.
check il222 2 2 2 --pp-schedule interleaved
check il_tp2pp4 2 4 1 --pp-schedule interleaved
check il_pp2dp4 1 2 4 --pp-schedule interleaved --pp-chunks 4
plan_matches il222 "2x2x2 interleaved (blocks 0-1,4-5 and 2-3,6-7)" --tp 2 --pp 2 --dp 2 \
  --pp-schedule interleaved
check order 2 2 2 --mesh-order tp-pp-dp
check zero_dp8 1 1 8 --zero 1
check seqpar 2 2 2 --sequence-parallel 1
check seqpar_tp8 8 1 1 --sequence-parallel 1  # 34 rows over 8 ranks: 6 padding rows
# Drop path keys each sample's masks by its stream position and global block, so every layout
# drops the same branches as one rank: a pipeline splits the blocks, DP and the micro-batches
# split the samples, TP with sequence parallelism splits a sample's rows (and pads them).
if run base_drop 1 --drop-path 0.3; then
  "$py" - "$work/base/metrics.jsonl" "$work/base_drop/metrics.jsonl" <<'PY' || fail=1
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert a[0] != b[0] and a[-1] != b[-1], "--drop-path 0.3 left the losses unchanged"
print(f"drop path 0.3 changes the run: step-5 loss {b[-1]:.6f} (without: {a[-1]:.6f})")
PY
  for layout in "drop_mix222 2 2 2" "drop_pp2dp4 1 2 4" "drop_seqpar_tp8 8 1 1 --sequence-parallel 1" \
                "drop_il_pp4dp2 1 4 2 --pp-schedule interleaved"; do
    set -- $layout
    name=$1 tp=$2 pp=$3 dp=$4; shift 4
    run "$name" 8 --tp "$tp" --pp "$pp" --dp "$dp" --drop-path 0.3 "$@" &&
      "$py" "$here/compare_runs.py" "$work/base_drop" "$work/$name" \
        "$name $tp x $pp x $dp --drop-path 0.3 $*" || fail=1
  done
else
  fail=1
fi
# Mixup and CutMix mix the images at stream positions 2k and 2k+1, keyed by k: the first
# pipeline stage mixes the pixels and the last the targets, each on its own; DP ranks and
# micro-batches (of 2 here: one pair each) split the stream between pairs. Random erasing
# before them is keyed by position too.
# variant PLAIN NAME WHAT FLAGS...: one rank with FLAGS (run NAME) must log another last loss
# than run PLAIN (WHAT changes the run), then 2x2x2 and 1x1x8 with FLAGS must compute it.
variant() {
  local plain=$1 name=$2 what=$3
  shift 3
  run "$name" 1 "$@" || { fail=1; return; }
  "$py" - "$work/$plain/metrics.jsonl" "$work/$name/metrics.jsonl" "$what" <<'PY' || fail=1
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert a[-1] != b[-1], f"{sys.argv[3]} left the losses unchanged"
print(f"with {sys.argv[3]}: step-5 loss {b[-1]:.6f} (without: {a[-1]:.6f}), another run")
PY
  local layout
  for layout in "222 2 2 2" "dp8 1 1 8"; do
    set -- $layout "$@"
    local lname=${name}_$1 tp=$2 pp=$3 dp=$4
    shift 4
    run "$lname" 8 --tp "$tp" --pp "$pp" --dp "$dp" "$@" &&
      "$py" "$here/compare_runs.py" "$work/$name" "$work/$lname" "$lname $tp x $pp x $dp $*" ||
      fail=1
  done
}
# The weights' EMA: under ZeRO-1 each DP rank keeps the EMA of the shard it updates; gathered
# for the export (--final-ema), it must be one rank's EMA.
ema=(--model-ema 0.9)
if run base_ema 1 "${ema[@]}" --final-ema "$work/base_ema/ema.safetensors"; then
  for layout in "ema_zero222 2 2 2" "ema_zero_dp8 1 1 8"; do
    set -- $layout
    run "$1" 8 --tp "$2" --pp "$3" --dp "$4" --zero 1 "${ema[@]}" --final-ema "$work/$1/ema.safetensors" &&
      "$py" "$here/compare_runs.py" "$work/base_ema" "$work/$1" "$1 $2 x $3 x $4 --zero 1 EMA" ema.safetensors ||
      fail=1
  done
else
  fail=1
fi
variant base base_mix "Mixup/CutMix/erasing" --mixup 0.8 --cutmix 1.0 --mix-prob 0.9 --reprob 0.5
# The mean-pooled head (--global-pool avg, fc_norm) pools the tokens the last stage gathers from
# its TP group under sequence parallelism, so also 4x2x1 with it.
variant base base_avg "the mean-pooled head" --global-pool avg
run avg_sp 8 --tp 4 --pp 2 --dp 1 --sequence-parallel 1 --global-pool avg &&
  "$py" "$here/compare_runs.py" "$work/base_avg" "$work/avg_sp" "avg_sp 4 x 2 x 1 SP --global-pool avg" ||
  fail=1
# The gap head (every patch token normalised, then the mean) without a class token, one register
# the only prefix token: under sequence parallelism its backward gathers the last block's output
# again and takes the gradient in place. With big_vision's pre-logits layer (whole on every TP
# rank, as the head), dropout of its output and the jax initialisation (keyed by global
# elements and shapes, as every initialiser).
gap=(--global-pool gap --class-token 0 --reg-tokens 1 --pre-logits 40 --drop 0.2 --weight-init jax)
variant base base_gap "the gap head without a class token, pre-logits" "${gap[@]}"
run gap_sp 8 --tp 4 --pp 2 --dp 1 --sequence-parallel 1 "${gap[@]}" &&
  "$py" "$here/compare_runs.py" "$work/base_gap" "$work/gap_sp" "gap_sp 4 x 2 x 1 SP ${gap[*]}" ||
  fail=1
# The MAP head (attention pooling by a latent query, then an MLP) splits its attention over TP
# by heads (q and kv column-parallel, proj row-parallel, the tokens' gradient summed over TP)
# on the last stage over all tokens (gathered under sequence parallelism); also under ZB-H1
# below. With an MLP width no short ratio gives (SigLIP So400m's kind), 43 hidden units per TP
# rank at tp 4.
map=(--global-pool map --class-token 0 --reg-tokens 1 --mlp-dim 172)
variant base base_map "the MAP head without a class token" "${map[@]}"
run map_sp 8 --tp 4 --pp 2 --dp 1 --sequence-parallel 1 "${map[@]}" &&
  "$py" "$here/compare_runs.py" "$work/base_map" "$work/map_sp" "map_sp 4 x 2 x 1 SP ${map[*]}" ||
  fail=1
# LayerScale, register tokens and positions on the patch tokens only (DeiT III, DINOv2), QK-norm
# without the qkv bias (ViT-22B), with drop path on top: the gammas are replicated over TP, and
# under sequence parallelism each TP rank's gamma gradient covers only its rows (summed over TP
# like the LayerNorms'), so also 4x2x1 with it; QK-norm's weights are shared by the heads that
# TP splits, so their gradients are summed over TP in every TP layout.
ls=(--layer-scale 0.2 --reg-tokens 2 --no-embed-class 1 --qk-norm 1 --qkv-bias 0 --drop-path 0.2)
variant base base_ls "LayerScale, registers, no_embed_class, QK-norm, drop path" "${ls[@]}"
run ls_sp 8 --tp 4 --pp 2 --dp 1 --sequence-parallel 1 "${ls[@]}" &&
  "$py" "$here/compare_runs.py" "$work/base_ls" "$work/ls_sp" "ls_sp 4 x 2 x 1 SP ${ls[*]}" ||
  fail=1
# Parallel blocks (ViT-22B): one TP reduction per block each way, the branches' input gradients
# added before it; with LayerScale on the sum, QK-norm, drop path (one mask per block),
# dropout of the MLP's hidden units (each TP rank its columns) and of the attention's
# probabilities (each TP rank its heads) and the binary cross-entropy loss on binary targets; also
# 4x2x1 with sequence parallelism, and ZB-H1 bit for bit as 1F1B below (its weight pass reads
# the one output gradient both branches share).
par=(--parallel-blocks 1 --layer-scale 0.2 --qk-norm 1 --drop-path 0.2 --proj-drop 0.1
     --attn-drop 0.1 --bce-loss 1 --bce-target-thresh 0.05)
variant base base_par "parallel blocks, LayerScale, QK-norm, drop path, dropout, BCE loss (binary targets)" "${par[@]}"
run par_sp 8 --tp 4 --pp 2 --dp 1 --sequence-parallel 1 "${par[@]}" &&
  "$py" "$here/compare_runs.py" "$work/base_par" "$work/par_sp" "par_sp 4 x 2 x 1 SP ${par[*]}" ||
  fail=1
# Dropout (timm's proj_drop, attn_drop and pos_drop) keys each element's mask by the sample's
# stream position, the token and the channel over the whole width (fc1's hidden units over all
# of TP's shards; the attention's probabilities by the head over all of TP's, the query and the
# key), so every layout drops the same elements as one rank; with LayerScale (which keeps the
# dropped branch output for its gamma gradient) and drop path on top, also 4x2x1 with sequence
# parallelism (padding rows), ZB-H1 bit for bit as 1F1B and activation recompute below. In the
# CLIP towers' layout: norm_pre on each rank's rows of the stream (a partial sum over TP under
# sequence parallelism, its padding rows kept zero), every LayerNorm's eps 1e-5, quick GELU.
dropout=(--proj-drop 0.2 --attn-drop 0.2 --pos-drop 0.2 --drop 0.2 --layer-scale 0.2
         --drop-path 0.2 --pre-norm 1 --norm-eps 1e-5 --act quick_gelu)
variant base base_do "dropout, LayerScale, drop path, the CLIP layout" "${dropout[@]}"
run do_sp 8 --tp 4 --pp 2 --dp 1 --sequence-parallel 1 "${dropout[@]}" &&
  "$py" "$here/compare_runs.py" "$work/base_do" "$work/do_sp" "do_sp 4 x 2 x 1 SP ${dropout[*]}" ||
  fail=1
# RandAugment, 3-Augment and repeated augmentation act in the image loader of the first stage's ranks,
# keyed by (seed, epoch, image, copy): any layout decodes the same pixels. On a small
# ImageFolder (tests/make_images.py), with Mixup on top (whose pairs must not be an image and
# its copy).
if "$py" "$here/make_images.py" "$work/imgs" 4 16 32; then
  images=(--data "$work/imgs" --num-classes 4 --loader-threads 1 --mixup 0.8)
  run base_img 1 "${images[@]}" || fail=1
  variant base_img base_aug "RandAugment + repeats" "${images[@]}" --aa rand-m9-mstd0.5-inc1 \
    --aug-repeats 3
  variant base_img base_3aug "3-Augment, simple random crop" "${images[@]}" --three-augment 1 \
    --simple-crop 1 --train-interpolation bicubic
else
  echo "FAIL: tests/make_images.py"; fail=1
fi
# Layer-wise lr decay scales each layer's AdamW step by its global layer: the same under a
# pipeline (stages hold other layers) and ZeRO-1 (a shard cuts through layers).
if run base_lrd 1 --layer-decay 0.7; then
  for layout in "lrd_zero222 2 2 2" "lrd_zero_dp8 1 1 8"; do
    set -- $layout
    run "$1" 8 --tp "$2" --pp "$3" --dp "$4" --zero 1 --layer-decay 0.7 &&
      "$py" "$here/compare_runs.py" "$work/base_lrd" "$work/$1" "$1 $2 x $3 x $4 --zero 1 --layer-decay 0.7" ||
      fail=1
  done
else
  fail=1
fi
# LAMB's trust ratio needs each tensor's whole norms: TP adds the pieces of split tensors (a
# replicated one counts once), ZeRO-1 the pieces its shards cut, each stage holds its own; with
# layer-wise lr decay, and 2x2x2 ZeRO-1 with sequence parallelism (LayerNorms' gradients summed
# over TP first).
lamb=(--opt lamb --layer-decay 0.7 --lr 4e-3)
variant base base_lamb "LAMB" "${lamb[@]}"
run lamb_zero_sp 8 --tp 2 --pp 2 --dp 2 --zero 1 --sequence-parallel 1 "${lamb[@]}" &&
  "$py" "$here/compare_runs.py" "$work/base_lamb" "$work/lamb_zero_sp" \
    "lamb_zero_sp 2 x 2 x 2 --zero 1 SP ${lamb[*]}" || fail=1
# Frozen tensors (--freeze) keep their values on every mesh: the embeddings and blocks 0-2 (a
# prefix: their backward is skipped, on stage 0 of 2 but its last block) and blocks.5's norms
# (replicated, and under sequence parallelism partial sums: gradients computed, not applied);
# ZeRO-1's shards cut between frozen and trained tensors; the gradient norm (so clipping) counts
# the trained ones, once; the EMA leaves the frozen ones as they are; ZB-H1's weight passes skip
# the prefix too; layers all frozen are not reduced over DP; ZB-V on 3 stages (8 blocks in 6
# virtual stages of unequal length: stage 1 holds blocks 1-2 frozen in its chunk 0 and 6 in its
# chunk 1, so only its second slot block is frozen in every chunk that has one). Started from the base run's weights
# (--init-from), the frozen tensors of every run's weights and EMA must be those bytes, and all
# others must have moved.
frz_re='^(patch_embed|pos_embed|cls_token|blocks\.[0-2]\.|blocks\.5\.norm)'
frz=(--init-from "$work/base/weights.safetensors" --model-ema 0.9 --freeze "$frz_re")
frozen_kept() {  # frozen_kept NAME: its weights' and EMA's frozen tensors are the init's bytes
  PYTHONPATH="$here" "$py" - "$work/base/weights.safetensors" "$work/$1/weights.safetensors" \
      "$work/$1/ema.safetensors" "$1" "$frz_re" <<'PY'
import re, sys
from compare_runs import load_safetensors
init = load_safetensors(sys.argv[1])
frozen = [n for n in init if re.search(sys.argv[5], n)]
for path in sys.argv[2:4]:
    got = load_safetensors(path)
    moved = [n for n in frozen if got[n].tobytes() != init[n].tobytes()]
    trained = sum(got[n].tobytes() != init[n].tobytes() for n in init if n not in frozen)
    assert not moved and trained == len(init) - len(frozen), (sys.argv[4], path, moved, trained)
print(f"{sys.argv[4]}: the {len(frozen)} frozen tensors keep their bytes in the weights and the "
      f"EMA; the other {len(init) - len(frozen)} all moved")
PY
}
for layout in "base_frz 1 1 1 1" "frz_222 8 2 2 2 --comm-stats 1" "frz_zero_sp 8 2 2 2 --zero 1 --sequence-parallel 1" \
              "frz_zbh1 8 2 2 2 --pp-schedule zb-h1" "frz_pp4 8 1 4 2" "frz_zbv 8 1 4 2 --pp-schedule zb-v" \
              "frz_il 8 1 4 2 --pp-schedule interleaved" "frz_zbv3 3 1 3 1 --pp-schedule zb-v"; do
  set -- $layout
  name=$1 np=$2 tp=$3 pp=$4 dp=$5
  shift 5
  run "$name" "$np" --tp "$tp" --pp "$pp" --dp "$dp" "$@" "${frz[@]}" \
      --final-ema "$work/$name/ema.safetensors" || { fail=1; continue; }
  frozen_kept "$name" || fail=1
  [ "$name" = base_frz ] && continue
  for file in weights.safetensors ema.safetensors; do
    "$py" "$here/compare_runs.py" "$work/base_frz" "$work/$name" \
      "$name $tp x $pp x $dp $* --freeze, $file" "$file" || fail=1
  done
done
# The frozen prefix keeps no optimizer state and no gradients, and its blocks share one set of
# activations: the ranks' memory plans are vit3d plan's, and stage 0's gradients, optimizer and
# activations are smaller than without --freeze (stage 1's gradients and optimizer the same:
# blocks.5's norms are not in a prefix).
plan_matches frz_222 "2x2x2 with a frozen prefix" --tp 2 --pp 2 --dp 2 "${frz[@]}"
"$vit3d" plan "${common[@]:1}" --tp 2 --pp 2 --dp 2 --model-ema 0.9 > "$work/plan_nofrz.txt" 2>&1
"$py" - "$work/plan_frz_222.txt" "$work/plan_nofrz.txt" <<'PY' || fail=1
import re, sys
def rows(path):  # stage -> (optimizer, activations, gradients) MiB
    return {int(r[0]): (float(r[6]), float(r[7]), float(r[5])) for r in
            (l.split() for l in open(path) if re.match(r"\s+\d+\s+\d+-", l))}
f, n = rows(sys.argv[1]), rows(sys.argv[2])
assert f[0][0] < n[0][0] and f[0][1] < n[0][1] and f[0][2] < n[0][2] and f[1][0] == n[1][0] \
    and f[1][2] == n[1][2], (f, n)
print(f"frz_222: stage 0 plans gradients {f[0][2]} MiB, optimizer {f[0][0]} MiB and activations "
      f"{f[0][1]} MiB, {n[0][2]}, {n[0][0]} and {n[0][1]} without --freeze")
PY
# Stage 0 holds the frozen embeddings and blocks 0-2 and block 3: one DP all-reduce (block 3's),
# started in the backward; the frozen layers reduce nothing.
"$py" - "$work/frz_222/comm.rank0.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
dp = r["axes"]["dp"]["all_reduce"]
assert r["dp_reductions"] == 1 and r["dp_started_in_backward"] == 1 and dp[0] == 1, (r["dp_reductions"], dp)
print(f"frz_222: stage 0 reduces one layer over DP ({dp[1]} bytes), none of its frozen ones")
PY
if cmp -s "$work/frz_222/weights.safetensors" "$work/frz_zbh1/weights.safetensors" &&
   cmp -s "$work/frz_222/ema.safetensors" "$work/frz_zbh1/ema.safetensors"; then
  echo "frz_zbh1: the weights and EMA of 1F1B's frz_222, bit for bit (its weight passes skip the prefix too)"
else
  echo "FAIL: frz_zbh1 differs from 1F1B's frz_222"; fail=1
fi
# On 4 stages of 2 blocks (8 virtual stages of 1 under zb-v and interleaved) the first 1 (3)
# are wholly frozen: no gradient goes to them and they run no backward; zb-v and interleaved
# sum as 1F1B does, so all three end with the same bytes.
for name in frz_zbv frz_il; do
  if cmp -s "$work/frz_pp4/weights.safetensors" "$work/$name/weights.safetensors" &&
     cmp -s "$work/frz_pp4/ema.safetensors" "$work/$name/ema.safetensors"; then
    echo "$name: the weights and EMA of 1F1B's frz_pp4, bit for bit (3 of its 8 virtual stages wholly frozen)"
  else
    echo "FAIL: $name differs from 1F1B's frz_pp4"; fail=1
  fi
done
# Activation recompute runs the very same forward again, so a run with it must log the very
# numbers and end with the very bytes of the same run without; its plan holds fewer activations.
same_bits() {  # same_bits A B: the same logged numbers and final weights, bit for bit
  cmp -s "$work/$1/weights.safetensors" "$work/$2/weights.safetensors" &&
    cmp -s <(sed 's/"img_per_s.*//' "$work/$1/metrics.jsonl") \
           <(sed 's/"img_per_s.*//' "$work/$2/metrics.jsonl")
}
# --decode-split 1 (the default): the first stage's TP ranks each make their share of a
# micro-batch's images and all-gather them; the bytes must be those of each rank making all of
# them (--decode-split 0): 2x2x2 with RandAugment, repeats and erasing (shares of one image) and
# an evaluation with mirrored images, and with Mixup/CutMix at micro-batch 4 (shares of two: a
# mixed pair stays in one share).
for case in "split_aug --aa rand-m9-mstd0.5-inc1 --aug-repeats 3 --reprob 0.5 --val-data $work/imgs --eval-hflip 1" \
            "split_mix --micro-batch-size 4 --mixup 0.8 --cutmix 1.0 --reprob 0.5"; do
  set -- $case
  name=$1
  shift
  flags=(--tp 2 --pp 2 --dp 2 --data "$work/imgs" --num-classes 4 --loader-threads 1 "$@")
  if run "$name" 8 "${flags[@]}" && run "${name}_whole" 8 "${flags[@]}" --decode-split 0 &&
     same_bits "$name" "${name}_whole"; then
    echo "$name: TP ranks decoding their shares ($*) log the numbers and end with the weights of each decoding all, bit for bit"
  else
    echo "FAIL: $name: --decode-split 1 differs from 0 ($*)"; fail=1
  fi
done
same_run() {  # same_run A B LABEL
  local acts_a acts_b
  acts_a=$(grep -m1 "^\[rank 0 .*memory plan" "$work/$1.log" | grep -o "activations [0-9.]* MiB")
  acts_b=$(grep -m1 "^\[rank 0 .*memory plan" "$work/$2.log" | grep -o "activations [0-9.]* MiB")
  if same_bits "$1" "$2" && [ "${acts_a% MiB}" != "${acts_b% MiB}" ]; then
    echo "$3: the same losses, norms and final weights, bit for bit ($acts_a without, $acts_b with)"
  else
    echo "FAIL: $3 differs from the run without recompute ($acts_a, $acts_b)"; fail=1
  fi
}
run rc_base_drop 1 --drop-path 0.3 --recompute-blocks 8 && same_run base_drop rc_base_drop "recompute all 8 blocks, 1 rank, drop path" || fail=1
# (with the weights' EMA too, which changes no weight, so that the plan below counts it)
rc_flags=(--tp 2 --pp 2 --dp 2 --drop-path 0.3 --recompute-blocks 8 --model-ema 0.99)
run rc_mix222 8 "${rc_flags[@]}" &&
  same_run drop_mix222 rc_mix222 "recompute, 2x2x2 (1F1B: two micro-batches in flight share the recomputed set), drop path" &&
  plan_matches rc_mix222 "2x2x2 with recompute and EMA" "${rc_flags[@]}" || fail=1
run rc_do 1 "${dropout[@]}" --recompute-blocks 8 &&
  same_run base_do rc_do "recompute all 8 blocks, 1 rank, dropout" || fail=1
run rc_seqpar_tp8 8 --tp 8 --sequence-parallel 1 --recompute-blocks 3 &&
  same_run seqpar_tp8 rc_seqpar_tp8 "recompute of the first 3 of 8 blocks, 8x1x1 sequence parallel" || fail=1
# like_1f1b KIND "PLAIN NAME TP PP DP FLAGS..."...: each run under --pp-schedule KIND must log the
# numbers and end with the weights of 1F1B's run PLAIN on the same mesh, bit for bit.
like_1f1b() {
  local kind=$1 pair plain name tp pp dp
  shift
  for pair in "$@"; do
    set -- $pair
    plain=$1 name=$2 tp=$3 pp=$4 dp=$5; shift 5
    if run "$name" 8 --tp "$tp" --pp "$pp" --dp "$dp" --pp-schedule "$kind" "$@" &&
       same_bits "$plain" "$name"; then
      echo "$name: $kind $tp x $pp x $dp $* logs the numbers and ends with the weights of 1f1b, bit for bit"
    else
      echo "FAIL: $name ($kind $tp x $pp x $dp $*) differs from 1f1b's $plain"; fail=1
    fi
  done
}
# ZB-H1 runs 1F1B's forwards and backwards with each backward split into the input gradients (sent
# at once) and the weight gradients (later); every weight gradient still sums the micro-batches in
# order, with the same GEMMs, so it must end with the very bytes of 1F1B on the same mesh: 2x2x2,
# 1x8x1 (8 micro-batches, every stage deferring weight passes), with drop path, with sequence
# parallelism (whose weight pass reads the gathered LayerNorm rows).
like_1f1b zb-h1 "mix222 zb222 2 2 2" "pp8 zb_pp8 1 8 1" "drop_mix222 zb_drop222 2 2 2 --drop-path 0.3" \
  "seqpar zb_seqpar 2 2 2 --sequence-parallel 1" \
  "base_par_222 zb_par222 2 2 2 ${par[*]}" "base_map_222 zb_map222 2 2 2 ${map[*]}" \
  "base_do_222 zb_do222 2 2 2 ${dropout[*]}"
plan_matches zb222 "2x2x2 zb-h1 (weight-pass input sets)" --tp 2 --pp 2 --dp 2 --pp-schedule zb-h1
# ZB-V: two chunks per stage in a V (stage 0 holds the embedding's and the head's), each backward
# split as in ZB-H1, an order from the greedy simulation; every chunk still runs its micro-batches
# in order with the same GEMMs, so again the very bytes of 1F1B on the same mesh: 2x2x2, 2x4x1
# (one block per virtual stage), with Mixup/CutMix (the head's targets wait on stage 0 for its
# second chunk), with sequence parallelism, with the MAP head (on stage 0's chunk 1). Under
# --pp-pass-times auto (the default) each of them takes the order built for its second step's
# pass times from its third step on; also with given times (1:1.3:0.4) and with equal ones.
like_1f1b zb-v "mix222 zbv222 2 2 2" "tp2pp4 zbv_tp2pp4 2 4 1" \
  "base_mix_222 zbv_mix222 2 2 2 --mixup 0.8 --cutmix 1.0 --mix-prob 0.9 --reprob 0.5" \
  "seqpar zbv_seqpar 2 2 2 --sequence-parallel 1" "base_map_222 zbv_map222 2 2 2 ${map[*]}" \
  "tp2pp4 zbv_tp2pp4_t 2 4 1 --pp-pass-times 1:1.3:0.4" "mix222 zbv222_eq 2 2 2 --pp-pass-times equal"
# 1x2x1 with 8 micro-batches, where the weight pass (a third of the backward's time or less on
# these CPU stages) makes the order built for the measured times idle far less (simulated 0.03
# against 0.09): the run normally takes it from step 3 on, and must still end with 1F1B's bytes.
if run zb_auto_1f1b 2 --pp 2 --global-batch-size 16 --micro-batch-size 2 &&
   run zb_auto 2 --pp 2 --global-batch-size 16 --micro-batch-size 2 --pp-schedule zb-v &&
   same_bits zb_auto_1f1b zb_auto && grep -q "zb-v: this run's passes per unit took" "$work/zb_auto.log" &&
   grep -q "zb-v: this run's passes per unit took" "$work/zbv222.log" &&
   ! grep -q "zb-v: this run's passes" "$work/zbv222_eq.log" "$work/zbv_tp2pp4_t.log"; then
  echo "zb_auto: 1x2x1 zb-v logs the numbers and ends with the weights of 1f1b, bit for bit; $(grep -o "zb-v: this run's passes.*" "$work/zb_auto.log" | head -n 1)"
else
  echo "FAIL: zb-v with --pp-pass-times auto (its order for the measured times) differs from 1f1b or did not measure"; fail=1
fi
plan_matches zbv222 "2x2x2 zb-v (blocks 0-1 and 6-7 on stage 0)" --tp 2 --pp 2 --dp 2 --pp-schedule zb-v
cc=$here/compare_curves.py
if run base_bf16 1 --precision bf16 && run rc_base_bf16 1 --precision bf16 --recompute-blocks 8 &&
   same_run base_bf16 rc_base_bf16 "recompute, 1 rank, bf16" && run pp8_bf16 8 --pp 8 --precision bf16 &&
   run il_pp4_bf16 4 --pp 4 --pp-schedule interleaved --precision bf16 &&
   run zb_pp4_bf16 4 --pp 4 --pp-schedule zb-h1 --precision bf16 &&
   run zbv_pp4_bf16 4 --pp 4 --pp-schedule zb-v --precision bf16 &&
   run mix_bf16 8 --tp 2 --pp 2 --dp 2 --precision bf16 &&
   run seqpar_bf16 8 --tp 2 --pp 2 --dp 2 --sequence-parallel 1 --precision bf16; then
  "$py" "$cc" "$work/pp8_bf16/metrics.jsonl" "$work/base_bf16/metrics.jsonl" --label "bf16 1x8x1" \
    --same "$work/base_bf16/metrics.jsonl" --bands 1-5:0 --tail-tol 0 | grep -E "determinism|VERDICT" || fail=1
  "$py" "$cc" "$work/il_pp4_bf16/metrics.jsonl" "$work/base_bf16/metrics.jsonl" \
    --label "bf16 1x4x1 interleaved" --same "$work/base_bf16/metrics.jsonl" --bands 1-5:0 \
    --tail-tol 0 | grep -E "determinism|VERDICT" || fail=1
  "$py" "$cc" "$work/zb_pp4_bf16/metrics.jsonl" "$work/base_bf16/metrics.jsonl" \
    --label "bf16 1x4x1 zb-h1" --same "$work/base_bf16/metrics.jsonl" --bands 1-5:0 \
    --tail-tol 0 | grep -E "determinism|VERDICT" || fail=1
  "$py" "$cc" "$work/zbv_pp4_bf16/metrics.jsonl" "$work/base_bf16/metrics.jsonl" \
    --label "bf16 1x4x1 zb-v" --same "$work/base_bf16/metrics.jsonl" --bands 1-5:0 \
    --tail-tol 0 | grep -E "determinism|VERDICT" || fail=1
  "$py" "$cc" "$work/mix_bf16/metrics.jsonl" "$work/base_bf16/metrics.jsonl" --label "bf16 2x2x2" \
    --bands 1-1:1e-4,2-5:2e-3 --tail-tol 2e-3 | grep -E "loss steps|VERDICT" || fail=1
  # Sequence parallelism gathers the LayerNorm outputs as bf16 (vt_ops.h), so step 1 (one
  # forward from the same weights) has the very loss of the same mesh without it. The LayerNorms'
  # parameter gradients are then summed over each TP rank's rows and over TP, another order of
  # the same sums, so later steps may differ by rounding (seen on a Sapphire Rapids CPU: grad norm
  # 2.5e-8 apart at step 5): fp32's per-step tolerance.
  "$py" "$cc" "$work/seqpar_bf16/metrics.jsonl" "$work/mix_bf16/metrics.jsonl" \
    --label "bf16 2x2x2 sequence parallel vs without" --bands 1-1:0,2-5:1e-5 --tail-tol 1e-5 |
    grep -E "loss steps|VERDICT" || fail=1
else
  fail=1
fi
exit $fail
