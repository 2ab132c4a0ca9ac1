# bench_loader.py: the torchvision side of the loader benchmark (bench_loader.sh, label `bench`),
# and the maker of its data. `make OUT N` writes an ImageFolder of N 1024x1024 photo-like images as
# PNG (OUT/png) and JPEG q90 (OUT/jpeg); `run DIR THREADS EPOCHS BATCH LABEL MODE` times
# ImageFolder + RandomResizedCrop/flip/ToTensor/Normalize through a DataLoader, as bench_loader.c;
# `stages DIR LABEL` splits one process's time per image into decode / crop+resize / to tensor.
import os
import sys
import time


def make(out, n, side=1024, seed=0):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in range(2):
        for fmt in ("png", "jpeg"):
            os.makedirs(os.path.join(out, fmt, "class%d" % c), exist_ok=True)
    for i in range(n):
        # Photo-like statistics, so that PNG's deflate and JPEG's entropy coding do realistic
        # work: smooth structure at several scales (upsampled random fields, as shading and
        # objects), soft edges, and sensor-like noise. Pure noise or flat colour would make either
        # format unrealistically slow or fast.
        img = np.zeros((side, side, 3), np.float32)
        for cells, amp in ((4, 90.0), (16, 40.0), (64, 18.0), (256, 12.0)):
            small = rng.uniform(-1, 1, (cells, cells, 3)).astype(np.float32)
            field = np.stack([np.asarray(Image.fromarray(small[:, :, k], mode="F").resize(
                (side, side), Image.BICUBIC)) for k in range(3)], axis=2)
            img += amp * field
        img += 128.0 + rng.normal(0.0, 4.0, img.shape).astype(np.float32)
        pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), mode="RGB")
        name = "class%d/img%04d" % (i % 2, i)
        pil.save(os.path.join(out, "png", name + ".png"))  # Pillow's default: zlib level 6
        pil.save(os.path.join(out, "jpeg", name + ".jpg"), quality=90)


def proc_cpu_seconds(pid):
    # utime + stime of one process from /proc (clock ticks): persistent DataLoader workers are
    # never reaped, so getrusage(RUSAGE_CHILDREN) would not see them.
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_thread_per_worker(_):
    import torch

    torch.set_num_threads(1)


def run(root, threads, epochs, batch, label, mode):
    import torch
    from torchvision import datasets, transforms

    # Intra-op threads would add cores that vit3d does not get; each side has exactly `threads`.
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(root, transform=tf)
    # mode "workers": the usual training setup, THREADS worker processes (the main process only
    # receives batches). mode "single": no workers, everything in this one process (THREADS=1),
    # the cleanest per-core figure.
    workers = threads if mode == "workers" else 0
    dl = torch.utils.data.DataLoader(
        ds, batch_size=batch, shuffle=True, num_workers=workers,
        persistent_workers=workers > 0, worker_init_fn=one_thread_per_worker if workers else None)
    sink = 0.0
    # Epoch 0 warms the page cache and starts the workers; only the later epochs are timed.
    for x, _ in dl:
        sink += float(x[0, 0, 0, 0])
    pids = [os.getpid()] + ([w.pid for w in dl._iterator._workers] if workers else [])
    c0 = sum(proc_cpu_seconds(p) for p in pids)
    w0 = time.perf_counter()
    images = 0
    for _ in range(epochs):
        for x, _ in dl:
            sink += float(x[0, 0, 0, 0])
            images += x.shape[0]
    wall = time.perf_counter() - w0
    cpu = sum(proc_cpu_seconds(p) for p in pids) - c0
    print("torchvision format=%s mode=%s threads=%d batch=%d images=%d wall_s=%.3f img_s=%.2f "
          "img_s_per_core=%.2f cpu_s=%.3f img_per_cpu_s=%.2f" % (
              label, mode, threads, batch, images, wall, images / wall, images / wall / threads,
              cpu, images / cpu if cpu > 0 else float("nan")))
    del dl  # stops the persistent workers before the interpreter exits


def stages(root, label):
    # The same work as one sample of `run`, timed per stage with this thread's CPU clock, to set
    # beside `bench_loader --stages` (which stage Pillow + torchvision are faster or slower at).
    import torch
    import torchvision.transforms.functional as F
    from PIL import Image
    from torchvision import datasets, transforms

    torch.set_num_threads(1)
    rrc = transforms.RandomResizedCrop(224)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    ds = datasets.ImageFolder(root)
    t = [0.0, 0.0, 0.0]
    with open(ds.samples[0][0], "rb") as f:  # untimed: lazy imports and first allocations
        Image.open(f).convert("RGB")
    for path, _ in ds.samples:
        t0 = time.thread_time()
        with open(path, "rb") as f:  # as torchvision's pil_loader
            img = Image.open(f).convert("RGB")
        t1 = time.thread_time()
        i, j, h, w = rrc.get_params(img, rrc.scale, rrc.ratio)
        img = F.hflip(F.resized_crop(img, i, j, h, w, rrc.size, rrc.interpolation))
        t2 = time.thread_time()
        x = F.normalize(F.to_tensor(img), mean, std)
        t3 = time.thread_time()
        for k, d in enumerate((t1 - t0, t2 - t1, t3 - t2)):
            t[k] += d
    n = len(ds.samples)
    total = sum(t)
    print("torchvision-stages format=%s images=%d ms_per_image: decode=%.2f crop_resize=%.2f "
          "to_tensor_normalize=%.2f total=%.2f decode_share=%.0f%% (sum %.1f)" % (
              label, n, 1e3 * t[0] / n, 1e3 * t[1] / n, 1e3 * t[2] / n, 1e3 * total / n,
              100 * t[0] / total, float(x.sum())))


def main(argv):
    if len(argv) >= 3 and argv[0] == "make":
        make(argv[1], int(argv[2]))
    elif len(argv) >= 7 and argv[0] == "run":
        mode = argv[6]
        if mode not in ("workers", "single") or (mode == "single" and int(argv[2]) != 1):
            sys.exit("bench_loader.py: MODE is workers, or single with THREADS=1")
        run(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5], mode)
    elif len(argv) >= 3 and argv[0] == "stages":
        stages(argv[1], argv[2])
    else:
        sys.exit("usage: bench_loader.py make OUT N | "
                 "run DIR THREADS EPOCHS BATCH LABEL workers|single | stages DIR LABEL")


if __name__ == "__main__":
    main(sys.argv[1:])
