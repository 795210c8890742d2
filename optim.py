"""
Optimizers, learning-rate schedules and the one training step that train.py, analyze.py (residual growth) and
tools/bench.py share.

- make_optimizer: AdamW over the model's parameter groups (muP and the other LR / eps rules live in
  model.param_groups), or MuonH on the hidden matrices + AdamW on the rest (Schwethelm et al. 2026).
- lr_multiplier: warm-up, then WSD (sqrt or linear cool-down), cosine, linear or constant.
- decay_weights: independent weight decay, theta <- theta*(1 - wd*s_t).
- train_step: forward and backward over the micro-batches of one step, clipping, decay, the optimizer step and
  the MoE routers' bias balancing.
"""
import math
from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from distributed import sync_gradients
from moe import update_biases


# -----------------------------------------------------------------------------------------------------------------
# schedules, optimizers, the training step


def lr_multiplier(step, total, cfg):
    """The schedule's LR multiplier at `step` of `total` steps (linear warmup first, then):
    wsd_sqrt   constant, then over the last decay_frac: f + (1-f)(1-sqrt(p)) (Hagele et al. 2024; Lee et al. 2026)
    wsd_linear constant, then f + (1-f)(1-p) over the last decay_frac (Wang et al. 2026, arXiv:2606.18524)
    cosine     f + (1-f)(1+cos(pi p))/2 after warmup (Jeddi et al. 2026, arXiv:2602.11451)
    linear     f + (1-f)(1-p) after warmup (Schwethelm et al. 2026, arXiv:2604.21106)
    where f = min_lr_frac and p in [0, 1] is the progress through the decay phase."""
    warmup, f = cfg["warmup_iters"], cfg["min_lr_frac"]
    if step < warmup:
        return (step + 1) / warmup
    kind = cfg["schedule"]
    if kind == "constant":
        return 1.0
    if kind in ("wsd_sqrt", "wsd_linear"):
        decay_start = total - int(cfg["decay_frac"] * total)
        if step < decay_start:
            return 1.0
        p = (step - decay_start) / max(1, total - decay_start)
        return f + (1 - f) * (1 - (math.sqrt(p) if kind == "wsd_sqrt" else p))
    p = (step - warmup) / max(1, total - warmup)
    if kind == "cosine":
        return f + (1 - f) * 0.5 * (1 + math.cos(math.pi * p))
    if kind == "linear":
        return f + (1 - f) * (1 - p)
    raise ValueError(f"unknown schedule {kind!r}: use wsd_sqrt | wsd_linear | cosine | linear | constant")


def make_optimizer(model, cfg, device_type):
    """AdamW over the model's parameter groups (muP and the other LR rules live in model.param_groups)."""
    groups = model.param_groups()
    for g in groups:
        g["weight_decay"] = cfg["weight_decay"] if (g["decay"] and not cfg["wd_independent"]) else 0.0
        g["eps"] = cfg["adam_eps"] * g["eps_scale"]
        g["lr"] = cfg["lr"] * g["lr_scale"]
    fused = device_type in ("cuda", "cpu")  # one multi-tensor kernel per step instead of several ops per parameter
    if cfg["optimizer"] == "muonh":  # Schwethelm et al. 2026: MuonH on matrices, AdamW (its own LRs) on the rest
        return MuonHAdamW(groups, cfg["lr"], (cfg["beta1"], cfg["beta2"]), fused=fused)
    if cfg["optimizer"] != "adamw":
        raise ValueError(f"unknown optimizer {cfg['optimizer']!r}: use adamw | muonh")
    return torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), fused=fused)


def set_lr(optimizer, lr):
    for g in optimizer.param_groups:
        g["lr"] = lr * g["lr_scale"]


@torch.no_grad()
def decay_weights(optimizer, wd, schedule=1.0, skipped=None):
    """Independent weight decay (Lee et al. 2026, arXiv:2605.09165, §3; the term is Wortsman et al. 2023,
    arXiv:2309.14322, §3.2.2): theta <- theta*(1 - wd*s_t), where s_t = lr_t/lr_peak is the schedule's multiplier.
    Decoupled from the peak LR (torch's AdamW multiplies by lr_t = lr_peak*s_t), but it still warms up and cools
    down with the schedule. Applied before the Adam update, like AdamW's own decay. skipped: a bool tensor, True
    for a step the fp16 loss scaler skips: no decay either (chosen on the device, no host read)."""
    factor = 1.0 - wd * schedule
    if skipped is not None:
        factor = torch.where(skipped, 1.0, factor)
    for g in optimizer.param_groups:
        if g["decay"]:
            torch._foreach_mul_(g["params"], factor)


def train_step(model, optimizer, get_batch, accum=1, ctx=nullcontext(), grad_clip=0.0, weight_decay=0.0,
               schedule=1.0, world_size=1, rng=None, scaler=None):
    """One optimizer step: forward and backward over `accum` micro-batches (get_batch(i) -> (x, y)), each scaled
    by 1/accum, with rng(i) the random generator of micro-batch i for an elastic objective (forward's rng; None:
    fresh entropy, loop.py); gradient clipping; independent weight decay (0 = none); the optimizer step; the MoE
    routers' bias step. With DDP or FSDP only the last micro-batch synchronises gradients. scaler: fp16's
    torch.amp.GradScaler (the loss scaled up for the backward, the gradients unscaled before clipping; a step whose
    gradients hold an inf or NaN is skipped with its weight decay and MoE bias step, and the scale lowered).
    Returns the mean loss and the mean auxiliary losses as tensors on the device (no host sync) and the gradient
    norm before clipping (or None)."""
    raw = model.module if isinstance(model, DDP) else model
    loss_sum, aux_sums = 0.0, {}
    for micro in range(accum):
        x, y = get_batch(micro)
        sync_gradients(model, micro == accum - 1)
        with ctx:
            _, loss, aux = model(x, y, rng=rng(micro) if rng is not None else None)
            objective = loss + sum(aux.values()) if aux else loss
        (objective / accum if scaler is None else scaler.scale(objective / accum)).backward()
        loss_sum = loss_sum + loss.detach() / accum
        for k, v in aux.items():
            aux_sums[k] = aux_sums.get(k, 0.0) + v.detach() / accum
    if scaler is not None:
        scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), grad_clip) if grad_clip > 0 else None
    if hasattr(grad_norm, "full_tensor"):  # a DTensor (FSDP): the norm over all shards, the same on every rank
        grad_norm = grad_norm.full_tensor()
    skipped = None
    if scaler is not None:  # the scaler skips the step exactly when a gradient is not finite: so is their norm
        norm = grad_norm if grad_norm is not None else torch.nn.utils.get_total_norm(
            [p.grad for p in raw.parameters() if p.grad is not None])
        skipped = ~torch.isfinite(norm)
    if weight_decay > 0:
        decay_weights(optimizer, weight_decay, schedule, skipped)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    update_biases(raw, world_size, skipped)  # MoE routers' bias balancing (moe.py): after each optimizer step
    return loss_sum, aux_sums, grad_norm


# -----------------------------------------------------------------------------------------------------------------
# MuonH (Schwethelm et al. 2026, arXiv:2604.21106, §4.2; the ArchScale implementation)

MUONH_LR = 0.014  # their base MuonH LR; the AdamW LRs below are tied to it as ratios of train.py's lr
MUONH_ADAMW_LR = {"embed": 0.3, "head": 0.004}  # every other non-matrix parameter (norm gains ...): 0.005
MUONH_ADAMW_OTHER_LR = 0.005


class MuonH(torch.optim.Optimizer):
    """Muon on the hypersphere: U = Muon's orthogonalised (Nesterov) momentum; W <- W - lr*(|W|_F/|U|_F)*U, then W
    is scaled back to its previous Frobenius norm, so every matrix stays on its init-norm sphere. A matrix of norm
    0 (a zero-initialised modulator) takes the plain Muon step instead, or it could never move.
    A stacked parameter (MoE experts, (E, out, in)) is E matrices: each is orthogonalised and kept on its own
    sphere, as Muon trains MoE models expert by expert (Liu et al. 2025, Moonlight, arXiv:2502.16982). Momentum,
    Newton-Schulz and the shape-adjusted LR are torch.optim.Muon's own, step for step (tests/test_loop.py compares
    the two on a matrix; the step is bit for bit the torch.optim.Muon-based one this class replaced)."""

    def __init__(self, params, lr, momentum=0.95, nesterov=True, ns_steps=5):
        defaults = dict(lr=lr, weight_decay=0.0, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                        ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, adjust_lr_fn=None)  # torch's defaults
        super().__init__(params, defaults)
        for g in self.param_groups:
            for p in g["params"]:
                if p.dim() not in (2, 3):
                    raise ValueError(f"MuonH takes matrices or stacks of them, not a tensor of shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure=None):
        from torch.optim._muon import _adjust_lr, _zeropower_via_newtonschulz  # torch's Muon, one matrix at a time
        loss = closure() if closure is not None else None
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - g["momentum"])
                update = p.grad.lerp(buf, g["momentum"]) if g["nesterov"] else buf
                for w, u in zip(p.unbind(0), update.unbind(0)) if p.dim() == 3 else [(p, update)]:
                    U = _zeropower_via_newtonschulz(u, g["ns_coefficients"], g["ns_steps"], g["eps"])
                    step = torch.zeros_like(w).add_(U, alpha=-_adjust_lr(g["lr"], g["adjust_lr_fn"], w.shape))
                    radius, step_norm = w.norm(), step.norm()
                    new = w + (g["lr"] * radius / step_norm.clamp_min(1e-30)) * step
                    # radius 0: plain Muon (chosen on the device: `if radius == 0` would be a host sync per matrix)
                    w.copy_(torch.where(radius == 0, w + step, new * (radius / new.norm().clamp_min(1e-30))))
        return loss


class MuonHAdamW:
    """MuonH for the hidden matrices (and stacks of expert matrices) and AdamW for everything else, stepping as one
    optimizer. param_groups lists both (train.py's set_lr and weight decay walk them); state_dict holds both."""

    def __init__(self, groups, lr, betas, fused=False, momentum=0.95):
        muon, adam = [], []
        for g in groups:
            options = {k: v for k, v in g.items() if k not in ("params", "names", "eps")}
            sphere = [g["role"] == "hidden" and p.dim() in (2, 3) for p in g["params"]]  # matrices, expert stacks
            mat = [(n, p) for n, p, s in zip(g["names"], g["params"], sphere) if s]
            rest = [(n, p) for n, p, s in zip(g["names"], g["params"], sphere) if not s]
            if mat:  # no weight decay on the sphere: the renormalisation would undo it
                muon.append(dict(options, params=[p for _, p in mat], names=[n for n, _ in mat],
                                 weight_decay=0.0, decay=False))
            if rest:
                ratio = MUONH_ADAMW_LR.get(g["role"], MUONH_ADAMW_OTHER_LR) / MUONH_LR
                adam.append(dict(options, params=[p for _, p in rest], names=[n for n, _ in rest],
                                 eps=g["eps"], lr_scale=g["lr_scale"] * ratio))
        for g in muon + adam:
            g["lr"] = lr * g["lr_scale"]
        self.muon = MuonH(muon, lr=lr, momentum=momentum) if muon else None
        self.adam = torch.optim.AdamW(adam, lr=lr, betas=betas, weight_decay=0.0, fused=fused) if adam else None

    def parts(self):
        return [o for o in (self.muon, self.adam) if o is not None]

    @property
    def param_groups(self):
        return [g for o in self.parts() for g in o.param_groups]

    def step(self):
        for o in self.parts():
            o.step()

    def zero_grad(self, set_to_none=True):
        for o in self.parts():
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return {"muon": self.muon.state_dict() if self.muon else None,
                "adamw": self.adam.state_dict() if self.adam else None}

    def load_state_dict(self, state):
        for o, key in ((self.muon, "muon"), (self.adam, "adamw")):
            if o is not None:
                o.load_state_dict(state[key])
