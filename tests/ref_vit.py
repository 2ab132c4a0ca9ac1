# ref_vit.py: checks vit3d's whole model against an independent PyTorch ViT (timm's layout and
# parameter names). Reads the file written by tests/ref_dump.c, then compares logits, loss, every
# gradient and 5 AdamW (or LAMB) steps (schedule, clipping, weight decay, layer-wise lr decay),
# one tensor at a time. Training
# as timm does it: drop path (masks drawn here), Mixup and CutMix in pair mode (the images mixed
# here from the raw ones and each pair's lam and box; targets by timm's mixup_target); frozen
# tensors as requires_grad=False ones (ref_dump's "frozen." markers).
# Usage: python3 ref_vit.py DUMP.safetensors [--dtype float64|float32]   Exit 0 = all pass.
import argparse, json, math, struct, sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ref_optim import Lamb, Lars
from ref_philox import fnv1a, uniform, uniforms

# Must match tests/ref_dump.c; the shapes read from the file are checked against them.
IMG, PATCH, WIDTH, DEPTH, HEADS, MLP_RATIO, CLASSES = 32, 8, 48, 3, 3, 4, 10
GLOBAL, STEPS, SMOOTHING, DROP_PATH, SEED, LAYER_DECAY, EMA = 6, 5, 0.1, 0.5, 1234, 0.75, 0.9
LR, MIN_LR, WARMUP, BETAS, EPS, WD, CLIP = 1e-3, 1e-5, 2, (0.9, 0.999), 1e-8, 0.05, 0.5
SGD_MOMENTUM = 0.8  # ref_dump's SGD variants

# Relative tolerances, ||vit3d - ref|| / ||ref|| per tensor. vit3d runs in fp32: logits, loss and
# gradients measure ~5e-7, so 1e-5 leaves 20x headroom and still flags the 1e-3 self-check
# corruption. Final parameters are compared relative to the reference's 5-step update (~3e-3 per
# element), where fp32 storage alone costs ~4e-5 on LayerNorm weights (ulp(1.0) / update, the
# same for a float32 PyTorch run), hence 2e-4. "final_kbias" is explained at final_err(). The
# weights' EMA moves less than they do (0.9^5 of its start remains) and rounds at every step
# itself: LayerNorm weights of block 0, whose lr layer decay scales by 0.42, measure 2.6e-4, so
# 1e-3 for "ema" (its self-check plants 1e-2).
TOL = {"logits": 1e-5, "loss": 1e-5, "grad": 1e-5, "lr": 1e-6, "grad_norm": 1e-5,
       "loss_per_step": 1e-5, "final": 2e-4, "final_kbias": 1e-2, "ema": 1e-3, "ema_kbias": 1e-2}


def read_safetensors(path):
    raw = open(path, "rb").read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    dtypes = {"F32": "<f4", "I32": "<i4"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(raw, dtype=dtypes[info["dtype"]], count=(b - a) // 4,
                            offset=8 + hlen + a)
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


# Drop path's masks, drawn as vit3d documents them (vit/model.h, src/vt_rng.h) with the Philox
# numbers of ref_philox.py, not vit3d's C: sample at stream position p
# keeps branch j (0 attention, 1 MLP) of block l when uniform number p of the stream
# (SEED, fnv1a("drop_path"), 2l + j) is below the keep probability.
def drop_masks(positions, keep_probs):
    """(DEPTH, 2, len(positions)) of 0/1: which samples keep each branch of each block."""
    stream = fnv1a("drop_path")
    return torch.tensor([[[float(uniform(SEED, stream, 2 * l + j, p) < keep) for p in positions]
                          for j in range(2)] for l, keep in enumerate(keep_probs)])


# Dropout's masks as vit3d documents them (src/vt_backend.h's vt_dropout_mask, vit/model.h):
# element (token n, channel c) of the sample at stream position q, in a tensor of `width`
# channels, is number (q * N + n) * width + c of stream (SEED, fnv1a("dropout"), site) and is
# dropped when that uniform is below p. Sites: 0 the embedding's output, 1 + 3l + j for block l
# (j 0 the attention's output, 1 the MLP's hidden units, 2 the MLP's output), 1 + 3 DEPTH the
# head's input (one row per image), 2 + 3 DEPTH + l block l's attention probabilities: element
# (head h, query i, key j) of the image at q is number ((q * heads + h) * N + i) * N + j, as a
# (heads * N, N) tensor per image is numbered.
PROJ_DROP = ATTN_DROP = POS_DROP = HEAD_DROP = 0.0  # main() sets them from ref_dump's marker
# Every LayerNorm's eps: timm's ViT 1e-6, or the CLIP towers' 1e-5 (main() sets it from
# ref_dump's marker).
NORM_EPS = 1e-6


def dropout(x, positions, site, p):
    """timm's nn.Dropout in training on x (B, N, width): x * mask / (1 - p)."""
    if p == 0.0 or positions is None:
        return x
    B, N, W = x.shape
    q = np.array(list(positions), dtype=np.uint64).reshape(B, 1, 1)
    idx = (q * np.uint64(N) + np.arange(N, dtype=np.uint64).reshape(1, N, 1)) * np.uint64(W) + \
        np.arange(W, dtype=np.uint64).reshape(1, 1, W)
    keep = torch.from_numpy(uniforms(SEED, fnv1a("dropout"), site, idx) >= np.float32(p))
    return x * keep.to(x.dtype) / (1.0 - torch.tensor(p, dtype=torch.float32)).item()


def drop_path(x, mask, keep):
    """timm's DropPath in training: x * (bernoulli(keep) / keep) per sample."""
    if keep == 1.0:
        return x
    return x * (mask.to(x.dtype) / keep).reshape(-1, 1, 1)


class Attention(nn.Module):
    def __init__(self, dim, heads, qk_norm=False, qkv_bias=True):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        # timm's qk_norm: a LayerNorm over each head's dim, shared by the heads
        self.q_norm = nn.LayerNorm(dim // heads, eps=NORM_EPS) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(dim // heads, eps=NORM_EPS) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, positions=None, site=0):
        """With positions (training): dropout of the probabilities (timm's attn_drop) at site."""
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        att = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        att = dropout(att.reshape(B, self.heads * N, N), positions, site, ATTN_DROP)
        att = att.reshape(B, self.heads, N, N)
        return self.proj((att @ v).transpose(1, 2).reshape(B, N, C))


# The MLPs' GELU: "none" (the exact erf form, PyTorch's default), "tanh" or "quick" (CLIP's
# x * sigmoid(1.702 x), timm's QuickGELU; main() sets it from ref_dump's marker).
GELU = "none"


def gelu(x):
    return x * torch.sigmoid(1.702 * x) if GELU == "quick" else F.gelu(x, approximate=GELU)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x, positions=None, site=0, out_drop=True):
        """With positions (training): dropout of the hidden units (site) and, with out_drop,
        of the output (site + 1), timm's drop1 and drop2."""
        h = dropout(gelu(self.fc1(x)), positions, site, PROJ_DROP)
        y = self.fc2(h)
        return dropout(y, positions, site + 1, PROJ_DROP) if out_drop else y


class MapHead(nn.Module):
    """Attention pooling by a learned latent query (timm's attn_pool, big_vision's MAP head):
    one query per head attends over all of a sample's tokens, then proj, then a residual MLP
    behind its own LayerNorm."""

    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))
        self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=NORM_EPS)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        B, N, C = x.shape
        D = C // self.heads
        q = self.q(self.latent[0, 0]).reshape(self.heads, D)
        k, v = self.kv(x).reshape(B, N, 2, self.heads, D).unbind(2)  # (B, N, H, D) each
        p = (torch.einsum("hd,bnhd->bhn", q, k) / math.sqrt(D)).softmax(dim=-1)
        y = self.proj(torch.einsum("bhn,bnhd->bhd", p, v).reshape(B, C))
        return y + self.mlp(self.norm(y))


class LayerScale(nn.Module):
    """timm's LayerScale (CaiT, DeiT III): x * gamma per channel."""
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, layer_scale=False, qk_norm=False, qkv_bias=True):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=NORM_EPS)
        self.attn = Attention(dim, heads, qk_norm, qkv_bias)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=NORM_EPS), Mlp(dim, hidden)
        self.ls1 = LayerScale(dim) if layer_scale else nn.Identity()
        self.ls2 = LayerScale(dim) if layer_scale else nn.Identity()

    def forward(self, x, masks=None, keep=1.0, positions=None, layer=0):
        if masks is None:
            masks, keep = torch.ones(2, x.shape[0]), 1.0
        a = self.attn(self.norm1(x), positions, 2 + 3 * DEPTH + layer)
        a = dropout(a, positions, 1 + 3 * layer, PROJ_DROP)
        x = x + drop_path(self.ls1(a), masks[0], keep)
        m = self.mlp(self.norm2(x), positions, 2 + 3 * layer)
        return x + drop_path(self.ls2(m), masks[1], keep)


class ParallelBlock(nn.Module):
    """ViT-22B's parallel block: x + drop_path(ls(attn(n) + mlp(n))), n = norm1(x); timm's
    ParallelScalingBlock computes the same with its own tensor names. Its dropout (timm's
    mlp_drop) drops the MLP's hidden units only."""
    def __init__(self, dim, heads, hidden, layer_scale=False, qk_norm=False, qkv_bias=True):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=NORM_EPS)
        self.attn = Attention(dim, heads, qk_norm, qkv_bias)
        self.mlp = Mlp(dim, hidden)
        self.ls = LayerScale(dim) if layer_scale else nn.Identity()

    def forward(self, x, masks=None, keep=1.0, positions=None, layer=0):
        if masks is None:
            masks, keep = torch.ones(2, x.shape[0]), 1.0
        n = self.norm1(x)
        m = self.mlp(n, positions, 2 + 3 * layer, out_drop=False)
        a = self.attn(n, positions, 2 + 3 * DEPTH + layer)
        return x + drop_path(self.ls(a + m), masks[0], keep)


class PatchEmbed(nn.Module):
    def __init__(self, patch, dim, bias=True):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, stride=patch, bias=bias)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, patches, C), row-major patch order


def head_name(model):
    if model.map:
        return "attention pooling by a latent query (map)"
    if model.gap:
        return "mean of the normalised patch tokens (gap)"
    return "mean of the patch tokens, fc_norm" if model.global_pool else "class token"


class ViT(nn.Module):
    def __init__(self, img=IMG, patch=PATCH, width=WIDTH, depth=DEPTH, heads=HEADS,
                 mlp_ratio=MLP_RATIO, classes=CLASSES, global_pool=False, layer_scale=False,
                 reg_tokens=0, no_embed_class=False, qk_norm=False, qkv_bias=True,
                 parallel=False, class_token=True, gap=False, map_head=False, pre_logits=0,
                 pre_norm=False):
        super().__init__()
        self.global_pool, self.no_embed_class, self.gap = global_pool, no_embed_class, gap
        self.map = map_head
        # timm's num_prefix_tokens: the class token (unless class_token=False), then registers
        self.prefix = int(class_token) + reg_tokens
        n = (img // patch) ** 2 + (0 if no_embed_class else self.prefix)
        self.patch_embed = PatchEmbed(patch, width, bias=not pre_norm)  # timm: CLIP has none
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width)) if class_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, width)) if reg_tokens else None
        self.pos_embed = nn.Parameter(torch.zeros(1, n, width))
        # timm's pre_norm (the CLIP towers): a LayerNorm after the positions, before the blocks
        self.norm_pre = nn.LayerNorm(width, eps=NORM_EPS) if pre_norm else nn.Identity()
        self.blocks = nn.Sequential(
            *[(ParallelBlock if parallel else Block)(width, heads, round(width * mlp_ratio),
                                                     layer_scale, qk_norm, qkv_bias)
              for _ in range(depth)])
        # timm: global_pool='avg' replaces `norm` by fc_norm after the pooling, unless
        # fc_norm=False (gap: every token normalised by `norm`, then the mean)
        if global_pool and not gap:
            self.fc_norm = nn.LayerNorm(width, eps=NORM_EPS)
        else:
            self.norm = nn.LayerNorm(width, eps=NORM_EPS)
        if map_head:  # every token normalised by `norm`, then attention-pooled
            self.attn_pool = MapHead(width, heads, round(width * mlp_ratio))
        # big_vision's pre-logits (rep_size): tanh(Linear(width, R)) before the head, under the
        # old timm name pre_logits.fc
        self.pre_logits = None
        if pre_logits:
            self.pre_logits = nn.Module()
            self.pre_logits.fc = nn.Linear(width, pre_logits)
        self.head = nn.Linear(pre_logits or width, classes)
        # timm's stochastic depth ramp: drop_path_rate * i / (depth - 1) for block i
        self.keep = [1.0 - r.item() for r in torch.linspace(0, DROP_PATH, depth)]

    def forward(self, img, positions=None):
        """Training with the images' stream positions (drop path's masks, kept in self.masks;
        dropout's), evaluation without."""
        x = self.features(img, positions)
        if self.pre_logits is not None:
            x = torch.tanh(self.pre_logits.fc(x))
        return self.head(dropout(x[:, None], positions, 1 + 3 * DEPTH, HEAD_DROP)[:, 0])

    def features(self, img, positions):
        """The head's input (B, C)."""
        x = self.patch_embed(img)
        prefix = [] if self.cls_token is None else [self.cls_token.expand(x.shape[0], -1, -1)]
        if self.reg_token is not None:
            prefix.append(self.reg_token.expand(x.shape[0], -1, -1))
        if self.no_embed_class:  # timm's _pos_embed: positions on the patches, then the prefix
            x = torch.cat(prefix + [x + self.pos_embed], dim=1)
        else:
            x = torch.cat(prefix + [x], dim=1) + self.pos_embed
        x = self.norm_pre(dropout(x, positions, 0, POS_DROP))
        self.masks = None if positions is None else drop_masks(positions, self.keep)
        for l, block in enumerate(self.blocks):
            x = block(x) if positions is None else block(x, self.masks[l], self.keep[l],
                                                         positions, l)
        if self.map:
            return self.attn_pool(self.norm(x))
        if self.gap:  # every token normalised, then the mean of the patch tokens
            return self.norm(x)[:, self.prefix:].mean(dim=1)
        if self.global_pool:  # the mean of the patch tokens, then fc_norm
            return self.fc_norm(x[:, self.prefix:].mean(dim=1))
        return self.norm(x)[:, 0]  # timm normalises all tokens, then pools


def sincos_table(h, w, width, temperature=10000.0):
    """big_vision's posemb_sincos_2d in float64: (1, h*w, width) of [sin(x w_d), cos(x w_d),
    sin(y w_d), cos(y w_d)], w_d = temperature^(-d / (width/4 - 1))."""
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64),
                          torch.arange(w, dtype=torch.float64), indexing="ij")
    omega = 1.0 / temperature ** (torch.arange(width // 4, dtype=torch.float64) / (width // 4 - 1))
    xs, ys = x.flatten()[:, None] * omega[None], y.flatten()[:, None] * omega[None]
    return torch.cat([xs.sin(), xs.cos(), ys.sin(), ys.cos()], dim=1)[None]


def check_sincos(d, model, dt):
    """Fixed positions: model.pos_embed becomes a buffer holding the reference's own table, and
    vit3d's must be that table at init (to float rounding), its gradient exactly zero and its
    final value and EMA its initial one. Removes pos_embed from d; returns the worst error."""
    g = IMG // PATCH
    table = sincos_table(g, g, WIDTH)
    del model.pos_embed
    model.register_buffer("pos_embed", table.to(dt))
    init, grad = d.pop("init.pos_embed").double(), d.pop("grad.pos_embed")
    final, ema = d.pop("final.pos_embed"), d.pop("ema.pos_embed")
    err, ema_err = (init - table).abs().max().item(), (ema.double() - init).abs().max().item()
    zero, same = bool((grad == 0).all()), torch.equal(final.double(), init)
    print(f"fixed 2D sin-cos positions: vit3d's table {err:.1e} from the reference's (tol 1e-7), "
          f"gradient {'all zero' if zero else 'NOT zero'}, after 5 steps "
          f"{'unchanged' if same else 'CHANGED'}, EMA within {ema_err:.1e} (tol 1e-6)")
    return err if zero and same and ema_err <= 1e-6 else math.inf


def mix_pairs(raw, lam, box):
    """timm's Mixup in pair mode for pairs (2k, 2k+1), from each pair's lam and CutMix box
    (cutmix, y0, y1, x0, x1): the images as vit3d should have trained on them."""
    x = raw.clone()
    for k in range(raw.shape[0] // 2):
        i, j = 2 * k, 2 * k + 1
        cut, y0, y1, x0, x1 = box[k].tolist()
        if cut:
            x[i, :, y0:y1, x0:x1] = raw[j, :, y0:y1, x0:x1]
            x[j, :, y0:y1, x0:x1] = raw[i, :, y0:y1, x0:x1]
        elif lam[k] < 1:
            x[i] = raw[i] * lam[k] + raw[j] * (1 - lam[k])
            x[j] = raw[j] * lam[k] + raw[i] * (1 - lam[k])
    return x


def mixed_targets(labels, lam):
    """timm's mixup_target: lam smooth_one_hot(y) + (1 - lam) smooth_one_hot(partner's y)."""
    def smooth(y):
        return F.one_hot(y, CLASSES).double() * (1 - SMOOTHING) + SMOOTHING / CLASSES
    partner = labels.view(-1, 2).flip(1).reshape(-1)
    lam_each = lam.double().repeat_interleave(2).unsqueeze(1)
    return lam_each * smooth(labels) + (1 - lam_each) * smooth(partner)


def lr_at(s):
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * (s - WARMUP) / (STEPS - WARMUP)))


def rel_err(mine, ref, base=None):
    """||mine - ref|| / ||base||, base defaulting to ref; in float64 so the metric adds no error."""
    mine, ref = mine.detach().double(), ref.detach().double()
    den = (ref if base is None else base.detach().double()).norm().item()
    num = (mine - ref).norm().item()
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def final_pieces(name, t):
    """Splits the k third off qkv.bias (see final_err), the k half off the MAP head's kv.bias;
    QK-norm's k bias is all such a piece; other tensors are one piece."""
    if name.endswith("attn.qkv.bias"):
        q, k, v = t.chunk(3)
        return {name + "[q,v]": torch.cat([q, v]), name + "[k]": k}
    if name == "attn_pool.kv.bias":
        k, v = t.chunk(2)
        return {name + "[v]": v, name + "[k]": k}
    if name.endswith("attn.k_norm.bias"):
        return {name + "[k]": t}
    return {name: t}


def grad_base(name, grads):
    """What a gradient's error is relative to: its own norm, but for QK-norm's k bias (an
    exactly zero gradient, see final_err) that of the k norm's weight."""
    return grads[name.replace("k_norm.bias", "k_norm.weight")]


def final_err(key, mine, ref, init, lr_sum):
    """The k bias (of qkv, or of QK-norm's k LayerNorm) gets an exactly zero gradient (softmax
    ignores the per-query constant q.b_k),
    so vit3d's ~1e-10 roundoff there becomes Adam updates of ~1e-3 lr with random sign: no
    reference can match them. Check instead that it stayed put: the largest move as a fraction
    of a real Adam trajectory (sum of lr), which a wrong nonzero gradient would make ~1."""
    if key.endswith("[k]"):
        return "final_kbias", (mine.double() - init.double()).abs().max().item() / lr_sum
    # The update, not the parameter, is what 5 steps change, so errors are relative to it.
    return "final", rel_err(mine, ref, ref - init)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"],
                    help="reference precision; float64 makes the reference the exact answer")
    args = ap.parse_args()
    dt = getattr(torch, args.dtype)
    torch.manual_seed(0)
    torch.set_num_threads(2)
    d = read_safetensors(args.dump)

    regs = d["init.reg_token"].shape[1] if "init.reg_token" in d else 0
    class_token, gap = "init.cls_token" in d, "gap" in d  # gap: ref_dump's marker
    map_head = "init.attn_pool.latent" in d
    global GELU, PROJ_DROP, ATTN_DROP, POS_DROP, HEAD_DROP, NORM_EPS
    GELU = "tanh" if "gelu_tanh" in d else "quick" if "quick_gelu" in d else "none"  # markers
    NORM_EPS = float(d["norm_eps"][0]) if "norm_eps" in d else 1e-6  # ... and its eps
    if "dropout" in d:  # ref_dump's marker: proj_drop, pos_drop, drop_rate, attn_drop
        PROJ_DROP, POS_DROP, HEAD_DROP, ATTN_DROP = (float(r) for r in d["dropout"])
    no_embed_class = d["init.pos_embed"].shape[1] == (IMG // PATCH) ** 2 and \
        (class_token or regs > 0)
    qk_norm, qkv_bias = "init.blocks.0.attn.q_norm.weight" in d, "init.blocks.0.attn.qkv.bias" in d
    parallel = "init.blocks.0.norm2.weight" not in d
    bce = "bce" in d  # ref_dump's marker: trained with binary cross-entropy
    bce_thresh = float(d["bce"][0]) if bce else -1.0  # >= 0: binary targets
    lamb = "lamb" in d  # ... with LAMB
    sgd = int(d["sgd"][0]) if "sgd" in d else 0  # ... with SGD: 2 Nesterov, 1 plain momentum
    lars = int(d["lars"][0]) if "lars" in d else 0  # ... with LARS likewise (+ 2: LARC)
    global LR, MIN_LR, CLIP
    if sgd or lars:  # ref_dump runs SGD and LARS at larger rates, with its own clipping (their
        m = d["sgd" if sgd else "lars"]  # steps are lr x gradient)
        LR, MIN_LR, CLIP = LR * float(m[1]), MIN_LR * float(m[1]), float(m[2])
    layer_scale = "init.blocks.0.ls1.gamma" in d or "init.blocks.0.ls.gamma" in d
    model = ViT(global_pool="init.fc_norm.weight" in d or gap, layer_scale=layer_scale,
                reg_tokens=regs, no_embed_class=no_embed_class, qk_norm=qk_norm,
                qkv_bias=qkv_bias, parallel=parallel, class_token=class_token, gap=gap,
                map_head=map_head,
                pre_logits=d["init.pre_logits.fc.weight"].shape[0]
                if "init.pre_logits.fc.weight" in d else 0,
                pre_norm="init.norm_pre.weight" in d).to(dt)
    sincos_err = None
    if "pos_sincos" in d:  # ref_dump's marker: pos_embed is a fixed table, not a parameter
        sincos_err = check_sincos(d, model, dt)
    names = [n for n, _ in model.named_parameters()]
    init = {n[5:]: t for n, t in d.items() if n.startswith("init.")}
    missing, unexpected = model.load_state_dict({n: t.to(dt) for n, t in init.items()},
                                                strict=False)
    # (fixed positions: the buffer keeps the reference's own table)
    assert not unexpected and missing == (["pos_embed"] if sincos_err is not None else []), \
        (missing, unexpected)
    for prefix in ("grad.", "final."):
        got = sorted(n[len(prefix):] for n in d if n.startswith(prefix))
        assert got == sorted(names), f"{prefix}* tensors do not match the model's parameters"
    images, labels = d["images"].to(dt), d["labels"].long()
    lam, box = d["mix_lam"], d["mix_box"]
    mix_err = (mix_pairs(d["images_raw"], lam, box) - d["images"]).abs().max().item()
    n_cut = int(box[:, 0].sum())
    n_mixup = int(((lam < 1) & (box[:, 0] == 0)).sum())
    n_plain = lam.numel() - n_cut - n_mixup
    targets = mixed_targets(labels, lam).to(dt)
    assert images.shape == (STEPS * GLOBAL, 3, IMG, IMG) and labels.shape == (STEPS * GLOBAL,)

    params = dict(model.named_parameters())
    # ref_dump's markers: the tensors its optimizer froze (--freeze, --trainable). As
    # requires_grad=False would: not in the optimizer, nor in the clipped norm, nor in the EMA.
    frozen = {n[len("frozen."):] for n in d if n.startswith("frozen.")}
    assert frozen <= set(params), frozen - set(params)
    trained = [n for n in params if n not in frozen]
    # timm decays every tensor of 2 or more dimensions but pos_embed and cls_token (and
    # reg_token); vit3d keeps reg_token undecayed, as the class token (vit/params.c)
    decays = {n: p.ndim >= 2 and n not in ("pos_embed", "cls_token", "reg_token")
              for n, p in params.items()}
    # Layer-wise lr decay as MAE's lrd.param_groups_lrd: layer 0 the embeddings, i + 1 block i,
    # DEPTH + 1 the rest; one group per (layer, weight decay or not) with lr_scale.
    def layer_id(n):
        if n.startswith(("cls_token", "reg_token", "pos_embed", "patch_embed")):
            return 0
        return int(n.split(".")[1]) + 1 if n.startswith("blocks.") else DEPTH + 1
    groups = {}
    for n, p in params.items():
        if n in frozen:
            continue
        key = (layer_id(n), decays[n])
        groups.setdefault(key, {"params": [], "weight_decay": WD if decays[n] else 0.0,
                                "lr_scale": LAYER_DECAY ** (DEPTH + 1 - key[0])})
        groups[key]["params"].append(p)
    if sgd:  # torch.optim.SGD, Nesterov's or plain momentum, L2 weight decay per group
        opt = torch.optim.SGD(list(groups.values()), lr=LR, momentum=SGD_MOMENTUM,
                              nesterov=sgd == 2)
    elif lars:  # timm's Lars (Lars above, itself checked against timm.optim.Lars)
        opt = Lars(list(groups.values()), lr=LR, momentum=SGD_MOMENTUM, nesterov=lars in (2, 4),
                   eps=EPS, trust_clip=lars > 2)
    else:
        opt = (Lamb if lamb else torch.optim.AdamW)(list(groups.values()), lr=LR, betas=BETAS,
                                                    eps=EPS)

    results = []  # (group, name, err, tol)
    ref_lr, ref_norm, ref_loss = [], [], []
    ema = {n: init[n].to(dt).clone() for n in names}
    dropped = dropped0 = 0
    for s in range(STEPS):
        lr = lr_at(s)
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_scale"]
        opt.zero_grad(set_to_none=True)
        batch = slice(s * GLOBAL, (s + 1) * GLOBAL)
        logits = model(images[batch], range(batch.start, batch.stop))
        masks = model.masks
        dropped += masks.numel() - masks.sum().item()
        if s == 0:
            dropped0 = masks.numel() - masks.sum().item()
        if bce:  # timm's BinaryCrossEntropy: the mean over images and classes
            target = targets[batch]
            if bce_thresh >= 0:  # its target_threshold: 1 where the soft target exceeds it
                target = target.gt(bce_thresh).to(dt)
            loss = F.binary_cross_entropy_with_logits(logits, target)
        else:
            loss = -(targets[batch] * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        loss.backward()
        if s == 0:
            results.append(("logits", "logits", rel_err(d["logits"], logits), TOL["logits"]))
            results.append(("loss", "loss", rel_err(d["loss"], loss.reshape(1)), TOL["loss"]))
            ref_grads = {n: p.grad.clone() for n, p in params.items()}  # before clipping
            # ref_dump's variants freeze a prefix of the model (embeddings, first blocks), whose
            # backward vit3d skips: those gradients stay exactly zero
            frozen_grads = [n for n in frozen if d["grad." + n].abs().max().item() != 0.0]
            for n in trained:
                results.append(("grad", n, rel_err(d["grad." + n], ref_grads[n],
                                                   grad_base(n, ref_grads)), TOL["grad"]))
        norm = torch.nn.utils.clip_grad_norm_([params[n] for n in trained], max_norm=CLIP)
        opt.step()
        # timm's ModelEmaV2: ema * decay + (1 - decay) * weights; with ref_dump's ema_warmup
        # marker ModelEmaV3 with use_warmup as timm's train.py steps it: update s + 1 (1-based)
        # takes decay 1 - (1 + s)^(-2/3) (none at s = 0: the EMA becomes the weights), capped
        # at EMA
        decay = EMA if "ema_warmup" not in d else \
            (0.0 if s == 0 else min(EMA, 1.0 - (1.0 + s) ** (-2.0 / 3.0)))
        with torch.no_grad():
            for n in trained:
                ema[n] = ema[n] * decay + (1.0 - decay) * params[n].detach()
        ref_lr.append(lr), ref_norm.append(norm.item()), ref_loss.append(loss.item())
    clipped = sum(n > CLIP for n in ref_norm)
    for key, ref in (("lr", ref_lr), ("grad_norm", ref_norm), ("loss_per_step", ref_loss)):
        for s in range(STEPS):
            results.append((key, f"{key}[{s}]",
                            rel_err(d[key][s:s + 1], torch.tensor([ref[s]])), TOL[key]))
    final = {}  # piece name -> (vit3d, reference, init)
    # Frozen tensors must keep their very bits, in the weights and in the EMA.
    frozen_moved = [p + n for n in sorted(frozen) for p in ("final.", "ema.")
                    if not torch.equal(d[p + n], d["init." + n])]
    for n in trained:
        trio = [final_pieces(n, t) for t in (d["final." + n], params[n].detach(), init[n].to(dt))]
        final.update({k: (trio[0][k], trio[1][k], trio[2][k]) for k in trio[0]})
    for key, (mine, ref, ini) in final.items():
        group, err = final_err(key, mine, ref, ini, sum(ref_lr))
        results.append((group, key, err, TOL[group]))
    emas = {}  # piece name -> (vit3d, reference, init)
    for n in trained:  # the EMA of the weights, measured like them against its own movement
        trio = [final_pieces(n, t) for t in (d["ema." + n], ema[n], init[n].to(dt))]
        emas.update({k: (trio[0][k], trio[1][k], trio[2][k]) for k in trio[0]})
    for key, (mine, ref, ini) in emas.items():
        group, err = final_err(key, mine, ref, ini, sum(ref_lr))
        group = group.replace("final", "ema")
        results.append((group, "ema." + key, err, TOL[group]))

    # Self-check: the per-tensor comparator must flag a single wrong element in any one tensor:
    # 1e-3 of the tensor's norm (gradient, or update for final parameters), or for the k bias a
    # tenth of one Adam step.
    gen = torch.Generator().manual_seed(1)
    insensitive, planted = [], 0

    def corrupt(t, amount):
        bad = t.clone().double()
        bad.view(-1)[torch.randint(bad.numel(), (1,), generator=gen).item()] += amount
        return bad

    for n in trained:
        planted += 1
        base = grad_base(n, ref_grads)
        bad = corrupt(d["grad." + n], 1e-3 * base.norm().item())
        if rel_err(bad, ref_grads[n], base) <= TOL["grad"]:
            insensitive.append("grad." + n)
    for key, (mine, ref, ini) in final.items():
        planted += 1
        amount = 0.1 * LR if key.endswith("[k]") else 1e-3 * (ref - ini).norm().item()
        group, err = final_err(key, corrupt(mine, amount), ref, ini, sum(ref_lr))
        if err <= TOL[group]:
            insensitive.append("final." + key)
    for key, (mine, ref, ini) in emas.items():
        planted += 1
        amount = 0.1 * LR if key.endswith("[k]") else 1e-2 * (ref - ini).norm().item()
        group, err = final_err(key, corrupt(mine, amount), ref, ini, sum(ref_lr))
        if err <= TOL[group.replace("final", "ema")]:
            insensitive.append("ema." + key)

    failed = [r for r in results if not r[2] <= r[3]]  # "not <=" also catches NaN
    variant = ((", binary cross-entropy" if bce else "") +
               (f" with targets over {bce_thresh:g}" if bce_thresh >= 0 else "") +
               (", LAMB" if lamb else "") +
               (f", SGD with {'Nesterov' if sgd == 2 else 'plain'} momentum {SGD_MOMENTUM:g}"
                if sgd else "") +
               (f", {'LARC' if lars > 2 else 'LARS'} with "
                f"{'Nesterov' if lars in (2, 4) else 'plain'} momentum {SGD_MOMENTUM:g}"
                if lars else "") +
               (", parallel blocks" if parallel else "") +
               (", LayerScale" if layer_scale else "") +
               (f", {regs} register tokens" if regs else "") +
               (", positions on the patch tokens only" if no_embed_class else "") +
               (", QK-norm" if qk_norm else "") + ("" if qkv_bias else ", no qkv bias") +
               (", tanh GELU" if GELU == "tanh" else ", quick GELU" if GELU == "quick" else "") +
               (", norm_pre" if "init.norm_pre.weight" in d else "") +
               (f", LayerNorm eps {NORM_EPS:.3g}" if NORM_EPS != 1e-6 else "") +
               (f", dropout {PROJ_DROP:g} (attention {ATTN_DROP:g}, positions {POS_DROP:g}, "
                f"head {HEAD_DROP:g})" if PROJ_DROP or ATTN_DROP or POS_DROP or HEAD_DROP
                else "") +
               (", fixed 2D sin-cos positions" if sincos_err is not None else "") +
               (", EMA with ModelEmaV3's warmup" if "ema_warmup" in d else "") +
               (f", pre-logits {model.head.in_features} (tanh)" if model.pre_logits is not None
                else "") +
               (f", {len(frozen)} of {len(names)} tensors frozen" if frozen else ""))
    print(f"vit3d vs PyTorch reference ({args.dtype}, head: "
          f"{head_name(model)}"
          f"{'' if class_token else ', no class token'}"
          f"{variant}); clipping active on {clipped}/{STEPS} steps;"
          f" drop path dropped {dropped:.0f} of {STEPS * GLOBAL * 2 * (DEPTH - 1)} branch passes"
          f" of blocks 1-{DEPTH - 1} ({dropped0:.0f} in step 0)")
    print(f"{'group':<14}{'tensors':>8}{'worst rel':>12}{'tol':>9}  worst tensor")
    for group in TOL:
        rs = sorted((r for r in results if r[0] == group), key=lambda r: -r[2])
        print(f"{group:<14}{len(rs):>8}{rs[0][2]:>12.2e}{TOL[group]:>9.0e}  {rs[0][1]}")
    print("worst tensors overall:")
    for g, n, e, t in sorted(results, key=lambda r: -(r[2] / r[3]))[:6]:
        print(f"  {g:<14}{n:<32}{e:>10.2e}  ({e / t:.2f} of tol)")
    print(f"self-check: {planted} gradient, final and EMA tensors corrupted in one element each; "
          f"{planted - len(insensitive)} flagged")
    if clipped == 0:
        print("FAIL: clipping never triggered, so it was not tested")
    print(f"mixing: {n_mixup} Mixup, {n_cut} CutMix, {n_plain} unmixed pairs; images against "
          f"timm's pair mode from the raw images: max abs difference {mix_err:.2e} (tol 1e-6)")
    mix_ok = mix_err <= 1e-6 and n_mixup > 0 and n_cut > 0 and n_plain > 0
    if not mix_ok:
        print("FAIL: the mixed images differ, or the run lacks a Mixup, a CutMix or a plain pair")
    kept0 = GLOBAL * 2 * (DEPTH - 1) - dropped0
    if not (dropped0 > 0 and kept0 > 0):
        print("FAIL: step 0 (the gradient check) did not both keep and drop branches")
    if insensitive:
        print("FAIL: comparator missed corrupted tensors: " + ", ".join(insensitive))
    if failed:
        print("FAIL: " + ", ".join(f"{g}:{n} ({e:.2e} > {t:.0e})" for g, n, e, t in failed))
    if sincos_err is not None and not sincos_err <= 1e-7:
        print("FAIL: the fixed sin-cos positions")
    if frozen:
        print(f"frozen: {len(frozen)} tensors, in the final weights and the EMA "
              f"{'bit for bit their initial values' if not frozen_moved else 'MOVED'}; their "
              f"gradients {'zero (backward skipped)' if not frozen_grads else 'NOT ZERO'}")
    if frozen_moved:
        print("FAIL: frozen tensors changed: " + ", ".join(frozen_moved))
    if frozen_grads:
        print("FAIL: gradients of the frozen prefix, whose backward is skipped: " +
              ", ".join(frozen_grads))
    # LARC: ref_dump's rates lie above the trust ratios, so they are divided by the rate (the
    # other side of min(trust / lr, 1) is test_optim's and timm_check's)
    larc_ok = lars <= 2 or opt.clipped < opt.adapted
    if lars > 2:
        print(f"LARC: {opt.adapted - opt.clipped} of {opt.adapted} trust ratios divided by the "
              f"rate, {opt.clipped} cut to 1{'' if larc_ok else ': FAIL, none divided'}")
    ok = not failed and not insensitive and clipped > 0 and dropped0 > 0 and kept0 > 0 and mix_ok \
        and (sincos_err is None or sincos_err <= 1e-7) and not frozen_moved and not frozen_grads \
        and larc_ok
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
