# ref_optim.py: the reference's own LAMB and LARS (ref_vit.py's 5 steps with --opt lamb, lars,
# larc, ...), written from their papers and timm's documented choices, not from vit3d's C;
# tests/timm_check.py holds them to timm.optim.Lamb and timm.optim.Lars. Needs torch only.
import math

import torch


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019) with timm's Lamb
    choices: Adam's bias-corrected direction plus weight_decay * w, scaled by the trust ratio
    ||w|| / ||direction|| (1 where either is 0) only in groups with weight decay; no clipping of
    its own (clip_grad_norm_ runs before it) and no clamp of the ratio."""

    def __init__(self, params, lr, betas, eps, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                st = self.state[p]
                if not st:
                    st.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                st["t"] += 1
                t, m, v = st["t"], st["m"], st["v"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                u = (m / (1 - b1 ** t)) / (v.sqrt() / math.sqrt(1 - b2 ** t) + g["eps"])
                if g["weight_decay"] != 0:
                    u = u + g["weight_decay"] * p
                    w_norm, u_norm = p.norm(), u.norm()
                    if w_norm > 0 and u_norm > 0:
                        u = u * (w_norm / u_norm)
                p.add_(u, alpha=-g["lr"])


class Lars(torch.optim.Optimizer):
    """LARS as timm's Lars (its APEX LARC-derived form): in a group with weight decay, each
    tensor's gradient becomes (g + weight_decay * w) * trust, trust = trust_coeff * ||w|| /
    (||g|| + weight_decay * ||w|| + eps) where ||w|| and ||g|| are both positive, else 1, with
    trust_clip (LARC) min(trust / the group's lr, 1); then torch.optim.SGD's momentum (dampening
    0, the buffer starting as the first step's gradient), Nesterov's or plain. Groups without
    weight decay: that momentum SGD alone. clipped / adapted count LARC's ratios cut to 1."""

    def __init__(self, params, lr, momentum, nesterov, eps=1e-8, trust_coeff=0.001,
                 trust_clip=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, eps=eps,
                                      trust_coeff=trust_coeff, weight_decay=0.0,
                                      trust_clip=trust_clip))
        self.clipped = self.adapted = 0

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            wd, mom = g["weight_decay"], g["momentum"]
            for p in g["params"]:
                d = p.grad.clone()
                if wd != 0:
                    w_norm, g_norm = p.norm(), d.norm()
                    trust = 1.0
                    if w_norm > 0 and g_norm > 0:
                        trust = g["trust_coeff"] * w_norm / (g_norm + wd * w_norm + g["eps"])
                    if g["trust_clip"]:
                        ratio = trust / g["lr"] if g["lr"] > 0 else math.inf
                        self.adapted += 1
                        self.clipped += bool(ratio >= 1.0)
                        trust = min(ratio, 1.0)
                    d = (d + wd * p) * trust
                st = self.state[p]
                if "buf" not in st:
                    st["buf"] = d.clone()
                else:
                    st["buf"].mul_(mom).add_(d)
                step = d + mom * st["buf"] if g["nesterov"] else st["buf"]
                p.add_(step, alpha=-g["lr"])
