"""convert_weights.py [--unsafe-pickle] [--drop-head] IN OUT.safetensors: a published ViT
checkpoint as the timm-named safetensors that `vit3d train|eval --init-from` reads, and the vit3d
flags its layout needs. --drop-head leaves out the classifier (head and the pre-logits layer,
as the ViT paper's fine-tuning does): --init-from then starts a fresh head (zero with
--weight-init jax).

IN is a PyTorch file (.pth, .pt, .bin: loaded with weights_only where this PyTorch has it, so
a pickle cannot run code; a training checkpoint that also pickles other objects, as MAE's and
DeiT's argparse arguments, needs --unsafe-pickle: only for a file you trust), a JAX/Flax .npz
of Google's original ViT (the ViT paper's and AugReg's "embedding/kernel", "Transformer/
encoderblock_i/MultiHeadDotProductAttention_1/query/kernel", ...; big_vision's "params/" layout
with scanned blocks too; class-token, gap and MAP heads; the representation layer,
pre_logits, of the ViT paper's ImageNet-21k weights and big_vision's rep_size; big_vision's
fixed sin-cos positions, which it does not store: --pos-embed sincos2d) or safetensors, holding the
weights directly or under "model",
"state_dict", "module", "model_ema" or "teacher" (DINO/DINOv2 training checkpoints). Names are
made timm's:
  - prefixes of wrappers dropped: "module." (DDP), "_orig_mod." (torch.compile), "backbone."
  - DeiT III (the deit repository's models_v2): blocks.i.gamma_1 / gamma_2 -> ls1.gamma / ls2.gamma
  - DINOv2: register_tokens -> reg_token; FSDP-chunked blocks.c.i. -> blocks.i.; with registers
    its class token's position (its registers have none) is added into cls_token, leaving
    pos_embed for the patches (timm's no_embed_class layout, --no-embed-class 1)
  - timm's ParallelScalingBlock (ViT-22B's parallel block): in_norm -> norm1, in_proj's rows
    [fc1 | q | k | v] -> mlp.fc1 and attn.qkv, attn_out_proj -> attn.proj, mlp_out_proj ->
    mlp.fc2, q_norm/k_norm -> attn.q_norm/k_norm. Without its qkv bias timm adds
    cat(zeros(3 * width), mlp_bias) to in_proj's output, whose rows are [fc1 | q | k | v]: the
    first 3 * width rows get no bias and mlp_bias lands on the last fc1 rows and on q, k, v;
    that bias is written as it acts (fc1's and qkv's), so the model has a qkv bias
  - parts no classifier uses dropped: MAE's decoder (decoder_*), mask_token, DINO's heads
Every other tensor must be one vit3d builds (blocks' norm1, attn.qkv, attn.q_norm/k_norm,
attn.proj, ls1/ls2/ls, norm2, mlp.fc1/fc2; cls_token, reg_token, pos_embed, patch_embed.proj,
norm, fc_norm, head, pre_logits.fc; the MAP head's attn_pool.latent, q, kv, proj, norm,
mlp.fc1/fc2): anything
else (SwiGLU, relative position biases, a distillation token) is
refused by name. Tensors are written as float32. The activation is not in the weights: an .npz
comes from JAX code whose GELU is Flax's tanh form (`--act gelu_tanh`; timm uses erf for them).
Exit 0 converted, 1 refused, 2 usage.
Needs numpy and, for PyTorch files, torch (Debian: python3-numpy python3-torch).
"""
import json
import math
import re
import struct
import sys

import numpy as np

# vit3d's tensor names (vit/params.c), as patterns.
KNOWN = [r"cls_token", r"reg_token", r"pos_embed", r"patch_embed\.proj\.(weight|bias)",
         r"(norm|fc_norm|norm_pre|head)\.(weight|bias)",
         r"blocks\.\d+\.(norm1|norm2|attn\.qkv|attn\.proj|attn\.q_norm|attn\.k_norm|mlp\.fc1|mlp\.fc2)"
         r"\.(weight|bias)",
         r"blocks\.\d+\.(ls1|ls2|ls)\.gamma",
         r"attn_pool\.latent", r"attn_pool\.(q|kv|proj|norm|mlp\.fc1|mlp\.fc2)\.(weight|bias)",
         r"pre_logits\.fc\.(weight|bias)"]
DROPPED = re.compile(r"^(decoder|mask_token|dino_head|ibot_head|head_drop)")
WRAPPERS = ("model", "state_dict", "module", "model_ema", "teacher")


def read_safetensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    kinds = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        raw = blob[8 + n + lo:8 + n + hi]
        if t["dtype"] == "BF16":  # the upper halves of float32s
            a = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
            out[name] = a.view(np.float32).reshape(t["shape"])
        elif t["dtype"] in kinds:
            out[name] = np.frombuffer(raw, kinds[t["dtype"]]).reshape(t["shape"])
        else:
            sys.exit(f"convert_weights: {path}: tensor {name} is {t['dtype']}, not a float")
    return out


def read_torch(path, unsafe):
    import torch
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not unsafe)
    except TypeError:  # a PyTorch without weights_only
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # a pickle with more than tensors (an optimizer, args objects)
        sys.exit(f"convert_weights: {path} pickles objects other than tensors ({str(e)[:120]}); "
                 "if you trust the file, rerun with --unsafe-pickle")
    while isinstance(obj, dict):
        inner = next((obj[k] for k in WRAPPERS if isinstance(obj.get(k), dict)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, dict):
        sys.exit(f"convert_weights: {path} holds no dictionary of tensors")
    return {k: v.detach().float().numpy() for k, v in obj.items() if hasattr(v, "detach")}


def from_flax(w):
    """Google's original ViT weights (a Flax tree flattened into an .npz, as the ViT paper's,
    AugReg's and big_vision's checkpoints are) under timm's names: kernels transposed to PyTorch's
    (out, in) order, attention's (width, heads, head_dim) kernels flattened and q, k, v stacked
    into qkv, a scanned encoder's leading layer axis split into blocks. Also the heads count."""
    prefix = next((p for p in ("opt/target/", "params/img/", "params/", "")
                   if f"{p}embedding/kernel" in w), None)
    if prefix is None:
        sys.exit("convert_weights: an .npz without embedding/kernel: not Google's ViT layout")
    big_vision = prefix.startswith("params/")
    get = lambda k: np.asarray(w[prefix + k], np.float32)  # noqa: E731
    sd = {"patch_embed.proj.weight": get("embedding/kernel").transpose(3, 2, 0, 1),
          "patch_embed.proj.bias": get("embedding/bias"),
          "norm.weight": get("Transformer/encoder_norm/scale"),
          "norm.bias": get("Transformer/encoder_norm/bias")}
    pos = "pos_embedding" if big_vision else "Transformer/posembed_input/pos_embedding"
    if prefix + pos in w:  # else big_vision's fixed sin-cos positions (posemb 'sincos2d')
        sd["pos_embed"] = get(pos)
    if prefix + "cls" in w:  # else big_vision's gap head: the mean of encoder_norm's tokens
        sd["cls_token"] = get("cls")
    if prefix + "head/kernel" in w:
        sd["head.weight"], sd["head.bias"] = get("head/kernel").T, get("head/bias")
    if prefix + "pre_logits/kernel" in w:  # the representation layer (big_vision's rep_size)
        sd["pre_logits.fc.weight"] = get("pre_logits/kernel").T
        sd["pre_logits.fc.bias"] = get("pre_logits/bias")
    if prefix + "MAPHead_0/probe" in w:  # big_vision's MAP head (SigLIP): timm's attn_pool
        m = lambda k: get("MAPHead_0/" + k)  # noqa: E731
        att = "MultiHeadDotProductAttention_0/"
        flat = lambda k: k.reshape(k.shape[0], -1).T  # (C, heads, head_dim) -> (out, in)  # noqa: E731
        sd["attn_pool.latent"] = m("probe")
        sd["attn_pool.q.weight"], sd["attn_pool.q.bias"] = \
            flat(m(att + "query/kernel")), m(att + "query/bias").reshape(-1)
        sd["attn_pool.kv.weight"] = np.concatenate([flat(m(att + f"{n}/kernel"))
                                                    for n in ("key", "value")])
        sd["attn_pool.kv.bias"] = np.concatenate([m(att + f"{n}/bias").reshape(-1)
                                                  for n in ("key", "value")])
        out = m(att + "out/kernel")  # (heads, head_dim, C)
        sd["attn_pool.proj.weight"] = out.reshape(-1, out.shape[-1]).T
        sd["attn_pool.proj.bias"] = m(att + "out/bias")
        sd["attn_pool.norm.weight"], sd["attn_pool.norm.bias"] = \
            m("LayerNorm_0/scale"), m("LayerNorm_0/bias")
        for r in range(2):
            sd[f"attn_pool.mlp.fc{r + 1}.weight"] = m(f"MlpBlock_0/Dense_{r}/kernel").T
            sd[f"attn_pool.mlp.fc{r + 1}.bias"] = m(f"MlpBlock_0/Dense_{r}/bias")
    mha, mlp, ln2 = ("MultiHeadDotProductAttention_0", "MlpBlock_0", "LayerNorm_1") if big_vision \
        else ("MultiHeadDotProductAttention_1", "MlpBlock_3", "LayerNorm_2")
    scanned = prefix + "Transformer/encoderblock/LayerNorm_0/scale" in w
    depth = (w[prefix + "Transformer/encoderblock/LayerNorm_0/scale"].shape[0] if scanned else
             sum(1 for k in w if k.startswith(prefix + "Transformer/encoderblock_") and
                 k.endswith("/LayerNorm_0/scale")))
    heads = 0
    for i in range(depth):
        blk = "Transformer/encoderblock/" if scanned else f"Transformer/encoderblock_{i}/"
        b = (lambda k, blk=blk, i=i: get(blk + k)[i]) if scanned else (lambda k, blk=blk: get(blk + k))
        q = [b(f"{mha}/{n}/kernel") for n in ("query", "key", "value")]  # (C, heads, head_dim)
        heads = q[0].shape[1]
        pre = f"blocks.{i}"
        sd[f"{pre}.norm1.weight"], sd[f"{pre}.norm1.bias"] = b("LayerNorm_0/scale"), b("LayerNorm_0/bias")
        sd[f"{pre}.attn.qkv.weight"] = np.concatenate([k.reshape(k.shape[0], -1).T for k in q])
        sd[f"{pre}.attn.qkv.bias"] = np.concatenate(
            [b(f"{mha}/{n}/bias").reshape(-1) for n in ("query", "key", "value")])
        out = b(f"{mha}/out/kernel")  # (heads, head_dim, C)
        sd[f"{pre}.attn.proj.weight"] = out.reshape(-1, out.shape[-1]).T
        sd[f"{pre}.attn.proj.bias"] = b(f"{mha}/out/bias")
        sd[f"{pre}.norm2.weight"], sd[f"{pre}.norm2.bias"] = b(f"{ln2}/scale"), b(f"{ln2}/bias")
        for r in range(2):
            sd[f"{pre}.mlp.fc{r + 1}.weight"] = b(f"{mlp}/Dense_{r}/kernel").T
            sd[f"{pre}.mlp.fc{r + 1}.bias"] = b(f"{mlp}/Dense_{r}/bias")
    return {k: np.ascontiguousarray(v) for k, v in sd.items()}, heads


def timm_name(k):
    for prefix in ("module.", "_orig_mod.", "backbone."):
        while k.startswith(prefix):
            k = k[len(prefix):]
    k = re.sub(r"^blocks\.\d+\.(\d+)\.", r"blocks.\1.", k)  # DINOv2's FSDP chunks
    k = re.sub(r"^(blocks\.\d+)\.gamma_([12])$", r"\1.ls\2.gamma", k)  # DeiT III
    return "reg_token" if k == "register_tokens" else k


# timm's ParallelScalingBlock's own names -> vit3d's parallel block's (in_proj is split apart).
PSB_NAMES = {"in_norm": "norm1", "q_norm": "attn.q_norm", "k_norm": "attn.k_norm",
             "attn_out_proj": "attn.proj", "mlp_out_proj": "mlp.fc2"}


def split_parallel_blocks(sd):
    """timm's ParallelScalingBlock tensors as vit3d's parallel block (the docstring above); the
    number of blocks converted and whether an mlp_bias (no qkv bias) was placed as timm adds it."""
    blocks = sorted(int(k.split(".")[1]) for k in sd if re.fullmatch(r"blocks\.\d+\.in_proj\.weight", k))
    moved = False
    for i in blocks:
        pre = f"blocks.{i}"
        w = sd.pop(f"{pre}.in_proj.weight")
        C = w.shape[1]
        F = w.shape[0] - 3 * C
        b = sd.pop(f"{pre}.in_proj.bias", None)
        mlp_bias = sd.pop(f"{pre}.mlp_bias", None)
        if b is None:
            b = np.zeros(F + 3 * C, np.float32)
            if mlp_bias is not None:  # timm: torch.cat((qkv_bias zeros, mlp_bias))
                b = np.concatenate([np.zeros(3 * C, np.float32), np.asarray(mlp_bias, np.float32)])
                moved = True
        sd[f"{pre}.mlp.fc1.weight"], sd[f"{pre}.attn.qkv.weight"] = w[:F], w[F:]
        sd[f"{pre}.mlp.fc1.bias"], sd[f"{pre}.attn.qkv.bias"] = b[:F], b[F:]
        for k in [k for k in sd if k.startswith(pre + ".")]:
            part = k[len(pre) + 1:].rsplit(".", 1)
            if part[0] in PSB_NAMES:
                sd[f"{pre}.{PSB_NAMES[part[0]]}.{part[1]}"] = sd.pop(k)
    return len(blocks), moved


def is_square(n):
    return n >= 0 and math.isqrt(n) ** 2 == n


def fold_class_position(sd):
    """DINOv2 with registers: pos_embed holds the class token's position and the patches', none
    for the registers; a position of a token that is always the same is part of it."""
    if "reg_token" not in sd or "pos_embed" not in sd or "cls_token" not in sd:
        return False
    R, T = sd["reg_token"].shape[1], sd["pos_embed"].shape[1]
    if not is_square(T - 1) or is_square(T - 1 - R):
        return False
    sd["cls_token"] = sd["cls_token"] + sd["pos_embed"][:, :1]
    sd["pos_embed"] = np.ascontiguousarray(sd["pos_embed"][:, 1:])
    return True


def flags_for(sd):
    """The vit3d flags of the layout these tensors describe (heads are not in the weights)."""
    w = sd["patch_embed.proj.weight"]
    C, P = w.shape[0], w.shape[2]
    depth = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    F = sd["blocks.0.mlp.fc1.weight"].shape[0]
    R = sd["reg_token"].shape[1] if "reg_token" in sd else 0
    cls = int("cls_token" in sd)
    f, no_embed_class = [], 0
    if "pos_embed" in sd:
        T = sd["pos_embed"].shape[1]
        grid = math.isqrt(T - cls - R)
        if not is_square(T - cls - R):  # positions on the patch tokens only
            grid, no_embed_class = math.isqrt(T), 1
        f.append(f"--img-size {grid * P}")
    else:  # fixed sin-cos positions: the image size is not in the weights
        f += ["--img-size S (not in the weights: the model's, e.g. 224)", "--pos-embed sincos2d"]
        no_embed_class = int(cls or R > 0)
    f += [f"--patch-size {P}", f"--width {C}", f"--depth {depth}"]
    # The ratio when it is short and exact (4, 2.5), the hidden width itself otherwise (So400m's
    # 4304 over 1152: 3.7361...)
    ratio = f"{F / C:g}"
    f.append(f"--mlp-ratio {ratio}" if float(ratio) * C == F else f"--mlp-dim {F}")
    if "head.weight" in sd:
        f.append(f"--num-classes {sd['head.weight'].shape[0]}")
    # Without a class token and fc_norm, `norm` acts on every token before the mean (timm's
    # fc_norm=False, big_vision's gap). With a class token that head looks like the class
    # token's in the weights: such a model needs --global-pool gap by hand. A MAP head (attn_pool)
    # pools every token, with a class token or without.
    pool = ("map" if "attn_pool.latent" in sd else "avg" if "fc_norm.weight" in sd
            else "token" if cls else "gap")
    f.append(f"--global-pool {pool}")
    if not cls:
        f.append("--class-token 0")
    if any(k.endswith(".gamma") for k in sd):
        f.append("--layer-scale 1e-6")  # any positive value: the gammas are loaded
    if R:
        f.append(f"--reg-tokens {R}")
    if no_embed_class:
        f.append("--no-embed-class 1")
    if "blocks.0.attn.q_norm.weight" in sd:
        f.append("--qk-norm 1")
    if "blocks.0.attn.qkv.bias" not in sd:
        f.append("--qkv-bias 0")
    if "blocks.0.norm2.weight" not in sd:
        f.append("--parallel-blocks 1")
    if "pre_logits.fc.weight" in sd:
        f.append(f"--pre-logits {sd['pre_logits.fc.weight'].shape[0]}")
    if "norm_pre.weight" in sd:  # timm's CLIP towers: norm_pre, every norm nn.LayerNorm's
        f += ["--pre-norm 1", "--norm-eps 1e-5"]
    return " ".join(f)


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        blobs.append(a.tobytes())
        at += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    args = sys.argv[1:]
    unsafe, drop_head = "--unsafe-pickle" in args, "--drop-head" in args
    args = [a for a in args if a not in ("--unsafe-pickle", "--drop-head")]
    if len(args) != 2 or not args[1].endswith(".safetensors"):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    src, dst = args
    heads = 0
    if src.endswith(".npz"):
        raw, heads = from_flax(np.load(src))
    else:
        raw = read_safetensors(src) if src.endswith(".safetensors") else read_torch(src, unsafe)
    sd, dropped = {}, []
    for k, v in raw.items():
        name = timm_name(k)
        if DROPPED.match(name) or (drop_head and re.match(r"(head|pre_logits)\.", name)):
            dropped.append(name)
        else:
            sd[name] = v
    folded = fold_class_position(sd)
    psb, moved = split_parallel_blocks(sd)
    unknown = [k for k in sd if not any(re.fullmatch(p, k) for p in KNOWN)]
    if unknown or "patch_embed.proj.weight" not in sd or "blocks.0.mlp.fc1.weight" not in sd:
        what = ", ".join(sorted(unknown)[:8]) or "no patch_embed.proj or blocks.0.mlp.fc1"
        print(f"convert_weights: {src} is not a ViT layout vit3d builds: {what}", file=sys.stderr)
        return 1
    write_safetensors(dst, sd)
    if folded:
        print("the class token's position added into cls_token (registers without positions)")
    if psb:
        print(f"{psb} ParallelScalingBlocks (timm) split into vit3d's parallel blocks" +
              (": without a qkv bias, the mlp_bias placed where timm adds it (the last fc1 rows "
               "and qkv), so the model has one" if moved else ""))
    print(f"wrote {len(sd)} tensors to {dst}" +
          (f" (dropped {len(dropped)}: {', '.join(sorted(dropped)[:4])}"
           f"{', ...' if len(dropped) > 4 else ''})" if dropped else ""))
    if heads:  # an .npz: Google's JAX code uses Flax's GELU, the tanh form
        print(f"vit3d flags: {flags_for(sd)} --heads {heads}")
        print("the JAX model's MLPs use the tanh GELU: add --act gelu_tanh for its very function "
              "(timm loads these weights with the erf one)")
    else:
        print(f"vit3d flags: {flags_for(sd)} --heads H (not in the weights: the model's, e.g. "
              "ViT-S 6, ViT-B 12, ViT-L 16)")
    if "norm_pre.weight" in sd:
        print("a CLIP image tower (norm_pre): its LayerNorms' eps is taken as nn.LayerNorm's 1e-5; "
              "the activation is not in the weights: add --act quick_gelu for OpenAI's weights "
              "(timm's *_clip_quickgelu_*), none for OpenCLIP's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
