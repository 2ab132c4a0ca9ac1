"""bench_randaug.py RANDAUG_DUMP [REPS] (label bench, not pass/fail): RandAugment's cost per
224 x 224 image, vit3d (dataio/randaug.c through randaug_dump --bench) against Pillow, which
timm's RandAugment calls, measured in the same run on the same image, one thread each, in
alternating rounds so that machine noise hits both. Per operation at magnitude 9 (geometric ones
bicubic, as DeiT), then the whole rand-m9-mstd0.5-inc1 policy: vit3d's draws and operations
against timm's policy restated in Python over the same Pillow calls (2 operations uniform with
replacement, each with probability 0.5, magnitude N(9, 0.5) clipped to [0, 10], timm's levels).
Prints milliseconds per image and the ratio Pillow / vit3d (above 1: vit3d faster)."""
import os
import platform
import random
import subprocess
import sys
import tempfile
import timeit

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"bench_randaug: not measured: {e} (apt-get install python3-numpy python3-pil)")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from randaug_pil import GEOMETRIC, OPS, pillow, timm_level  # noqa: E402

DUMP = sys.argv[1]
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
ROUNDS = 3
S = 224
SPEC = "rand-m9-mstd0.5-inc1"


def picture():
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:S, 0:S]
    a = np.stack([x * 255 // (S - 1), y * 255 // (S - 1), (x + y) * 255 // (2 * S - 2)], -1)
    a = np.clip(a + rng.normal(0, 20, a.shape), 0, 255).astype(np.uint8)
    a[60:120, 80:170] = (200, 30, 90)
    return a


def timm_policy(img, rnd):
    """timm's RandAugment.__call__ for rand-m9-mstd0.5-inc1 over Pillow."""
    for op in rnd.choices(OPS, k=2):
        if rnd.random() > 0.5:
            continue
        m = max(0.0, min(rnd.gauss(9, 0.5), 10))
        arg = timm_level(op, m, rnd.random() > 0.5, True)
        img = pillow(img, op, arg, 1)
    return img


def main():
    arr = picture()
    pil = Image.fromarray(arr)
    cases = [(op, float(np.float32(timm_level(op, 9.0, False, True))), 1 if op in GEOMETRIC else 0)
             for op in OPS]
    with tempfile.TemporaryDirectory() as work:
        src = os.path.join(work, "in.rgb")
        arr.tofile(src)
        lines = "".join(f"{OPS.index(o)} {a!r} {b}\n" for o, a, b in cases)
        mine = {o: [] for o, _, _ in cases} | {"policy": []}
        theirs = {o: [] for o, _, _ in cases} | {"policy": []}
        for _ in range(ROUNDS):
            out = subprocess.run([DUMP, "--bench", src, str(S), str(REPS), SPEC], input=lines,
                                 text=True, capture_output=True, check=True).stdout.split("\n")
            for line in out:
                f = line.split()
                if len(f) == 4:
                    mine[OPS[int(f[0])]].append(float(f[3]))
                elif len(f) == 3 and f[0] == "policy":
                    mine["policy"].append(float(f[2]))
            for op, arg, bic in cases:
                t = timeit.timeit(lambda: pillow(pil, op, arg, bic), number=REPS)
                theirs[op].append(t / REPS * 1e3)
            rnd = random.Random(1)
            t = timeit.timeit(lambda: timm_policy(pil, rnd), number=REPS)
            theirs["policy"].append(t / REPS * 1e3)
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"bench_randaug: {S}x{S} RGB, one thread each, {ROUNDS} alternating rounds of {REPS} "
          f"images, best round; Pillow {Image.__version__}, {cpu}")
    print(f"{'operation (magnitude 9)':<28}{'vit3d ms':>10}{'Pillow ms':>11}{'Pillow/vit3d':>14}")
    for key in [o for o, _, _ in cases] + ["policy"]:
        a, b = min(mine[key]), min(theirs[key])
        name = f"{SPEC} per image" if key == "policy" else key
        print(f"{name:<28}{a:>10.3f}{b:>11.3f}{b / a:>14.2f}")


main()
