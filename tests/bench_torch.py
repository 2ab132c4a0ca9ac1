# bench_torch.py: the PyTorch eager peer of bench_cpu.c: the same ViT-Ti/16 training step (fp32,
# AdamW, gradient clipping) at the same batch and thread count, so bench_cpu.sh can print a ratio.
# A plain module that mirrors timm's VisionTransformer (no timm on the machine).
# Usage: bench_torch.py [batch=64] [threads=cores] [warmup=2] [timed=5]; VT_BENCH_OPS=1 adds a profile.
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0 only
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            x = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4.0):
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, img=224, patch=16, dim=192, depth=12, heads=3, classes=1000):
        super().__init__()
        tokens = (img // patch) ** 2 + 1
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, img):
        x = self.patch_embed(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))  # timm normalises every token, then pools the class token
        return self.head(x[:, 0])


def main():
    args = [int(a) for a in sys.argv[1:5]]
    B, threads, warmup, timed = args + [64, os.cpu_count(), 2, 5][len(args):]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ViT()
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
    attn = "sdpa" if hasattr(F, "scaled_dot_product_attention") else "explicit"
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
