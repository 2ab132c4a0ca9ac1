"""The filtered interpolations (--train-interpolation / --eval-interpolation bilinear|bicubic:
dataio/resample.c) against Pillow, which torchvision's transforms call on PIL images.

Usage: resample_pil.py RESAMPLE_DUMP WORK_DIR. On PNG images of several sizes (downscaled by up
to 10x, and upscaled), each training sample must equal Pillow's img.crop(box).resize((S, S), f)
(mirrored when the crop says so), each simple random crop (DeiT III's --src) torchvision's
Resize(S) (Pillow's resize, shorter side to S), numpy's reflect padding by 4, the S x S window at
the crop's offset and the flip, each training sample with the colour jitter alone (timm's
--color-jitter 0.4 without --aa) the training crop then torchvision's ColorJitter functions in the
drawn order, and each evaluation sample Pillow's resize of the whole image,
shorter side to floor(S / 0.875), then the centre S x S (torchvision's Resize + CenterCrop; with
--eval-crop-mode squash both sides to floor(S / 0.875), timm's crop_mode 'squash'), byte
for byte (the samples are normalised floats: the bytes are recovered from them). A JPEG decoded
in full must match too; decoded reduced (DCT scaling) it must stay close. Exits 77 (skip)
without numpy or Pillow.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"SKIP: {e} (Debian: apt-get install python3-numpy python3-pil)")
    sys.exit(77)

dump, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
S, N = 64, 24
try:  # ColorJitter's brightness, contrast and saturation (vt_ra_op's numbers)
    import torchvision.transforms.functional as TF
    JITTER = {9: TF.adjust_brightness, 8: TF.adjust_contrast, 7: TF.adjust_saturation}
except ImportError:  # (what they call on PIL images)
    from PIL import ImageEnhance
    JITTER = {9: lambda i, f: ImageEnhance.Brightness(i).enhance(f),
              8: lambda i, f: ImageEnhance.Contrast(i).enhance(f),
              7: lambda i, f: ImageEnhance.Color(i).enhance(f)}


def picture(w, h, seed):
    """Edges, gradients and noise: something every filter tap changes."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                    ((x // 7 + y // 5) % 2) * 255], -1).astype(np.int32)
    img += rng.integers(-40, 40, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def reference(img, mode, f, crop):
    if mode == "src":  # x, y: the window's start in the resized image, -4 at the padding's edge
        x, y, _, _, flip = crop[:5]
        w, h = img.size
        rw, rh = (S, int(S * h / w)) if w <= h else (int(S * w / h), S)
        padded = np.pad(np.asarray(img.resize((rw, rh), FILTERS[f])), ((4, 4), (4, 4), (0, 0)),
                        mode="reflect")
        out = Image.fromarray(padded[int(y) + 4:int(y) + 4 + S, int(x) + 4:int(x) + 4 + S])
        return out.transpose(Image.FLIP_LEFT_RIGHT) if flip else out
    if mode in ("train", "jitter"):
        x, y, w, h, flip = crop[:5]
        out = img.crop((int(x), int(y), int(x + w), int(y + h))).resize((S, S), FILTERS[f])
        out = out.transpose(Image.FLIP_LEFT_RIGHT) if flip else out
        for op, factor in crop[5]:  # (torchvision's ColorJitter calls these on PIL images)
            out = JITTER[op](out, factor)
        return out
    w, h = img.size
    R = int(np.floor(S / 0.875))
    rw, rh = (R, int(R * h / w)) if w <= h else (int(R * w / h), R)
    if mode == "squash":  # timm's crop_mode 'squash': Resize((R, R)), then the centre crop
        rw = rh = R
    left, top = int(round((rw - S) / 2.0)), int(round((rh - S) / 2.0))
    return img.resize((rw, rh), FILTERS[f]).crop((left, top, left + S, top + S))


def ours(path, mode, f, decode):
    raw = f"{work}/out.f32"
    lines = subprocess.run([dump, path, str(S), mode, f, str(N), decode, raw], check=True,
                           capture_output=True, text=True).stdout.split("\n")[:N]
    planes = np.fromfile(raw, np.float32).reshape(N, 3, S, S)
    scale = np.float32(1.0) / (np.float32(255.0) * STD)
    bias = -MEAN / STD
    pixels = (planes - bias[None, :, None, None]) / scale[None, :, None, None]
    crops = [tuple(float(v) for v in l.split()[:4]) + (int(l.split()[4]),) +
             ([(int(a), float(b)) for a, b in zip(l.split()[6::2], l.split()[7::2])],)
             for l in lines]
    return np.rint(pixels).transpose(0, 2, 3, 1), crops, np.abs(pixels - np.rint(pixels)).max()


failures = 0
checked = 0
cases = [(300, 200, "png"), (97, 131, "png"), (1000, 640, "png"), (41, 45, "png"),
         (640, 480, "jpg")]
for w, h, kind in cases:
    path = f"{work}/img_{w}x{h}.{kind}"
    picture(w, h, w * h).save(path, quality=92) if kind == "jpg" else picture(w, h, w * h).save(path)
    img = Image.open(path).convert("RGB")
    for f in FILTERS:
        for mode in ("train", "src", "jitter", "eval", "squash"):
            for decode in (("full", "reduced") if kind == "jpg" else ("reduced",)):
                got, crops, off = ours(path, mode, f, decode)
                want = np.stack([np.asarray(reference(img, mode, f, c), np.float64) for c in crops])
                diff = np.abs(got - want)
                exact = kind == "png" or decode == "full"
                ok = off < 1e-3 and (diff.max() == 0 if exact else diff.mean() < 4.0)
                ok = ok and all(len(c[5]) == (3 if mode == "jitter" else 0) for c in crops)
                checked += 1
                tag = f"{kind} {w}x{h} {f} {mode} ({decode} decode)"
                if not ok:
                    failures += 1
                    print(f"FAIL {tag}: max |diff| {diff.max():.0f} levels, mean {diff.mean():.3f} "
                          f"(samples off integer levels by {off:.2e})")
                else:
                    print(f"ok {tag}: {N} samples, max |diff| {diff.max():.0f}"
                          + ("" if exact else f", mean {diff.mean():.2f} (reduced decode)"))
print(f"resample_pil: {checked} cases, {failures} failed")
sys.exit(1 if failures else 0)
