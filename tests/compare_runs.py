"""compare_runs.py BASE_DIR OTHER_DIR [LABEL [FILE]]: is a parallel (or resumed) run the same
computation as the reference run? Compares the per-step losses of metrics.jsonl (every step the
other run logged, matched by step number: a resumed run logs only the steps after its resume)
and every parameter of the final weights (weights.safetensors, or FILE: ema.safetensors for the
weights' EMA, which the same tolerances fit) of two run directories; exits 1 naming what differs.

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


def main():
    base, other = sys.argv[1], sys.argv[2]
    label = sys.argv[3] if len(sys.argv) > 3 else other
    file = sys.argv[4] if len(sys.argv) > 4 else "weights.safetensors"
    ma, mb = load_metrics(base + "/metrics.jsonl"), load_metrics(other + "/metrics.jsonl")
    problems = []
    by_step = {r["step"]: r for r in ma}
    if not mb or any(r["step"] not in by_step for r in mb):
        problems.append(f"steps {[r['step'] for r in mb]} are not a subset of {sorted(by_step)}")
    worst_loss = 0.0
    for rb in mb:
        ra = by_step.get(rb["step"], rb)
        rel = abs(ra["loss"] - rb["loss"]) / abs(ra["loss"])
        worst_loss = max(worst_loss, rel)
        if rel > 1e-5:
            problems.append(f"step {ra['step']} loss {ra['loss']:.9g} vs {rb['loss']:.9g}")
    lr_sum = sum(r["lr"] for r in ma)
    wa = load_safetensors(f"{base}/{file}")
    wb = load_safetensors(f"{other}/{file}")
    if sorted(wa) != sorted(wb):
        problems.append("the two runs have different parameter names")
    worst = (0.0, "")
    for name in wa:
        a, b = wa[name].astype(np.float64), wb[name].astype(np.float64)
        if a.shape != b.shape:
            problems.append(f"{name}: shape {a.shape} vs {b.shape}")
            continue
        if name.endswith("attn.qkv.bias") or name.endswith("attn.k_norm.bias"):
            c = a.shape[0] // 3 if name.endswith("qkv.bias") else 0
            k = slice(c, 2 * c) if c else slice(None)
            k_move = np.abs(a[k] - b[k]).max()
            if k_move > 0.25 * lr_sum:
                problems.append(f"{name}[k]: moved {k_move:.3g} apart, limit {0.25 * lr_sum:.3g}")
            if not c:
                continue
            a, b = np.concatenate([a[:c], a[2 * c:]]), np.concatenate([b[:c], b[2 * c:]])
        rel = np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30)
        worst = max(worst, (rel, name))
        far = np.abs(a - b).max() if a.size else 0.0
        if rel > 5e-5 and far > 0.05 * lr_sum:
            problems.append(f"{name}: relative difference {rel:.3g} > 5e-5, an element "
                            f"{far:.3g} apart (> 5% of the lr sum, {0.05 * lr_sum:.3g})")
        elif rel > 5e-5:
            print(f"    {name}: relative difference {rel:.3g} > 5e-5 from elements at most "
                  f"{far:.3g} apart (<= 5% of the lr sum): AdamW on gradients that round to zero")
    print(f"{label:32s} loss worst rel {worst_loss:.2e} (tol 1e-05), parameters worst rel "
          f"{worst[0]:.2e} (tol 5e-05, or elements within 5% of the lr sum) in {worst[1]}: "
          f"{'FAIL' if problems else 'ok'}")
    for p in problems[:10]:
        print("   ", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
