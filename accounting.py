"""
Parameter and FLOP accounting: the units every count of the project is built from (train.py's FLOP budget and
MFU, exits.py's exit costs, the sweeps' plans), and the capacity balancing of LoopMoE that rests on it. A library:
its command line is scaling.py's (`python scaling.py count config/sparse_base.py`).

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
import dataclasses
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


def tokens_for_budget(flops_budget, model, convention="lee", seq_len=None):
    """D = C / (training FLOPs per token)."""
    return flops_budget / flops_per_token(model, convention, seq_len)


def model_on_meta(model_cfg):
    """Build a model without allocating its weights (paper-scale models cost nothing)."""
    with torch.device("meta"):
        return GPT(model_cfg)


def accounting(model, convention="lee", flops_budget=0.0, seq_len=None):
    """Everything `scaling.py count` prints, as a dict."""
    out = count_params(model)
    out["flops_convention"] = convention
    out["flops_per_token"] = flops_per_token(model, convention, seq_len)
    for conv in CONVENTIONS:
        out[f"flops_per_token_{conv}"] = flops_per_token(model, conv, seq_len)
    out["forward_flops_per_token"] = forward_flops_per_token(model, seq_len)
    out["kv_cache_per_token_layer"], out["kv_cache_per_token"] = kv_cache_per_token(model)
    if flops_budget > 0:
        out["flops_budget"] = flops_budget
        out["tokens"] = flops_budget / out["flops_per_token"]
    return out


# -----------------------------------------------------------------------------------------------------------------
# capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4 and App. A.4), counted on the meta-device model
#
# capacity_report() gives the attention/FFN active ratio rho, stored params N and per-token executed (FLOP) params
# F of a config; moe.unique_experts_per_token() measures how many distinct experts a token touches over the loop
# iterations from routing records; match_flops() fits the expert width to a target F and the expert count to a
# target N; rebalance() scales the MLA ranks, with the expert width refitted at fixed F, until rho reaches a target,
# then restores N. F is strict by default: it counts everything a token executes, IterAdaLN's modulators included
# (count_conditioning=False: the backbone only).

_CAPACITY = {}  # repr(config) -> capacity_counts(config): rebalance's bisection meets the same rounded configs often


def capacity_counts(config):
    """What capacity balancing reads off the model built on the meta device (cached per config): N and strict F
    (count_params), the per-token work of the per-loop modulators, and one entry per physical layer (model.blocks
    order) with its attention params, runs per token and FFN: the dense MLP's params, or for an MoE layer one
    expert's params, its shared experts, its router row per expert and its expert width."""
    key = repr(config)
    if key in _CAPACITY:
        return _CAPACITY[key]
    model = model_on_meta(config)
    declared = module_executions(model, False)
    runs, layers, modulators = {}, [], 0
    for block, (fwd, _) in zip(model.blocks, block_executions(model, False)):
        runs[id(block)] = runs.get(id(block), 0) + fwd
    for i, block in enumerate(model.blocks):
        if id(block) not in runs:
            continue  # a module listed twice in `blocks` is one layer that runs at both places
        layer = dict(attn=sum(p.numel() for p in block.attn.parameters()), runs=runs.pop(id(block)))
        if isinstance(block.ffn, MoE):
            c = moe_counts(block.ffn)
            layer.update(per_expert=c["per_expert"], n_shared=c["shared"] // c["per_expert"],
                         router_row=block.ffn.router.in_features, hidden=block.ffn.w_down.size(-1))
        else:
            layer.update(dense=sum(p.numel() for p in block.ffn.parameters()))
        if block.modulator is not None:  # runs with its block unless the model declares otherwise (per sequence: 0)
            per_token = declared.get(f"blocks.{i}.modulator", (layer["runs"], 0))[0]
            modulators += per_token * sum(p.numel() for p in block.modulator.parameters())
        layers.append(layer)
    counts = count_params(model)
    _CAPACITY[key] = dict(N=counts["params_unique"], F=counts["params_active"], modulators=modulators, layers=layers)
    return _CAPACITY[key]


def capacity_report(config, unique_experts=None, count_conditioning=True):
    """Active capacity of a configuration (Chen et al. 2026, §3.4): per-token unique attention params A_attn,
    per-token unique FFN params A_ffn, rho = A_attn/A_ffn, stored params N (everything the model stores:
    embeddings, routers, per-loop conditioning) and per-token executed params F (count_params' params_active, the
    FLOPs proxy, 2F per token forward). Attention weights are reused across loops, so they count once in A_attn; a
    shared MoE layer run K times touches `unique_experts` distinct routed experts per token (measured with
    moe.unique_experts_per_token, default top_k, i.e. no new experts after the first pass) plus its shared experts.
    Shared experts count in A_ffn, routers in neither.
    count_conditioning: whether F counts the per-token work of the per-loop conditioning (IterAdaLN's modulators).
    Chen et al. match F without saying whether it includes them; True (the default) is the strict reading, a token's
    FLOPs are everything it executes; False the loose one, F of the backbone only."""
    counts = capacity_counts(config)
    k = config.top_k
    u = k if unique_experts is None else unique_experts
    A_attn = A_ffn = 0
    for layer in counts["layers"]:
        A_attn += layer["attn"]
        if "dense" in layer:
            A_ffn += layer["dense"]
        else:
            A_ffn += (layer["n_shared"] + (u if layer["runs"] > 1 else k)) * layer["per_expert"]
    F = counts["F"] - (0 if count_conditioning else counts["modulators"])
    return dict(A_attn=A_attn, A_ffn=A_ffn, rho=A_attn / A_ffn, N=counts["N"], F=F, unique_experts=u)


def _round(x, multiple):
    return max(multiple, int(round(x / multiple)) * multiple)


def match_params(config, target_params, extra_params=0):
    """Set n_expert so that the stored params (capacity_report N + extra_params) come closest to target_params
    (step 3 of LoopMoE's capacity balancing: the routed expert pool restores N; F changes only by the router)."""
    counts = capacity_counts(config)
    moe_layers = [layer for layer in counts["layers"] if "per_expert" in layer]
    if not moe_layers:
        raise ValueError("match_params: the config has no MoE layers")
    per_expert = sum(m["per_expert"] + m["router_row"] for m in moe_layers)  # one more expert in every MoE layer
    gap = target_params - extra_params - counts["N"]
    n_expert = int(round(config.n_expert + gap / per_expert))
    if n_expert < config.top_k:
        raise ValueError(f"match_params: {target_params} params need n_expert={n_expert} < top_k={config.top_k}; "
                         "the target is too small for this width and depth")
    return dataclasses.replace(config, n_expert=n_expert)


def fit_expert_width(config, target_flops, count_conditioning=True, multiple=8):
    """The config with the expert hidden size (moe_d_ff, routed and shared experts alike) that brings the per-token
    executed params F (capacity_report) closest to target_flops, rounded to `multiple`; None if the experts would
    be narrower than `multiple`. F is linear in the expert width: every MoE run computes top_k + n_shared_expert
    experts of (3 for SwiGLU, else 2) * n_embd params per unit of width."""
    moe_layers = [layer for layer in capacity_counts(config)["layers"] if "per_expert" in layer]
    if not moe_layers:
        raise ValueError("fit_expert_width: the config has no MoE layers")
    H0 = moe_layers[0]["hidden"]
    config = dataclasses.replace(config, moe_d_ff=H0)
    per_hidden = sum(m["runs"] * (config.top_k + m["n_shared"]) * m["per_expert"] for m in moe_layers) // H0
    hidden = H0 + (target_flops - capacity_report(config, count_conditioning=count_conditioning)["F"]) / per_hidden
    if hidden < multiple:
        return None
    return dataclasses.replace(config, moe_d_ff=_round(hidden, multiple))


def match_flops(config, target_flops, target_params, extra_params=0, count_conditioning=True, multiple=8):
    """Match a rung to its reference at fixed top_k (Chen et al. 2026, arXiv:2606.04438, §3.4: N = N*, F = F*):
    the expert width pays for whatever else the rung executes per token (fit_expert_width: IterAdaLN's modulators,
    the larger MLA ranks of rebalance), then the routed expert count restores the stored params (match_params).
    Repeated until neither moves: more experts widen the routers, which costs a little F."""
    seen = []
    while config not in seen:
        seen.append(config)
        fitted = fit_expert_width(config, target_flops, count_conditioning, multiple)
        if fitted is None:
            raise ValueError(f"match_flops: F={target_flops} cannot pay for this config's other per-token work "
                             f"(the experts would be narrower than {multiple}); raise the target or drop a module")
        config = match_params(fitted, target_params, extra_params)
    return config


def rebalance(config, target_rho, unique_experts, target_params=None, target_flops=None, extra_params=0,
              count_conditioning=True, multiple=8):
    """LoopMoE's capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4): scale the MLA query and key/value
    latent ranks by one factor t and refit every expert's hidden size so that the per-token executed params F stay
    at target_flops (fit_expert_width; default: the input config's F), top_k fixed, until rho = A_attn/A_ffn
    reaches target_rho; then add routed experts until the stored params reach target_params (match_flops; default:
    the input config's). t > 1 (A_attn up, A_ffn down) where looping lowered rho, the paper's case; t < 1 where rho
    is above the target, e.g. after narrow experts paid for IterAdaLN's modulators at fixed F. Ranks and widths are
    rounded to `multiple`, so rho and F land close to, not exactly on, their targets.
    unique_experts: distinct routed experts per token over the loop (moe.unique_experts_per_token, or
    moe.independent_unique_experts as an upper-bound estimate). count_conditioning: see capacity_report.
    Returns the new GPTConfig."""
    if config.attn != "mla" or config.n_expert == 0:
        raise ValueError("rebalance needs an MoE model with attn='mla' (it scales the MLA latent ranks)")
    before = capacity_report(config, unique_experts, count_conditioning)
    target_params = before["N"] + extra_params if target_params is None else target_params
    target_flops = before["F"] if target_flops is None else target_flops

    def candidate(t):
        """Ranks scaled by t, then the expert width and count matched to F and N (None if the experts vanish)."""
        ranks = dict(kv_lora_rank=_round(config.kv_lora_rank * t, multiple))
        if config.q_lora_rank:
            ranks["q_lora_rank"] = _round(config.q_lora_rank * t, multiple)
        try:
            return match_flops(dataclasses.replace(config, **ranks), target_flops, target_params, extra_params,
                               count_conditioning, multiple)
        except ValueError:
            return None

    def reached(t):  # rho grows with t; a candidate whose experts vanished has gone past the target
        c = candidate(t)
        return c is None or capacity_report(c, unique_experts)["rho"] >= target_rho

    lo, hi = 1.0, 1.0
    if reached(1.0):  # lower the ranks until rho falls below the target
        while reached(lo):
            if config.kv_lora_rank * lo < multiple and config.q_lora_rank * lo < multiple:
                raise ValueError(f"rebalance: target rho={target_rho:.3g} is out of reach at fixed FLOPs even "
                                 f"with ranks of {multiple}; raise the target or the expert budget")
            lo, hi = lo / 2, lo
    else:  # raise the ranks until rho passes the target
        while not reached(hi):
            lo, hi = hi, hi * 2
        if candidate(hi) is None:
            raise ValueError(f"rebalance: target rho={target_rho:.3g} is out of reach at fixed FLOPs "
                             f"(rho={before['rho']:.3g} now); lower the target or add attention heads")
    for _ in range(40):  # bisection on the rank scale
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if reached(mid) else (mid, hi)
    options = [c for c in (candidate(lo), candidate(hi)) if c is not None]
    return min(options, key=lambda c: abs(capacity_report(c, unique_experts)["rho"] - target_rho))
