"""
Parameter and FLOP accounting: the units every count of the project is built from (train.py's FLOP budget and
MFU, exits.py's exit costs, the sweeps' plans, LoopMoE's capacity balancing in analyze.py). A library: its command
line is scaling.py's (`python scaling.py count config/sparse_base.py`).

Accounting reads the real module: its parameters, its `blocks` and its depth plan (block_executions: how often each
block runs per token, and how many of those runs are backpropagated). A weight shared across passes is stored once and
computed at every pass; tied embeddings are stored once. Two FLOP conventions:

- "lee" (Lee et al. 2026, arXiv:2605.09165, §3): C = 6 * N_active * D, where N_active counts every pass of a looped
  layer, only the active experts of an MoE layer, and both embedding matrices (token embedding and head).
- "schwethelm" (Schwethelm et al. 2026, arXiv:2604.21106, §3.2 and App. G; nanochat's estimate_flops):
  6 * (executed non-embedding parameters + head) + 12 * h*q * T per executed layer (the attention matmuls, h*q =
  n_head*head_dim, T = sequence length); a forward-only run (truncated BPTT) costs 2 per parameter and 4*h*q*T
  instead of 6 and 12*h*q*T; hyper-connection lane mixing costs 6 * (K^2 + 2K) * d per pass.

module_executions(model) -> {module name: (forward runs, backward runs)} lists the modules that do not run exactly
once per token (input injection, per-pass norms; 0 for per-sequence work), from what the model's registry rows
declare (loop.py), and its `between` module has extra_macs(), multiply-adds per pass that no parameter unit counts
(hyper-connection lane mixing). Both take `training` (False: one inference forward pass) and `schedule` (the
passes' step sizes, loop.py's elastic depth; None: the trained depth), as every count below does.
"""
from collections import namedtuple

import torch

from loop import ELASTIC
from model import GPT
from moe import MoE

# -----------------------------------------------------------------------------------------------------------------
# accounting

# One group of parameters that runs together: kind is embed | head | block | other; stored = parameters this unit
# adds to storage; active = parameters one run computes with; fwd/bwd = runs per token (bwd: runs backpropagated);
# attn_width = n_head*head_dim of a block's attention (0 for other units); decode_attn_width = the same for one
# cached decoding step (MLA attends in its latent space there).
Unit = namedtuple("Unit", "name kind stored active fwd bwd attn_width decode_attn_width", defaults=(0,))


def moe_counts(layer):
    """Stored and active (per token) parameters of an MoE layer (moe.MoE): active = router + top_k routed experts +
    shared experts. The router counts in both."""
    E = layer.n_expert
    per_expert = (layer.w_up.numel() + layer.w_down.numel()) // E
    shared = sum(p.numel() for p in (layer.shared_up, layer.shared_down) if p is not None)
    router = layer.router.weight.numel()
    return dict(stored=router + E * per_expert + shared, active=router + layer.top_k * per_expert + shared,
                router=router, per_expert=per_expert, shared=shared)


def _ffn_active_adjustment(block):
    """Active minus stored parameters of a block's FFN: negative for an MoE layer (only top_k experts run)."""
    if not isinstance(block.ffn, MoE):
        return 0
    return moe_counts(block.ffn)["active"] - sum(p.numel() for p in block.ffn.parameters())


def block_executions(model, training=True, schedule=None):
    """(forward runs, backward runs) per token of each module of model.blocks in one forward pass at the schedule.
    Truncated BPTT: the shared layers run n_loop times but build a graph only in the last bptt_loops passes.
    training=True adds the elastic objective's expected extra work (its loop.ELASTIC row's runs)."""
    cfg = model.config
    n = model.loop_count(schedule)
    fwd, bwd = n, (min(cfg.bptt_loops, n) if cfg.bptt_loops else n)
    elastic = ELASTIC[cfg.elastic]
    if training and elastic is not None:
        fwd, bwd = elastic.runs(fwd, bwd, n)
    return [(fwd, bwd) if model.part(i) == "loop" else (1, 1) for i in range(len(model.blocks))]


def module_executions(model, training=True, schedule=None):
    """{module name: (forward runs, backward runs) per token} of the modules that do not run exactly once per
    token: the end-of-pass norm runs once per pass, the module between the passes as its runs() says (a linear
    injection once per pass; hyper-connection lane mixing is its extra_macs()); the loop embedders, and the
    modulators of a per-sequence conditioning (TMLT, LoopFormer), work once per pass per sequence (0 per token)."""
    per_pass = block_executions(model, training, schedule)[model.config.n_prelude]
    runs = model.between.runs(per_pass)
    out = {} if runs is None else {model.between_name: runs}
    if model.norm_loop is not None:
        out["norm_loop"] = per_pass
    if model.cond is not None:
        out.update({name: (0, 0) for name in model.cond.embedders})
        if model.cond.per_sequence:
            out.update({f"blocks.{i}.modulator": (0, 0) for i in range(len(model.blocks)) if model.part(i) == "loop"})
    return out


def compute_units(model, training=True, schedule=None):
    """The model as accounting units: embeddings, modules declared by module_executions(), blocks, every other
    child module, the head. The stored counts sum to the model's parameters (asserted). training=False: the runs of
    one inference forward pass (no extra passes of a training objective); schedule: the passes' step sizes."""
    seen = set()

    def new_params(module):  # parameters not yet counted: a tensor shared between modules is stored once
        n = 0
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        return n

    units = []
    for name in ("wte", "wpe"):
        m = getattr(model, name, None)
        if m is not None:
            n = new_params(m)
            units.append(Unit(name, "embed", n, n, 1, 1, 0))

    # modules whose runs per token the model declares (deepest names first, so a submodule can differ from its
    # parent; a submodule of a block, like a per-sequence modulator, leaves the block's count)
    declared = dict(module_executions(model, training, schedule))
    head_runs = declared.pop("lm_head", (1, 1))
    modules = dict(model.named_modules())
    for name in sorted(declared, key=lambda n: -n.count(".")):
        if name not in modules:
            raise ValueError(f"module_executions() names '{name}', which is not a module of the model")
        f, b = declared[name]
        n = new_params(modules[name])
        units.append(Unit(name, "other", n, n, f, b, 0))

    units += block_units(model, block_executions(model, training, schedule), new_params, set(seen))

    head = model.lm_head
    for name, m in model.named_children():
        if m is not head and name != "blocks":
            n = new_params(m)
            if n:
                units.append(Unit(name, "other", n, n, 1, 1, 0))
    root = [p for p in model.parameters(recurse=False) if id(p) not in seen]
    if root:  # parameters owned by the model itself: assumed to run once
        seen.update(id(p) for p in root)
        units.append(Unit("(model)", "other", sum(p.numel() for p in root), sum(p.numel() for p in root), 1, 1, 0))
    # the head computes with V*d parameters even when its weight is the (already stored) token embedding
    units.append(Unit("lm_head", "head", new_params(head), head.weight.numel(), *head_runs, 0))

    assert sum(u.stored for u in units) == sum(p.numel() for p in model.parameters()), "accounting missed params"
    return units


def block_units(model, executions, new_params, declared_ids):
    """One 'block' unit per module of model.blocks with its runs per token (a module listed twice in `blocks` is one
    module that runs at both places); parameters in declared_ids are counted elsewhere (module_executions)."""
    cfg = model.config
    if len(executions) != len(model.blocks):
        raise ValueError(f"block_executions() has {len(executions)} entries for {len(model.blocks)} blocks")
    runs, units = {}, []
    for i, (block, (f, b)) in enumerate(zip(model.blocks, executions)):
        name, fwd, bwd = runs.get(id(block), (f"blocks.{i}", 0, 0))
        runs[id(block)] = (name, fwd + f, bwd + b)
    for block in model.blocks:
        if id(block) not in runs:
            continue
        name, fwd, bwd = runs.pop(id(block))
        attn = getattr(block, "attn", None)
        attn_width = attn.n_head * attn.head_dim if attn is not None else cfg.n_head * cfg.head_dim
        decode_width = attn.n_head * getattr(attn, "decode_head_dim", attn.head_dim) if attn is not None else attn_width
        active = sum(p.numel() for p in block.parameters() if id(p) not in declared_ids)
        active += _ffn_active_adjustment(block)
        units.append(Unit(name, "block", new_params(block), active, fwd, bwd, attn_width, decode_width))
    return units


def count_params(model):
    """Parameter counts of one forward pass (see the module docstring). params_active counts every run of a module
    (Lee et al.'s N_active); params_once/rec_nonembed split the unique non-embedding parameters into those run once
    per token and those of modules run more than once (Schwethelm et al. 2026, arXiv:2604.21106, eq. 4: N_once,
    N_rec); for a model without loops everything is "once". params_pass_nonembed are the third part: modules run
    once per pass and sequence, not per token (TMLT's and LoopFormer's loop embedders and adaLN modulators). Their
    output is a function of the pass alone, a lookup like the token embedding, so N_once and N_rec leave them out as
    N leaves out the embedding: at d=16 LoopFormer's embedders alone would add half the model to N_once."""
    units = compute_units(model, training=False)
    embed = [u for u in units if u.kind in ("embed", "head")]
    body = [u for u in units if u.kind not in ("embed", "head")]
    c = dict(
        params_unique=sum(u.stored for u in units),
        params_active=sum(u.active * u.fwd for u in units),
        params_unique_nonembed=sum(u.stored for u in body),
        params_active_nonembed=sum(u.active * u.fwd for u in body),
        params_once_nonembed=sum(u.stored for u in body if 0 < u.fwd <= 1),
        params_rec_nonembed=sum(u.stored for u in body if u.fwd > 1),
        params_pass_nonembed=sum(u.stored for u in body if u.fwd == 0),
        params_embed=sum(u.stored for u in embed),
    )
    # the parts sum to the whole (nanochat's habit)
    assert c["params_unique"] == c["params_unique_nonembed"] + c["params_embed"]
    assert c["params_unique_nonembed"] == sum(c[f"params_{k}_nonembed"] for k in ("once", "rec", "pass"))
    assert c["params_active"] == c["params_active_nonembed"] + sum(u.active * u.fwd for u in embed)
    return c


def between_pass_flops(model, train=True, schedule=None):
    """FLOPs per token of the module between loop passes that its parameter units do not count (its extra_macs()
    per pass, see loop.py; hyper-connections' lane mixing: 6 * n_loop * (K^2 + 2K) * d, Schwethelm et al. 2026,
    arXiv:2604.21106, App. G.1): 2 per multiply-add forward and 4 more backward; passes without backward
    (truncated BPTT) cost 2 instead of 6."""
    macs = model.between.extra_macs() if model.between is not None else 0
    if not macs:
        return 0.0
    shared = [u for u in compute_units(model, train, schedule) if u.kind == "block" and u.fwd > 1]
    fwd, bwd = (shared[0].fwd, shared[0].bwd) if shared else (1, 1)  # the passes of the shared block
    return float((2 * fwd + (4 * bwd if train else 0)) * macs)


CONVENTIONS = ("lee", "schwethelm")
# "schwethelm" against Schwethelm et al.'s Table 6 (tests/test_scaling.py): the unique parameters N(s, r) match
# exactly. The token columns, captioned "for r=1", are cell by cell the counts of r = 1, 2 or 4 under this
# accounting: 23 of the 29 cells to the printed 0.01B, among them the whole 2.15e19 column (r=4: s=34 2.519B for
# the printed 2.52B, s=18 7.782B for 7.78B, where r=1 gives 2.588B and 7.965B); the other 6 within 0.40% of their
# nearest variant, cause unknown. Readings tried against r=1 alone, max |relative error| over the 29 cells: this one
# 2.70%; vocabulary unpadded (32,000 or 32,008) 2.71%; context T-1 2.71%; no head 18.7%; causal attention 6*d*T
# instead of 12*d*T 25.1%; token embedding counted too 13.8%; 6*(N + 2dV) without attention 32.2%. No per-token
# formula can fit r=1 alone: the same s=12 model's cells imply C/D = 1.389e9 FLOPs (4.64e18, +-0.15% from rounding)
# and 1.4025e9 (1e19, +-0.07%).


def flops_per_token(model, convention="lee", seq_len=None):
    """Training FLOPs per token under a convention (module docstring). seq_len: attention context T for
    "schwethelm" (default: block_size)."""
    if convention == "lee":  # Lee et al. 2026, arXiv:2605.09165, §3: C = 6 N_active D (extra passes of a training
        # objective, e.g. LoopFormer's shortcut, count; truncated BPTT does not: the convention knows no backward)
        return 6.0 * sum(u.active * u.fwd for u in compute_units(model, training=True))
    if convention != "schwethelm":
        raise ValueError(f"unknown FLOP convention {convention!r}: use one of {CONVENTIONS}")
    T = seq_len or model.config.block_size
    total = between_pass_flops(model)
    for u in compute_units(model):
        if u.kind == "embed":  # a lookup, no matmul
            continue
        # forward 2 FLOPs per parameter, backward 4 more (input and weight gradients); attention QK^T and AV
        # are 2 matmuls of 2*h*q*T FLOPs per token forward, twice that backward (Schwethelm et al., App. G eq. 8)
        total += (2 * u.fwd + 4 * u.bwd) * u.active + (4 * u.fwd + 8 * u.bwd) * u.attn_width * T
    return float(total)


def forward_flops_per_token(model, seq_len=None):
    """Matmul FLOPs of one forward pass per token (inference, MFU): 2 per executed non-embedding parameter
    (head included) plus 4*h*q*T attention per executed layer, T = seq_len (default block_size) counted as a full
    T x T square (as Schwethelm et al. and FlopCounterMode do; for decoding pass the mean context instead)."""
    T = seq_len or model.config.block_size
    total = between_pass_flops(model, train=False)
    for u in compute_units(model, training=False):
        if u.kind != "embed":
            total += u.fwd * (2 * u.active + 4 * u.attn_width * T)
    return float(total)


def kv_cache_per_token(model):
    """Numbers the KV cache holds per token: (per executed layer, all executed layers together), i.e. what one
    layer's attention writes into its slot (its cache_entry: 2*n_head*head_dim keys and values for multi-head
    attention, kv_lora_rank + rope_head_dim for MLA) times the slots. Read off the module; bytes = numbers * 2 in
    bf16."""
    p = next(model.parameters())
    x = torch.zeros(1, 1, model.config.n_embd, device=p.device, dtype=p.dtype)
    rope = model.rope(0, 1)
    widths = [sum(t.size(1) * t.size(-1) for t in block.attn.cache_entry(x, rope)) for block in model.blocks]
    runs = [f for f, _ in block_executions(model, False)]  # a layer's runs per token = its cache slots
    assert sum(runs) == model.n_slots(), "cache slots and block executions disagree"
    return max(widths), sum(w * f for w, f in zip(widths, runs))


def model_on_meta(model_cfg):
    """Build a model without allocating its weights (paper-scale models cost nothing)."""
    with torch.device("meta"):
        return GPT(model_cfg)
