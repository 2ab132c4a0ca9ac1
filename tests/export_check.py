"""export_check.py WEIGHTS.safetensors DUMP.safetensors WIDTH DEPTH HEADS [--hflip]: loads vit3d's
exported weights into the independent PyTorch ViT of ref_vit.py (timm's parameter names,
load_state_dict strict=True) and checks that it reproduces the validation logits vit3d wrote
with `vit3d eval --logits-out` on the same inputs: max |diff| / max |logit| <= 1e-5 (fp32, the
reference runs in float64). With --hflip the dump comes from `vit3d eval --eval-hflip 1`, and
the reference is the mean of the logits of each image and of its mirror image. Exit 0 = pass.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_vit import ViT, read_safetensors  # noqa: E402


def main():
    weights, dump = read_safetensors(sys.argv[1]), read_safetensors(sys.argv[2])
    width, depth, heads = map(int, sys.argv[3:6])
    patch = weights["patch_embed.proj.weight"].shape[-1]
    img = dump["images"].shape[-1]
    classes = weights["head.weight"].shape[0]
    mlp_ratio = weights["blocks.0.mlp.fc1.weight"].shape[0] / width
    model = ViT(img, patch, width, depth, heads, mlp_ratio, classes).double()
    model.load_state_dict({k: torch.as_tensor(v).double() for k, v in weights.items()},
                          strict=True)
    with torch.no_grad():
        x = torch.as_tensor(dump["images"]).double()
        ref = model(x)
        if "--hflip" in sys.argv[6:]:
            ref = 0.5 * (ref + model(x.flip(-1)))
    mine = torch.as_tensor(dump["logits"]).double()
    err = ((mine - ref).abs().max() / ref.abs().max()).item()
    agree = (mine.argmax(1) == ref.argmax(1)).double().mean().item()
    print(f"{len(mine)} validation images: max |vit3d - torch| / max |logit| = {err:.2e} "
          f"(tol 1e-05), argmax agreement {100 * agree:.2f}%")
    return 0 if err <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
