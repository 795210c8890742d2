"""
Routing records: what the MoE layers of a model route, recorded during ordinary forward passes, and what is measured
from them: how often a token's experts change between the passes of a loop (Lee et al. 2026, arXiv:2605.09165,
routing divergence: analyze.py) and how many distinct experts a token touches over the passes (Chen et al. 2026,
arXiv:2606.04438, §3.4: the input of capacity balancing, scaling.rebalance).

    with record_routing(model) as records:
        model(idx)

appends one dict per MoE call: {layer, loop, shape, experts (N,K), gates (N,K), router_input (N,C)} (detached, on
the CPU); `layer` is the physical layer index, `loop` the pass the block ran in. Off by default; an eager model only.
"""
import contextlib

import torch

from moe import moe_layers


@contextlib.contextmanager
def record_routing(model):
    """`with record_routing(model) as records:` every MoE call inside appends one dict (see the module
    docstring), on an eager model (a compiled block would record tensors of its trace)."""
    layers = moe_layers(model)
    if not layers:
        raise ValueError("record_routing: this model has no MoE layers (set n_expert > 0)")
    if any(m.compiled for m in layers):
        raise ValueError("record_routing: the model's blocks are compiled; record routing on an eager model")
    records = []
    for m in layers:
        m._records = records
    try:
        yield records
    finally:
        for m in layers:
            m._records = None


def passes_by_layer(records):
    """Group records into passes: {layer: [[record of loop 0, loop 1, ...] for each forward pass]}."""
    out = {}
    for r in records:
        passes = out.setdefault(r["layer"], [])
        if r["loop"] == 0 or not passes:
            passes.append([])
        passes[-1].append(r)
    return out


def unique_experts_per_token(records, n_expert):
    """The expected number of distinct experts a token activates over the loop iterations of each physical layer
    (Chen et al. 2026, arXiv:2606.04438, §3.4 'Measurement'): {layer: mean over tokens and passes}."""
    result = {}
    for layer, passes in passes_by_layer(records).items():
        total, count = 0.0, 0
        for group in passes:
            experts_LNK = torch.stack([r["experts"] for r in group])  # (loops, N, K)
            hit_NE = torch.zeros(experts_LNK.size(1), n_expert, dtype=torch.bool)
            for experts_NK in experts_LNK:
                hit_NE.scatter_(1, experts_NK, True)
            total += hit_NE.sum(1).float().sum().item()
            count += hit_NE.size(0)
        result[layer] = total / count
    return result


def independent_unique_experts(n_expert, top_k, n_loop):
    """Distinct experts per token over n_loop iterations if each iteration picked k experts uniformly at random,
    independently: E*(1 - (1 - k/E)^K). An upper-bound estimate when no trained model is at hand."""
    return n_expert * (1.0 - (1.0 - top_k / n_expert) ** n_loop)
