"""bench_torch_gpu.py: the PyTorch peer of tests/gpu/bench_gpu.c on a GPU: timm's
vit_base_patch16_224 (or another timm ViT), the same batch, one device-resident batch, AdamW
(fused, PyTorch's fastest, on a GPU),
clip_grad_norm_ 1.0 and label smoothing 0.1 as in vit3d's step, in bf16 autocast (fp32 master
weights), eager or torch.compile. MFU uses vit3d's own FLOP count (vit/config.c,
vt_config_train_flops) so both sides are counted the same way. Not pass/fail.

Usage: bench_torch_gpu.py [--mode eager|compile] [--model vit_base_patch16_224] [--batch 128]
       [--warmup 3] [--timed 10] [--peak-tflops 989] [--dtype bf16|fp32] [--device cuda|cpu]
Prints one line starting with "torch-bench". --device cpu only checks the script on machines
without a GPU.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def vit3d_train_flops(img, patch, width, depth, classes, mlp_hidden):
    """vt_config_train_flops: 3 x the forward's multiply-adds x 2 (no softmax or norms)."""
    n = (img // patch) ** 2 + 1
    block = n * (4.0 * width * width + 2.0 * width * mlp_hidden) + 2.0 * n * n * width
    fwd = 2.0 * (depth * block + (n - 1) * 3.0 * patch * patch * width + width * classes)
    return 3.0 * fwd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--model", default="vit_base_patch16_224")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timed", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    import timm  # after argparse, so --help works without timm

    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("torch-bench SKIP: torch sees no CUDA device")
        return 77
    if a.mode == "compile" and not hasattr(torch, "compile"):
        print(f"torch-bench SKIP: torch {torch.__version__} has no torch.compile")
        return 77
    torch.manual_seed(0)
    model = timm.create_model(a.model, pretrained=False, num_classes=1000).to(dev)
    img_size, patch = model.patch_embed.img_size[0], model.patch_embed.patch_size[0]
    width, depth = model.embed_dim, len(model.blocks)
    mlp_hidden = model.blocks[0].mlp.fc1.out_features
    flops = vit3d_train_flops(img_size, patch, width, depth, model.num_classes, mlp_hidden)
    # PyTorch's fastest AdamW on a GPU: the fused kernel (torch >= 2.0), else its default.
    adamw = "default"
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05,
                                fused=dev.type == "cuda")
        adamw = "fused" if dev.type == "cuda" else "default"
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    fwd = torch.compile(model) if a.mode == "compile" else model
    x = torch.randn(a.batch, 3, img_size, img_size, device=dev)
    y = torch.randint(0, model.num_classes, (a.batch,), device=dev)
    bf16 = a.dtype == "bf16"

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(fwd(x), y, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    step()  # compile mode: compiles here
    sync()
    first_s = time.perf_counter() - t0
    for _ in range(max(a.warmup - 1, 0)):
        step()
    sync()
    times = []
    for _ in range(a.timed):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    img_s = a.batch / med
    tflops = flops * img_s / 1e12
    attn = "sdpa" if getattr(model.blocks[0].attn, "fused_attn", False) else "explicit"
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"torch-bench mode={a.mode} model={a.model} batch={a.batch} dtype={a.dtype} "
          f"img_per_s={img_s:.1f} step_ms={1e3 * med:.2f} min_ms={1e3 * min(times):.2f} "
          f"model_tflops={tflops:.2f} mfu={tflops / a.peak_tflops:.4f} "
          f"first_step_s={first_s:.1f} loss={loss.item():.4f} attention={attn} adamw={adamw} "
          f"torch={torch.__version__} timm={timm.__version__} device={name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
