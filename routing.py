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


def unique_experts(ids_by_loop, n_expert):
    """Distinct experts a token has used after each of the K passes of one layer (Chen et al. 2026,
    arXiv:2606.04438, §3.4 'Measurement', App. A.4). ids_by_loop: K tensors (N, k) of expert ids -> a list of K
    means over the N tokens."""
    seen = torch.zeros(ids_by_loop[0].size(0), n_expert, dtype=torch.bool)
    out = []
    for ids in ids_by_loop:
        seen.scatter_(1, ids.long(), True)
        out.append(seen.sum(1).double().mean().item())
    return out


def unique_experts_per_token(records, n_expert):
    """unique_experts after the last pass, per physical layer, averaged over the recorded forward passes (weighted
    by their tokens): {layer: distinct experts per token}."""
    result = {}
    for layer, passes in passes_by_layer(records).items():
        tokens = [group[0]["experts"].size(0) for group in passes]
        final = [unique_experts([r["experts"] for r in group], n_expert)[-1] for group in passes]
        result[layer] = sum(n * u for n, u in zip(tokens, final)) / sum(tokens)
    return result


def independent_unique_experts(n_expert, top_k, n_loop):
    """Distinct experts per token over n_loop iterations if each iteration picked k experts uniformly at random,
    independently: E*(1 - (1 - k/E)^K). An upper-bound estimate when no trained model is at hand."""
    return n_expert * (1.0 - (1.0 - top_k / n_expert) ** n_loop)
