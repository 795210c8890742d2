"""
The model: GPTConfig, the one config every script shares, and GPT, the one model class.

    GPT: token embedding -> the depth plan (loop.py) -> final RMSNorm -> head

A plain transformer (the "Base" model of Lee et al. 2026, arXiv:2605.09165) is the one-pass plan of n_layer
layers; a looped model's plan runs a prelude, n_loop passes of a shared block and a coda. GPT.walk is a loop over
the plan that yields the hidden state after every step with its Label (and the conditioning the step ran with):
forward(), cached decoding, early exit and every analysis use that one walk. What varies between looped models
(injection, per-pass conditioning, residual rules, elastic objectives) are rows of loop.py's registries; the MoE
layers are moe.py's.

Also here: RMSNorm, RoPE, attention (SDPA, flash kernels on CUDA; optional MLA), the MLPs, Block with its hooks
(per-pass conditioning, residual multiplier, sandwich norm, MoE), the KV cache, muP init and optimizer groups,
all written with torch's own operations; a model built with cpu_kernels=True calls kernels.py's faster CPU versions
of three of them instead (RMSNorm, RoPE, the loss), each at the one line that chooses.
"""
import math
from contextlib import nullcontext
from dataclasses import dataclass, asdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from kernels import chunked_cross_entropy, fused_rms_norm, rope_in_place  # the CPU fast paths
from loop import (BETWEEN_PASSES, CONDITIONING, ELASTIC, RESIDUAL_RULES, TRAJECTORY_SAMPLERS, Label,  # noqa: F401
                  LoopCond, Passthrough, ScalarEmbedder, add_aux, between_passes_kind, depth_lr_factor, make_plan,
                  resolve_schedule)
from moe import ROUTERS, make_ffn, recomputing


@dataclass
class GPTConfig:
    # ---- shape ----
    block_size: int = 256  # maximum context length in tokens
    vocab_size: int = 257  # tokenizer vocabulary (train.py sets it from the data's meta.json)
    vocab_pad_multiple: int = 1  # pad embedding/head rows to a multiple of this (64 is faster on GPUs)
    n_layer: int = 4  # unique layers (for looped models: layers in the shared block)
    n_embd: int = 128  # model width d
    head_dim: int = 64  # size of one attention head
    n_head: int = 0  # attention heads; 0 = n_embd // head_dim
    d_ff: int = 0  # FFN hidden size; 0 = 64*ceil(8*n_embd/3/64) for swiglu, 4*n_embd otherwise
    # ---- block (Lee et al.'s defaults; the other papers' backbones switch some) ----
    mlp: str = "swiglu"  # swiglu | gelu | relu2
    norm_gain: bool = False  # learnable RMSNorm gains (Lee et al.: none)
    norm_eps: float = 1e-6  # RMSNorm epsilon
    qk_norm: bool = False  # RMSNorm (gain-free) on queries and keys
    pos_emb: str = "rope"  # rope | learned (absolute positions)
    rope_base: float = 10000.0  # RoPE base frequency
    tie_embeddings: bool = False  # share the token embedding with the output head
    logit_softcap: float = 0.0  # if > 0: logits = c*tanh(logits/c)
    sandwich_norm: bool = False  # RMSNorm on each sublayer's output before the residual add
    # ---- attention (MLA: DeepSeek-V2/V3, as Chen et al. 2026 use it) ----
    attn: str = "mha"  # mha | mla (multi-head latent attention: low-rank Q and KV, decoupled RoPE)
    q_lora_rank: int = 0  # MLA query latent rank; 0 = full-rank queries
    kv_lora_rank: int = 64  # MLA key/value latent rank
    rope_head_dim: int = 32  # MLA: rotary dims per head (one rotary key for all heads), on top of head_dim
    v_head_dim: int = 0  # MLA value size per head; 0 = head_dim
    # ---- init and muP (Lee et al.: hidden and head init variance sigma^2/w, Adam LR eta/w, w = n_embd/base) ----
    init: str = "normal"  # normal (N(0, init_std^2)) | uniform (U(-a,a), a = sqrt(3/d))
    init_std: float = 0.02  # sigma_base of the normal init
    mup: bool = True  # muP of Lee et al. (see the heading)
    mup_base_width: int = 128  # d_base of muP
    head_init_std: float = 0.0  # > 0: head N(0, std^2/w) whatever the init (Schwethelm et al.: 1e-3); 0 = off
    proj_init: str = "default"  # c_proj init: default | gpt2 (N(0, init_std^2/(2 n_layer w)), LoopFormer's code)
    # ---- looping: the depth plan (loop.py) ----
    n_loop: int = 1  # passes of the shared block
    n_prelude: int = 0  # unshared layers before the loop
    n_coda: int = 0  # unshared layers after the loop
    loop_norm: bool = False  # RMSNorm after the embedding and at the end of every pass (Schwethelm et al.)
    bptt_loops: int = 0  # truncated BPTT: gradients through the last k passes only (Schwethelm et al.); 0 = all
    # ---- looping: how the prelude's output e enters each pass (Schwethelm et al. 2026) ----
    # none: u = h ("passthrough"); linear: u = W[e||h], W = [I|0] at init; additive: u = h + e, h0 = 0.
    # Hyper-connections: hc_lanes lanes mixed at loop boundaries; each lane takes the pass's increment and the
    # coda reads the lanes' mean (our reading, under which the cyclic init is the plain loop, App. G.1) or sum.
    injection: str = "none"  # none | linear | additive (see the heading)
    hc_lanes: int = 0  # hyper-connection lanes (Schwethelm et al.: 2); 0 = off; needs injection=none
    hc_pool: str = "mean"  # what the coda reads from the lanes: mean (App. G.1's reduction) | sum (its wording)
    # ---- looping: residual scaling of the shared blocks (Wang et al. 2026), with its LR/eps rule ----
    # none 1 | sqrt n_loop^-1/2 | linear 1/n_loop | factorized lambda/n_loop * (n_layer/L_ref)^-1/2
    residual_scaling: str = "none"  # none | sqrt | linear | factorized (see the heading)
    residual_lambda: float = 1.0  # lambda of residual_scaling=factorized
    residual_ref_layers: int = 12  # L_ref of factorized: the depth where the base LR was tuned
    # ---- looping: per-pass conditioning and elastic depth ----
    # index (TMLT) | loopformer (t, dt; Jeddi et al.) | iteradaln (Chen et al.). Elastic training: shortcut
    # (LoopFormer), early_exit (Base-Loop-EE-Cons, TMLT-EE), random_depth (Naive-Loop-EE).
    loop_cond: str = "none"  # none | index | loopformer | iteradaln (see the heading)
    cond_init: str = "zero"  # modulator output init: zero (the papers) | normal (LoopFormer's code: N(0, 0.02))
    # LR multiplier of the conditioning (modulators, loop/step embedders). 1 = the papers' one LR for all. A pass's
    # conditioning vector is the same for every token, so the modulator's weight gradient is rank one and Adam moves
    # its gates by about lr*|silu(c)|_1 a step, far more than a norm gain's lr: at a small model's LR the gates blow up
    # (records/jeddi2026.md); at 0.1 they stay small and the model trains.
    cond_lr_scale: float = 1.0
    elastic: str = "none"  # none | shortcut | early_exit | random_depth (see the heading)
    shortcut_weight: float = 0.1  # lambda_1: weight of the shortcut (or early-exit) cross-entropy
    consistency_weight: float = 0.1  # lambda_2: weight of the consistency MSE
    consistency_on: str = "hidden"  # hidden (final-normed state; LoopFormer's Algorithm 1, code) | logits (prose)
    trajectory_sampler: str = "uniform"  # uniform (the paper, §3.3) | greedy (LoopFormer's released code)
    # ---- mixture of experts (moe.py) ----
    n_expert: int = 0  # routed experts per MoE layer; 0 = dense FFN everywhere
    top_k: int = 2  # experts each token is routed to
    n_shared_expert: int = 0  # always-on shared experts per MoE layer (DeepSeekMoE)
    moe_d_ff: int = 0  # hidden size of one expert; 0 = d_ff // (top_k + n_shared_expert): active FFN = dense FFN
    moe_first_dense: int = 0  # the first this-many physical layers (model.blocks order) keep a dense FFN
    moe_router: str = "softmax"  # softmax (gates = softmax of the top-k logits) | sigmoid (DeepSeek-V3 scores)
    moe_route_scale: float = 1.0  # multiplier on the routed experts' output (DeepSeek-V3: 2.5)
    moe_lb_coef: float = 0.01  # weight of the load-balancing loss E*sum_i f_i*p_i (Switch; 0 = off)
    moe_z_coef: float = 0.001  # weight of the router z-loss mean(logsumexp(logits)^2) (ST-MoE; 0 = off)
    moe_seq_coef: float = 0.0  # weight of DeepSeek-V3's sequence-wise balance loss (V3: 1e-4; 0 = off)
    moe_bias_rate: float = 0.0  # aux-loss-free balancing: bias step gamma after each optimizer step (V3: 1e-3)
    moe_capacity_factor: float = 0.0  # > 0: an expert takes at most ceil(cf*tokens*k/E) tokens, drops the rest
    moe_dispatch: str = "auto"  # auto | grouped (sort + grouped_mm) | batched (padded bmm) | loop (per expert)

    def __post_init__(self):
        check_keys(self)  # each key alone: its choices and range (above), before the sizes derived from them
        if self.n_head == 0:
            self.n_head = self.n_embd // self.head_dim
        if self.d_ff == 0:
            self.d_ff = 64 * math.ceil(8 * self.n_embd / 3 / 64) if self.mlp == "swiglu" else 4 * self.n_embd
        check_combinations(self)  # keys that constrain each other, and the checks of the registry rows picked

    @property
    def rope_dim(self):
        """Rotary dims per head: the whole head for MHA, the decoupled rope_head_dim for MLA."""
        return self.rope_head_dim if self.attn == "mla" else self.head_dim

    @property
    def padded_vocab(self):
        m = self.vocab_pad_multiple
        return (self.vocab_size + m - 1) // m * m

    @property
    def mup_width_ratio(self):
        return self.n_embd / self.mup_base_width if self.mup else 1.0

    def to_dict(self):
        return asdict(self)


# -----------------------------------------------------------------------------------------------------------------
# GPTConfig's refusals: a setting no model here can build stops when the config is made, with one line that says
# what to do (a typo in a choice, a negative size, keys that contradict each other). GPTConfig calls check_keys
# before it derives n_head and d_ff, and check_combinations after (train.py's own keys: checkpoint.check_training).
# The choices of the looping and MoE keys are the registries of loop.py and moe.py, so a row registered there (also
# by a test) is a valid value here, and its own check(cfg) runs with the rest.

# the allowed values of GPTConfig's enum keys
CHOICES = dict(
    mlp=("swiglu", "gelu", "relu2"), pos_emb=("rope", "learned"), attn=("mha", "mla"), init=("normal", "uniform"),
    proj_init=("default", "gpt2"), injection=BETWEEN_PASSES, hc_pool=("mean", "sum"), residual_scaling=RESIDUAL_RULES,
    loop_cond=CONDITIONING, cond_init=("zero", "normal"), elastic=ELASTIC, consistency_on=("hidden", "logits"),
    trajectory_sampler=TRAJECTORY_SAMPLERS, moe_router=ROUTERS,
    moe_dispatch=("auto", "grouped", "batched", "loop"),
)
POSITIVE = ("block_size", "vocab_size", "vocab_pad_multiple", "n_layer", "n_embd", "head_dim", "n_loop",
            "mup_base_width")
NON_NEGATIVE = ("n_head", "d_ff", "n_prelude", "n_coda", "n_expert", "n_shared_expert", "moe_d_ff", "moe_first_dense",
                "q_lora_rank", "v_head_dim", "hc_lanes", "bptt_loops")
# sizes beyond any model (--n_layer=1e9 is an int): one line here, not a build that overflows or never ends
MOST = dict(n_layer=10_000, n_prelude=10_000, n_coda=10_000, **{k: 2**20 for k in (
    "n_embd", "head_dim", "n_head", "d_ff", "q_lora_rank", "kv_lora_rank", "rope_head_dim", "v_head_dim", "n_loop",
    "hc_lanes", "n_expert", "n_shared_expert", "moe_d_ff")})


def need(cond, msg):
    if not cond:
        raise ValueError(f"GPTConfig: {msg}")


def check_keys(c):
    """Each key alone: a choice among its allowed values, a size in its range."""
    for key, allowed in CHOICES.items():
        value = getattr(c, key)
        need(value in allowed, f"{key} must be one of {' | '.join(allowed)}, got {value!r}")
    for key in POSITIVE:
        need(getattr(c, key) >= 1, f"{key} must be >= 1, got {getattr(c, key)}")
    for key in NON_NEGATIVE:
        need(getattr(c, key) >= 0, f"{key} must be >= 0, got {getattr(c, key)}")
    for key, most in MOST.items():
        need(getattr(c, key) <= most, f"{key}={getattr(c, key)} is more than any model here builds (at most {most:,})")
    need(c.n_head or c.n_embd % c.head_dim == 0, f"n_embd={c.n_embd} is not a multiple of head_dim={c.head_dim}; "
         "set n_head or head_dim")


def check_combinations(c):
    """Keys that constrain each other (after n_head and d_ff are derived), and the checks of the registry rows the
    config picks (loop.py)."""
    need(c.proj_init == "default" or c.init == "normal",
         "proj_init='gpt2' scales the normal init: it needs init='normal'")
    need(c.head_init_std >= 0, f"head_init_std must be >= 0, got {c.head_init_std}")
    need(c.head_init_std == 0 or not c.tie_embeddings,
         "head_init_std needs an untied head: with tie_embeddings=True the head is the token embedding")
    need(c.rope_dim % 2 == 0 or c.pos_emb != "rope", "RoPE needs an even head_dim (rope_head_dim for MLA)")
    need(c.attn == "mha" or (c.kv_lora_rank > 0 and c.rope_head_dim > 0 and not c.qk_norm),
         "attn='mla' needs kv_lora_rank > 0, rope_head_dim > 0 and qk_norm=False")
    need(c.n_expert == 0 or 1 <= c.top_k <= c.n_expert, f"top_k={c.top_k} must be between 1 and n_expert={c.n_expert}")
    need(c.n_expert == 0 or c.moe_d_ff or c.d_ff % (c.top_k + c.n_shared_expert) == 0,
         f"d_ff={c.d_ff} is not divisible by top_k + n_shared_expert = {c.top_k + c.n_shared_expert}; "
         "set moe_d_ff (the hidden size of one expert) explicitly")
    need(0 <= c.bptt_loops <= c.n_loop, f"bptt_loops={c.bptt_loops} must be in 0..n_loop={c.n_loop} (0 = all)")
    need(c.cond_lr_scale > 0, f"cond_lr_scale must be > 0 (1 = the model's LR), got {c.cond_lr_scale}")
    need(c.elastic == "none" or c.n_loop >= 2, f"elastic={c.elastic!r} needs n_loop >= 2")
    elastic = ELASTIC[c.elastic]
    for problem in (between_passes_kind(c).check(c), elastic.check(c) if elastic else None):
        need(problem is None, problem)


# Parameters that write into the residual stream (names end so): attention and FFN output projections, MoE experts'
# down projections. proj_init='gpt2' scales their init.
RESIDUAL_PROJECTIONS = ("c_proj.weight", ".w_down", ".shared_down")


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019), over the last dimension; no weight when
    gain=False (Lee et al. 2026 use none)."""

    def __init__(self, dim, eps=1e-6, gain=False, fast=False):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if gain else None
        self.fast = fast  # the CPU fast path (GPT's cpu_kernels)

    def forward(self, x):
        if self.fast:  # kernels.py's: the same values, fewer ops on a CPU (tests/test_kernels.py pins them)
            return fused_rms_norm(x, self.weight, self.eps)
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


def rope_tables(head_dim, length, base, device=None):
    """cos/sin tables (length, head_dim/2) for rotary position embeddings (Su et al. 2021)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x: (B, H, T, D); rotates the two halves of the head dimension as complex pairs:
    (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    d = x.size(-1) // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class KVCache:
    """The KV cache: one slot per step of the depth plan (an executed (pass, layer) step), for autoregressive decoding.

    A slot holds what its layer's attention module stores per token (its `cache_entry`): keys and values for
    multi-head attention, one latent per token for MLA. Slots are allocated on first write (their sizes differ
    between attention kinds). `pos` counts the tokens already cached; the model advances it after a whole
    forward pass."""

    def __init__(self, n_slots, batch_size, max_len):
        self.slots = [None] * n_slots
        self.batch_size, self.max_len, self.pos = batch_size, max_len, 0

    def update(self, index, *parts):
        """Write the parts (each (B, heads, T, size)) at the current position into slot `index`; return each
        part's cached prefix with the new tokens, (B, heads, pos + T, size)."""
        T = parts[0].size(2)
        if self.pos + T > self.max_len:
            raise ValueError(f"KV cache full: {self.pos}+{T} tokens > max_len={self.max_len}; "
                             "generate fewer tokens or raise block_size")
        if self.slots[index] is None:
            self.slots[index] = tuple(t.new_zeros(*t.shape[:2], self.max_len, t.size(-1)) for t in parts)
        for cached, t in zip(self.slots[index], parts):
            cached[:, :, self.pos:self.pos + T] = t
        return tuple(cached[:, :, :self.pos + T] for cached in self.slots[index])


class CausalSelfAttention(nn.Module):
    def __init__(self, config, fast=False):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        inner = config.n_head * config.head_dim
        self.c_q = nn.Linear(config.n_embd, inner, bias=False)
        self.c_k = nn.Linear(config.n_embd, inner, bias=False)
        self.c_v = nn.Linear(config.n_embd, inner, bias=False)
        self.c_proj = nn.Linear(inner, config.n_embd, bias=False)
        self.norm_qk = RMSNorm(config.head_dim, config.norm_eps, fast=fast) if config.qk_norm else None  # gain-free
        self.use_rope = config.pos_emb == "rope"
        # RoPE: kernels.py's rope_in_place on the CPU fast path (the same values in place; tests/test_kernels.py)
        self.rotate = rope_in_place if fast else apply_rope

    def forward(self, x, rope, cache=None, slot=0):
        B, T, C = x.shape
        q = self.heads(self.c_q(x), rope)  # (B, H, T, D)
        k, v = self.cache_entry(x, rope)
        if cache is not None:
            k, v = cache.update(slot, k, v)  # the cached tokens' keys and values, then these
        y = attend(q, k, v)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))

    def heads(self, t, rope):
        """(B, T, H*D) -> (B, H, T, D), rotated by RoPE, then qk-norm (after RoPE, as nanochat does)."""
        B, T, _ = t.shape
        t = t.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if self.use_rope:
            t = self.rotate(t, *rope)
        if self.norm_qk is not None:
            t = self.norm_qk(t)
        return t

    def cache_entry(self, x, rope):
        """What the KV cache stores for x: keys and values (B, H, T, D) (exits.py fills the slots of
        skipped layers with it)."""
        B, T, _ = x.shape
        v = self.c_v(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        return self.heads(self.c_k(x), rope), v


class MLA(nn.Module):
    """Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2, arXiv:2405.04434, §2.1), the attention of
    LoopMoE (Chen et al. 2026, arXiv:2606.04438). Queries and keys/values pass through low-rank latents
    (RMS-normed); RoPE acts only on `rope_head_dim` extra dims per head, and the rotary key part is one vector
    shared by all heads (decoupled RoPE). Per head: q = [q_content; q_rope], k = [k_content; k_rope], v of size
    v_head_dim, softmax(q.k / sqrt(head_dim + rope_head_dim)) v, with k_content = W_UK c_KV and v = W_UV c_KV.

    The KV cache holds only c_KV (kv_lora_rank numbers per token, after its norm) and the rotated shared rotary key
    (rope_head_dim): MLA's reason to exist. Decoding against it absorbs the up-projections (DeepSeek-V2, §2.1.2):
    q_content.(W_UK c) = (W_UK^T q_content).c, so each head's query moves into the latent space and attends to
    the cached latents directly, and sum_s p_s W_UV c_s = W_UV (sum_s p_s c_s) is applied once after attention."""

    def __init__(self, config, fast=False):
        super().__init__()
        C, H = config.n_embd, config.n_head
        self.n_head, self.d_nope, self.d_rope = H, config.head_dim, config.rope_head_dim
        self.d_v = config.v_head_dim or config.head_dim
        self.kv_rank = config.kv_lora_rank
        # scaling.py counts attention FLOPs as 4*T*n_head*head_dim per token (q.k and attn.v): for MLA the mean of
        # the q.k size (d_nope + d_rope) and the value size d_v gives that sum exactly
        self.head_dim = (self.d_nope + self.d_rope + self.d_v) / 2
        # the same for absorbed decoding, in the latent space: q.c over kv_rank + d_rope, attn.c over kv_rank (the
        # absorbed W_UK, W_UV cost per token what kv_up costs, so 2 FLOPs per parameter still hold)
        self.decode_head_dim = (2 * self.kv_rank + self.d_rope) / 2
        d_qk = self.d_nope + self.d_rope
        self.scale = d_qk ** -0.5  # the softmax scale of the full head, also when attending in the latent space
        if config.q_lora_rank > 0:
            self.q_down = nn.Linear(C, config.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(config.q_lora_rank, config.norm_eps, config.norm_gain, fast)
            self.q_up = nn.Linear(config.q_lora_rank, H * d_qk, bias=False)
        else:  # full-rank queries, as in DeepSeek-V2-Lite
            self.q_down = None
            self.c_q = nn.Linear(C, H * d_qk, bias=False)
        self.kv_down = nn.Linear(C, self.kv_rank + self.d_rope, bias=False)  # [latent c_kv; shared rotary key]
        self.kv_norm = RMSNorm(self.kv_rank, config.norm_eps, config.norm_gain, fast)
        self.kv_up = nn.Linear(self.kv_rank, H * (self.d_nope + self.d_v), bias=False)  # [W_UK; W_UV] per head
        self.c_proj = nn.Linear(H * self.d_v, C, bias=False)
        self.use_rope = config.pos_emb == "rope"
        self.rotate = rope_in_place if fast else apply_rope  # (as CausalSelfAttention's)

    def forward(self, x, rope, cache=None, slot=0):
        B, T, C = x.shape
        q = self.q_up(self.q_norm(self.q_down(x))) if self.q_down is not None else self.c_q(x)
        q = self.rotate_tail(q.view(B, T, self.n_head, -1).transpose(1, 2), rope)  # (B, H, T, d_nope + d_rope)
        c, = self.cache_entry(x, rope)
        pos = 0 if cache is None else cache.pos
        if cache is not None:
            c, = cache.update(slot, c)  # (B, 1, pos + T, kv_rank + d_rope)
        if pos == 0:
            # training and prefill (no earlier tokens): up-project the T latents to per-head keys and values, as
            # DeepSeek-V2 trains. Each (query, key) pair then costs H*(d_nope + d_rope + d_v) multiply-adds instead
            # of H*(2*kv_rank + d_rope) in the latent space, and the up-projection is paid once per token: the
            # cheaper form for a T x T attention
            k, v = self.up_project(c)
            y = attend(q, k, v, scale=self.scale)  # (B, H, T, d_v)
        else:
            # decoding after cached tokens: absorbed, or each step would up-project the whole cache again
            y = self.attend_latent(q, c)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))

    def rotate_tail(self, t, rope):
        """RoPE on the last d_rope dims of each head; the first d_nope dims carry no position."""
        if not self.use_rope:
            return t
        return torch.cat([t[..., :self.d_nope], self.rotate(t[..., self.d_nope:], *rope)], dim=-1)

    def cache_entry(self, x, rope):
        """What the KV cache stores for x: (c,), c = [norm(c_KV); RoPE(k_rope)] of shape (B, 1, T, kv_rank +
        d_rope), one entry per token for all heads (exits.py fills the slots of skipped layers with it)."""
        latent, k_rope = self.kv_down(x).unsqueeze(1).split([self.kv_rank, self.d_rope], dim=-1)
        if self.use_rope:
            k_rope = self.rotate(k_rope, *rope)
        return torch.cat([self.kv_norm(latent), k_rope], dim=-1),

    def up_project(self, c):
        """Cache entries c (B, 1, S, kv_rank + d_rope) -> keys (B, H, S, d_nope + d_rope) and values (B, H, S, d_v)."""
        B, _, S, _ = c.shape
        latent, k_rope = c.split([self.kv_rank, self.d_rope], dim=-1)
        kv = self.kv_up(latent).view(B, S, self.n_head, self.d_nope + self.d_v).transpose(1, 2)
        k_nope, v = kv.split([self.d_nope, self.d_v], dim=-1)
        return torch.cat([k_nope, k_rope.expand(B, self.n_head, S, self.d_rope)], dim=-1), v

    def attend_latent(self, q, c):
        """Absorbed attention of queries q (B, H, T, d_nope + d_rope), the last T positions, to the cached entries
        c (B, 1, S, kv_rank + d_rope): the output before c_proj, (B, H, T, d_v)."""
        B, H, T, _ = q.shape
        S = c.size(2)
        w_uk, w_uv = self.kv_up.weight.view(H, self.d_nope + self.d_v, self.kv_rank).split([self.d_nope, self.d_v], 1)
        q_nope, q_rope = q.split([self.d_nope, self.d_rope], dim=-1)
        q_latent = torch.cat([q_nope @ w_uk, q_rope], dim=-1)  # (B, H, T, kv_rank + d_rope): W_UK^T q per head
        # one key/value head shared by all query heads: fold the heads into the query rows (no per-head copies of
        # the cache, one attention call whose values are the latents); keys and values differ in size, so the
        # scale of the full head is passed explicitly
        o = F.scaled_dot_product_attention(q_latent.reshape(B, 1, H * T, -1), c, c[..., :self.kv_rank],
                                           attn_mask=causal_mask(T, S, q.device, repeat=H), scale=self.scale)
        return o.view(B, H, T, self.kv_rank) @ w_uv.transpose(1, 2)  # W_UV per head: (B, H, T, d_v)


def attend(q, k, v, scale=None):
    """Causal scaled dot-product attention. q (B, H, T, D) are the last T of the S positions of k, v (B, H, S, D):
    the whole sequence (training, prefill) or T new tokens after S - T cached ones."""
    T, S = q.size(2), k.size(2)
    if T == S:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T, S, q.device), scale=scale)


def causal_mask(T, S, device, repeat=1):
    """Mask (repeat*T, S) for T new tokens after S - T cached ones: new token i sees the cached tokens and the new
    tokens <= i (rows repeated `repeat` times, for heads folded into the rows). None for one new token: it sees all."""
    if T == 1:
        return None
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T).repeat(repeat, 1)


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020) by default; GELU and squared-ReLU two-layer MLPs for other backbones."""

    def __init__(self, config, d_ff=None):
        super().__init__()
        d_ff = d_ff or config.d_ff
        self.kind = config.mlp
        self.c_fc = nn.Linear(config.n_embd, d_ff, bias=False)
        if self.kind == "swiglu":
            self.c_gate = nn.Linear(config.n_embd, d_ff, bias=False)
        self.c_proj = nn.Linear(d_ff, config.n_embd, bias=False)

    def forward(self, x):
        h = self.c_fc(x)
        if self.kind == "swiglu":
            h = F.silu(self.c_gate(x)) * h
        elif self.kind == "gelu":
            h = F.gelu(h)
        else:
            h = F.relu(h).square()
        return self.c_proj(h)


class Block(nn.Module):
    """Pre-norm transformer layer: x + s*g*Attn(mod(norm(x))), then the same for the FFN.

    Hooks for the looped variants (loop.py), all off by default so a plain Block is the standard layer:
    - `res_scale` s: a residual-branch multiplier (Wang et al. 2026, arXiv:2606.18524);
    - `cond`: per-loop conditioning, an object with .attn(x) and .ffn(m) returning (scale, shift, gate), any of
      them None, applied as norm(x)*(1+scale)+shift and gate*branch (adaLN, as in LoopFormer/TMLT/IterAdaLN);
      .ffn receives m, the state after the attention update (IterAdaLN conditions on it);
    - sandwich norm (Chen et al. 2026, arXiv:2606.04438): an RMSNorm on each branch output before the add.
    The FFN is a dense MLP or an MoE layer (moe.py); an MoE layer also takes the pass index `loop` (its routing
    records carry it) and returns (y, aux) with its auxiliary losses.
    """

    def __init__(self, config, ffn=None, fast=False):
        super().__init__()
        self.norm_attn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain, fast)
        self.attn = MLA(config, fast) if config.attn == "mla" else CausalSelfAttention(config, fast)
        self.norm_ffn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain, fast)
        self.ffn = ffn if ffn is not None else MLP(config)
        self.returns_aux = getattr(self.ffn, "returns_aux", False)
        self.modulator = None  # per-loop conditioning: loop.py gives the shared blocks of a conditioned loop one
        if config.sandwich_norm:
            self.post_attn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain, fast)
            self.post_ffn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain, fast)
        else:
            self.post_attn = self.post_ffn = None

    def attention_input(self, x, cond=None):
        """(what the attention reads of the stream x, the gate of its branch): the pre-norm modulated by cond.
        forward uses it, and so does an early exit's cache fill (GPT.fill_cache)."""
        scale, shift, gate = cond.attn(x) if cond is not None else (None, None, None)
        return modulate(self.norm_attn(x), scale, shift), gate

    def forward(self, x, rope, cache=None, slot=0, cond=None, res_scale=1.0, loop=0):
        """loop: the pass this call belongs to, for the routing records of an MoE layer (moe.py)."""
        h, gate = self.attention_input(x, cond) if cond is not None else (self.norm_attn(x), None)
        a = self.attn(h, rope, cache, slot)
        if self.post_attn is not None:
            a = self.post_attn(a)
        x = x + res_scale * (a if gate is None else gate * a)

        h, gate = self.norm_ffn(x), None
        if cond is not None:
            scale, shift, gate = cond.ffn(x)
            h = modulate(h, scale, shift)
        aux = None
        if self.returns_aux:
            f, aux = self.ffn(h, loop)
        else:
            f = self.ffn(h)
        if self.post_ffn is not None:
            f = self.post_ffn(f)
        x = x + res_scale * (f if gate is None else gate * f)
        return x, aux


def modulate(h, scale, shift):
    if scale is not None:
        h = h * (1 + scale)
    if shift is not None:
        h = h + shift
    return h


class CrossEntropy(nn.Module):
    """The training loss: mean next-token cross entropy over targets != -1, in fp32 whatever the logits' dtype.
    A module without weights (no state_dict keys) so that GPT.compile compiles it as it does a block."""

    def __init__(self, fast=False):
        super().__init__()
        self.fast = fast  # the CPU fast path (GPT's cpu_kernels)

    def forward(self, logits, targets):
        if self.fast and logits.dtype != torch.float16:  # kernels.py's (tests/test_kernels.py pins it); not fp16,
            # whose gradient stored in fp16 would flush the small entries to zero
            return chunked_cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)


class GPT(nn.Module):
    """The one model: token embedding -> the depth plan -> final norm -> head. The plan (loop.make_plan) lists the
    steps of one forward pass: the prelude's layers, n_loop passes of the shared block's layers, the coda's layers;
    a plain transformer is the one-pass plan of n_layer layers. Every looped model of the five papers is a config
    of this class; what varies between them are rows of loop.py's registries (injection, conditioning, residual
    rule, elastic objective). A schedule (the step sizes of the passes, elastic depth) and rng (the random
    generator of an elastic training objective) are arguments, never state of the model.

    self.blocks holds the prelude, the shared block and the coda modules, in that order; Label.layer indexes it.
    res_scale: the multiplier on the shared blocks' branches, by default the residual rule's (analyze.py's
    non-shared stack passes the one of a deeper loop)."""

    def __init__(self, config, res_scale=None, cpu_kernels=False, activation_checkpointing=False):
        super().__init__()
        cfg = self.config = config
        self.cpu_kernels = cpu_kernels  # build with kernels.py's CPU fast paths (kernels.wanted(device) decides)
        self.activation_checkpointing = activation_checkpointing  # run_block: recompute activations in the backward
        V, C = cfg.padded_vocab, cfg.n_embd
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(cfg.block_size, C) if cfg.pos_emb == "learned" else None
        self.blocks = nn.ModuleList(self.make_block(i) for i in range(cfg.n_prelude + cfg.n_layer + cfg.n_coda))
        self.norm_f = RMSNorm(C, cfg.norm_eps, cfg.norm_gain, cpu_kernels)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.loss = CrossEntropy(cpu_kernels)  # loss(logits, targets)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        # the loop's own parts: norms after the embedding and each pass (Schwethelm et al.), what runs between the
        # passes (injection or hyper-connections, under its own name: inject | hc), the conditioning's embedders
        self.norm_embed = RMSNorm(C, cfg.norm_eps, cfg.norm_gain, cpu_kernels) if cfg.loop_norm else None
        self.norm_loop = RMSNorm(C, cfg.norm_eps, cfg.norm_gain, cpu_kernels) if cfg.loop_norm else None
        between = between_passes_kind(cfg)(cfg)
        self.add_module(between.name, between)
        self.between_name = between.name
        self.passthrough = type(between) is Passthrough  # its methods are identities: the walk skips them
        self.cond = CONDITIONING[cfg.loop_cond]
        self.loop_embed = self.step_embed = None  # the papers' embedder names, None without them (analyses ask)
        for name in self.cond.embedders if self.cond is not None else ():  # in the row's order: its init order
            setattr(self, name, ScalarEmbedder(C))
        # the trained depth's steps and plan, made once (GPT.walk at schedule=None: every training and decoding step)
        self.trained_steps = self.resolve_schedule()
        self.trained_plan = make_plan(cfg, len(self.trained_steps))
        buffers = self.derived_buffers(res_scale)
        for name, tensor in buffers.items():
            self.register_buffer(name, tensor, persistent=False)
        if "res_scales" not in buffers:
            self.res_scales = None

    # ---- structure ----
    def derived_buffers(self, res_scale=None):
        """The buffers computed from the config, never saved: the RoPE tables and the branch multipliers (a tensor,
        so that the compiled block never specialises on their value; only under a residual rule or a res_scale).
        __init__ registers them; a model that transformers builds on the meta device refills them from here."""
        cfg, out = self.config, {}
        if cfg.pos_emb == "rope":
            out["rope_cos"], out["rope_sin"] = rope_tables(cfg.rope_dim, cfg.block_size, cfg.rope_base)
        rule = RESIDUAL_RULES[cfg.residual_scaling]
        if rule.multiplier is not None or res_scale is not None:
            eps = rule.multiplier(cfg) if res_scale is None else res_scale
            out["res_scales"] = torch.tensor([eps if self.part(i) == "loop" else 1.0 for i in range(len(self.blocks))])
        return out

    @property
    def between(self):
        """The module for what happens between loop passes (loop.between_passes_kind)."""
        return getattr(self, self.between_name)

    def part(self, i):
        c = self.config
        return "prelude" if i < c.n_prelude else "loop" if i < c.n_prelude + c.n_layer else "coda"

    def make_block(self, index):
        """Prelude, shared and coda layers are ordinary Blocks; the FFN of layer `index` is an MoE layer when the
        config has experts (moe.py decides per layer). A conditioned shared block gets a modulator and affine-free
        pre-norms (the modulation supplies the scale)."""
        cfg = self.config
        block = Block(cfg, make_ffn(cfg, index), self.cpu_kernels)
        cond = CONDITIONING[cfg.loop_cond]
        if cond is not None and self.part(index) == "loop":
            block.norm_attn.weight = None
            block.norm_ffn.weight = None
            block.modulator = cond.modulator(cfg.n_embd, cfg.cond_init)
        return block

    def resolve_schedule(self, schedule=None):
        """The passes' step sizes (loop.resolve_schedule); None: the trained n_loop uniform steps."""
        return resolve_schedule(self.config, schedule, self.between.max_passes)

    def loop_count(self, schedule=None):
        return len(self.resolve_schedule(schedule))

    def plan(self, schedule=None):
        """The Labels of one forward pass at the schedule, in order (loop.make_plan)."""
        return make_plan(self.config, self.loop_count(schedule))

    def n_slots(self, schedule=None):
        """KV-cache slots: one per step of the plan."""
        return len(self.plan(schedule))

    # ---- the depth walk ----
    def embed(self, idx, pos=0):
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(pos, pos + idx.size(1), device=idx.device))
        return x

    def rope(self, pos, T):
        if self.config.pos_emb != "rope":
            return None
        if pos + T > self.rope_cos.size(0):
            raise ValueError(f"sequence of {pos + T} tokens exceeds block_size={self.config.block_size}")
        return self.rope_cos[pos:pos + T], self.rope_sin[pos:pos + T]

    def loop_embedding(self, loop, t, dt):
        """The conditioning vector c (1, C) of pass `loop` (starting at time t with step size dt), or None."""
        return self.cond.vector(self, loop, t, dt) if self.cond is not None else None

    def run_block(self, i, x, rope, cache, slot, loop, c, aux, keep_cond=False):
        """Run block i in pass `loop` conditioned by the vector c (None: unconditioned); returns (its output, the
        conditioning it ran with, which keeps its modulators' outputs if keep_cond)."""
        block = self.blocks[i]
        cond = LoopCond(block.modulator, c, keep_cond) if c is not None else None
        res_scale = self.res_scales[i] if self.res_scales is not None else 1.0
        if self.activation_checkpointing and torch.is_grad_enabled():  # keep the block's inputs only: its activations
            # are recomputed in the backward, where its MoE layers count no loads a second time (moe.recomputing)
            x, block_aux = checkpoint(block, x, rope, cache, slot, cond, res_scale, loop, use_reentrant=False,
                                      context_fn=lambda: (nullcontext(), recomputing(block)))
        else:
            x, block_aux = block(x, rope, cache, slot, cond, res_scale, loop)
        if block_aux is not None:  # an MoE layer's balancing terms
            add_aux(aux, block_aux)
        return x, cond

    def walk(self, x, rope, cache=None, aux=None, schedule=None, keep_cond=False):
        """Yield (Label, state, conditioning) after every step of the plan. x: embedded input (B, T, C); aux: a
        dict that collects the MoE layers' auxiliary terms. At the last layer of a pass (boundary=True) the state
        is what the coda would read: after the end-of-pass norm, and with hyper-connections the pooled lanes.
        conditioning: the LoopCond the layer ran with, or None. Passes before the last bptt_loops run without a
        graph. schedule: the passes' step sizes (resolve_schedule). keep_cond: each LoopCond keeps what its modulators
        returned (an analysis asks; nothing is kept otherwise)."""
        cfg = self.config
        aux = {} if aux is None else aux
        steps = self.trained_steps if schedule is None else self.resolve_schedule(schedule)
        plan = self.trained_plan if schedule is None else make_plan(cfg, len(steps))
        n_frozen = len(steps) - cfg.bptt_loops if (cfg.bptt_loops and torch.is_grad_enabled()) else 0
        between = None if self.passthrough else self.between  # (passthrough: each pass reads what the last wrote)
        if self.norm_embed is not None:
            x = self.norm_embed(x)
        e = state = u_in = c = None
        for label in plan:
            # truncated BPTT (Schwethelm et al. 2026, App. G.1): the first passes build no graph, which detaches the
            # state they hand on. Never yield inside the no_grad block: the caller would run without grad too.
            looping = label.part == "loop"
            frozen = torch.no_grad() if looping and label.loop < n_frozen else nullcontext()
            with frozen:
                if looping and label.layer == cfg.n_prelude:  # a pass begins: its conditioning and its input
                    if self.cond is not None:
                        c = self.loop_embedding(label.loop, sum(steps[:label.loop]), steps[label.loop])
                    if between is not None:
                        if label.loop == 0:
                            e = x  # the prelude output, injected into every pass
                            state = between.start(e)
                        x = u_in = between.read(state, e, label.loop)
                x, cond = self.run_block(label.layer, x, rope, cache, label.index, label.loop,
                                         c if looping else None, aux, keep_cond)
                if label.boundary:  # a pass ends: the end-of-pass norm, then what the next pass and the coda read
                    x = self.norm_loop(x) if self.norm_loop is not None else x
                    if between is not None:
                        state = between.write(state, x, u_in, label.loop)
                        x = between.pool(state)
            yield label, x, cond

    def fill_cache(self, labels, h, rope, cache, schedule=None):
        """An early exit's KV fill (CALM-style): write into the slots of the skipped steps `labels` what each step's
        attention would read of the exited state h (B, 1, C) (its K/V, or MLA's latent), modulated as that pass of a
        conditioned loop at `schedule` is, so that later tokens can still attend to every slot."""
        pass_embeddings = {}  # {loop index: conditioning vector}, filled on first use
        for label in labels:
            block = self.blocks[label.layer]
            cond = None
            if block.modulator is not None and label.part == "loop":
                if label.loop not in pass_embeddings:
                    steps = self.resolve_schedule(schedule)
                    pass_embeddings[label.loop] = self.loop_embedding(label.loop, sum(steps[:label.loop]),
                                                                      steps[label.loop])
                cond = LoopCond(block.modulator, pass_embeddings[label.loop])
            a, _ = block.attention_input(h, cond)
            cache.update(label.index, *block.attn.cache_entry(a, rope))

    def final_state(self, h, label=None, cache=None):
        """The state the final norm reads, from a state anywhere in the walk. An early exit before the end of the
        coda runs the rest of the coda on it (its KV-cache slots are the last ones of the cache, written by every
        token); a state in the middle of a pass first gets the end-of-pass norm. label None means h is final."""
        cfg = self.config
        if label is None:
            return h
        if label.part == "loop" and not label.boundary and self.norm_loop is not None:
            h = self.norm_loop(h)
        coda = cfg.n_prelude + cfg.n_layer
        first = label.layer + 1 - coda if label.part == "coda" else 0
        pos = cache.pos if cache is not None else 0
        for j in range(first, cfg.n_coda):
            slot = len(cache.slots) - (cfg.n_coda - j) if cache is not None else 0  # (no cache: no slot is read)
            h, _ = self.run_block(coda + j, h, self.rope(pos, h.size(1)), cache, slot, 0, None, {})
        return h

    def readout(self, h, label=None, cache=None):
        """Logits of a state of the walk (labelled `label`; cache: the KV cache a coda then writes to)."""
        return self.logits(self.final_state(h, label, cache))

    def logits(self, h):
        """Final state -> logits (final norm, head, optional softcap)."""
        logits = self.lm_head(self.norm_f(h))
        if self.config.logit_softcap > 0:
            c = self.config.logit_softcap
            logits = c * torch.tanh(logits.float() / c)
        return logits

    def forward(self, idx, targets=None, cache=None, schedule=None, rng=None):
        """Returns (logits, loss, aux). loss is the next-token cross entropy (None without targets); aux holds
        the extra terms of the training objective, already weighted (MoE balancing, LoopFormer shortcuts...):
        train on loss + sum(aux.values()). schedule: the passes' step sizes (None: the trained depth). In training
        mode with an elastic objective (loop.ELASTIC) that objective runs, drawing from rng (a numpy Generator:
        loop.trajectory_rng(seed, micro-batch index); None: fresh entropy, not reproducible)."""
        elastic = ELASTIC[self.config.elastic]
        if elastic is not None and self.training and targets is not None and cache is None:
            aux = {}
            rng = np.random.default_rng() if rng is None else rng
            logits, loss = elastic.objective(self, self.embed(idx), self.rope(0, idx.size(1)), targets, rng,
                                             schedule, aux)
            return logits, loss, aux
        pos = cache.pos if cache is not None else 0
        x = self.embed(idx, pos)
        aux = {}
        label = None
        for label, x, _ in self.walk(x, self.rope(pos, idx.size(1)), cache, aux, schedule):
            pass
        logits = self.logits(x)  # the walk ends at the final state (readout's final_state has nothing left to run)
        if cache is not None:
            cache.pos += idx.size(1)
        loss = None if targets is None else self.loss(logits, targets)
        return logits, loss, aux

    def compile(self, **kwargs):
        """torch.compile each block and the loss (train.py --compile=True), not the model as a whole: the depth loop
        stays in Python, so a shared block is compiled once whatever the loop count, and another count or schedule
        never recompiles. nn.Module.compile keeps the state_dict keys (no `_orig_mod.`); FSDP's hooks on a block stay
        eager (torch excludes them from dynamo), and so does run_block's activation checkpoint around it. A compiled
        loss is inductor's one fused pass over the logits."""
        for module in (*self.blocks, self.loss):
            module.compile(**kwargs)

    def states(self, idx):
        """All (Label, hidden state) pairs of one full forward pass, for analyses (no grad, eager)."""
        return [(label, h) for label, h, _ in self.walk(self.embed(idx), self.rope(0, idx.size(1)))]

    # ---- init and optimizer groups (muP as in Lee et al. 2026, arXiv:2605.09165, §3) ----
    def param_role(self, name, p):
        """embed | head | hidden | norm: what muP and the other LR rules treat differently. The parameters between
        the passes take their module's role if it names one (hyper-connection scalars: 'norm', no decay, no muP LR
        scale); under a residual rule with a depth factor the norm gains inside blocks are 'block_norm' (they take
        the depth LR rule)."""
        if self.between.role is not None and name.startswith(self.between_name + "."):
            return self.between.role
        if name.startswith(("wte.", "wpe.")):
            return "embed"
        if name.startswith("lm_head."):
            return "head"
        if p.dim() >= 2:
            return "hidden"
        depth_rule = RESIDUAL_RULES[self.config.residual_scaling].depth_factor is not None
        return "block_norm" if depth_rule and name.startswith("blocks.") else "norm"

    def init_weights(self, seed=None):
        """Embeddings N(0, sigma^2); every other matrix N(0, sigma^2/w) (w = n_embd/d_base with muP, else 1),
        or U(-a, a) with a = sqrt(3/fan_in) for init='uniform'; norm gains 1. Two overrides keep muP's 1/w:
        head_init_std > 0: the head is N(0, head_init_std^2/w) (Schwethelm et al. 2026, arXiv:2604.21106, App. C.1,
        "the LM head is N(0, 10^-3)": a standard deviation, as in nanochat, the code base they build on, whose
        init_weights draws the head with std=0.001); proj_init='gpt2': the residual output projections (attention
        and FFN c_proj, expert down projections) are N(0, sigma^2/(2 n_layer w)), GPT-2's rule as in LoopFormer's
        released code (Jeddi et al. 2026, arXiv:2602.11451), where n_layer counts the unique layers of the shared
        block, not the passes. Modules with an init of their own (zero-initialised modulators, [I|0] injection,
        ...) define reset_special() and run last."""
        cfg = self.config
        if seed is not None:
            torch.manual_seed(seed)
        std, w = cfg.init_std, cfg.mup_width_ratio
        for name, p in self.named_parameters():
            role = self.param_role(name, p)
            if role == "embed":
                nn.init.normal_(p, 0.0, std)
            elif role not in ("hidden", "head"):
                nn.init.ones_(p)
            elif role == "head" and cfg.head_init_std > 0:
                nn.init.normal_(p, 0.0, cfg.head_init_std / math.sqrt(w))
            elif cfg.proj_init == "gpt2" and name.endswith(RESIDUAL_PROJECTIONS):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * cfg.n_layer * w))
            elif cfg.init == "uniform":
                a = math.sqrt(3.0 / p.size(-1))
                nn.init.uniform_(p, -a, a)
            else:
                nn.init.normal_(p, 0.0, std / math.sqrt(w))
        for m in self.modules():
            if m is not self and hasattr(m, "reset_special"):
                m.reset_special()
        return self

    def group_scales(self, role):
        """(lr multiplier, Adam-eps multiplier) for a parameter role. muP: hidden and head LR eta/w; times the
        residual rule's depth factor on the hidden LR and eps and the block norms' (loop.RESIDUAL_RULES)."""
        w = self.config.mup_width_ratio
        lr_scale, eps_scale = (1.0 / w if role in ("hidden", "head") else 1.0), 1.0
        if role in ("hidden", "block_norm"):
            m = depth_lr_factor(self.config)
            lr_scale, eps_scale = lr_scale * m, eps_scale * m
        return lr_scale, eps_scale

    def param_groups(self):
        """Optimizer groups: one per role, each with `lr_scale` and `eps_scale` (train.py multiplies the
        schedule's LR and the base eps by them) and `decay` (weight decay applies to matrices only)."""
        groups = {}
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            role, extra = self.param_role(name, p), self.lr_multiplier(name)
            key = (role, extra)  # parameters of one role with another LR multiplier form a group of their own
            if key not in groups:
                lr_scale, eps_scale = self.group_scales(role)
                groups[key] = dict(params=[], names=[], role=role, lr_scale=lr_scale * extra, eps_scale=eps_scale,
                                   decay=role != "norm" and p.dim() >= 2)
            groups[key]["params"].append(p)
            groups[key]["names"].append(name)
        return list(groups.values())

    def lr_multiplier(self, name):
        """An LR multiplier of one parameter on top of its role's: cond_lr_scale for the per-pass conditioning (the
        blocks' modulators and the loop/step embedders)."""
        cond = self.cond is not None and (".modulator." in name or name.split(".")[0] in self.cond.embedders)
        return self.config.cond_lr_scale if cond else 1.0

    # ---- generation ----
    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, schedule=None, step=None,
                 stop=None, logits_out=None):
        """Sample continuations with the KV cache: the one generate loop (sample.py, exits.py's exit decoding,
        eval.py's generation). idx: (B, T) prompt token ids; schedule as in forward; temperature 0: greedy.
        step(tokens (B, 1), cache) -> the next logits (B, V): how a new token runs (default: the full depth;
        early_exit.decode_step exits early); stop(new tokens so far, (B, n)) -> True ends the loop; logits_out: a
        list that receives the logits each new token was drawn from."""
        B, T = idx.shape
        if T + max_new_tokens > self.config.block_size:
            raise ValueError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) exceeds block_size="
                             f"{self.config.block_size}")
        cache = KVCache(self.n_slots(schedule), B, T + max_new_tokens)
        logits = self(idx, cache=cache, schedule=schedule)[0][:, -1]
        out = [idx]
        for n in range(max_new_tokens):
            logits = logits[:, :self.config.vocab_size]
            if logits_out is not None:
                logits_out.append(logits)
            out.append(sample_next(logits, temperature, top_k, generator))
            if n == max_new_tokens - 1 or (stop is not None and stop(torch.cat(out[1:], dim=1))):
                break
            logits = step(out[-1], cache) if step else self(out[-1], cache=cache, schedule=schedule)[0][:, -1]
        return torch.cat(out, dim=1)


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """Pick the next token ids (B, 1) from last-position logits (B, V); temperature 0 means greedy."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
