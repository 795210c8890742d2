"""
What varies between looped models, as small parts in registries. model.py's one GPT class walks a depth *plan*
built here; a plain transformer is the one-pass plan:

    embedding -> [norm] -> prelude (n_prelude unshared layers)
              -> n_loop passes of the shared block (n_layer layers), each pass: inject -> layers -> [norm]
              -> coda (n_coda unshared layers) -> final norm -> head

A config key picks one row of each registry; a new variant is one class or function plus one row (also one a test
registers), which GPTConfig accepts from then on. A row holds all the rest of the house needs to know of it: its
config check, its parameters' optimizer role or LR multiplier, its runs and extra multiply-adds (scaling.py counts).
- BETWEEN_PASSES (`injection`; hyper-connections when hc_lanes > 0): what enters each pass (Schwethelm et al. 2026).
- CONDITIONING (`loop_cond`): per-pass conditioning of the shared blocks (TMLT, LoopFormer, IterAdaLN).
- RESIDUAL_RULES (`residual_scaling`): the shared blocks' branch multiplier and its LR / eps rule (Wang et al. 2026).
- ELASTIC (`elastic`) and TRAJECTORY_SAMPLERS (`trajectory_sampler`): elastic-depth training (Jeddi et al. 2026).
The papers' plans, as config keys (README.md's section "Looped models" lists the keys and each paper's preset): the
full loop (Lee et al., Jeddi et al., Wang et al.: n_prelude = n_coda = 0); prelude / recur / coda with injection,
loop_norm, hyper-connections and truncated BPTT (bptt_loops; Schwethelm et al.); the sandwich loop (Chen et al.:
prelude + shared block + coda, sandwich_norm, loop_cond="iteradaln"). Elastic depth: forward, generate and the walk
take a schedule of step sizes.

This file imports no other file of the project: model.py builds on it.
"""
import math
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# -----------------------------------------------------------------------------------------------------------------
# the depth plan

# Where a hidden state sits in the depth: effective-layer index (also the KV-cache slot), physical layer (index into
# GPT.blocks), loop index, whether it ends a pass of the loop, and the part (prelude | loop | coda).
Label = namedtuple("Label", "index layer loop boundary part")


def make_plan(cfg, n_passes):
    """The depth plan: one Label per step (block run) of a forward pass with n_passes passes of the shared block."""
    P, K = cfg.n_prelude, cfg.n_layer
    plan = [Label(i, i, 0, False, "prelude") for i in range(P)]
    for loop in range(n_passes):
        plan += [Label(len(plan) + j, P + j, loop, j == K - 1, "loop") for j in range(K)]
    return plan + [Label(len(plan) + j, P + K + j, 0, False, "coda") for j in range(cfg.n_coda)]


def is_looped(config):
    """True if the depth reuses layers or has a prelude/coda around a loop, i.e. has loop boundaries (early exit
    then exits at them); a one-pass model without prelude or coda has the plain plan."""
    return config.n_loop > 1 or config.n_prelude > 0 or config.n_coda > 0


def resolve_schedule(cfg, schedule=None, max_passes=None):
    """A schedule is a list of step sizes dt summing to 1 (one pass each), or an int M (M uniform steps): elastic
    evaluation at budget M (Jeddi et al. 2026, Algorithm 2). None means the trained depth, n_loop uniform steps. A
    one-pass model without prelude or coda makes one pass; max_passes: what the module between passes allows."""
    schedule = cfg.n_loop if schedule is None else schedule
    if isinstance(schedule, int):
        schedule = [1.0 / schedule] * schedule
    schedule = [float(s) for s in schedule]
    if not schedule or min(schedule) <= 0 or abs(sum(schedule) - 1) > 1e-6:
        raise ValueError(f"a schedule is a non-empty list of positive step sizes summing to 1 (or an int), "
                         f"got {schedule}")
    if len(schedule) > 1 and not is_looped(cfg):
        raise ValueError(f"a plain model makes one pass: the schedule {schedule!r} needs a looped model")
    if max_passes is not None and len(schedule) > max_passes:
        raise ValueError(f"the module between passes has parameters for n_loop={max_passes} passes; "
                         f"a schedule of {len(schedule)} steps is too long")
    return schedule


def last(walk):
    """The final (Label, state) of a walk."""
    label = h = None
    for label, h, _ in walk:
        pass
    return label, h


# -----------------------------------------------------------------------------------------------------------------
# per-loop conditioning


def sinusoidal(value, dim=256, max_period=10000.0, device=None):
    """(1, dim) features [cos(value*w_k), sin(value*w_k)], w_k = max_period^(-k/(dim/2)), k = 0..dim/2-1: the DiT
    timestep encoding (Peebles & Xie 2023) used by TMLT, LoopFormer (Jeddi et al. 2026, arXiv:2602.11451, §3.2;
    t in [0, 1] enters as is) and IterAdaLN (Chen et al. 2026, arXiv:2606.04438, §3.3)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=device) / half)
    angles = float(value) * freqs
    return torch.cat([angles.cos(), angles.sin()])[None]


class ScalarEmbedder(nn.Module):
    """A scalar (loop index, time t, step size dt) -> sinusoidal(256) -> Linear -> SiLU -> Linear: (1, C)."""

    def __init__(self, n_embd, freq_dim=256):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, n_embd), nn.SiLU(), nn.Linear(n_embd, n_embd))

    def forward(self, value):
        w = self.mlp[0].weight
        return self.mlp(sinusoidal(value, self.freq_dim, device=w.device).to(w.dtype))

    def reset_special(self):
        for layer in (self.mlp[0], self.mlp[2]):
            nn.init.zeros_(layer.bias)


def zero_or_normal_(linear, how):
    """The papers zero-initialise a modulator's output (so a modulated block starts as the identity);
    LoopFormer's released code ends up with N(0, 0.02) weights instead (its global init runs after the zeroing)."""
    nn.init.zeros_(linear.bias)
    if how == "zero":
        nn.init.zeros_(linear.weight)
    else:
        nn.init.normal_(linear.weight, 0.0, 0.02)


class AdaLNModulator(nn.Module):
    """adaLN-zero modulator of one shared block for TMLT (loop index) and LoopFormer (t, dt): SiLU -> Linear(C, 4C)
    on the loop embedding c, chunked as (alpha_msa, alpha_mlp, gamma_msa, gamma_mlp) (Jeddi et al. 2026,
    arXiv:2602.11451, §3.2): x + alpha * Branch(norm(x) * (1 + gamma)) with affine-free norms, no shift."""

    def __init__(self, n_embd, init="zero"):
        super().__init__()
        self.proj = nn.Linear(n_embd, 4 * n_embd)
        self.init_kind = init
        self.reset_special()

    def chunks(self, c):  # c: (1, C) -> four (1, 1, C)
        return self.proj(F.silu(c)).unsqueeze(1).chunk(4, dim=-1)

    def attn(self, x, c):
        gate, _, scale, _ = self.chunks(c)
        return scale, None, gate

    def ffn(self, m, c):
        _, gate, _, scale = self.chunks(c)
        return scale, None, gate

    def reset_special(self):
        zero_or_normal_(self.proj, self.init_kind)


class IterAdaLNModulator(nn.Module):
    """IterAdaLN of one shared layer (Chen et al. 2026, arXiv:2606.04438, §3.3, Eqs. 3-9):
    c_attn = Linear_attn(h) + v_k, (gamma, beta, alpha) = MLP_attn(c_attn);  c_ffn = Linear_ffn(m) + v_k,
    (gamma, beta) = MLP_ffn(c_ffn); MLP = SiLU -> Linear with a zero-initialised output [INF: the paper does not give
    its inner structure]; the norm is (1 + gamma) * rmsnorm(h) + beta and alpha gates the attention branch only.
    h is the layer input, m the state after the attention update, v_k the shared iteration embedding."""

    def __init__(self, n_embd, init="zero"):
        super().__init__()
        self.token_attn = nn.Linear(n_embd, n_embd, bias=False)
        self.out_attn = nn.Linear(n_embd, 3 * n_embd)
        self.token_ffn = nn.Linear(n_embd, n_embd, bias=False)
        self.out_ffn = nn.Linear(n_embd, 2 * n_embd)
        self.init_kind = init
        self.reset_special()

    def attn(self, x, v):  # x: (B, T, C), v: (1, C)
        gamma, beta, alpha = self.out_attn(F.silu(self.token_attn(x) + v)).chunk(3, dim=-1)
        return gamma, beta, alpha

    def ffn(self, m, v):
        gamma, beta = self.out_ffn(F.silu(self.token_ffn(m) + v)).chunk(2, dim=-1)
        return gamma, beta, None

    def reset_special(self):
        zero_or_normal_(self.out_attn, self.init_kind)
        zero_or_normal_(self.out_ffn, self.init_kind)


class LoopCond:
    """What Block.forward receives as `cond` in one pass: the block's modulator bound to this pass's embedding c.
    A plain object, so the compiled block traces through it and c (a tensor) is a graph input. The walk yields it
    with the block's output state. Only when an analysis asks (GPT.walk's keep_cond, for analyze.py's conditioning
    statistics) it keeps what it returned, out = {"attn": (scale, shift, gate), "ffn": (...)} (any of them None);
    otherwise out is None and nothing is kept."""

    def __init__(self, modulator, c, keep=False):
        self.modulator, self.c, self.out = modulator, c, {} if keep else None

    def keep(self, branch, result):
        if self.out is not None:
            self.out[branch] = result
        return result

    def attn(self, x):
        return self.keep("attn", self.modulator.attn(x, self.c))

    def ffn(self, m):
        return self.keep("ffn", self.modulator.ffn(m, self.c))


class IndexConditioning:
    """TMLT: the loop index (0-based) through a sinusoidal embedder; adaLN-zero modulators."""
    embedders = ("loop_embed",)  # model attributes holding a ScalarEmbedder each (names kept in checkpoints)
    modulator = AdaLNModulator
    per_sequence = True  # the modulator's input is one vector per pass: it works once per sequence, not per token

    @staticmethod
    def vector(model, loop, t, dt):
        return model.loop_embed(loop)


class LoopFormerConditioning(IndexConditioning):
    """LoopFormer (Jeddi et al. 2026, arXiv:2602.11451, §3.2): c = e_t(t_{i-1}) + e_dt(dt_i)."""
    embedders = ("loop_embed", "step_embed")

    @staticmethod
    def vector(model, loop, t, dt):
        return model.loop_embed(t) + model.step_embed(dt)


class IterAdaLNConditioning:
    """IterAdaLN (Chen et al. 2026, arXiv:2606.04438, §3.3): the embedding v_k of iteration k = loop + 1, mixed with
    each token's state inside the modulator (so it works per token)."""
    embedders = ("loop_embed",)
    modulator = IterAdaLNModulator
    per_sequence = False

    @staticmethod
    def vector(model, loop, t, dt):
        return model.loop_embed(loop + 1)


CONDITIONING = {"none": None, "index": IndexConditioning, "loopformer": LoopFormerConditioning,
                "iteradaln": IterAdaLNConditioning}


# -----------------------------------------------------------------------------------------------------------------
# between the passes: input injection and hyper-connections (Schwethelm et al. 2026, arXiv:2604.21106)
#
# Every kind is one small module with the same methods, which GPT.walk calls around each pass:
#   start(e)              the state before the first pass, from the prelude output e (B, T, C)
#   read(state, e, i)     the input u of pass i
#   write(state, s, u, i) the state after pass i, from its output s (after the end-of-pass norm) and its input u
#   pool(state)           the (B, T, C) state the coda and every exit at a loop boundary read
# and with the same facts for the rest of the house: `name` (GPT's attribute holding it, so its parameters'
# prefix in checkpoints), `role` (the optimizer role of its parameters; None: as GPT.param_role decides),
# `max_passes` (None: any schedule), runs() and extra_macs() (accounting.py's counts), check(cfg) (a config error,
# or None).


class Passthrough(nn.Module):
    """injection='none', Schwethelm et al.'s "passthrough": each pass reads the state the last one wrote, u = h,
    with h0 = e. Holds no parameters; the other kinds keep its defaults where they agree. Its four methods are
    identities, so GPT.walk skips them when the kind is this class itself: a plain model's forward runs none."""
    name, role, max_passes = "inject", None, None

    def __init__(self, cfg):
        super().__init__()

    @staticmethod
    def check(cfg):
        return None

    def start(self, e):
        return e

    def read(self, state, e, i):
        return state

    def write(self, state, s, u, i):
        return s

    def pool(self, state):
        return state

    def runs(self, per_pass):
        """(forward, backward) runs per token of this module's parameters as matmul weights, given those of one
        pass of the shared block, for scaling.py's units; None: no parameters, no unit."""
        return None

    def extra_macs(self):
        """Multiply-adds per token and pass that runs() does not count (hyper-connections' lane mixing)."""
        return 0


class Additive(Passthrough):
    """injection='additive': u = h + e with h0 = 0 (Schwethelm et al. 2026, arXiv:2604.21106, App. C.1)."""

    def start(self, e):
        return torch.zeros_like(e)

    def read(self, state, e, i):
        return state + e


class LinearInjection(Passthrough):
    """injection='linear': u = W [e || h], W in R^{C x 2C} initialised [I | 0], so the first pass sees the prelude
    output e unchanged (Schwethelm et al. 2026, arXiv:2604.21106, App. C.1, Eq. 7; the concat injection of Geiping
    et al. 2025). W runs once per pass."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.proj = nn.Linear(2 * cfg.n_embd, cfg.n_embd, bias=False)
        self.reset_special()

    def read(self, state, e, i):
        return self.proj(torch.cat([e, state], dim=-1))

    def runs(self, per_pass):
        return per_pass

    @torch.no_grad()
    def reset_special(self):
        C = self.proj.out_features
        self.proj.weight.zero_()
        self.proj.weight[:, :C].copy_(torch.eye(C))


class HyperConnections(Passthrough):
    """K parallel lanes l (K, B, T, C) mixed at every loop boundary (Schwethelm et al. 2026, arXiv:2604.21106,
    App. G.1, Eq. 9, after Zhu et al. 2025): u_i = alpha_i . l_i, s_i = RecurBlock(u_i), l_{i+1} = M_i l_i +
    beta_i (x) s_i, with l_0 = (e, ..., e) and per-pass alpha_i, beta_i in R^K, M_i in R^{K x K}; cyclic init
    alpha_i = e_{i mod K}, M_i = I, beta_i = 1, "so that the first training iteration reduces to a plain looped
    forward pass". Our reading, because that property of App. G.1 requires it: s_i is the pass's increment
    norm_loop(RecurBlock(u_i)) - u_i, so at init every lane equals the plain (passthrough) loop's state; and the
    coda (and every exit at a loop boundary) reads the lanes' mean (hc_pool='mean'), since a pre-norm coda is not
    scale-invariant and the paper's "sum-pooled lanes" (hc_pool='sum') would feed it K times that state.
    Its scalars are 'norm' parameters (no decay, no muP LR scale) and exist for n_loop passes only."""
    name, role = "hc", "norm"

    @staticmethod
    def check(cfg):
        if cfg.hc_lanes == 1:
            return "hc_lanes must be 0 (off) or >= 2 (Schwethelm et al. use 2)"
        if cfg.injection != "none":
            return f"hyper-connections replace the input injection: set injection='none' (got {cfg.injection!r})"
        return None

    def __init__(self, cfg):
        super().__init__(cfg)
        n_loop, n_lanes = cfg.n_loop, cfg.hc_lanes
        self.alpha = nn.Parameter(torch.zeros(n_loop, n_lanes))
        self.mix = nn.Parameter(torch.zeros(n_loop, n_lanes, n_lanes))
        self.beta = nn.Parameter(torch.zeros(n_loop, n_lanes))
        self.pool_kind, self.n_embd, self.max_passes = cfg.hc_pool, cfg.n_embd, n_loop
        self.reset_special()

    def start(self, e):
        return e.unsqueeze(0).expand(self.alpha.size(1), *e.shape)  # (K, B, T, C)

    def read(self, lanes, e, i):
        return torch.einsum("k,kbtc->btc", self.alpha[i].to(lanes.dtype), lanes)

    def write(self, lanes, s, u, i):
        increment = s - u  # our reading (see the class docstring)
        mixed = torch.einsum("jk,kbtc->jbtc", self.mix[i].to(lanes.dtype), lanes)
        return mixed + self.beta[i].to(increment.dtype)[:, None, None, None] * increment

    def pool(self, lanes):
        """The state the coda reads: the lanes' mean (or, hc_pool='sum', their sum)."""
        return lanes.mean(0) if self.pool_kind == "mean" else lanes.sum(0)

    def runs(self, per_pass):
        return 0, 0  # per-pass scalars, not weights of a matmul: their work is extra_macs()

    def extra_macs(self):
        """Lane mixing: (K^2 + 2K) * d multiply-adds per pass and token (Schwethelm et al. 2026, App. G.1); as in
        the paper's count, the d-wide elementwise work of our reading (the increment, the pooling) is not counted."""
        K = self.alpha.size(1)
        return (K * K + 2 * K) * self.n_embd

    @torch.no_grad()
    def reset_special(self):
        n_loop, K = self.alpha.shape
        self.alpha.zero_()
        self.alpha[torch.arange(n_loop), torch.arange(n_loop) % K] = 1.0
        self.mix.copy_(torch.eye(K).expand(n_loop, K, K))
        self.beta.fill_(1.0)


BETWEEN_PASSES = {"none": Passthrough, "linear": LinearInjection, "additive": Additive}  # by config.injection


def between_passes_kind(cfg):
    """The one place that picks what happens between loop passes: hyper-connections when hc_lanes > 0 (they
    replace the injection), else the injection kind; a one-pass linear injection has nothing to mix in, so it
    stores no W and passes e through."""
    if cfg.hc_lanes:
        return HyperConnections
    if cfg.injection == "linear" and cfg.n_loop == 1:
        return Passthrough
    return BETWEEN_PASSES[cfg.injection]


# -----------------------------------------------------------------------------------------------------------------
# residual scaling (Wang et al. 2026, arXiv:2606.18524, §5 and App. 8.2)


class ResidualRule:
    """A multiplier on every attention and FFN branch of the shared blocks, multiplier(cfg) (None: no multiplier),
    and the factor depth_factor(cfg) on the hidden LR and AdamW eps it asks for (None: none; the norm gains inside
    blocks then take it too, as the 'block_norm' role)."""

    def __init__(self, multiplier=None, depth_factor=None):
        self.multiplier, self.depth_factor = multiplier, depth_factor


def factorized_depth_factor(cfg):
    """m_L^-1/2 = (n_layer / L_ref)^-1/2 (Wang et al. 2026, Table 1; CompleteP with alpha = 1/2)."""
    return (cfg.n_layer / cfg.residual_ref_layers) ** -0.5


RESIDUAL_RULES = {
    "none": ResidualRule(),
    "sqrt": ResidualRule(lambda cfg: cfg.n_loop ** -0.5),  # n_loop^-1/2
    "linear": ResidualRule(lambda cfg: 1.0 / cfg.n_loop),  # 1/n_loop
    # lambda / n_loop * (n_layer / L_ref)^-1/2, with the depth rule on the LR and eps
    "factorized": ResidualRule(lambda cfg: cfg.residual_lambda / cfg.n_loop * factorized_depth_factor(cfg),
                               factorized_depth_factor),
}


def residual_multiplier(cfg):
    """The multiplier on the shared blocks' branches under the config's residual rule (1 when it has none)."""
    rule = RESIDUAL_RULES[cfg.residual_scaling]
    return 1.0 if rule.multiplier is None else rule.multiplier(cfg)


def depth_lr_factor(cfg):
    """The factor on the hidden (looped-stack) LR and AdamW eps under the config's residual rule (1 when none)."""
    rule = RESIDUAL_RULES[cfg.residual_scaling]
    return 1.0 if rule.depth_factor is None else rule.depth_factor(cfg)


# -----------------------------------------------------------------------------------------------------------------
# elastic depth: training objectives and trajectories (Jeddi et al. 2026, arXiv:2602.11451)


def uniform_trajectory(n_loop, rng):
    """A shortcut trajectory for a model trained with n_loop (= L) passes: S ~ U{1..L-1} steps whose sizes are
    multiples of 1/L summing to 1, returned as integer units (Delta_i = units_i / L). The paper's sampler (Jeddi et
    al. 2026, arXiv:2602.11451, §3.3: "first sample a shortcut length S ~ U{1,...,L-1}, then uniformly draw the
    discrete step schedule"): given S, uniform over the C(L-1, S-1) compositions of L into S parts (S-1 distinct
    cut points out of the L-1 inner ones)."""
    L = n_loop
    S = int(rng.integers(1, L))  # 1..L-1
    cuts = np.sort(rng.choice(np.arange(1, L), size=S - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [L]])).tolist()


def greedy_trajectory(n_loop, rng):
    """As uniform_trajectory, by the released code's sampler: each of the first S-1 steps is uniform over the sizes
    that still leave one unit for every later step; the last step takes the rest (favours a large first step)."""
    S = int(rng.integers(1, n_loop))
    units, remaining = [], n_loop
    for steps_left in range(S, 1, -1):
        cap = remaining - (steps_left - 1)  # leave one unit per later step
        u = int(rng.integers(1, cap + 1))
        units.append(u)
        remaining -= u
    return units + [remaining]


TRAJECTORY_SAMPLERS = {"uniform": uniform_trajectory, "greedy": greedy_trajectory}


def trajectory_rng(seed, index):
    """The generator of the elastic objective's draws for one micro-batch (GPT.forward's rng): seeded by (seed, global
    micro-batch index), so resumed and DDP runs sample exactly what one uninterrupted process would."""
    return np.random.default_rng([int(seed), int(index), 0x100F])


def add_aux(total, aux):
    """Accumulate auxiliary terms (a dict of scalars: the MoE layers' balancing losses) into the running dict."""
    if aux:
        for k, v in aux.items():
            total[k] = total[k] + v if k in total else v


def consistency_pair(model, targets, final, final_s, aux):
    """(logits, loss) of the full trajectory's final state, and into aux, weighted, the shortcut (or early-exit)
    cross-entropy and the consistency MSE between the full trajectory's final state (stop-gradient) and the shorter
    one's."""
    cfg = model.config
    logits, logits_s = model.logits(final), model.logits(final_s)
    loss = model.loss(logits, targets)
    aux["shortcut_ce"] = cfg.shortcut_weight * model.loss(logits_s, targets)
    if cfg.consistency_on == "hidden":  # Algorithm 1 and the released code: the final-normed hidden state
        a, b = model.norm_f(final), model.norm_f(final_s)
    else:  # the paper's prose: per-token logits
        a, b = logits.float(), logits_s.float()
    aux["consistency"] = cfg.consistency_weight * F.mse_loss(b, a.detach())
    return logits, loss


def shortcut_objective(model, x, rope, targets, rng, schedule, aux):
    """LoopFormer: aux['shortcut_ce'] = l1*CE(a sampled shortcut trajectory), aux['consistency'] = l2*MSE(stopgrad(
    final-normed state of the full trajectory), that of the shortcut); the shortcut's MoE terms weighted by l1."""
    cfg = model.config
    L = model.loop_count(schedule)
    label, h = last(model.walk(x, rope, None, aux, schedule))
    units = TRAJECTORY_SAMPLERS[cfg.trajectory_sampler](L, rng)
    short_aux = {}
    label_s, h_s = last(model.walk(x, rope, None, short_aux, schedule=[u / L for u in units]))
    add_aux(aux, {k: cfg.shortcut_weight * v for k, v in short_aux.items()})
    return consistency_pair(model, targets, model.final_state(h, label), model.final_state(h_s, label_s), aux)


def early_exit_objective(model, x, rope, targets, rng, schedule, aux):
    """Base-Loop-EE-Cons / TMLT-EE: the same two terms for the state after S ~ U{1..L-1} plain passes of the same
    walk (an unconditioned or index-conditioned loop stopped early)."""
    S = int(rng.integers(1, model.loop_count(schedule)))
    label_s = h_s = None
    for label, h, _ in model.walk(x, rope, None, aux, schedule):
        if label.boundary and label.loop == S - 1:
            label_s, h_s = label, h
    return consistency_pair(model, targets, model.final_state(h, label), model.final_state(h_s, label_s), aux)


def random_depth_objective(model, x, rope, targets, rng, schedule, aux):
    """Naive-Loop-EE [INF: "akin to Recurrent Depth", Geiping et al. 2025]: the loss is the CE after S ~ U{1..L}
    passes, S drawn per micro-batch."""
    S = int(rng.integers(1, model.loop_count(schedule) + 1))
    label, h = last(model.walk(x, rope, None, aux, schedule=S))
    logits = model.readout(h, label)
    return logits, model.loss(logits, targets)


class Elastic:
    """An elastic training objective: objective(model, x, rope, targets, rng, schedule, aux) -> (logits, loss) in
    training mode; runs(fwd, bwd, n) -> the shared blocks' expected (forward, backward) runs per token of one training
    step with n passes (scaling.py); check(cfg) -> a config error or None."""

    def __init__(self, objective, runs, check=None):
        self.objective, self.runs, self.check = objective, runs, check or (lambda cfg: None)


ELASTIC = {
    "none": None,
    # the shortcut pass runs E[S] = n/2 more passes
    "shortcut": Elastic(shortcut_objective, lambda fwd, bwd, n: (fwd + n / 2, bwd + n / 2),
                        lambda cfg: None if cfg.loop_cond == "loopformer" else
                        "elastic='shortcut' trains LoopFormer trajectories: set loop_cond='loopformer' "
                        "(or use elastic='early_exit')"),
    "early_exit": Elastic(early_exit_objective, lambda fwd, bwd, n: (fwd, bwd)),
    # E[S] = (n+1)/2 passes instead of n
    "random_depth": Elastic(random_depth_objective, lambda fwd, bwd, n: ((n + 1) / 2, (n + 1) / 2)),
}
