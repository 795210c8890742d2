"""
Looped (weight-tied, recurrent-depth) transformers: every looped model of the five papers is a configuration of
one class, LoopedGPT(GPT), and a plain transformer is the looped model with one pass.

    embedding -> [norm] -> prelude (n_prelude unshared layers)
              -> n_loop passes of the shared block (n_layer layers), each pass: inject -> layers -> [norm]
              -> coda (n_coda unshared layers) -> final norm -> head

Depth plans (config keys, not the papers' symbols; DESIGN.md maps them):
- full loop: n_prelude = n_coda = 0 (Lee et al. 2026; Jeddi et al. 2026; Wang et al. 2026).
- prelude / recur / coda with input injection and the model-level norms (Schwethelm et al. 2026,
  arXiv:2604.21106): injection="linear" (u = W[e||h], W = [I|0] at init), "additive" (u = h + e, h0 = 0) or
  "none" (their "passthrough", u = h); loop_norm=True; hyper-connection lanes at loop boundaries (hc_lanes);
  truncated BPTT (bptt_loops). Every injection kind and the hyper-connections are one small module each, with the
  same methods (start, read before a pass, write after it, pool), which between_passes picks.
- sandwich loop (Chen et al. 2026, arXiv:2606.04438): prelude + shared block + coda, injection="none",
  sandwich_norm=True, loop_cond="iteradaln".
Per-loop conditioning of the shared blocks (loop_cond): "index" (TMLT: the loop index), "loopformer" (normalised
time t and step size dt), "iteradaln" (iteration + per-token state). Residual-branch multipliers (Wang et al.
2026, arXiv:2606.18524): residual_scaling. Elastic depth (Jeddi et al. 2026): run forward, generate or the walk
with any schedule of step sizes (schedule=...), and train with the shortcut-consistency objective (elastic), whose
trajectories are drawn from the generator passed as forward's rng (trajectory_rng: seeded by the micro-batch).

The walk (LoopedGPT.walk) is the only forward code path: forward, generation, early exit and analyses all use it.
The blocks are compiled one by one (GPT.compile_blocks) and the loop stays in Python, so a new loop count never
recompiles a block: per-loop conditioning and residual multipliers enter the block as tensor arguments.

Also here: build_model / load_model (the one place turning configs and checkpoints into models); MuonH, the
optimizer of Schwethelm et al. (train.py --optimizer=muonh), lives in optim.py.
"""
import math
import os
import warnings
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from configurator import ConfigError
from model import GPT, GPTConfig, Label, RMSNorm, add_aux

# the GPTConfig fields of the "looping" section; a config that leaves all of them at their defaults is plain
LOOP_FIELDS = ("n_loop", "n_prelude", "n_coda", "injection", "hc_lanes", "hc_pool", "loop_norm", "bptt_loops",
               "residual_scaling", "residual_lambda", "residual_ref_layers", "loop_cond", "cond_init", "cond_lr_scale",
               "elastic", "shortcut_weight", "consistency_weight", "consistency_on", "trajectory_sampler")


def is_plain(config):
    """True if every looping key is at its default: build_model makes a GPT, not a LoopedGPT."""
    defaults = GPTConfig.__dataclass_fields__
    return all(getattr(config, name) == defaults[name].default for name in LOOP_FIELDS)


def is_looped(config):
    """True if the depth reuses layers or has a prelude/coda around a loop, i.e. has loop boundaries (early exit
    then exits at them). A LoopedGPT with one pass and no prelude or coda (n_loop=1, loop_cond=index, say) is not."""
    return config.n_loop > 1 or config.n_prelude > 0 or config.n_coda > 0


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
    with the block's output state; outside torch.compile it keeps what it returned, out = {"attn": (scale, shift,
    gate), "ffn": (...)} (any of them None), for the conditioning statistics (analyze.py)."""

    def __init__(self, modulator, c):
        self.modulator, self.c, self.out = modulator, c, {}

    def keep(self, branch, result):
        if not torch.compiler.is_compiling():
            self.out[branch] = result
        return result

    def attn(self, x):
        return self.keep("attn", self.modulator.attn(x, self.c))

    def ffn(self, m):
        return self.keep("ffn", self.modulator.ffn(m, self.c))


# -----------------------------------------------------------------------------------------------------------------
# between the passes: input injection and hyper-connections (Schwethelm et al. 2026, arXiv:2604.21106)
#
# Every kind is one small module with the same methods, which LoopedGPT.walk calls around each pass:
#   start(e)              the state before the first pass, from the prelude output e (B, T, C)
#   read(state, e, i)     the input u of pass i
#   write(state, s, u, i) the state after pass i, from its output s (after the end-of-pass norm) and its input u
#   pool(state)           the (B, T, C) state the coda and every exit at a loop boundary read
# and with the same facts for the rest of the house: `name` (LoopedGPT's attribute holding it, so its parameters'
# prefix in checkpoints), `role` (the optimizer role of its parameters; None: as GPT.param_role decides),
# `max_passes` (None: any schedule), runs() and extra_macs() (scaling.py's accounting).
# A new kind is one class here and one entry in BETWEEN_PASSES (and its name in GPTConfig's injection choices).


class Passthrough(nn.Module):
    """injection='none', Schwethelm et al.'s "passthrough": each pass reads the state the last one wrote, u = h,
    with h0 = e. Holds no parameters; the other kinds keep its defaults where they agree."""
    name, role, max_passes = "inject", None, None

    def __init__(self, cfg):
        super().__init__()

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


BETWEEN_PASSES = {"none": Passthrough, "additive": Additive, "linear": LinearInjection}  # by config.injection


def between_passes(cfg):
    """The one place that picks what happens between loop passes: hyper-connections when hc_lanes > 0 (they
    replace the injection), else the injection kind; a one-pass linear injection has nothing to mix in, so it
    stores no W and passes e through."""
    if cfg.hc_lanes:
        return HyperConnections(cfg)
    if cfg.injection == "linear" and cfg.n_loop == 1:
        return Passthrough(cfg)
    return BETWEEN_PASSES[cfg.injection](cfg)


# -----------------------------------------------------------------------------------------------------------------
# residual scaling (Wang et al. 2026, arXiv:2606.18524)


def residual_multiplier(cfg):
    """The multiplier on every attention and FFN branch of the shared blocks (Wang et al. 2026, §5 and App. 8.2):
    none 1, sqrt n_loop^-1/2, linear 1/n_loop, factorized lambda / n_loop * (n_layer / L_ref)^-1/2."""
    N = cfg.n_loop
    return {"none": 1.0, "sqrt": N ** -0.5, "linear": 1.0 / N,
            "factorized": cfg.residual_lambda / N * (cfg.n_layer / cfg.residual_ref_layers) ** -0.5,
            }[cfg.residual_scaling]


def depth_lr_factor(cfg):
    """m_L^-1/2 = (n_layer / L_ref)^-1/2: factor on the hidden (looped-stack) LR and AdamW eps under
    residual_scaling='factorized' (Wang et al. 2026, arXiv:2606.18524, Table 1; CompleteP with alpha = 1/2)."""
    return (cfg.n_layer / cfg.residual_ref_layers) ** -0.5 if cfg.residual_scaling == "factorized" else 1.0


# -----------------------------------------------------------------------------------------------------------------
# trajectories (Jeddi et al. 2026, arXiv:2602.11451, §3.3)


def sample_trajectory(n_loop, rng, kind="uniform"):
    """A shortcut trajectory for a model trained with n_loop (= L) passes: S ~ U{1..L-1} steps whose sizes are
    multiples of 1/L summing to 1, returned as integer units (Delta_i = units_i / L).
    uniform (the paper, Jeddi et al. 2026, arXiv:2602.11451, §3.3: "first sample a shortcut length S ~ U{1,...,L-1},
            then uniformly draw the discrete step schedule"): given S, uniform over the C(L-1, S-1) compositions of
            L into S parts (S-1 distinct cut points out of the L-1 inner ones).
    greedy  (the released code's sampler): each of the first S-1 steps is uniform over the sizes that still leave
            one unit for every later step; the last step takes the rest (favours a large first step)."""
    L = n_loop
    S = int(rng.integers(1, L))  # 1..L-1
    if kind == "uniform":
        cuts = np.sort(rng.choice(np.arange(1, L), size=S - 1, replace=False))
        return np.diff(np.concatenate([[0], cuts, [L]])).tolist()
    units, remaining = [], L
    for steps_left in range(S, 1, -1):
        cap = remaining - (steps_left - 1)  # leave one unit per later step
        u = int(rng.integers(1, cap + 1))
        units.append(u)
        remaining -= u
    return units + [remaining]


def uniform_schedule(n):
    return [1.0 / n] * n


def trajectory_rng(seed, index):
    """The generator of the elastic objective's draws for one micro-batch (LoopedGPT.forward's rng): seeded by
    (seed, global micro-batch index), so resumed and DDP runs sample exactly what one uninterrupted process would."""
    return np.random.default_rng([int(seed), int(index), 0x100F])


# -----------------------------------------------------------------------------------------------------------------
# the model


class LoopedGPT(GPT):
    """GPT whose depth is a plan of (layer, loop) steps. self.blocks holds the prelude, the shared block and the
    coda modules, in that order; Label.layer indexes it."""

    def __init__(self, config, res_scale=None):
        """res_scale: the multiplier on the shared blocks' branches, by default residual_multiplier(config) when
        residual_scaling is on (analyze.py's non-shared stack passes the one of a deeper loop)."""
        super().__init__(config)
        cfg, C = config, config.n_embd
        self.norm_embed = RMSNorm(C, cfg.norm_eps, cfg.norm_gain) if cfg.loop_norm else None
        self.norm_loop = RMSNorm(C, cfg.norm_eps, cfg.norm_gain) if cfg.loop_norm else None
        between = between_passes(cfg)  # injection or hyper-connections, under its own name (inject / hc)
        self.add_module(between.name, between)
        self.between_name = between.name
        self.loop_embed = ScalarEmbedder(C) if cfg.loop_cond != "none" else None  # index / t / iteration k
        self.step_embed = ScalarEmbedder(C) if cfg.loop_cond == "loopformer" else None  # dt
        # the branch multipliers as a tensor, so that the compiled block never specialises on their value
        if cfg.residual_scaling != "none" or res_scale is not None:
            eps = residual_multiplier(cfg) if res_scale is None else res_scale
            scales = [eps if self.part(i) == "loop" else 1.0 for i in range(len(self.blocks))]
            self.register_buffer("res_scales", torch.tensor(scales), persistent=False)
        else:
            self.res_scales = None

    # ---- structure ----
    @property
    def between(self):
        """The module for what happens between loop passes (see between_passes)."""
        return getattr(self, self.between_name)

    def n_block_modules(self):
        c = self.config
        return c.n_prelude + c.n_layer + c.n_coda

    def part(self, i):
        c = self.config
        return "prelude" if i < c.n_prelude else "loop" if i < c.n_prelude + c.n_layer else "coda"

    def make_block(self, index):
        """Prelude, shared and coda layers are ordinary Blocks (MoE or not, as moe.py decides per index). A
        conditioned shared block gets a modulator and affine-free pre-norms (the modulation supplies the scale)."""
        block = super().make_block(index)
        cfg = self.config
        if cfg.loop_cond != "none" and self.part(index) == "loop":
            block.norm_attn.weight = None
            block.norm_ffn.weight = None
            kind = IterAdaLNModulator if cfg.loop_cond == "iteradaln" else AdaLNModulator
            block.modulator = kind(cfg.n_embd, cfg.cond_init)
        return block

    def n_slots(self, schedule=None):
        c = self.config
        return c.n_prelude + self.loop_count(schedule) * c.n_layer + c.n_coda

    def block_executions(self, training=True, schedule=None):
        """(forward runs, backward runs) per module of self.blocks in one forward pass at the schedule (None: the
        trained n_loop passes). Truncated BPTT: the shared layers run n_loop times but build a graph only in the last
        bptt_loops passes. training=True adds the elastic objective's expected extra work: the LoopFormer shortcut
        pass runs E[S] = n_loop/2 more times; random_depth runs E[S] = (n_loop+1)/2 passes instead of n_loop."""
        cfg = self.config
        n = self.loop_count(schedule)
        fwd, bwd = n, (min(cfg.bptt_loops, n) if cfg.bptt_loops else n)
        if training and cfg.elastic == "shortcut":
            fwd, bwd = fwd + n / 2, bwd + n / 2
        elif training and cfg.elastic == "random_depth":
            fwd = bwd = (n + 1) / 2
        return [(fwd, bwd) if self.part(i) == "loop" else (1, 1) for i in range(len(self.blocks))]

    def module_executions(self, training=True, schedule=None):
        """Runs per token (forward, backward) of the modules that do not run exactly once per token, for
        scaling.py: the end-of-pass norm runs once per pass, the module between the passes as its runs() says (a
        linear injection once per pass; hyper-connection lane mixing is its extra_macs()); the loop embedders and
        the adaLN modulators of TMLT / LoopFormer work once per pass per sequence (0 per token)."""
        cfg = self.config
        per_pass = self.block_executions(training, schedule)[cfg.n_prelude]
        runs = self.between.runs(per_pass)
        out = {} if runs is None else {self.between_name: runs}
        if self.norm_loop is not None:
            out["norm_loop"] = per_pass
        out.update({name: (0, 0) for name in ("loop_embed", "step_embed") if getattr(self, name) is not None})
        if cfg.loop_cond in ("index", "loopformer"):
            out.update({f"blocks.{i}.modulator": (0, 0) for i in range(len(self.blocks)) if self.part(i) == "loop"})
        return out

    # ---- elastic depth ----
    def resolve_schedule(self, schedule=None):
        """A schedule is a list of step sizes dt summing to 1 (one pass each), or an int M (M uniform steps): elastic
        evaluation at budget M (Jeddi et al. 2026, Algorithm 2). None means the trained depth, n_loop uniform steps."""
        if schedule is None:
            return uniform_schedule(self.config.n_loop)
        if isinstance(schedule, int):
            schedule = uniform_schedule(schedule)
        schedule = [float(s) for s in schedule]
        if not schedule or min(schedule) <= 0 or abs(sum(schedule) - 1) > 1e-6:
            raise ValueError(f"a schedule is a non-empty list of positive step sizes summing to 1 (or an int), "
                             f"got {schedule}")
        most = self.between.max_passes
        if most is not None and len(schedule) > most:
            raise ValueError(f"{type(self.between).__name__} has parameters for n_loop={most} passes; "
                             f"a schedule of {len(schedule)} steps is too long")
        return schedule

    # ---- the depth walk ----
    def loop_embedding(self, loop, t, dt):
        """The conditioning vector c (1, C) of one pass, or None: TMLT embeds the loop index (0-based), IterAdaLN
        the iteration k = loop + 1, LoopFormer e_t(t_{i-1}) + e_dt(dt_i)."""
        kind = self.config.loop_cond
        if kind == "none":
            return None
        if kind == "index":
            return self.loop_embed(loop)
        if kind == "iteradaln":
            return self.loop_embed(loop + 1)
        return self.loop_embed(t) + self.step_embed(dt)

    def block_cond(self, i, c):
        """What block i receives as `cond` in a pass conditioned by the vector c (None: an unconditioned step)."""
        return LoopCond(self.blocks[i].modulator, c) if c is not None else None

    def run_block(self, i, x, rope, cache, slot, loop, c, aux):
        """Run block i in pass `loop` conditioned by c; returns (its output, the conditioning it ran with)."""
        cond = self.block_cond(i, c)
        res_scale = self.res_scales[i] if self.res_scales is not None else 1.0
        x, block_aux = self.blocks[i](x, rope, cache, slot, cond, res_scale, loop)
        add_aux(aux, block_aux)
        return x, cond

    def walk(self, x, rope, cache=None, aux=None, schedule=None):
        """Yield (Label, state, conditioning) after every effective layer. x: embedded input (B, T, C). At the last
        layer of a pass (boundary=True) the state is what the coda would read: after the end-of-pass norm, and with
        hyper-connections the pooled lanes. conditioning: the LoopCond the layer ran with, or None. Passes before the
        last bptt_loops run without a graph. schedule: the passes' step sizes (resolve_schedule)."""
        cfg = self.config
        aux = {} if aux is None else aux
        steps = self.resolve_schedule(schedule)
        P, K = cfg.n_prelude, cfg.n_layer
        index = 0
        if self.norm_embed is not None:
            x = self.norm_embed(x)
        for i in range(P):
            x, cond = self.run_block(i, x, rope, cache, index, 0, None, aux)
            yield Label(index, i, 0, False, "prelude"), x, cond
            index += 1

        e = x  # the prelude output, injected into every pass
        state = self.between.start(e)
        n_frozen = len(steps) - cfg.bptt_loops if (cfg.bptt_loops and torch.is_grad_enabled()) else 0
        t = 0.0
        for loop, dt in enumerate(steps):
            # truncated BPTT (Schwethelm et al. 2026, App. G.1): the first passes build no graph, which detaches the
            # state they hand on. Never yield inside the no_grad block: the caller would run without grad too.
            frozen = torch.no_grad() if loop < n_frozen else nullcontext()
            with frozen:
                c = self.loop_embedding(loop, t, dt)
                u = u_in = self.between.read(state, e, loop)  # the pass input
            for j in range(K):
                with frozen:
                    u, cond = self.run_block(P + j, u, rope, cache, index, loop, c, aux)
                if j < K - 1:
                    yield Label(index, P + j, loop, False, "loop"), u, cond
                    index += 1
            with frozen:
                s = self.norm_loop(u) if self.norm_loop is not None else u
                state = self.between.write(state, s, u_in, loop)
                h = self.between.pool(state)
            yield Label(index, P + K - 1, loop, True, "loop"), h, cond
            index += 1
            t += dt

        yield from self.coda(h, rope, cache, aux, index)

    def coda(self, x, rope, cache, aux, index, first=0):
        """Run the coda on x from its module `first` (counted within the coda) on, yielding (Label, state,
        conditioning) after each; index: the effective-layer index (and KV-cache slot) of that first module. The walk
        ends with it, and final_state runs it on an early exit."""
        start = self.config.n_prelude + self.config.n_layer
        for j in range(first, self.config.n_coda):
            x, cond = self.run_block(start + j, x, rope, cache, index, 0, None, aux)
            yield Label(index, start + j, 0, False, "coda"), x, cond
            index += 1

    def final_state(self, h, label=None, cache=None):
        """The state the final norm reads, from a state anywhere in the walk. An early exit before the end of the
        coda runs the rest of the coda on it (its KV-cache slots are the last ones of the cache, written by every
        token); a state in the middle of a pass first gets the end-of-pass norm. label None means h is final."""
        cfg = self.config
        if label is not None and label.part == "loop" and not label.boundary and self.norm_loop is not None:
            h = self.norm_loop(h)
        if label is None:
            return h
        first = label.layer + 1 - (cfg.n_prelude + cfg.n_layer) if label.part == "coda" else 0
        if first >= cfg.n_coda:
            return h
        pos = cache.pos if cache is not None else 0
        slot = len(cache.slots) - (cfg.n_coda - first) if cache is not None else 0  # (no cache: no slot is read)
        return last(self.coda(h, self.rope(pos, h.size(1)), cache, {}, slot, first))[1]

    # ---- training objectives for elastic depth (Jeddi et al. 2026, arXiv:2602.11451) ----
    def forward(self, idx, targets=None, cache=None, schedule=None, rng=None):
        """As GPT.forward. In training mode with elastic != 'none' the objective adds weighted terms to aux, drawing
        from rng (a numpy Generator: trajectory_rng(seed, micro-batch index); None: fresh entropy, not reproducible):
        shortcut      LoopFormer: aux['shortcut_ce'] = l1*CE(a sampled shortcut trajectory), aux['consistency'] =
                      l2*MSE(stopgrad(final-normed state of the full trajectory), that of the shortcut)
        early_exit    Base-Loop-EE-Cons / TMLT-EE: the same two terms for the state after S ~ U{1..L-1} plain
                      passes of the same walk (an unconditioned or index-conditioned loop stopped early)
        random_depth  Naive-Loop-EE [INF: "akin to Recurrent Depth", Geiping et al. 2025]: the loss is the CE
                      after S ~ U{1..L} passes, S drawn per micro-batch."""
        cfg = self.config
        if not (self.training and targets is not None and cache is None and cfg.elastic != "none"):
            return super().forward(idx, targets, cache, schedule)
        rng = np.random.default_rng() if rng is None else rng
        x, rope, aux = self.embed(idx), self.rope(0, idx.size(1)), {}
        L = self.loop_count(schedule)
        if cfg.elastic == "random_depth":
            label, h = last(self.walk(x, rope, None, aux, schedule=int(rng.integers(1, L + 1))))
            logits = self.readout(h, label)
            return logits, self.loss(logits, targets), aux
        if cfg.elastic == "shortcut":
            label, h = last(self.walk(x, rope, None, aux, schedule))
            units = sample_trajectory(L, rng, cfg.trajectory_sampler)
            short_aux = {}
            label_s, h_s = last(self.walk(x, rope, None, short_aux, schedule=[u / L for u in units]))
            add_aux(aux, {k: cfg.shortcut_weight * v for k, v in short_aux.items()})  # the MoE terms of that pass
        else:  # early_exit: the state after S passes of the full walk
            S = int(rng.integers(1, L))
            label_s = h_s = None
            for label, h, _ in self.walk(x, rope, None, aux, schedule):
                if label.boundary and label.loop == S - 1:
                    label_s, h_s = label, h
        final, final_s = self.final_state(h, label), self.final_state(h_s, label_s)
        logits, logits_s = self.logits(final), self.logits(final_s)
        loss = self.loss(logits, targets)
        aux["shortcut_ce"] = cfg.shortcut_weight * self.loss(logits_s, targets)
        if cfg.consistency_on == "hidden":  # Algorithm 1 and the released code: the final-normed hidden state
            a, b = self.norm_f(final), self.norm_f(final_s)
        else:  # the paper's prose: per-token logits
            a, b = logits.float(), logits_s.float()
        aux["consistency"] = cfg.consistency_weight * F.mse_loss(b, a.detach())
        return logits, loss, aux

    # ---- optimizer groups ----
    def param_role(self, name, p):
        """As GPT, plus: the parameters between the passes take their module's role if it names one
        (hyper-connection scalars: 'norm', no decay, no muP LR scale); under residual_scaling='factorized' the norm
        gains inside blocks are 'block_norm' (they take the depth LR rule)."""
        if self.between.role is not None and name.startswith(self.between_name + "."):
            return self.between.role
        role = super().param_role(name, p)
        if role == "norm" and name.startswith("blocks.") and self.config.residual_scaling == "factorized":
            return "block_norm"
        return role

    def lr_multiplier(self, name):
        """cond_lr_scale for the per-pass conditioning: the blocks' modulators and the loop/step embedders."""
        cond = ".modulator." in name or name.startswith(("loop_embed.", "step_embed."))
        return self.config.cond_lr_scale if cond else 1.0

    def group_scales(self, role):
        """muP's (lr, eps) multipliers times Wang et al.'s depth rule under residual_scaling='factorized':
        hidden LR and eps, and the block norms', x (n_layer/12)^-1/2; embedding, head and final norm unscaled."""
        lr_scale, eps_scale = super().group_scales(role)
        if role in ("hidden", "block_norm"):
            m = depth_lr_factor(self.config)
            lr_scale, eps_scale = lr_scale * m, eps_scale * m
        return lr_scale, eps_scale


def last(walk):
    """The final (Label, state) of a walk."""
    label = h = None
    for label, h, _ in walk:
        pass
    return label, h


# -----------------------------------------------------------------------------------------------------------------
# building and loading


def build_model(config):
    """GPT for a plain config, LoopedGPT for anything with a looping key off its default."""
    if not is_plain(config):
        return LoopedGPT(config)
    return GPT(config)


def pick_device(name):
    """The torch device for a script's device key: auto = cuda if there is one, else cpu."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def read_checkpoint(path, device="cpu", weights=True):
    """The checkpoint dict of a train.py run: a ckpt.pt file, or the ckpt/ directory of an --fsdp run (see
    read_sharded_model; weights=False leaves its weights on disk). A missing, empty or truncated file is one line
    saying what to do."""
    sharded = os.path.isdir(path)
    file = os.path.join(path, "run.pt") if sharded else path  # a sharded checkpoint's run state (train.save_sharded)
    if not os.path.exists(file):
        raise ConfigError(f"no checkpoint at {path}: pass the out_dir of a train.py run")
    try:
        ckpt = torch.load(file, map_location=device, weights_only=True)
    except Exception as e:  # torch reports a cut-off or empty file as one of several errors, each with a traceback
        raise ConfigError(f"{file} is not a readable checkpoint ({os.path.getsize(file):,} bytes: {str(e)[:80]}); "
                          "it was cut off or is not a train.py checkpoint: train again or use another run") from None
    if sharded and weights and isinstance(ckpt, dict):
        ckpt["model"] = read_sharded_model(path, device)
    if not (isinstance(ckpt, dict) and "model_config" in ckpt and ("model" in ckpt or not weights)):
        raise ConfigError(f"{path} is not a train.py checkpoint (no model / model_config entries)")
    return ckpt


def read_sharded_model(path, device="cpu"):
    """The model's state dict, whole, from a torch.distributed.checkpoint directory written by train.py --fsdp, in
    one process: tensors of the shapes its metadata lists, filled by dcp.load from the shards of every rank (any
    number of them). Only the weights are read, in place: no converted copy on disk, and the optimizer state,
    twice the weights' size, stays unread. (torch.distributed.checkpoint.format_utils converts the whole
    directory to one torch.save file, for tools that want one.)"""
    import torch.distributed.checkpoint as dcp
    listed = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    model = {key.removeprefix("model."): torch.empty(m.size, dtype=m.properties.dtype, device=device)
             for key, m in listed.items() if key.startswith("model.")}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load({"model": model}, checkpoint_id=path, no_dist=True)
    return model


def checkpoint_of(run_dir):
    """The checkpoint in a run directory: ckpt.pt, or ckpt/ (DCP) of an --fsdp run; any other path as it is."""
    if not os.path.isdir(run_dir) or os.path.exists(os.path.join(run_dir, "run.pt")):
        return run_dir
    sharded = os.path.join(run_dir, "ckpt")
    return sharded if os.path.isdir(sharded) else os.path.join(run_dir, "ckpt.pt")


def load_model(run_dir, device="cpu"):
    """(model in eval mode, checkpoint dict) from a run directory's checkpoint (or a path to one)."""
    ckpt = read_checkpoint(checkpoint_of(run_dir), device)
    model = build_model(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval(), ckpt
