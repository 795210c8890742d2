"""
The plain decoder-only transformer (the "Base" model of Lee et al. 2026, arXiv:2605.09165) and the one config
dataclass every script shares.

    GPT: token embedding -> depth (each Block once) -> final RMSNorm -> head

Everything looped lives in loop.py (LoopedGPT subclasses GPT) and everything MoE in moe.py; this file holds
the parts they share: GPTConfig, RMSNorm, RoPE, attention (SDPA, flash kernels on CUDA), the MLPs, Block with
its hooks (per-loop conditioning, residual multiplier, sandwich norm, MoE), the KV cache, muP-aware init and
optimizer parameter groups.

One method walks the depth: `GPT.walk` yields the hidden state after every effective layer with its Label.
forward(), early exit and every analysis use that same walk, so there is one code path for all of them.
"""
import math
from collections import namedtuple
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F

from moe import make_ffn, update_biases


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
    # ---- block options (paper-000 defaults; other papers' backbones switch these) ----
    mlp: str = "swiglu"  # swiglu | gelu | relu2
    norm_gain: bool = False  # learnable RMSNorm gains (paper 000: none)
    norm_eps: float = 1e-6  # RMSNorm epsilon
    qk_norm: bool = False  # RMSNorm (gain-free) on queries and keys
    pos_emb: str = "rope"  # rope | learned (absolute positions)
    rope_base: float = 10000.0  # RoPE base frequency
    tie_embeddings: bool = False  # share the token embedding with the output head
    logit_softcap: float = 0.0  # if > 0: logits = c*tanh(logits/c)
    sandwich_norm: bool = False  # RMSNorm on each sublayer's output before the residual add
    # ---- init and muP ----
    init: str = "normal"  # normal (N(0, init_std^2)) | uniform (U(-a,a), a = sqrt(3/d))
    init_std: float = 0.02  # sigma_base of the normal init
    mup: bool = True  # muP of Lee et al.: hidden & head init var sigma^2/w and Adam LR eta/w, w = n_embd/mup_base_width
    mup_base_width: int = 128  # d_base of muP
    # ---- looping (loop.py) ----
    n_loop: int = 1  # passes of the shared block
    n_prelude: int = 0  # unshared layers before the loop
    n_coda: int = 0  # unshared layers after the loop
    # ---- mixture of experts (moe.py) ----
    n_expert: int = 0  # routed experts per MoE layer; 0 = dense FFN everywhere
    top_k: int = 2  # experts each token is routed to

    def __post_init__(self):
        def need(cond, msg):
            if not cond:
                raise ValueError(f"GPTConfig: {msg}")
        if self.n_head == 0:
            need(self.n_embd % self.head_dim == 0, f"n_embd={self.n_embd} is not a multiple of head_dim="
                 f"{self.head_dim}; set n_head or head_dim")
            self.n_head = self.n_embd // self.head_dim
        if self.d_ff == 0:
            self.d_ff = 64 * math.ceil(8 * self.n_embd / 3 / 64) if self.mlp == "swiglu" else 4 * self.n_embd
        need(self.mlp in ("swiglu", "gelu", "relu2"), f"mlp must be swiglu|gelu|relu2, got {self.mlp!r}")
        need(self.pos_emb in ("rope", "learned"), f"pos_emb must be rope|learned, got {self.pos_emb!r}")
        need(self.init in ("normal", "uniform"), f"init must be normal|uniform, got {self.init!r}")
        need(self.head_dim % 2 == 0 or self.pos_emb != "rope", "RoPE needs an even head_dim")
        need(self.n_layer >= 1 and self.n_loop >= 1, "n_layer and n_loop must be >= 1")

    @property
    def padded_vocab(self):
        m = self.vocab_pad_multiple
        return (self.vocab_size + m - 1) // m * m

    @property
    def mup_width_ratio(self):
        return self.n_embd / self.mup_base_width if self.mup else 1.0

    def to_dict(self):
        return asdict(self)


# Where a hidden state sits in the depth: effective-layer index (also the KV-cache slot), physical layer,
# loop index, whether it ends a pass of the loop, and the part (prelude | loop | coda).
Label = namedtuple("Label", "index layer loop boundary part")


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6, gain=False):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if gain else None

    def forward(self, x):
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


def rope_tables(head_dim, length, base, device=None):
    """cos/sin tables (length, head_dim/2) for rotary position embeddings (Su et al. 2021)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x: (B, H, T, D); rotates the two halves of the head dimension as complex pairs."""
    d = x.size(-1) // 2
    x1, x2 = x[..., :d], x[..., d:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class KVCache:
    """Preallocated keys/values, one slot per executed (loop, layer) step, for autoregressive decoding.

    Slots are allocated on first write (their head sizes may differ between attention kinds). `pos` counts the
    tokens already cached; the model advances it after a whole forward pass."""

    def __init__(self, n_slots, batch_size, max_len):
        self.slots = [None] * n_slots
        self.batch_size, self.max_len, self.pos = batch_size, max_len, 0

    def update(self, index, k, v):
        """Write k, v (B, H, T, D) at the current position into slot `index`; return the cached prefix + them."""
        B, H, T, _ = k.shape
        if self.pos + T > self.max_len:
            raise ValueError(f"KV cache full: {self.pos}+{T} tokens > max_len={self.max_len}; "
                             "generate fewer tokens or raise block_size")
        if self.slots[index] is None:
            self.slots[index] = (k.new_zeros(B, H, self.max_len, k.size(-1)),
                                 v.new_zeros(B, H, self.max_len, v.size(-1)))
        ck, cv = self.slots[index]
        ck[:, :, self.pos:self.pos + T] = k
        cv[:, :, self.pos:self.pos + T] = v
        return ck[:, :, :self.pos + T], cv[:, :, :self.pos + T]


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        inner = config.n_head * config.head_dim
        self.c_q = nn.Linear(config.n_embd, inner, bias=False)
        self.c_k = nn.Linear(config.n_embd, inner, bias=False)
        self.c_v = nn.Linear(config.n_embd, inner, bias=False)
        self.c_proj = nn.Linear(inner, config.n_embd, bias=False)
        self.qk_norm = config.qk_norm
        self.use_rope = config.pos_emb == "rope"
        self.eps = config.norm_eps

    def forward(self, x, rope, cache=None, slot=0):
        B, T, C = x.shape
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.c_k(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = self.c_v(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if self.use_rope:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.qk_norm:  # after RoPE, as nanochat (used by Schwethelm et al. 2026) does
            q, k = F.rms_norm(q, (self.head_dim,), eps=self.eps), F.rms_norm(k, (self.head_dim,), eps=self.eps)
        y = attend(q, k, v, cache, slot)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


def attend(q, k, v, cache, slot):
    """Causal scaled dot-product attention, with the KV cache when decoding. q: (B, H, T, D)."""
    if cache is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    pos, T = cache.pos, q.size(2)
    k, v = cache.update(slot, k, v)
    if T == 1:  # one new token sees the whole cache
        return F.scaled_dot_product_attention(q, k, v)
    # T new tokens after `pos` cached ones: new token i sees cached tokens and new tokens <= i
    mask = torch.ones(T, pos + T, dtype=torch.bool, device=q.device).tril(diagonal=pos)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


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
    The FFN is a dense MLP or an MoE layer (moe.py); an MoE layer returns (y, aux) with its auxiliary losses.
    """

    def __init__(self, config, ffn=None):
        super().__init__()
        self.norm_attn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain)
        self.attn = CausalSelfAttention(config)
        self.norm_ffn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain)
        self.ffn = ffn if ffn is not None else MLP(config)
        self.returns_aux = getattr(self.ffn, "returns_aux", False)
        if config.sandwich_norm:
            self.post_attn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain)
            self.post_ffn = RMSNorm(config.n_embd, config.norm_eps, config.norm_gain)
        else:
            self.post_attn = self.post_ffn = None

    def forward(self, x, rope, cache=None, slot=0, cond=None, res_scale=1.0):
        h = self.norm_attn(x)
        scale, shift, gate = cond.attn(x) if cond is not None else (None, None, None)
        h = modulate(h, scale, shift)
        a = self.attn(h, rope, cache, slot)
        if self.post_attn is not None:
            a = self.post_attn(a)
        x = x + res_scale * (a if gate is None else gate * a)

        h = self.norm_ffn(x)
        scale, shift, gate = cond.ffn(x) if cond is not None else (None, None, None)
        h = modulate(h, scale, shift)
        aux = None
        if self.returns_aux:
            f, aux = self.ffn(h)
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


def add_aux(total, aux):
    """Accumulate an MoE layer's auxiliary terms (a dict of scalars) into the running dict."""
    if aux:
        for k, v in aux.items():
            total[k] = total[k] + v if k in total else v


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        V, C = config.padded_vocab, config.n_embd
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(config.block_size, C) if config.pos_emb == "learned" else None
        self.blocks = nn.ModuleList(self.make_block(i) for i in range(self.n_block_modules()))
        self.norm_f = RMSNorm(C, config.norm_eps, config.norm_gain)
        self.lm_head = nn.Linear(C, V, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        if config.pos_emb == "rope":
            cos, sin = rope_tables(config.head_dim, config.block_size, config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    # ---- structure (LoopedGPT overrides these) ----
    def n_block_modules(self):
        return self.config.n_layer

    def make_block(self, index):
        """The FFN of layer `index` is an MoE layer when the config has experts (moe.py decides per layer)."""
        return Block(self.config, make_ffn(self.config, index))

    def n_slots(self):
        """KV-cache slots: one per executed (loop, layer) step."""
        return len(self.blocks)

    def block_executions(self):
        """How often each module in self.blocks runs in one forward pass (and how many of those runs build a
        graph for backward): a list of (forward runs, backward runs). scaling.py counts compute with it."""
        return [(1, 1)] * len(self.blocks)

    def after_optimizer_step(self, world_size=1):
        """Work that follows each optimizer step: the bias-balancing update of MoE routers (moe.py)."""
        update_biases(self, world_size)

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

    def walk(self, x, rope, cache=None, aux=None):
        """Yield (Label, hidden state) after every effective layer. x: embedded input (B, T, C)."""
        aux = {} if aux is None else aux
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x, block_aux = block(x, rope, cache, i)
            add_aux(aux, block_aux)
            yield Label(i, i, 0, i == last, "loop"), x

    def readout(self, h, label=None):
        """Hidden state -> logits (final norm, head, optional softcap). LoopedGPT runs its coda first."""
        logits = self.lm_head(self.norm_f(h))
        if self.config.logit_softcap > 0:
            c = self.config.logit_softcap
            logits = c * torch.tanh(logits.float() / c)
        return logits

    def forward(self, idx, targets=None, cache=None):
        """Returns (logits, loss, aux). loss is the next-token cross entropy (None without targets); aux holds
        the extra terms of the training objective, already weighted (MoE balancing, LoopFormer shortcuts...):
        train on loss + sum(aux.values())."""
        pos = cache.pos if cache is not None else 0
        x = self.embed(idx, pos)
        aux = {}
        label = None
        for label, x in self.walk(x, self.rope(pos, idx.size(1)), cache, aux):
            pass
        logits = self.readout(x, label)
        if cache is not None:
            cache.pos += idx.size(1)
        loss = None if targets is None else self.loss(logits, targets)
        return logits, loss, aux

    def loss(self, logits, targets):
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)

    def states(self, idx):
        """All (Label, hidden state) pairs of one full forward pass, for analyses (no grad, eager)."""
        return list(self.walk(self.embed(idx), self.rope(0, idx.size(1))))

    # ---- init and optimizer groups (muP as in Lee et al. 2026, arXiv:2605.09165, §3) ----
    def param_role(self, name, p):
        """embed | head | hidden | norm: what muP and the other LR rules treat differently."""
        if name.startswith(("wte.", "wpe.")):
            return "embed"
        if name.startswith("lm_head."):
            return "head"
        return "hidden" if p.dim() >= 2 else "norm"

    def init_weights(self, seed=None):
        """Embeddings N(0, sigma^2); every other matrix N(0, sigma^2/w) (w = n_embd/d_base with muP, else 1),
        or U(-a, a) with a = sqrt(3/fan_in) for init='uniform'; norm gains 1. Modules with an init of their own
        (zero-initialised modulators, [I|0] injection, ...) define reset_special() and run last."""
        cfg = self.config
        if seed is not None:
            torch.manual_seed(seed)
        std = cfg.init_std
        for name, p in self.named_parameters():
            role = self.param_role(name, p)
            if role == "embed":
                nn.init.normal_(p, 0.0, std)
            elif role in ("hidden", "head"):
                if cfg.init == "uniform":
                    a = math.sqrt(3.0 / p.size(-1))
                    nn.init.uniform_(p, -a, a)
                else:
                    nn.init.normal_(p, 0.0, std / math.sqrt(cfg.mup_width_ratio))
            else:
                nn.init.ones_(p)
        for m in self.modules():
            if m is not self and hasattr(m, "reset_special"):
                m.reset_special()
        return self

    def group_scales(self, role):
        """(lr multiplier, Adam-eps multiplier) for a parameter role. muP: hidden and head LR eta/w."""
        w = self.config.mup_width_ratio
        return (1.0 / w if role in ("hidden", "head") else 1.0), 1.0

    def param_groups(self):
        """Optimizer groups: one per role, each with `lr_scale` and `eps_scale` (train.py multiplies the
        schedule's LR and the base eps by them) and `decay` (weight decay applies to matrices only)."""
        groups = {}
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            role = self.param_role(name, p)
            if role not in groups:
                lr_scale, eps_scale = self.group_scales(role)
                groups[role] = dict(params=[], names=[], role=role, lr_scale=lr_scale, eps_scale=eps_scale,
                                    decay=role != "norm")
            groups[role]["params"].append(p)
            groups[role]["names"].append(name)
        return list(groups.values())

    def compile_blocks(self, **kwargs):
        """torch.compile each block in place (state_dict keys unchanged, no `_orig_mod.`); the depth loop stays
        in Python, so changing the loop count never recompiles a block."""
        for block in self.blocks:
            block.compile(**kwargs)

    # ---- generation ----
    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """Sample continuations with the KV cache. idx: (B, T) prompt token ids."""
        B, T = idx.shape
        if T + max_new_tokens > self.config.block_size:
            raise ValueError(f"prompt ({T}) + max_new_tokens ({max_new_tokens}) exceeds block_size="
                             f"{self.config.block_size}")
        cache = KVCache(self.n_slots(), B, T + max_new_tokens)
        logits, _, _ = self(idx, cache=cache)
        out = [idx]
        for _ in range(max_new_tokens):
            nxt = sample_next(logits[:, -1, :self.config.vocab_size], temperature, top_k, generator)
            out.append(nxt)
            logits, _, _ = self(nxt, cache=cache)
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
