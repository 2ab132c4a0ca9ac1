# ref_philox.py: Philox4x32-10 (Salmon et al., SC'11) and the uniform numbers of vit3d's streams
# as src/vt_rng.h documents them, written here from the paper and not from vit3d's C, for the
# reference's drop path and dropout masks (ref_vit.py). Needs numpy only.
import numpy as np

M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    k0, k1 = key & M32, key >> 32 & M32
    c0, c1, c2, c3 = ctr
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def fnv1a(name):
    h = 2166136261
    for ch in name.encode():
        h = ((h ^ ch) * 16777619) & M32
    return h


def uniform(key, hi, lo, i):
    """Number i of stream (key, hi, lo): lane i % 4 of the block at counter (i // 4, lo, hi)."""
    blk = i >> 2
    return (philox4x32_10((blk & M32, blk >> 32, lo, hi), key)[i & 3] >> 8) / 2.0**24


def uniforms(key, hi, lo, idx):
    """uniform() for an array of numbers idx at once (numpy uint64: the 32x32-bit products fit)."""
    m = np.uint64(M32)
    blk = idx >> np.uint64(2)
    c0, c1 = blk & m, blk >> np.uint64(32)
    c2, c3 = np.full_like(idx, lo), np.full_like(idx, hi)
    k0, k1 = key & M32, key >> 32 & M32
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & m,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & m)
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    lane = np.choose((idx & np.uint64(3)).astype(np.int64), [c0, c1, c2, c3])
    return (lane >> np.uint64(8)).astype(np.float64) / 2.0**24
