"""compare_curves.py A.jsonl B.jsonl --label TEXT --bands LO-HI:TOL,... [--tail-tol T]
[--same C.jsonl]: does training run A follow reference run B? Reads the per-step losses of two
metrics.jsonl files (same steps, same seed and data), prints the worst relative loss difference
in each band of steps against its tolerance, the mean of the last 10 losses against --tail-tol,
a few steps side by side, and a last line "VERDICT ok" or "VERDICT FAIL: why". With --same, run C
must have logged exactly the losses and gradient norms of A (determinism). Exit 0 = ok.

Used by tests/test_train.sh (CPU bf16 against CPU fp32) and tests/gpu/run.sh (CUDA against CPU,
in each precision, and CUDA bf16 against CPU fp32), each with the bands it documents.
"""
import argparse
import json
import sys


def load(path):
    return {r["step"]: r for r in map(json.loads, open(path))}


def value(row, key):  # a skipped (non-finite) step logs null
    return float("nan") if row[key] is None else row[key]


def reldiff(x, y):
    d = abs(x - y) / abs(y) if y else abs(x - y)
    return float("inf") if d != d else d  # NaN sorts as the worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--label", default="a vs b")
    ap.add_argument("--bands", required=True, help="LO-HI:TOL,... relative loss tolerances")
    ap.add_argument("--tail-tol", type=float, default=1e-2)
    ap.add_argument("--same", help="a run that must match A exactly")
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    steps, bad = sorted(b), []
    if sorted(a) != steps:
        bad.append(f"steps logged differ: {len(a)} against {len(steps)}")
    steps = [s for s in steps if s in a]
    if not steps:
        print(f"{args.label}: VERDICT FAIL: no common steps")
        return 1
    if args.same:
        c = load(args.same)
        diff = [s for s in steps if s not in c or (c[s]["loss"], c[s]["grad_norm"]) !=
                (a[s]["loss"], a[s]["grad_norm"])]
        print(f"{args.label}: determinism: two runs {'DIFFER from step %d' % diff[0] if diff else 'identical'}"
              " (loss and grad norm, every step)")
        if diff:
            bad.append(f"two runs differ from step {diff[0]}")
    rel = {s: reldiff(value(a[s], "loss"), value(b[s], "loss")) for s in steps}
    gn = {s: reldiff(value(a[s], "grad_norm"), value(b[s], "grad_norm")) for s in steps}
    for band in args.bands.split(","):
        span, tol = band.split(":")
        lo, hi = map(int, span.split("-"))
        tol = float(tol)
        sel = [s for s in steps if lo <= s <= hi]
        if not sel:
            continue
        worst = max(sel, key=lambda s: rel[s])
        ok = rel[worst] <= tol
        print(f"{args.label}: loss steps {lo}-{hi}: max rel diff {rel[worst]:.2e} (step {worst}), "
              f"tol {tol:.0e} {'ok' if ok else 'FAIL'}; grad norm max rel diff "
              f"{max(gn[s] for s in sel):.2e}")
        if not ok:
            bad.append(f"loss at step {worst} differs by {rel[worst]:.2e} > {tol:.0e}")
    tail = steps[-10:]
    ma = sum(value(a[s], "loss") for s in tail) / len(tail)
    mb = sum(value(b[s], "loss") for s in tail) / len(tail)
    print(f"{args.label}: mean loss of the last {len(tail)} steps {ma:.5f} against {mb:.5f}, "
          f"rel {reldiff(ma, mb):.2e} (tol {args.tail_tol:.0e})")
    if not reldiff(ma, mb) <= args.tail_tol:
        bad.append(f"mean of the last {len(tail)} losses differs by more than {args.tail_tol:.0e}")
    for s in (1, 2, 5, 10, 20, 50, 100):
        if s in rel:
            print(f"  step {s:3d}: loss {value(a[s], 'loss'):.7f} against "
                  f"{value(b[s], 'loss'):.7f}, rel {rel[s]:.1e}")
    print(f"{args.label}: VERDICT", "ok" if not bad else "FAIL: " + "; ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
