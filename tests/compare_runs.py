"""compare_runs.py BASE_DIR OTHER_DIR [LABEL [FILE]] [--band TWIN_DIR]: is a parallel (or
resumed) run the same computation as the reference run? Compares the per-step losses of
metrics.jsonl (every step the other run logged, matched by step number: a resumed run logs only
the steps after its resume) and every parameter of the final weights (weights.safetensors, or
FILE: ema.safetensors for the weights' EMA, which the same tolerances fit) of two run
directories; exits 1 naming what differs.

Tolerances (fp32, different summation orders): loss 1e-5 relative per step; every tensor
||a - b|| / ||a|| <= 5e-5. One slice is special: the k third of each qkv bias has an exactly zero
gradient in exact arithmetic (softmax ignores a constant added to all keys' scores), so rounding
noise of 1e-10 reaches AdamW, which turns it into steps of a fraction of lr with random sign. That
slice is checked to stay put instead: max |a - b| <= 0.25 * sum of the learning rates, where a
wrong, nonzero gradient would move it by about the full sum. So is QK-norm's k_norm.bias, which
adds one vector b to every key (the same term q . b in all of a query's scores). The same can
happen to any element whose gradient is zero up to rounding (seen once, likely an MLP unit of
the last block, which reaches the loss only through the class tokens, that they leave inactive:
element 217 of blocks.7.mlp.fc1.bias moved -1.8e-5 on one rank and -3.9e-5 on 2x2x2, its
neighbours about 2e-3), so a tensor over 5e-5 still passes when no element of it differs by more
than 5% of the learning-rate sum, where a wrong gradient would move elements by a good part of
the sum.

--band TWIN_DIR (bf16 runs on meshes that sum in another order than the base run): an fp32 sum
next to a bf16 rounding boundary rounds the other way there, and AdamW turns such differences
into update differences, so the two runs cannot share bits. TWIN_DIR is the base run's fp32
twin (the same flags in fp32), whose distance from the base is what bf16 rounding as a whole
does. Each loss must then stay within LOSS_BAND_RATIO (8) times the largest relative loss
distance of the base from its twin over the steps (plus 1e-7), each tensor's relative distance
from the base within BAND_RATIO (4) times its twin's (plus 1e-6 for tensors that hardly move),
and the k slices' largest move within BAND_RATIO times their twin's plus a quarter of the lr
sum. A reordering flips the few roundings next to a boundary, rare but whole-ulp changes
(measured at step 1, where all runs start from the same weights: the gradient norm of TP 2
against one rank 2e-5 to 1e-4 apart in bf16 and 6e-8 in fp32, bf16 against fp32 about 1e-3),
which a few steps of training amplify towards what bf16 does as a whole (fuzz_equiv.py's
draws with TP: the mesh's loss up to 4.2 times the twin's distance from one rank, a scalar
that can by chance come out small; its tensors up to 1.5 times). Adam-like steps (AdamW,
LAMB) turn the rounding noise of an element's near-zero gradient into a step of about lr of
either sign, which no band scaled by the twin bounds (seen: single elements of head.weight,
fc1.bias, norm1.bias and norm2.bias about 2 lr apart where the twin's were 0.01 to 0.1 lr
apart; the same meshes in fp32 equal one rank), so a tensor over its band still passes when
its largest-moving elements (2, or 1% of it) are each within 2 times the lr sum and the rest of
it is within the band. What the bands still catch: the mesh run of a draw with its learning
rate 1% off fell outside them in each of three momentum-SGD draws tried and 0.3% off in two;
an AdamW draw 0.3% off fell outside by 72 times.
"""
import json
import struct
import sys

import numpy as np


def load_safetensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + lo:8 + n + hi], dtype=np.float32).reshape(t["shape"])
    return out


def load_metrics(path):
    return [json.loads(line) for line in open(path)]


BAND_RATIO = 4.0  # tensors
LOSS_BAND_RATIO = 8.0  # losses: the twin's distance is one noisy scalar a step


def k_slice(name, a):
    """The elements whose gradient is zero in exact arithmetic (see above), or None."""
    if name.endswith("attn.qkv.bias"):
        c = a.shape[0] // 3
        return np.arange(c, 2 * c)
    if name.endswith("attn.k_norm.bias"):
        return np.arange(a.shape[0])
    return None


def rel_dist(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30)


def banded(base, other, twin, file, ma, mb):
    """The --band check: (problems, summary)."""
    problems = []
    ms = {r["step"]: r["loss"] for r in load_metrics(twin + "/metrics.jsonl")}
    by_step = {r["step"]: r["loss"] for r in ma}
    if sorted(ms) != sorted(by_step):
        return [f"the fp32 twin logged steps {sorted(ms)}, the base {sorted(by_step)}"], \
            "bf16 bands"
    if not mb or any(r["step"] not in by_step for r in mb):
        problems.append(f"steps {[r['step'] for r in mb]} are not a subset of {sorted(by_step)}")
    loss_scale = max((abs(by_step[s] - ms[s]) / abs(by_step[s]) for s in by_step
                      if by_step[s] is not None and ms[s] is not None), default=0.0)
    lr_sum = sum(r["lr"] for r in ma if r["loss"] is not None)  # (a skipped step moves nothing)
    worst_loss = 0.0
    for rb in mb:
        la = by_step.get(rb["step"], rb["loss"])
        if la is None or rb["loss"] is None:  # a skipped step's loss (logged as null)
            if (la is None) != (rb["loss"] is None):
                problems.append(f"step {rb['step']} loss {la} vs {rb['loss']}")
            continue
        d, limit = abs(la - rb["loss"]) / abs(la), LOSS_BAND_RATIO * loss_scale + 1e-7
        worst_loss = max(worst_loss, d / limit)
        if not d <= limit:  # (a NaN fails too)
            problems.append(f"step {rb['step']} loss {la:.9g} vs {rb['loss']:.9g}: {d:.3g} apart, "
                            f"over {LOSS_BAND_RATIO} x the fp32 twin's {loss_scale:.3g} (+1e-7)")
    wa, wb = load_safetensors(f"{base}/{file}"), load_safetensors(f"{other}/{file}")
    ws = load_safetensors(f"{twin}/{file}")
    nonfinite((("first", wa), ("second", wb), ("fp32 twin", ws)), problems)
    if sorted(wa) != sorted(wb) or sorted(wa) != sorted(ws):
        return problems + ["the runs have different parameter names"], "bf16 bands"
    worst = (0.0, "")
    for name in wa:
        a, b, t = (w[name].astype(np.float64) for w in (wa, wb, ws))
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} vs {b.shape}")
            continue
        a, b, t = a.ravel(), b.ravel(), t.ravel()
        k = k_slice(name, a)
        if k is not None:  # noise on both sides: the largest move against the twin's
            far, limit = np.abs(a[k] - b[k]).max(), BAND_RATIO * np.abs(a[k] - t[k]).max()
            if far > limit + 0.25 * lr_sum:
                problems.append(f"{name}[k]: moved {far:.3g} apart, over {BAND_RATIO} x the fp32 "
                                f"twin's {limit / BAND_RATIO:.3g} + 0.25 x the lr sum")
            a, b, t = (np.delete(x, k) for x in (a, b, t))
        d, limit = rel_dist(a, b), BAND_RATIO * rel_dist(a, t) + 1e-6
        if d > limit:  # Adam's noise elements (above) left out, if they are all that is over
            far = np.argsort(-np.abs(a - b))[:max(2, a.size // 100)]
            a2, b2, t2 = (np.delete(x, far) for x in (a, b, t))
            move = np.abs(a[far] - b[far]).max()
            if move <= 2 * lr_sum and rel_dist(a2, b2) <= BAND_RATIO * rel_dist(a2, t2) + 1e-6:
                print(f"    {name}: relative distance {d:.3g} over {BAND_RATIO} x the fp32 twin's "
                      f"{rel_dist(a, t):.3g} from {len(far)} elements at most {move:.3g} apart "
                      f"(<= 2 x the lr sum): Adam on gradients that round to zero")
                d, limit = rel_dist(a2, b2), BAND_RATIO * rel_dist(a2, t2) + 1e-6
        worst = max(worst, (d / limit, name))
        if d > limit:
            problems.append(f"{name}: relative distance {d:.3g}, over {BAND_RATIO} x the fp32 "
                            f"twin's {rel_dist(a, t):.3g} (+1e-6)")
    return problems, (f"bf16 bands: loss worst {worst_loss:.2f} of its limit, parameters worst "
                      f"{worst[0]:.2f} of their limit in {worst[1]}")


def nonfinite(named, problems):
    """A NaN or infinity in either run's tensors is a difference (every comparison below is
    False for a NaN, so it would pass them)."""
    for label, w in named:
        for name, x in w.items():
            if not np.isfinite(x).all():
                problems.append(f"{name}: not finite in the {label} run")


def exact(base, other, file, ma, mb):
    """The fp32 rules above: (problems, summary)."""
    problems = []
    by_step = {r["step"]: r for r in ma}
    if not mb or any(r["step"] not in by_step for r in mb):
        problems.append(f"steps {[r['step'] for r in mb]} are not a subset of {sorted(by_step)}")
    worst_loss = 0.0
    for rb in mb:
        ra = by_step.get(rb["step"], rb)
        if ra["loss"] is None or rb["loss"] is None:  # a skipped step's loss (logged as null)
            if (ra["loss"] is None) != (rb["loss"] is None):
                problems.append(f"step {ra['step']} loss {ra['loss']} vs {rb['loss']}")
            continue
        rel = abs(ra["loss"] - rb["loss"]) / abs(ra["loss"])
        worst_loss = max(worst_loss, rel)
        if not rel <= 1e-5:  # (a NaN fails too)
            problems.append(f"step {ra['step']} loss {ra['loss']:.9g} vs {rb['loss']:.9g}")
    lr_sum = sum(r["lr"] for r in ma if r["loss"] is not None)  # (a skipped step moves nothing)
    wa = load_safetensors(f"{base}/{file}")
    wb = load_safetensors(f"{other}/{file}")
    if sorted(wa) != sorted(wb):
        problems.append("the two runs have different parameter names")
    nonfinite((("first", wa), ("second", wb)), problems)
    worst = (0.0, "")
    for name in wa:
        a, b = wa[name].astype(np.float64), wb[name].astype(np.float64)
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} vs {b.shape}")
            continue
        k = k_slice(name, a)
        if k is not None:
            k_move = np.abs(a[k] - b[k]).max()
            if k_move > 0.25 * lr_sum:
                problems.append(f"{name}[k]: moved {k_move:.3g} apart, limit {0.25 * lr_sum:.3g}")
            a, b = np.delete(a, k), np.delete(b, k)
        rel = rel_dist(a, b)
        worst = max(worst, (rel, name))
        far = np.abs(a - b).max() if a.size else 0.0
        if rel > 5e-5 and far > 0.05 * lr_sum:
            problems.append(f"{name}: relative difference {rel:.3g} > 5e-5, an element "
                            f"{far:.3g} apart (> 5% of the lr sum, {0.05 * lr_sum:.3g})")
        elif rel > 5e-5:
            print(f"    {name}: relative difference {rel:.3g} > 5e-5 from elements at most "
                  f"{far:.3g} apart (<= 5% of the lr sum): AdamW on gradients that round to zero")
    return problems, (f"loss worst rel {worst_loss:.2e} (tol 1e-05), parameters worst rel "
                      f"{worst[0]:.2e} (tol 5e-05, or elements within 5% of the lr sum) in "
                      f"{worst[1]}")


def main():
    args = sys.argv[1:]
    twin = None
    if "--band" in args:
        i = args.index("--band")
        twin = args[i + 1]
        del args[i:i + 2]
    base, other = args[0], args[1]
    label = args[2] if len(args) > 2 else other
    file = args[3] if len(args) > 3 else "weights.safetensors"
    ma, mb = load_metrics(base + "/metrics.jsonl"), load_metrics(other + "/metrics.jsonl")
    problems, summary = (banded(base, other, twin, file, ma, mb) if twin else
                         exact(base, other, file, ma, mb))
    print(f"{label:32s} {summary}: {'FAIL' if problems else 'ok'}")
    for p in problems[:10]:
        print("   ", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
