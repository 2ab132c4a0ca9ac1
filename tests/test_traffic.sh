#!/usr/bin/env bash
# test_traffic.sh VIT3D: the bytes every rank moves per axis in one step equal the formulas of
# tests/check_traffic.py, on 2x2x2, 2x2x2 with ZeRO-1, both also with a frozen prefix, 1x2x4
# with ZeRO-1 and a tail, and training the head alone, 1x4x2
# (also with two stages wholly frozen), 1x4x2 with the interleaved schedule, 2x2x2 with
# parallel blocks (half the TP bytes), 1x4x2 with ZB-V (its V: the turn between the chunks of
# the last rank is no transfer), 2x2x2 with sequence parallelism and 2x2x2 with activation
# recompute (also with a frozen prefix, and with sequence parallelism); and so do the traffic
# lines of `vit3d plan` for the same flags.
set -uo pipefail
vit3d=$1
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
measure() {  # measure NAME TP PP DP ZERO [flags...]
  local name=$1 tp=$2 pp=$3 dp=$4 zero=$5
  shift 5
  mkdir -p "$work/$name"
  local flags=(--model tiny --heads 8 --depth 8 --global-batch-size 16 --micro-batch-size 2
               --tp "$tp" --pp "$pp" --dp "$dp" --zero "$zero" "$@")
  timeout 300 mpirun -np 8 --oversubscribe "$vit3d" train "${flags[@]}" --steps 1 --threads 1 \
    --log-dir "$work/$name" --comm-stats 1 > "$work/$name.log" 2>&1 ||
    { echo "FAIL: run $name"; tail "$work/$name.log"; fail=1; return; }
  "$vit3d" plan "${flags[@]}" > "$work/$name.plan" 2>&1 ||
    { echo "FAIL: vit3d plan $name"; cat "$work/$name.plan"; fail=1; return; }
  "$py" "$here/check_traffic.py" "$work/$name" "$tp" "$pp" "$dp" "$zero" "$work/$name.plan" || fail=1
}
measure m222 2 2 2 0
measure zero 2 2 2 1
# ZeRO-1 on 4 DP ranks with 11 classes: stage 1's trained elements are odd, so its last DP
# rank's shard takes a tail (reduced with its part, broadcast besides the parts' all-gather)
measure ztail 1 2 4 1 --num-classes 11
# ZeRO-1 training the head alone on 4 DP ranks: stage 0 reduces and gathers nothing
measure zhead 1 2 4 1 --trainable '^head\.'
# ZeRO-1 with a frozen prefix (the embeddings and blocks 0-2 of stage 0's 0-3): stage 0 moves
# only block 3's gradients and weights over DP, stage 1 all of its own
measure zfrz 2 2 2 1 --freeze '^(patch_embed|pos_embed|cls_token|blocks\.[0-2]\.)'
# the same without ZeRO: stage 0 all-reduces block 3 only, and no block 0-2 backward all-reduces
measure frz222 2 2 2 0 --freeze '^(patch_embed|pos_embed|cls_token|blocks\.[0-2]\.)'
# 4 stages of 2 blocks, the embeddings and blocks 0-4 frozen: stages 0 and 1 wholly, so no
# gradient goes to them (stage 2 sends none, stage 1 neither), nor do they reduce anything
measure frz142 1 4 2 0 --freeze '^(patch_embed|pos_embed|cls_token|blocks\.[0-4]\.)'
"$py" - "$work/zero" "$work/zfrz" <<'PY' || fail=1
import json, sys
def rs(d, rank):
    r = json.load(open(f"{d}/comm.rank{rank}.json"))
    return r["pp_rank"], r["frozen_prefix"], r["axes"]["dp"]["reduce"][1]
for rank in range(8):
    (p, f0, a), (_, f1, b) = rs(sys.argv[1], rank), rs(sys.argv[2], rank)
    assert f0 == 0 and (f1 > 0 and b < a / 2 if p == 0 else f1 == 0 and b == a), (rank, f1, a, b)
print(f"zfrz: stage 0 reduces {b if p == 0 else rs(sys.argv[2], 0)[2]} bytes with the "
      f"frozen prefix, {rs(sys.argv[1], 0)[2]} without; stage 1 the same bytes")
PY
measure m142 1 4 2 0
measure il142 1 4 2 0 --pp-schedule interleaved  # chunks 0-0,4-4 ... 3-3,7-7: a ring
measure par222 2 2 2 0 --parallel-blocks 1  # half the TP traffic of m222
measure zbv142 1 4 2 0 --pp-schedule zb-v  # chunks 0-0,7-7 ... 3-3,4-4: the turn stays on rank 3
# sequence parallelism: reduce-scatters and all-gathers for the all-reduces, 9 of the 17 rows
# of a micro-batch of 1 per TP rank (one row of padding)
measure sp222 2 2 2 0 --sequence-parallel 1 --micro-batch-size 1
# activation recompute: the first 3 blocks of each stage's 4 run their forward again, their TP
# all-reduces too; with a frozen prefix (blocks 0-1) only block 2 of stage 0 does
measure rc222 2 2 2 0 --recompute-blocks 3
measure rcfrz 2 2 2 0 --recompute-blocks 3 \
  --freeze '^(patch_embed|pos_embed|cls_token|blocks\.[01]\.)'
measure rcsp 2 2 2 0 --recompute-blocks 2 --sequence-parallel 1 --micro-batch-size 1
exit $fail
