"""check_traffic.py DIR TP PP DP ZERO: the payload bytes each rank counted per axis over one
training step (DIR/comm.rank<R>.json, written by vit3d --comm-stats 1) against the formulas:
  TP  all-reduce: 4 x b*N*C floats per block per micro-batch (two forward, two backward, none
      for a block in the frozen prefix, frozen_blocks, whose backward is skipped; two more
      for a recomputed block, recomputed_blocks, whose forward runs again); with
      parallel blocks 2 x (one each way: both branches share the gathered input and one sum);
      with sequence parallelism a reduce-scatter of as many bytes, and an all-gather of as many
      and more (the embeddings' and the head's), the all-reduces only the LayerNorm gradients'
      sums; each TP rank holds ceil(b*N / tp) rows of the stream, and the gathers' whole is
      padded to tp times that
  PP  send = recv: one activation (forward) and one gradient (backward) of b*N*C floats (the
      rank's rows under sequence parallelism) per
      stage boundary per micro-batch; with model chunks (interleaved), per boundary of each
      chunk's virtual stage c * pp + pp_rank; ZB-V's chunks are stages pp_rank and
      2 pp - 1 - pp_rank, and its turn (pp - 1 to pp, both on the last rank) no transfer; no
      gradient goes to one of the first frozen_vstages, whose layers are all frozen
  DP  all-reduce of the rank's gradient elements once per step; ZeRO-1: a reduce of each DP
      rank's shard of the gradient elements after the rank's frozen prefix (frozen_prefix: none
      kept, none moved) to its owner (dp_reductions of them, dp where every shard has elements,
      each started during the step's last backward pass as soon as its layers are), and an
      all-gather of dp equal parts of zero_part elements and a broadcast of the tail of fewer
      than dp elements after them, instead. Without ZeRO, one all-reduce per layer of the stage
      (embeddings, each block, head) but those of the frozen prefix (frozen_layers: whole
      layers, so frozen_prefix elements), every one started during the step's last backward
      pass (overlap), none left for the optimizer step to start
Prints each rank's counts beside the formulas and exits 1 on any difference. With a fifth
argument PLAN (the output of `vit3d plan` for the same flags), each rank's counts must also be
the plan's traffic lines for its stage (printed in MiB to 3 decimals).
"""
import glob
import json
import re
import sys

d, tp, pp, dp, zero = sys.argv[1], *map(int, sys.argv[2:6])
plan = {}  # stage -> {(axis, op): MiB} from vit3d plan's traffic lines
if len(sys.argv) > 6:
    for line in open(sys.argv[6]):
        m = re.match(r"  stage (\d+): TP (all-reduce|reduce-scatter and all-gather) ([\d.]+), "
                     r"PP send ([\d.]+) and receive ([\d.]+), DP (all-reduce|reduce) "
                     r"([\d.]+)( and all-gather ([\d.]+))?;", line)
        if m:
            g = m.groups()
            tp_ops = ["all_reduce"] if g[1] == "all-reduce" else ["reduce_scatter", "all_gather"]
            plan[int(g[0])] = {("pp", "send"): float(g[3]), ("pp", "recv"): float(g[4]),
                               ("dp", g[5].replace("-", "_")): float(g[6]),
                               ("dp", "all_gather"): float(g[8] or 0),
                               **{("tp", op): float(g[2]) for op in tp_ops}}
    if len(plan) != pp:
        sys.exit(f"FAIL: vit3d plan printed traffic for {len(plan)} stages, expected {pp}")
ranks = sorted(glob.glob(d + "/comm.rank*.json"), key=lambda p: int(p.split("rank")[-1][:-5]))
if len(ranks) != tp * pp * dp:
    sys.exit(f"FAIL: {len(ranks)} rank reports, expected {tp * pp * dp}")
bad = 0
print(f"mesh {tp}x{pp}x{dp} zero {zero}: bytes per rank for one step, counted | formula")
for path in ranks:
    r = json.load(open(path))
    seq = r.get("sequence_parallel") and tp > 1
    # one micro-batch's stream; sequence parallelism: ceil(B N / tp) rows per TP rank, the
    # padded whole gathered
    rows = -(-r["B"] * r["N"] // tp) if seq else r["B"] * r["N"]
    act = rows * (tp if seq else 1) * r["C"] * 4
    m, nb = r["micro_batches"], r["nblocks"]
    v, p = r.get("chunks", 1), r["pp_rank"]
    # this rank's virtual stages: c * pp + p, or ZB-V's V (p and 2 pp - 1 - p)
    stages = [p, 2 * pp - 1 - p] if r.get("vshape") else [c * pp + p for c in range(v)]
    owner = (lambda s: s if s < pp else 2 * pp - 1 - s) if r.get("vshape") else \
        (lambda s: s % pp)
    # boundaries with a virtual stage on another rank (ZB-V's turn stays on rank pp - 1): the
    # activation goes up, its gradient down, but not into a wholly frozen virtual stage (the
    # first frozen_vstages)
    last, fvs = pp * v - 1, r["frozen_vstages"]
    sends = sum((s < last and owner(s + 1) != p) + (s > fvs and owner(s - 1) != p) for s in stages)
    recvs = sum((s > 0 and owner(s - 1) != p) + (s + 1 > fvs and s < last and owner(s + 1) != p)
                for s in stages)
    # blocks in the frozen prefix run no backward, so none of its all-reduces; a recomputed
    # block runs its forward's again in the backward
    passes = 2 * nb - r["frozen_blocks"] + r["recomputed_blocks"]
    blocks_tp = (1 if r.get("parallel_blocks") else 2) * passes * m * act if tp > 1 else 0
    want = {
        ("tp", "all_reduce"): 0 if seq else blocks_tp,
        ("tp", "reduce_scatter"): blocks_tp if seq else 0,
        ("pp", "send"): sends * m * rows * r["C"] * 4,
        ("pp", "recv"): recvs * m * rows * r["C"] * 4,
        ("dp", "all_reduce"): (r["params"] - r["frozen_prefix"]) * 4 if dp > 1 and not zero else 0,
        ("dp", "reduce"): (r["params"] - r["frozen_prefix"]) * 4 if dp > 1 and zero else 0,
        ("dp", "all_gather"): r["zero_part"] * dp * 4 if dp > 1 and zero else 0,
    }
    cells = []
    if dp > 1 and zero:
        trained = r["params"] - r["frozen_prefix"]
        tail = trained - r["zero_part"] * dp
        want[("dp", "broadcast")] = tail * 4
        # the shards with elements: none where the stage trains nothing, the last's alone where
        # it trains fewer elements than there are ranks
        owners = 0 if trained == 0 else dp if r["zero_part"] > 0 else 1
        calls = r["axes"]["dp"]["reduce"][0]
        ok = r["zero_part"] == trained // dp and r["dp_overlap"] == 1 and \
            r["dp_reductions"] == owners == calls and \
            r["dp_started_in_backward"] == owners
        bad += not ok
        cells.append(f"zero part {r['zero_part']} tail {tail} (frozen prefix "
                     f"{r['frozen_prefix']}), {calls} shard reduces|{owners}, "
                     f"{r['dp_started_in_backward']} started in backward"
                     f"{'' if ok else ' MISMATCH'}")
    if dp > 1 and not zero:
        head = r["pp_rank"] == (0 if r.get("vshape") else pp - 1)  # ZB-V: the head on rank 0
        embed = r["pp_rank"] == 0 and r["frozen_layers"] == 0
        layers = r["nblocks"] - r["frozen_blocks"] + embed + head
        calls = r["axes"]["dp"]["all_reduce"][0]
        ok = r["dp_overlap"] == 1 and r["dp_reductions"] == layers == calls and \
            r["dp_started_in_backward"] == layers
        bad += not ok
        cells.append(f"dp overlap: {r['dp_started_in_backward']} of {r['dp_reductions']} layers "
                     f"started in backward, {calls} all-reduces|{layers}"
                     f"{'' if ok else ' MISMATCH'}")
    def planned(key, value):  # vit3d plan's figure for this stage, to its 3 decimals
        return not plan or abs(value / 2**20 - plan[r["pp_rank"]].get(key, 0.0)) <= 0.0005 + 1e-9
    for (axis, op), w in want.items():
        got = r["axes"][axis][op][1]
        if seq and (axis, op) == ("tp", "all_reduce"):
            ok = got < act  # the LayerNorm gradients' sums only (a few vectors)
        else:
            ok = got == w and planned((axis, op), got)
        bad += not ok
        cells.append(f"{axis} {op} {got}|{w}{'' if ok else ' MISMATCH'}")
    if seq:  # the blocks' gathers (the plan's), then the embeddings' and the head's
        got = r["axes"]["tp"]["all_gather"][1]
        ok = blocks_tp <= got < 2 * blocks_tp and planned(("tp", "all_gather"), blocks_tp)
        bad += not ok
        cells.append(f"tp all_gather {got}|{blocks_tp}+{'' if ok else ' MISMATCH'}")
    name = path.split("/")[-1][5:-5]
    print(f"  {name:7s} tp{r['tp_rank']} pp{r['pp_rank']} dp{r['dp_rank']}: " + ", ".join(cells))
print(("all counts equal the formulas" + (" and vit3d plan's traffic" if plan else ""))
      if not bad else f"FAIL: {bad} counts differ")
sys.exit(1 if bad else 0)
