"""check_traffic.py DIR TP PP DP ZERO: the payload bytes each rank counted per axis over one
training step (DIR/comm.rank<R>.json, written by vit3d --comm-stats 1) against the formulas:
  TP  all-reduce: 4 x b*N*C floats per block per micro-batch (two forward, two backward); with
      parallel blocks 2 x (one each way: both branches share the gathered input and one sum)
  PP  send = recv: one activation (forward) and one gradient (backward) of b*N*C floats per
      stage boundary per micro-batch; with model chunks (interleaved), per boundary of each
      chunk's virtual stage c * pp + pp_rank
  DP  all-reduce of the rank's gradient elements once per step; ZeRO-1: a reduce-scatter and
      an all-gather of the (padded) gradient elements instead. Without ZeRO, one all-reduce per
      layer of the stage (embeddings, each block, head), every one started during the step's
      last backward pass (overlap), none left for the optimizer step to start
Prints each rank's counts beside the formulas and exits 1 on any difference.
"""
import glob
import json
import sys

d, tp, pp, dp, zero = sys.argv[1], *map(int, sys.argv[2:6])
ranks = sorted(glob.glob(d + "/comm.rank*.json"), key=lambda p: int(p.split("rank")[-1][:-5]))
if len(ranks) != tp * pp * dp:
    sys.exit(f"FAIL: {len(ranks)} rank reports, expected {tp * pp * dp}")
bad = 0
print(f"mesh {tp}x{pp}x{dp} zero {zero}: bytes per rank for one step, counted | formula")
for path in ranks:
    r = json.load(open(path))
    act = r["B"] * r["N"] * r["C"] * 4
    m, nb = r["micro_batches"], r["nblocks"]
    v = r.get("chunks", 1)
    stages = [c * pp + r["pp_rank"] for c in range(v)]  # this rank's virtual stages
    boundaries = sum((s > 0) + (s < pp * v - 1) for s in stages)
    want = {
        ("tp", "all_reduce"): (2 if r.get("parallel_blocks") else 4) * nb * m * act if tp > 1 else 0,
        ("pp", "send"): boundaries * m * act,
        ("pp", "recv"): boundaries * m * act,
        ("dp", "all_reduce"): r["params"] * 4 if dp > 1 and not zero else 0,
        ("dp", "reduce_scatter"): r["zero_padded"] * 4 if dp > 1 and zero else 0,
        ("dp", "all_gather"): r["zero_padded"] * 4 if dp > 1 and zero else 0,
    }
    cells = []
    if dp > 1 and not zero:
        layers = r["nblocks"] + (r["pp_rank"] == 0) + (r["pp_rank"] == pp - 1)
        calls = r["axes"]["dp"]["all_reduce"][0]
        ok = r["dp_overlap"] == 1 and r["dp_layers"] == layers == calls and \
            r["dp_started_in_backward"] == layers
        bad += not ok
        cells.append(f"dp overlap: {r['dp_started_in_backward']} of {r['dp_layers']} layers "
                     f"started in backward, {calls} all-reduces|{layers}"
                     f"{'' if ok else ' MISMATCH'}")
    for (axis, op), w in want.items():
        got = r["axes"][axis][op][1]
        ok = got == w
        bad += not ok
        cells.append(f"{axis} {op} {got}|{w}{'' if ok else ' MISMATCH'}")
    name = path.split("/")[-1][5:-5]
    print(f"  {name:7s} tp{r['tp_rank']} pp{r['pp_rank']} dp{r['dp_rank']}: " + ", ".join(cells))
print("all counts equal the formulas" if not bad else f"FAIL: {bad} counts differ")
sys.exit(1 if bad else 0)
