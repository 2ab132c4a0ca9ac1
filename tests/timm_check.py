"""timm_check.py: vit3d's ViT against timm's own VisionTransformer, not a copy of it: timm builds
each variant with random weights, they go to vit3d through --init-from, and the logits vit3d's
evaluation writes (--logits-out) must be timm's on the same inputs. Covers the names, shapes and
semantics of the plain ViT, the mean-pooled head, the gap head (every token normalised, then the
mean; with and without the class token and registers), the mean-pooled head without a class
token, the MAP head (SigLIP's attention pooling; with and without the class token), the tanh
GELU, DeiT III's LayerScale with positions on the
patch tokens only, register tokens with and without class positions, QK-norm without the qkv
bias (ViT-22B's attention), and timm's ParallelScalingBlock (ViT-22B's parallel block) with and
without its qkv bias, under timm's names, converted by launch/convert_weights.py.

  timm_check.py flags VARIANT           the vit3d model flags of a variant (one per line)
  timm_check.py write_all DIR           timm's weights of every variant (perturbed, so no bias
                                        or gamma is its initial constant) as
                                        DIR/VARIANT.safetensors, timm's names
  timm_check.py converts VARIANT        exit 0 where OUT needs launch/convert_weights.py
  timm_check.py check VARIANT W DUMP    timm (float64) on DUMP's inputs against its logits:
                                        max |diff| / max |logit| <= 1e-5; exit 0 = pass
  timm_check.py check_all DIR V...      check for each V with DIR/V.safetensors and
                                        DIR/V.dump.safetensors
  timm_check.py npz WORK                Google's .npz layouts, written from timm's weights: timm's
                                        loader and launch/convert_weights.py read them back
  timm_check.py init_flags VARIANT      the model flags of the initialisation check
  timm_check.py init VARIANT W          W (vit3d --weight-init jax's initial weights) against
                                        timm's weight_init='jax', tensor by tensor
  timm_check.py lamb                    the reference's LAMB (tests/ref_vit.py, which checks
                                        vit3d's) against timm.optim.Lamb: 8 steps of random
                                        gradients, groups with and without weight decay
  timm_check.py lars                    the reference's LARS against timm.optim.Lars likewise,
                                        with plain and Nesterov momentum, with and without
                                        LARC's trust_clip
  timm_check.py sched METRICS IMAGES BATCH EPOCHS WARMUP LR MIN_LR WARMUP_LR KIND [DROP_LAST]
                                        --sched-on epochs' rates against timm's schedulers
"""
import functools
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
torch = Lamb = Lars = read_safetensors = None  # imported by main() for the modes that need them


def import_torch():
    """torch and the reference's helpers (seconds to import: the flags modes, which test_timm.sh
    calls for every variant, do without)."""
    global torch, Lamb, Lars, read_safetensors
    import torch as torch_module
    from ref_optim import Lamb as lamb_class, Lars as lars_class
    from ref_vit import read_safetensors as reader
    torch, Lamb, Lars, read_safetensors = torch_module, lamb_class, lars_class, reader

# A small ViT: 32 px, patch 8 (16 patches), width 48, 3 blocks of 3 heads, 10 classes.
BASE = dict(img_size=32, patch_size=8, embed_dim=48, depth=3, num_heads=3, num_classes=10)
BASE_FLAGS = ["--img-size", "32", "--patch-size", "8", "--width", "48", "--depth", "3",
              "--heads", "3", "--num-classes", "10"]
# variant: (timm's VisionTransformer keywords, vit3d's flags)
VARIANTS = {
    "vit": ({}, []),
    "avg": ({"global_pool": "avg"}, ["--global-pool", "avg"]),
    "deit3": ({"init_values": 0.3, "no_embed_class": True},
              ["--layer-scale", "0.3", "--no-embed-class", "1"]),
    "reg": ({"init_values": 0.3, "reg_tokens": 2, "no_embed_class": True},
            ["--layer-scale", "0.3", "--reg-tokens", "2", "--no-embed-class", "1"]),
    "reg_avg": ({"reg_tokens": 3, "global_pool": "avg"},
                ["--reg-tokens", "3", "--global-pool", "avg"]),
    # the *_gap_* ViTs and SigLIP's gap models: no class token, every token normalised by
    # `norm`, then the mean (fc_norm=False); with registers and patch-only positions; the same
    # head with a class token; fc_norm after the mean without a class token
    "gap": ({"class_token": False, "global_pool": "avg", "fc_norm": False},
            ["--global-pool", "gap", "--class-token", "0"]),
    "gap_reg": ({"class_token": False, "reg_tokens": 2, "no_embed_class": True,
                 "global_pool": "avg", "fc_norm": False},
                ["--global-pool", "gap", "--class-token", "0", "--reg-tokens", "2",
                 "--no-embed-class", "1"]),
    "gap_cls": ({"global_pool": "avg", "fc_norm": False}, ["--global-pool", "gap"]),
    "avg_nocls": ({"class_token": False, "global_pool": "avg"},
                  ["--global-pool", "avg", "--class-token", "0"]),
    # SigLIP's MAP head (timm's attn_pool, AttentionPoolLatent: a latent query attends over every
    # token after `norm`, then proj and a residual MLP), without a class token as SigLIP, and
    # with one and registers (the prefix tokens are pooled too); the first with an MLP width
    # that no short ratio gives, as So400m's 4304 over 1152 (timm: mlp_ratio=3.7362)
    "map": ({"class_token": False, "global_pool": "map", "mlp_ratio": 2.0834},
            ["--global-pool", "map", "--class-token", "0", "--mlp-dim", "100"]),
    "map_cls": ({"global_pool": "map", "reg_tokens": 2}, ["--global-pool", "map", "--reg-tokens", "2"]),
    # timm's act_layer='gelu_tanh' (the tanh GELU of the JAX models; timm 1.0.9's attn_pool
    # keeps the erf one in its MLP, so not with the MAP head here)
    "tanh": ({"act_layer": "gelu_tanh"}, ["--act", "gelu_tanh"]),
    # the CLIP image towers (timm's vit_*_clip_quickgelu_*): norm_pre, nn.LayerNorm's eps 1e-5
    # in every norm, OpenAI's quick GELU
    "clip": ({"pre_norm": True, "norm_eps": 1e-5, "act_layer": "quick_gelu"},
             ["--pre-norm", "1", "--norm-eps", "1e-5", "--act", "quick_gelu"]),
    "qk_norm": ({"qk_norm": True, "qkv_bias": False, "init_values": 0.3},
                ["--qk-norm", "1", "--qkv-bias", "0", "--layer-scale", "0.3"]),
    # timm's ParallelScalingBlock (ViT-22B) under its own names, converted by
    # launch/convert_weights.py; without the qkv bias timm adds its mlp_bias shifted onto the
    # last fc1 rows and q, k, v, which the conversion keeps (so vit3d's model has a qkv bias)
    "parallel": ({"block": "ParallelScalingBlock", "qkv_bias": True, "qk_norm": True,
                  "init_values": 0.3},
                 ["--parallel-blocks", "1", "--qk-norm", "1", "--layer-scale", "0.3"]),
    "parallel_nb": ({"block": "ParallelScalingBlock", "qkv_bias": False, "qk_norm": True,
                     "init_values": 0.3},
                    ["--parallel-blocks", "1", "--qk-norm", "1", "--layer-scale", "0.3"]),
}

def variant_flags(variant, base):
    """vit3d's flags of VARIANT on the model BASE (BASE or INIT_BASE): an --mlp-dim is timm's
    int(embed_dim * mlp_ratio) at that width."""
    kw, flags = VARIANTS[variant][0], list(VARIANTS[variant][1])
    if "--mlp-dim" in flags:
        flags[flags.index("--mlp-dim") + 1] = str(int(base["embed_dim"] * kw["mlp_ratio"]))
    return flags


def build(variant):
    from timm.models import vision_transformer as vt
    torch.manual_seed(7)
    kw = dict(VARIANTS[variant][0])
    if "block" in kw:
        kw["block_fn"] = getattr(vt, kw.pop("block"))
    if "norm_eps" in kw:  # timm's norm_layer=nn.LayerNorm (eps 1e-5) of the CLIP towers
        kw["norm_layer"] = functools.partial(torch.nn.LayerNorm, eps=kw.pop("norm_eps"))
    model = vt.VisionTransformer(**BASE, **kw)
    with torch.no_grad():  # every tensor off its initial constant (zero biases, gamma = 0.3)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = np.ascontiguousarray(t.detach().numpy(), dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def check(variant, weights_path, dump_path):
    """The weights file must load strictly into timm's model (the converted variants' files hold
    vit3d's names: their model is rebuilt, with the very weights written, by build's seed)."""
    model = build(variant)
    weights = {k: torch.as_tensor(v) for k, v in read_safetensors(weights_path).items()}
    if "block" not in VARIANTS[variant][0]:
        model.load_state_dict(weights, strict=True)
    model = model.double()
    dump = read_safetensors(dump_path)
    with torch.no_grad():
        ref = model(torch.as_tensor(dump["images"]).double())
    mine = torch.as_tensor(dump["logits"]).double()
    err = ((mine - ref).abs().max() / ref.abs().max()).item() if mine.shape == ref.shape else 1.0
    names = len(weights)
    how = "converted from timm's" if "block" in VARIANTS[variant][0] else "loaded strictly into timm"
    print(f"{variant:8s} ({' '.join(VARIANTS[variant][1]) or 'timm defaults'}): {names} tensors "
          f"{how}; {len(mine)} images: max |vit3d - timm| / max |logit| = "
          f"{err:.2e} (tol 1e-05) {'ok' if err <= 1e-5 else 'FAIL'}")
    return 0 if err <= 1e-5 else 1


# The initialisation check's model: wide enough for statistics (the smallest tensors that are
# not constants have 192 elements), with the MAP head's Linears.
INIT_BASE = dict(img_size=32, patch_size=8, embed_dim=192, depth=2, num_heads=3, num_classes=10)
INIT_FLAGS = ["--img-size", "32", "--patch-size", "8", "--width", "192", "--depth", "2",
              "--heads", "3", "--num-classes", "10"]


def init_stats(x):
    x = x.astype(np.float64).ravel()
    sd = x.std()
    kurt = ((x - x.mean()) ** 4).mean() / sd ** 4 if sd > 0 else 0.0
    return sd, kurt, np.abs(x).max()


def init(variant, weights_path):
    """vit3d's --weight-init jax against timm's weight_init='jax' (VARIANT's keywords on
    INIT_BASE): every tensor is zero, constant or random as timm's, and a random one has timm's
    distribution: its std within 5/sqrt(2n) + 2% of timm's and, with 1000 elements or more, its
    kurtosis (1.8 for a uniform, about 2.4 for a normal truncated at 2 std, 3 for a normal)
    within 0.25 and, where timm's is bounded (a uniform or truncated normal), its largest |x|
    within 2% of timm's. timm's default initialisation fails it."""
    from timm.models import vision_transformer as vt
    torch.manual_seed(11)
    model = vt.VisionTransformer(**INIT_BASE, **VARIANTS[variant][0], weight_init="jax")
    ref = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    mine = read_safetensors(weights_path)
    bad = []
    if sorted(ref) != sorted(mine):
        bad.append(f"names differ: {sorted(set(ref) ^ set(mine))}")
    for name in sorted(set(ref) & set(mine)):
        r, m = ref[name], np.asarray(mine[name])
        (rs, rk, rm), (ms, mk, mm) = init_stats(r), init_stats(m)
        if rs == 0:  # a constant: the same one
            if ms != 0 or np.abs(m.ravel()[0] - r.ravel()[0]) > 0:
                bad.append(f"{name}: timm's is the constant {r.ravel()[0]}, vit3d's std {ms:.3g}")
            continue
        tol = 5 / np.sqrt(2 * r.size) + 0.02
        bounded = rm / rs < 3  # uniform or truncated: the largest |x| is near the bound
        if abs(ms / rs - 1) > tol or (r.size >= 1000 and (
                abs(mk - rk) > 0.25 or (bounded and abs(mm / rm - 1) > 0.02))):
            bad.append(f"{name} ({r.size}): std {ms:.4g} against timm's {rs:.4g} (tol "
                       f"{100 * tol:.0f}%), kurtosis {mk:.2f} / {rk:.2f}, max {mm:.4g} / {rm:.4g}")
    print(f"init {variant:5s} ({' '.join(variant_flags(variant, INIT_BASE)) or 'timm defaults'}): "
          f"{len(ref)} tensors against timm's weight_init='jax': "
          f"{'ok' if not bad else 'FAIL'}")
    for b in bad:
        print("  " + b)
    return 1 if bad else 0


def ema_warmup():
    """The EMA warmup that tests/ref_vit.py holds vit3d's to (and test_unit vit3d's C):
    1 - (1 + s)^(-2/3) capped at the decay, none at s = 0, for update s + 1, is timm's
    ModelEmaV3(use_warmup=True).get_decay(step) as its train.py calls it (step = the updates
    done, counting this one)."""
    from timm.utils import ModelEmaV3
    decay = 0.9999
    ema = ModelEmaV3(torch.nn.Linear(2, 2), decay=decay, use_warmup=True)
    worst = 0.0
    for step in range(1, 20001, 7):
        s = step - 1
        mine = 0.0 if s == 0 else min(decay, 1.0 - (1.0 + s) ** (-2.0 / 3.0))
        worst = max(worst, abs(mine - ema.get_decay(step)))
    ok = worst <= 1e-15
    print(f"ema      the EMA warmup of --model-ema-warmup against timm's ModelEmaV3.get_decay over "
          f"updates 1-20000: largest difference {worst:.1e} (tol 1e-15) {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def optimizers_alike(makers, lrs):
    """Each of makers (groups -> optimizer) on the same float64 tensors, 8 steps of the same random
    gradients, in two groups (with weight decay 0.05 at lrs[0], without at lrs[1]); one tensor all
    zero, the trust ratios' ||w|| = 0 case. The largest |difference| / |update| of any tensor
    between the first and each other maker."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(12, 8), (8,), (5, 3, 2), (1, 4, 6), (7,)]
    init = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    init[4].zero_()
    runs = []
    for make in makers:
        ps = [torch.nn.Parameter(t.clone()) for t in init]
        opt = make([{"params": [ps[0], ps[2], ps[4]], "weight_decay": 0.05, "lr": lrs[0]},
                    {"params": [ps[1], ps[3]], "weight_decay": 0.0, "lr": lrs[1]}])
        g = torch.Generator().manual_seed(4)
        for _ in range(8):
            for p in ps:
                p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64)
            opt.step()
        runs.append([p.detach() for p in ps])
    return max(((a - b).norm() / (a - i).norm().clamp_min(1e-300)).item()
               for run in runs[1:] for a, b, i in zip(runs[0], run, init))


def lamb():
    """ref_vit's Lamb and timm's: timm's own global clipping off (vit3d clips before the
    optimizer, as ref_vit does with clip_grad_norm_)."""
    from timm.optim import Lamb as TimmLamb
    args = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    err = optimizers_alike([lambda g: Lamb(g, **args),
                            lambda g: TimmLamb(g, max_grad_norm=1e30, **args)], (2e-3, 1e-3))
    ok = err <= 1e-12
    print(f"lamb     ref_vit's Lamb against timm.optim.Lamb, 8 steps of 5 tensors: largest "
          f"|difference| / |update| = {err:.2e} (tol 1e-12) {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def lars():
    """ref_vit's Lars and timm's, plain and Nesterov momentum, without and with LARC's
    clipping (trust_clip): at rates 0.8 and 0.4 the ratios stay below the rate, at 2e-4 most
    are cut to 1; both sides are counted."""
    from timm.optim import Lars as TimmLars
    err, clipped, adapted = 0.0, 0, 0
    for n in (False, True):
        for clip in (False, True):
            for lrs in ((0.8, 0.4), (2e-4, 1e-4)):
                if not clip and lrs[0] < 0.1:
                    continue
                args = dict(lr=lrs[0], momentum=0.9, nesterov=n, eps=1e-8, trust_clip=clip)
                ours = []  # ref_vit's optimizer, for its counts

                def make_ours(g):
                    ours.append(Lars(g, **args))
                    return ours[-1]
                err = max(err, optimizers_alike([make_ours, lambda g: TimmLars(g, **args)], lrs))
                clipped += ours[0].clipped
                adapted += ours[0].adapted
    ok = err <= 1e-12 and 0 < clipped < adapted
    print(f"lars     ref_vit's Lars against timm.optim.Lars, 8 steps of 5 tensors, plain and "
          f"Nesterov momentum, LARS and LARC ({clipped} of {adapted} LARC ratios cut to 1): "
          f"largest |difference| / |update| = {err:.2e} (tol 1e-12) {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def to_flax(sd, heads, big_vision):
    """timm's ViT tensors as Google's .npz holds them: the ViT paper's layout (encoderblock_i,
    MultiHeadDotProductAttention_1, MlpBlock_3, LayerNorm_2) or big_vision's (under params/, the
    blocks scanned into one stack with a leading layer axis, _0 modules, LayerNorm_1)."""
    C = sd["patch_embed.proj.weight"].shape[0]
    pre = "params/" if big_vision else ""
    w = {pre + "embedding/kernel": sd["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
         pre + "embedding/bias": sd["patch_embed.proj.bias"],
         pre + ("pos_embedding" if big_vision else "Transformer/posembed_input/pos_embedding"):
             sd["pos_embed"],
         pre + "Transformer/encoder_norm/scale": sd["norm.weight"],
         pre + "Transformer/encoder_norm/bias": sd["norm.bias"],
         pre + "head/kernel": sd["head.weight"].T, pre + "head/bias": sd["head.bias"]}
    if "cls_token" in sd:  # big_vision's gap and MAP models have none
        w[pre + "cls"] = sd["cls_token"]
    if "attn_pool.latent" in sd:  # big_vision's MAP head (MAPHead_0), as timm's loader reads it
        m, att = pre + "MAPHead_0/", pre + "MAPHead_0/MultiHeadDotProductAttention_0/"
        a = lambda n: sd["attn_pool." + n]  # noqa: E731
        w[m + "probe"] = a("latent")
        kv_w, kv_b = np.split(a("kv.weight"), 2), np.split(a("kv.bias"), 2)
        for n, wt, bs in (("query", a("q.weight"), a("q.bias")), ("key", kv_w[0], kv_b[0]),
                          ("value", kv_w[1], kv_b[1])):
            w[f"{att}{n}/kernel"], w[f"{att}{n}/bias"] = wt.T.reshape(C, heads, -1), bs.reshape(heads, -1)
        w[att + "out/kernel"] = a("proj.weight").reshape(C, heads, -1).transpose(1, 2, 0)
        w[att + "out/bias"] = a("proj.bias")
        w[m + "LayerNorm_0/scale"], w[m + "LayerNorm_0/bias"] = a("norm.weight"), a("norm.bias")
        for r in range(2):
            w[f"{m}MlpBlock_0/Dense_{r}/kernel"] = a(f"mlp.fc{r + 1}.weight").T
            w[f"{m}MlpBlock_0/Dense_{r}/bias"] = a(f"mlp.fc{r + 1}.bias")
    mha, mlp, ln2 = ("MultiHeadDotProductAttention_0", "MlpBlock_0", "LayerNorm_1") if big_vision \
        else ("MultiHeadDotProductAttention_1", "MlpBlock_3", "LayerNorm_2")
    depth = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    blocks = []
    for i in range(depth):
        b = lambda n: sd[f"blocks.{i}.{n}"]  # noqa: E731
        qkv_w, qkv_b = b("attn.qkv.weight"), b("attn.qkv.bias")
        t = {"LayerNorm_0/scale": b("norm1.weight"), "LayerNorm_0/bias": b("norm1.bias"),
             f"{ln2}/scale": b("norm2.weight"), f"{ln2}/bias": b("norm2.bias"),
             f"{mha}/out/kernel": b("attn.proj.weight").reshape(C, heads, -1).transpose(1, 2, 0),
             f"{mha}/out/bias": b("attn.proj.bias")}
        for j, n in enumerate(("query", "key", "value")):
            t[f"{mha}/{n}/kernel"] = qkv_w[j * C:(j + 1) * C].T.reshape(C, heads, -1)
            t[f"{mha}/{n}/bias"] = qkv_b[j * C:(j + 1) * C].reshape(heads, -1)
        for r in range(2):
            t[f"{mlp}/Dense_{r}/kernel"] = b(f"mlp.fc{r + 1}.weight").T
            t[f"{mlp}/Dense_{r}/bias"] = b(f"mlp.fc{r + 1}.bias")
        blocks.append(t)
    for k in blocks[0]:
        if big_vision:
            w[f"{pre}Transformer/encoderblock/{k}"] = np.stack([t[k] for t in blocks])
        else:
            for i, t in enumerate(blocks):
                w[f"{pre}Transformer/encoderblock_{i}/{k}"] = t[k]
    return {k: np.ascontiguousarray(v) for k, v in w.items()}


def npz(work):
    """Google's ViT .npz files (the ViT paper's layout and big_vision's scanned one, and
    big_vision's gap and MAP heads without a class token), written from timm's weights: timm's own loader
    (_load_weights) must read each back to the very model, and launch/convert_weights.py must
    give timm's tensors bit for bit, the heads count and the head's flags."""
    from timm.models.vision_transformer import _load_weights
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launch"))
    import convert_weights
    ok = True
    for layout, bv, variant in (("ViT paper", False, "vit"), ("big_vision, scanned", True, "vit"),
                                ("big_vision gap, scanned", True, "gap"),
                                ("big_vision MAP, scanned", True, "map")):
        model = build(variant)
        sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        path = os.path.join(work, f"flax_{int(bv)}_{variant}.npz")
        np.savez(path, **to_flax(sd, BASE["num_heads"], bv))
        again = build(variant)
        with torch.no_grad():
            for p in again.parameters():
                p.zero_()
            _load_weights(again, path)
        timm_same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                          again.state_dict().values()))
        conv, heads = convert_weights.from_flax(np.load(path))
        conv_same = set(conv) == set(sd) and all(np.array_equal(conv[k], sd[k]) for k in sd)
        flags = convert_weights.flags_for(conv)
        head_flags = " ".join(VARIANTS[variant][1][:4])  # --global-pool and --class-token
        mlp_flags = " ".join(VARIANTS[variant][1][4:6]) or "--mlp-ratio 4"
        flags_ok = (head_flags or "--global-pool token") in flags and mlp_flags in flags
        good = timm_same and conv_same and heads == BASE["num_heads"] and flags_ok
        ok = ok and good
        print(f"npz      {layout}: timm's _load_weights reads it as the model "
              f"{'(bit for bit)' if timm_same else 'FAILS'}; convert_weights.py gives "
              f"{len(conv)} tensors {'equal to timm' + chr(39) + 's' if conv_same else 'that DIFFER'}, "
              f"heads {heads}, flags {'with' if flags_ok else 'WITHOUT'} "
              f"'{head_flags or '--global-pool token'}' and '{mlp_flags}' "
              f"{'ok' if good else 'FAIL'}")
    return 0 if ok else 1


def sched(metrics, images, batch, epochs, warmup, lr, min_lr, warmup_lr, kind="cosine",
          drop_last="0"):
    """vit3d's --sched-on epochs rates (METRICS, its metrics.jsonl) against timm's
    CosineLRScheduler (KIND linear: PolyLRScheduler with power 1) stepped once an epoch as timm's
    train.py and DeiT's main.py do: created before epoch 0, step(e + 1) after epoch e. vit3d's
    step s (1-based in the log) is in epoch floor((s - 1) * BATCH / IMAGES), or with DROP_LAST 1
    (--drop-last, timm's loader's drop_last) floor((s - 1) / floor(IMAGES / BATCH))."""
    from timm.scheduler import CosineLRScheduler, PolyLRScheduler
    from fractions import Fraction
    images, batch = int(images), int(batch)
    epochs, warmup, lr, min_lr, warmup_lr = (float(Fraction(a)) for a in
                                             (epochs, warmup, lr, min_lr, warmup_lr))
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    if kind == "linear":
        sch = PolyLRScheduler(opt, t_initial=epochs, power=1.0, lr_min=min_lr, warmup_t=warmup,
                              warmup_lr_init=warmup_lr, cycle_limit=1, t_in_epochs=True)
    else:
        sch = CosineLRScheduler(opt, t_initial=epochs, lr_min=min_lr, warmup_t=warmup,
                                warmup_lr_init=warmup_lr, cycle_limit=1, t_in_epochs=True)
    per_epoch = []
    for e in range(int(epochs) + 2):
        per_epoch.append(opt.param_groups[0]["lr"])
        sch.step(e + 1)
    rows = [json.loads(line) for line in open(metrics)]
    err, seen = 0.0, set()
    per_epoch_steps = images // batch if drop_last == "1" else None
    for r in rows:
        e = (r["step"] - 1) // per_epoch_steps if per_epoch_steps else (r["step"] - 1) * batch // images
        seen.add(e)
        err = max(err, abs(r["lr"] - per_epoch[e]) / per_epoch[e])
    ok = err <= 1e-6 and len(rows) > 0
    name = "PolyLRScheduler (power 1)" if kind == "linear" else "CosineLRScheduler"
    print(f"sched    --sched {kind} --sched-on epochs{' --drop-last 1' if per_epoch_steps else ''}: "
          f"{len(rows)} steps over epochs "
          f"{min(seen)}-{max(seen)} ({images} images, {batch} per step, {warmup:g} of warmup) "
          f"against timm's {name} stepped per epoch: largest relative difference {err:.2e} "
          f"(tol 1e-6, vit3d prints float32) {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    if sys.argv[1] in ("flags", "init_flags", "converts"):  # no torch needed
        variant = VARIANTS[sys.argv[2]]
        if sys.argv[1] == "converts":  # exit 0: the file goes through launch/convert_weights.py
            return 0 if "block" in variant[0] else 1
        at_init = sys.argv[1] == "init_flags"
        return print("\n".join((INIT_FLAGS if at_init else BASE_FLAGS) +
                                variant_flags(sys.argv[2], INIT_BASE if at_init else BASE)))
    import_torch()
    if sys.argv[1] == "lamb":
        return lamb()
    if sys.argv[1] == "lars":
        return lars()
    if sys.argv[1] == "ema":
        return ema_warmup()
    if sys.argv[1] == "sched":
        return sched(*sys.argv[2:12])
    if sys.argv[1] == "init":
        return init(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "npz":
        return npz(sys.argv[2])
    if sys.argv[1] == "write_all":  # every variant's weights, one torch import
        for v in VARIANTS:
            write(os.path.join(sys.argv[2], v + ".safetensors"), build(v).state_dict())
        return 0
    if sys.argv[1] == "check_all":  # the variants named, each DIR/V.safetensors and its dump
        d = sys.argv[2]
        return max([check(v, os.path.join(d, v + ".safetensors"),
                          os.path.join(d, v + ".dump.safetensors")) for v in sys.argv[3:]] + [0])
    return check(sys.argv[2], sys.argv[3], sys.argv[4])


if __name__ == "__main__":
    sys.exit(main())
