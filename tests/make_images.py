"""make_images.py ROOT [CLASSES PER_CLASS SIDE [webp]]: a small deterministic ImageFolder for
training tests that need the image loader (RandAugment, repeated augmentation): CLASSES folders of
PER_CLASS images, SIDE x SIDE (PNG and every third one JPEG; with webp, another third lossy
WebP), each a class-coloured pattern with noise, so that crops and augmentations have something
to change."""
import os
import sys

import numpy as np
from PIL import Image

root = sys.argv[1]
classes = int(sys.argv[2]) if len(sys.argv) > 2 else 4
per = int(sys.argv[3]) if len(sys.argv) > 3 else 16
side = int(sys.argv[4]) if len(sys.argv) > 4 else 32
webp = len(sys.argv) > 5 and sys.argv[5] == "webp"
rng = np.random.default_rng(1)
y, x = np.mgrid[0:side, 0:side] / side
for c in range(classes):
    os.makedirs(f"{root}/c{c}", exist_ok=True)
    for i in range(per):
        phase = rng.uniform(0, 6.28)
        wave = np.sin((c + 1) * 3.0 * x + phase) * np.cos((c + 2) * 2.0 * y)
        img = np.stack([128 + 100 * wave * (ch == c % 3 or ch == (c + 1) % 3) for ch in range(3)], -1)
        img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
        kind = "jpg" if i % 3 == 2 else "webp" if webp and i % 3 == 1 else "png"
        name = f"{root}/c{c}/{i:03d}.{kind}"
        Image.fromarray(img).save(name, quality=90) if kind != "png" else Image.fromarray(img).save(name)
