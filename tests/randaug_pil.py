"""RandAugment's operations and levels (dataio/randaug.c) against the Pillow calls and level
functions of timm's RandAugment (timm/data/auto_augment.py, restated here from its definitions),
and 3-Augment's (dataio/threeaug.c) against DeiT III's: grayscale, the Gaussian blur, and whole
plans (one of grayscale, solarize, blur, then the colour jitter in the drawn order) through
torchvision's functions on PIL images (Pillow's own calls where torchvision is missing).

Usage: randaug_pil.py RANDAUG_DUMP WORK_DIR. Every operation runs on three images (noise 47x61,
a 224x224 picture of gradients and a box, a low-contrast 32x32; the blur also on 5x3 and 1x2 to
reach its edge cases) at several arguments, with bilinear and bicubic resampling for the
geometric ones, and must equal Pillow's output byte for byte. Exits 77 (skip) without numpy or
Pillow.
"""
import os
import subprocess
import sys

try:
    import numpy as np
    from PIL import Image, ImageEnhance, ImageFilter, ImageOps
except ImportError as e:
    print(f"SKIP: {e} (Debian: apt-get install python3-numpy python3-pil)")
    sys.exit(77)

FILL = (124, 116, 104)  # timm's img_mean for ImageNet's mean
OPS = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
       "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel",
       "TranslateYRel"]
GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
EXTRA = {"Grayscale": 100, "GaussianBlur": 101}  # 3-Augment's, in randaug_dump's numbering


def pillow(img, op, arg, bicubic):
    """The call timm's aug functions make for op (with fillcolor and resample as its hparams)."""
    kw = dict(resample=Image.BICUBIC if bicubic else Image.BILINEAR, fillcolor=FILL)
    w, h = img.size
    affine = {"ShearX": (1, arg, 0, 0, 1, 0), "ShearY": (1, 0, 0, arg, 1, 0),
              "TranslateXRel": (1, 0, arg * w, 0, 1, 0), "TranslateYRel": (1, 0, 0, 0, 1, arg * h)}
    if op in affine:
        return img.transform(img.size, Image.AFFINE, affine[op], **kw)
    if op == "Rotate":
        return img.rotate(arg, **kw)
    if op == "Grayscale":  # torchvision's Grayscale(3) on a PIL image: L in every channel
        return img.convert("L").convert("RGB")
    if op == "GaussianBlur":  # DeiT III's GaussianBlur
        return img.filter(ImageFilter.GaussianBlur(radius=arg))
    if op == "AutoContrast":
        return ImageOps.autocontrast(img)
    if op == "Equalize":
        return ImageOps.equalize(img)
    if op == "Invert":
        return ImageOps.invert(img)
    if op == "Posterize":
        return img if arg >= 8 else ImageOps.posterize(img, int(arg))
    if op == "Solarize":
        return ImageOps.solarize(img, arg)
    if op == "SolarizeAdd":  # timm's solarize_add, threshold 128
        return img.point([min(255, i + int(arg)) if i < 128 else i for i in range(256)] * 3)
    enhancer = {"Color": ImageEnhance.Color, "Contrast": ImageEnhance.Contrast,
                "Brightness": ImageEnhance.Brightness, "Sharpness": ImageEnhance.Sharpness}[op]
    return enhancer(img).enhance(arg)


def timm_level(op, m, negate, increasing):
    """timm's _LEVEL_TO_ARG for RandAugment (the 'Increasing' variants when increasing)."""
    sign = -1.0 if negate else 1.0
    if op == "Rotate":
        return sign * (m / 10) * 30
    if op in ("ShearX", "ShearY"):
        return sign * (m / 10) * 0.3
    if op in ("TranslateXRel", "TranslateYRel"):
        return sign * (m / 10) * 0.45
    if op == "Posterize":
        bits = int((m / 10) * 4)
        return 4 - bits if increasing else bits
    if op == "Solarize":
        t = int((m / 10) * 256)
        return 256 - t if increasing else t
    if op == "SolarizeAdd":
        return min(128, int((m / 10) * 110))
    if op in ("Color", "Contrast", "Brightness", "Sharpness"):
        if increasing:
            return max(0.1, 1.0 + sign * (m / 10) * 0.9)
        return (m / 10) * 1.8 + 0.1
    return 0.0


def three_augment(DUMP, WORK, picture):
    """Whole 3-Augment plans on the 224x224 picture against DeiT III's transforms, run through
    torchvision.transforms.functional on PIL images as its Compose does: the pick (Grayscale(3),
    Solarization = ImageOps.solarize at 128, GaussianBlur), then ColorJitter(0.3, 0.3, 0.3)'s
    brightness, contrast and saturation in the plan's order. Also the draws: every pick, every
    order and factors spread over [0.7, 1.3]."""
    try:
        import torchvision.transforms.functional as TF
        jitter = {9: TF.adjust_brightness, 8: TF.adjust_contrast, 7: TF.adjust_saturation}
        gray = lambda img: TF.rgb_to_grayscale(img, num_output_channels=3)
        via = "torchvision " + __import__("torchvision").__version__
    except ImportError:
        jitter = {9: lambda i, f: ImageEnhance.Brightness(i).enhance(f),
                  8: lambda i, f: ImageEnhance.Contrast(i).enhance(f),
                  7: lambda i, f: ImageEnhance.Color(i).enhance(f)}
        gray = lambda img: img.convert("L").convert("RGB")
        via = "Pillow (no torchvision)"
    n, size = 60, picture.shape[0]
    src, dst = os.path.join(WORK, "three_in.rgb"), os.path.join(WORK, "three_out.rgb")
    picture.tofile(src)
    out = subprocess.run([DUMP, "--threeaug", src, str(size), dst, "0.3", str(n)], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    got = np.fromfile(dst, np.uint8).reshape(n, size, size, 3)
    failures, picks, orders, factors = 0, set(), set(), []
    for k in range(n):
        f = out[k].split()
        pick, radius, steps = int(f[0]), float(f[1]), [(int(f[i]), float(f[i + 1])) for i in (2, 4, 6)]
        picks.add(pick)
        orders.add(tuple(op for op, _ in steps))
        factors += [x for _, x in steps]
        img = Image.fromarray(picture)
        img = [gray, lambda i: ImageOps.solarize(i, 128),
               lambda i: i.filter(ImageFilter.GaussianBlur(radius=radius))][pick](img)
        for op, x in steps:
            img = jitter[op](img, x)
        if (np.asarray(img.convert("RGB")) != got[k]).any():
            failures += 1
            print(f"FAIL 3-Augment plan {k} ({out[k]}): differs from DeiT III's transforms")
    spread = min(factors) < 0.75 and max(factors) > 1.25 and 0.7 <= min(factors) and max(factors) <= 1.3
    if picks != {0, 1, 2} or len(orders) != 6 or not spread:
        failures += 1
        print(f"FAIL 3-Augment draws: picks {sorted(picks)}, {len(orders)} orders of 6, factors "
              f"in [{min(factors):.3f}, {max(factors):.3f}]")
    print(f"3-Augment: {n} plans ({len(orders)} jitter orders, picks {sorted(picks)}) against "
          f"DeiT III's transforms through {via}: {'ok' if not failures else 'FAIL'}")
    return failures


def main(DUMP, WORK):
    os.makedirs(WORK, exist_ok=True)
    failures = 0

    out = subprocess.run([DUMP, "--levels"], check=True, capture_output=True, text=True).stdout
    n_levels = 0
    for line in out.splitlines():
        inc, op, m, neg, arg = line.split()
        want = timm_level(OPS[int(op)], float(m), int(neg), int(inc))
        n_levels += 1
        if abs(float(arg) - want) > 1e-6 * max(1.0, abs(want)):
            print(f"FAIL level {OPS[int(op)]} m {m} negate {neg} inc {inc}: {arg}, timm {want}")
            failures += 1
    print(f"levels: {n_levels} (operation, magnitude, sign, inc) checked against timm's")

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:224, 0:224]
    picture = np.stack([x * 255 // 223, y * 255 // 223, (x + y) * 255 // 446], -1).astype(np.uint8)
    picture[60:120, 80:170] = (200, 30, 90)
    images = [rng.integers(0, 256, (61, 47, 3), dtype=np.uint8), picture,
              rng.integers(40, 180, (32, 32, 3)).astype(np.uint8)]
    args = {"Posterize": [0, 1, 2, 3, 4, 8], "Solarize": [0, 26, 128, 230, 256],
            "SolarizeAdd": [0, 55, 99, 110], "Rotate": [-30, -12.5, 7.25, 27.0],
            "ShearX": [-0.3, -0.1, 0.05, 0.27], "ShearY": [-0.3, -0.1, 0.05, 0.27],
            "TranslateXRel": [-0.45, -0.2, 0.1234, 0.405],
            "TranslateYRel": [-0.45, -0.2, 0.1234, 0.405]}
    blur_radii = [0.1, 0.2731, 0.5, 0.9, 1.0, 1.37, 1.9, 2.0]
    cases = [("Grayscale", 0.0, 0)] + [("GaussianBlur", float(np.float32(r)), 0) for r in blur_radii]
    for op in OPS:
        for a in args.get(op, [0.1, 0.37, 1.0, 1.45, 1.9] if op in
                          ("Color", "Contrast", "Brightness", "Sharpness") else [0]):
            a = float(np.float32(a))  # the value vit3d's float argument holds
            for bicubic in ((0, 1) if op in GEOMETRIC else (0,)):
                cases.append((op, a, bicubic))
    src, dst = os.path.join(WORK, "in.rgb"), os.path.join(WORK, "out.rgb")
    for im in images:
        h, w = im.shape[:2]
        im.tofile(src)
        number = lambda o: EXTRA[o] if o in EXTRA else OPS.index(o)
        lines = "".join(f"{number(o)} {a!r} {b}\n" for o, a, b in cases)
        subprocess.run([DUMP, src, str(w), str(h), dst], input=lines.encode(), check=True)
        got = np.fromfile(dst, np.uint8).reshape(len(cases), h, w, 3)
        for k, (op, a, b) in enumerate(cases):
            want = np.asarray(pillow(Image.fromarray(im), op, a, b).convert("RGB"))
            d = np.abs(want.astype(int) - got[k].astype(int))
            if d.max() > 0:
                failures += 1
                print(f"FAIL {w}x{h} {op}({a}, {'bicubic' if b else 'bilinear'}): max difference "
                      f"{d.max()}, {np.mean(d > 0) * 100:.3f}% of the values differ")
    print(f"operations: {len(cases) * len(images)} (image, operation, argument, resampling) "
          f"against Pillow {Image.__version__}")
    for h, w in ((3, 5), (2, 1)):  # the blur on images narrower than its box
        im = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        im.tofile(src)
        lines = "".join(f"101 {float(np.float32(r))!r} 0\n" for r in blur_radii)
        subprocess.run([DUMP, src, str(w), str(h), dst], input=lines.encode(), check=True)
        got = np.fromfile(dst, np.uint8).reshape(len(blur_radii), h, w, 3)
        for k, r in enumerate(blur_radii):
            want = np.asarray(pillow(Image.fromarray(im), "GaussianBlur", float(np.float32(r)), 0))
            if (want != got[k]).any():
                failures += 1
                print(f"FAIL {w}x{h} GaussianBlur({r}): differs from Pillow's")
    failures += three_augment(DUMP, WORK, picture)
    if failures:
        print(f"FAIL: {failures} checks")
        sys.exit(1)
    print("PASS: every operation equals Pillow's byte for byte, every level timm's")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
