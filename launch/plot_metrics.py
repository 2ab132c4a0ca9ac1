#!/usr/bin/python3
"""plot_metrics.py: draw a vit3d run's curves from its metrics.jsonl into one PNG.

    /usr/bin/python3 launch/plot_metrics.py runs/quickstart/metrics.jsonl [more.jsonl ...] \
        -o curves.png [--smooth 20]

Three panels over the step: loss (training, smoothed, and evaluation), accuracy (evaluation
top-1 and top-5, and the EMA weights' top-1 with --model-ema) and throughput (images per second, smoothed, with MFU on a second axis when
the run had --peak-tflops). Several files are drawn side by side in each panel (one colour per
run, labelled by the file's directory), so runs can be compared. Needs matplotlib (Debian's
python3-matplotlib). A line that is not JSON is reported with its number and skipped.
"""
import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                print(f"plot_metrics: {path}:{n}: not JSON ({e}); line skipped", file=sys.stderr)
    # A log continued after a resume repeats the steps since the checkpoint: the last line of a
    # step is the one that counts.
    last = {}
    for r in rows:
        last[r.get("step")] = r
    return sorted(last.values(), key=lambda r: r.get("step") or 0)


def smooth(values, window):
    """Trailing mean over `window` points, ignoring non-finite values (skipped steps)."""
    out, acc = [], []
    for v in values:
        if v is not None and math.isfinite(v):
            acc.append(v)
        acc = acc[-window:]
        out.append(sum(acc) / len(acc) if acc else float("nan"))
    return out


def series(rows, key):
    pts = [(r["step"], r[key]) for r in rows if key in r and r[key] is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics", nargs="+", help="metrics.jsonl files (one per run)")
    ap.add_argument("-o", "--out", default="metrics.png", help="PNG to write [metrics.png]")
    ap.add_argument("--smooth", type=int, default=20, help="trailing mean window in steps [20]")
    args = ap.parse_args()

    runs = []
    for path in args.metrics:
        if not os.path.exists(path):
            sys.exit(f"plot_metrics: {path}: no such file")
        rows = read_metrics(path)
        if not any("step" in r and "loss" in r for r in rows):
            sys.exit(f"plot_metrics: {path}: no step with a loss (is it a vit3d metrics.jsonl?)")
        runs.append((os.path.basename(os.path.dirname(os.path.abspath(path))) or path, rows))

    fig, (ax_loss, ax_acc, ax_tput) = plt.subplots(1, 3, figsize=(16, 4.8))
    ax_mfu = None
    for i, (label, rows) in enumerate(runs):
        color = f"C{i}"
        steps, loss = series(rows, "loss")
        ax_loss.plot(steps, loss, color=color, alpha=0.25, linewidth=0.8)
        ax_loss.plot(steps, smooth(loss, args.smooth), color=color, label=f"{label} train")
        es, el = series(rows, "eval_loss")
        if es:
            ax_loss.plot(es, el, "o--", color=color, label=f"{label} eval")
        es, top1 = series(rows, "eval_top1")
        if es:
            ax_acc.plot(es, [100 * v for v in top1], "o-", color=color, label=f"{label} top-1")
            _, top5 = series(rows, "eval_top5")
            ax_acc.plot(es, [100 * v for v in top5], "s:", color=color, label=f"{label} top-5")
        es, top1 = series(rows, "eval_ema_top1")  # --model-ema
        if es:
            ax_acc.plot(es, [100 * v for v in top1], "^-.", color=color, label=f"{label} EMA top-1")
        ts, ips = series(rows, "img_per_s")
        ax_tput.plot(ts, smooth(ips, args.smooth), color=color, label=f"{label} images/s")
        ms, mfu = series(rows, "mfu")
        if ms:
            ax_mfu = ax_mfu or ax_tput.twinx()
            ax_mfu.plot(ms, [100 * v for v in smooth(mfu, args.smooth)], "--", color=color,
                        label=f"{label} MFU")
    ax_loss.set(title="loss", xlabel="step", ylabel="cross-entropy")
    ax_acc.set(title="evaluation accuracy", xlabel="step", ylabel="%")
    ax_tput.set(title="throughput", xlabel="step", ylabel="images / s")
    if ax_mfu:
        ax_mfu.set_ylabel("MFU %")
        ax_mfu.legend(loc="lower right", fontsize=8)
    if not ax_acc.lines:
        ax_acc.text(0.5, 0.5, "no evaluation in these runs\n(--val-data, --eval-interval)",
                    ha="center", va="center", transform=ax_acc.transAxes)
    for ax in (ax_loss, ax_acc, ax_tput):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"plot_metrics: wrote {args.out} ({len(runs)} run{'s' if len(runs) > 1 else ''})")


if __name__ == "__main__":
    main()
