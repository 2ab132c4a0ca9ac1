# bench_torch.py: the PyTorch eager peer of bench_cpu.c: the same ViT-Ti/16 training step (fp32,
# AdamW, gradient clipping) at the same batch and thread count, so bench_cpu.sh can print a ratio.
# The model is ref_vit.py's module that mirrors timm's VisionTransformer (no timm here).
# Usage: bench_torch.py [batch=64] [threads=cores] [warmup=2] [timed=5]; VT_BENCH_OPS=1 adds a profile.
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_vit import ViT  # noqa: E402  the reference test's timm-layout ViT, sized for ViT-Ti/16


def main():
    args = [int(a) for a in sys.argv[1:5]]
    B, threads, warmup, timed = args + [64, os.cpu_count(), 2, 5][len(args):]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ViT(img=224, patch=16, width=192, depth=12, heads=3, mlp_ratio=4, classes=1000)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    img = torch.randn(B, 3, 224, 224)
    labels = torch.randint(0, 1000, (B,))

    def step(times):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(img), labels)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)  # PyTorch 2.x default; the cheapest choice for torch
        t3 = time.perf_counter()
        times.append([1e3 * (t3 - t0), 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2)])
        return loss.item()

    for _ in range(warmup):
        step([])
    times = []
    for _ in range(timed):
        loss = step(times)
    med = [statistics.median(c) for c in zip(*times)]
    attn = "explicit"  # ref_vit.ViT computes softmax(q k^T / sqrt(D)) v itself
    print(f"torch config version={torch.__version__} batch={B} threads={torch.get_num_threads()} "
          f"warmup={warmup} timed={timed} attention={attn} loss={loss:.4f}")
    print(f"torch step_ms median={med[0]:.1f} min={min(t[0] for t in times):.1f} "
          f"fwd={med[1]:.1f} bwd={med[2]:.1f} opt={med[3]:.1f} img_per_s={1e3 * B / med[0]:.1f}")
    if os.environ.get("VT_BENCH_OPS", "0") not in ("", "0"):
        with torch.autograd.profiler.profile() as prof:
            step([])
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
