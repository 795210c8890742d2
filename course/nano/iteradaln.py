"""
Step 6 of course/nano: loop.py plus IterAdaLN, the per-pass conditioning of Chen et al.'s LoopMoE.

    token embedding -> n_loop passes of the same n_layer blocks, each pass modulated by v_k -> final RMSNorm -> head

A shared block sees a different input at every pass but has one set of weights, and nothing tells it which pass it
runs. IterAdaLN (Chen et al. 2026, LoopMoE, arXiv:2606.04438, §3.3, Eqs. 3-9) does: an embedding v_k of the
iteration k = 1..n_loop (sinusoidal features of k through a small MLP, shared by all layers) is added to a linear
map of each token's state, and an MLP of the sum gives per token a scale gamma and a shift beta of the pre-norm and,
on the attention branch, a gate alpha: x + alpha * attn((1 + gamma) * norm(x) + beta). The MLP's output starts at
zero: training starts with the attention branches off and plain norms, and learns how much each pass differs.
It gives the logits of the project's model.GPT with GPTConfig(n_loop=..., loop_cond="iteradaln")
(tests/test_course_nano.py).

    python course/nano/iteradaln.py [text file]   # trains a tiny one on the CPU for about a minute, prints its loss
"""
import math
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 256  # bytes
    block_size: int = 128  # the longest context
    n_layer: int = 2  # layers in the shared block
    n_loop: int = 2  # passes of the shared block
    n_embd: int = 64
    n_head: int = 2
    head_dim: int = 32
    d_ff: int = 192  # SwiGLU hidden size (the project's default: 64 * ceil(8 * n_embd / 3 / 64))
    norm_eps: float = 1e-6
    rope_base: float = 10000.0


def norm(x, eps):
    """RMSNorm without a learned gain (Lee et al. use none): x / sqrt(mean(x^2) + eps)."""
    return F.rms_norm(x, (x.size(-1),), eps=eps)


def rotate(x, cos, sin):
    """Rotary positions (Su et al. 2021): the pairs (x_i, x_{i + D/2}) of each head turn by position * freq_i."""
    d = x.size(-1) // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        inner = cfg.n_head * cfg.head_dim
        self.c_q = nn.Linear(cfg.n_embd, inner, bias=False)
        self.c_k = nn.Linear(cfg.n_embd, inner, bias=False)
        self.c_v = nn.Linear(cfg.n_embd, inner, bias=False)
        self.c_proj = nn.Linear(inner, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin, slot=None):
        B, T, _ = x.shape
        q, k, v = (c(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2) for c in (self.c_q, self.c_k, self.c_v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # (B, H, T, D)
        if slot is not None:  # decoding: this layer's keys and values of the earlier tokens come first
            if slot:
                k, v = torch.cat([slot[0], k], dim=2), torch.cat([slot[1], v], dim=2)
            slot[:] = [k, v]
        # causal over the T new tokens; one new token sees everything (a prompt is fed once, on an empty cache)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020): c_proj(silu(c_gate(x)) * c_fc(x))."""

    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.d_ff, bias=False)
        self.c_gate = nn.Linear(cfg.n_embd, cfg.d_ff, bias=False)
        self.c_proj = nn.Linear(cfg.d_ff, cfg.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.silu(self.c_gate(x)) * self.c_fc(x))


def sinusoidal(k, dim=256):
    """(1, dim) features [cos(k w_j), sin(k w_j)], w_j = 10000^(-j / (dim / 2)): the iteration's encoding."""
    w = torch.exp(-math.log(10000.0) * torch.arange(dim // 2).float() / (dim // 2))
    return torch.cat([(k * w).cos(), (k * w).sin()])[None]


class LoopEmbed(nn.Module):
    """v_k: the iteration k's sinusoidal features -> Linear -> SiLU -> Linear, one (1, n_embd) vector per pass."""

    def __init__(self, cfg):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(256, cfg.n_embd), nn.SiLU(), nn.Linear(cfg.n_embd, cfg.n_embd))

    def forward(self, k):
        return self.mlp(sinusoidal(k))


class IterAdaLN(nn.Module):
    """One layer's modulator: (gamma, beta, alpha) = out(silu(token(x) + v)) for attention, (gamma, beta) for the FFN
    from the state m after the attention update."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.token_attn, self.out_attn = nn.Linear(C, C, bias=False), nn.Linear(C, 3 * C)
        self.token_ffn, self.out_ffn = nn.Linear(C, C, bias=False), nn.Linear(C, 2 * C)

    def attn(self, x, v):
        return self.out_attn(F.silu(self.token_attn(x) + v)).chunk(3, dim=-1)

    def ffn(self, m, v):
        return self.out_ffn(F.silu(self.token_ffn(m) + v)).chunk(2, dim=-1)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.eps = cfg.norm_eps
        self.attn = Attention(cfg)
        self.ffn = MLP(cfg)
        self.modulator = IterAdaLN(cfg)

    def forward(self, x, cos, sin, v, slot=None):  # v: this pass's iteration embedding v_k
        gamma, beta, alpha = self.modulator.attn(x, v)
        x = x + alpha * self.attn(norm(x, self.eps) * (1 + gamma) + beta, cos, sin, slot)
        gamma, beta = self.modulator.ffn(x, v)
        return x + self.ffn(norm(x, self.eps) * (1 + gamma) + beta)


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.loop_embed = LoopEmbed(cfg)
        inv_freq = cfg.rope_base ** -(torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        angles = torch.outer(torch.arange(cfg.block_size).float(), inv_freq)  # (position, head_dim / 2)
        self.register_buffer("cos", angles.cos(), persistent=False)  # computed, never saved
        self.register_buffer("sin", angles.sin(), persistent=False)
        for name, p in self.named_parameters():  # muP's init: matrices N(0, 0.02^2 / w), w = n_embd / 128
            nn.init.normal_(p, 0.0, 0.02 if name == "wte.weight" else 0.02 / math.sqrt(cfg.n_embd / 128))
            if name.endswith("bias") or ".out_" in name:  # IterAdaLN starts as the plain loop: its outputs zero
                nn.init.zeros_(p)
        self.n_slots = cfg.n_loop * cfg.n_layer  # KV-cache slots: one per executed (pass, layer) step

    def forward(self, idx, targets=None, cache=None):
        """Logits (B, T, vocab) and the next-token cross entropy (None without targets). cache: a list of n_slots
        slots (lists, empty at first) that decoding fills with each step's keys and values."""
        pos = cache[0][0].size(2) if cache and cache[0] else 0  # tokens already cached
        cos, sin = self.cos[pos:pos + idx.size(1)], self.sin[pos:pos + idx.size(1)]
        x = self.wte(idx)
        for p in range(self.cfg.n_loop):  # the same blocks at every pass, told which one it is
            v = self.loop_embed(p + 1)
            for i, block in enumerate(self.blocks):
                x = block(x, cos, sin, v, cache[p * self.cfg.n_layer + i] if cache else None)
        logits = self.lm_head(norm(x, self.cfg.norm_eps))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, n_new, temperature=1.0):
        cache = [[] for _ in range(self.n_slots)]
        logits = self(idx, cache=cache)[0]
        for _ in range(n_new):
            nxt = torch.multinomial(F.softmax(logits[:, -1] / temperature, dim=-1), 1)
            idx = torch.cat([idx, nxt], dim=1)
            logits = self(nxt, cache=cache)[0]  # one token, after the cached ones
        return idx


# The real model's config keys that change its forward, at the only values this file implements.
DEFAULTS = dict(mlp="swiglu", norm_gain=False, qk_norm=False, pos_emb="rope", logit_softcap=0.0, sandwich_norm=False,
                attn="mha", loop_norm=False, hc_lanes=0, residual_scaling="none", loop_cond="iteradaln", n_expert=0,
                injection="none", n_prelude=0, n_coda=0)


def from_project(state_dict, config):
    """This file's GPT holding a real model.GPT's weights: its state_dict and its GPTConfig as a dict (a train.py
    checkpoint holds both: ckpt["model"], ckpt["model_config"]). The parameter names are the real model's."""
    for key, value in DEFAULTS.items():
        if config.get(key, value) != value:
            raise ValueError(f"{Path(__file__).name} has only {key}={value!r}; this model has {config[key]!r}")
    # the real model's vocabulary may be padded (vocab_pad_multiple): the embedding's rows are its size here
    shape = {f.name: config[f.name] for f in fields(Config) if f.name != "vocab_size"}
    cfg = Config(vocab_size=state_dict["wte.weight"].size(0), **shape)
    model = GPT(cfg)
    model.load_state_dict(state_dict)
    return model


def main(path=None, steps=500, batch_size=16, lr=3e-3, seed=0):
    """Train on the bytes of a text file (default: this repository's README.md and COURSE.md)."""
    torch.manual_seed(seed)
    root = Path(__file__).resolve().parents[2]
    text = Path(path).read_bytes() if path else (root / "README.md").read_bytes() + (root / "COURSE.md").read_bytes()
    data = torch.tensor(list(text))
    train, val = data[:int(0.9 * len(data))], data[int(0.9 * len(data)):]
    cfg = Config()
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)

    def batch(split):
        i = torch.randint(len(split) - cfg.block_size - 1, (batch_size,)).tolist()
        x = torch.stack([split[j:j + cfg.block_size] for j in i])
        return x, torch.stack([split[j + 1:j + 1 + cfg.block_size] for j in i])

    print(f"{sum(p.numel() for p in model.parameters()):,} parameters, {len(train):,} training bytes")
    t0 = time.time()
    for step in range(steps + 1):
        if step % 100 == 0 or step == steps:  # the loss on 8 random validation batches
            with torch.no_grad():
                val_loss = sum(model(*batch(val))[1].item() for _ in range(8)) / 8
            print(f"step {step:4d} | val loss {val_loss:.3f} | {time.time() - t0:.0f} s")
        if step < steps:
            for group in opt.param_groups:  # linear decay to 0 over the last half
                group["lr"] = lr * min(1.0, 2 * (1 - step / steps))
            loss = model(*batch(train))[1]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    sample = model.generate(val[:32][None], 64, temperature=0.8)[0].tolist()
    print(bytes(sample).decode("utf-8", errors="replace"))


if __name__ == "__main__":
    main(*sys.argv[1:2])
