"""same_tensors.py A B: exits 0 where the safetensors files A and B hold the same tensors (names,
dtypes, shapes and bytes), whatever their metadata (vit3d export adds the run's), else 1 naming
the first difference."""
import json
import struct
import sys


def tensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return {name: (t["dtype"], t["shape"], blob[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]])
            for name, t in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    sys.exit(f"{sys.argv[1]} and {sys.argv[2]} name other tensors: {sorted(a.keys() ^ b.keys())[:5]}")
for name in sorted(a):
    if a[name] != b[name]:
        sys.exit(f"{name} differs between {sys.argv[1]} and {sys.argv[2]}")
