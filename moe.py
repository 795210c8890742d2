"""
Mixture-of-experts FFN layers for plain and looped models: router, experts, dispatch, balancing, routing records,
and the capacity-balancing helper of LoopMoE.

    y = sum_{i in top-k} g_i * FFN_i(x)  [+ sum_s FFN_s(x) for always-on shared experts]

Routing (one module, two papers):
- softmax router (Lee et al. 2026, arXiv:2605.09165, §2): logits h = W_router x (no bias), top-k by logit,
  gates = softmax over the k selected logits only; E=8, k=2, each expert a SwiGLU of hidden d_ff/k so the
  active FFN parameters equal the dense FFN's.
- sigmoid router (DeepSeek-V3, arXiv:2412.19437, as used by Chen et al. 2026, arXiv:2606.04438): scores
  s = sigmoid(h), gates = the selected scores renormalised to sum 1; fine-grained experts plus shared experts.
- Both: a per-expert bias b is added to the scores for the top-k *selection* only, never to the gate values, and
  moved after each optimizer step by gamma*sign(mean load - load), then centred (aux-loss-free balancing, Wang et
  al. 2024, arXiv:2408.15664). Ties in the (biased) scores go to the lower expert index (a stable sort), so
  every dispatch path and the test reference pick the same experts.

Auxiliary losses (returned ALREADY WEIGHTED in the aux dict; the model sums them over layers and loops):
- moe_lb = coef * E * sum_i f_i * p_i (Switch, Fedus et al. 2022): f_i = share of the N*k routed (token, slot)
  assignments that go to expert i (sum f = 1, so the loss is 1 at perfect balance and E at total collapse with
  k=1), p_i = mean router probability (full softmax; for the sigmoid router the scores normalised per token).
- moe_z = coef * mean_tokens(logsumexp(h)^2) (ST-MoE, Zoph et al. 2022).
- moe_seq = coef * mean_sequences(E * sum_i f_i * p_i) within each sequence (DeepSeek-V3's sequence-wise loss).

Dispatch (shape suffixes: N tokens = B*T, C width, E experts, K = top_k, S = N*K (token, slot) assignments,
H expert hidden, P padded rows per expert). All paths sort the S slots by expert (stable), run the experts, and
combine the gated outputs per token; none loops over tokens.
- "grouped": one torch grouped_mm per projection over the jagged expert groups. Static shapes, no host sync,
  compiles (in bf16): the path for CUDA, where grouped_mm has a fast bf16 kernel.
- "batched": copy the sorted rows into a zero-padded (E, P, C) buffer and run torch.bmm. P is the capacity
  when moe_capacity_factor > 0 (static), else the largest load rounded up to 8 (one host sync), or N under
  torch.compile. bmm uses the CPU's bf16 matrix units; it wastes E*P/S - 1 of its work on padding.
- "loop": a Python loop over experts, plain matmuls on each expert's contiguous rows (exact sizes, one host
  sync, graph breaks under compile): the readable path, and the fastest on CPU. In bf16/fp16 on CPU each
  expert's rows are padded with zeros up to one of a few sizes (bucket()): oneDNN JIT-compiles a kernel for every
  new matmul shape (about 2 ms, 10x the matmul itself at d=256), and expert loads change at every step.
- "auto": on CUDA grouped in bf16 (else batched); on CPU loop, batched under compile: the fastest path that
  bench_moe.py measured for each device and dtype (its output and the README hold the numbers). In bf16 on CPU
  the MoE step's cost beyond the dense step is mostly per stored parameter, not matmuls: autocast's bf16 copies
  of all E experts' weights and gradients, zero-fills, the concatenation, and AdamW over E/k times the dense FFN's
  parameters. grouped_mm's CPU kernel does not use the bf16 matrix units.
A capacity factor (off by default) drops the slots beyond an expert's capacity in slot order (earlier tokens
first); grouped and loop still compute the dropped rows (gate 0) to keep their shapes simple. A float64
per-token reference lives only in tests/test_moe.py; every path matches it (values and gradients).

Counters and records:
- `expert_load` (buffer, not saved) counts routed slots per expert, only in training with grad enabled (eval and
  no-grad analyses never touch it); update_biases() turns it into the bias step with ONE all_reduce for all
  layers and zeroes it. With DDP, wrap the model with broadcast_buffers=False: DDP otherwise copies rank 0's
  counters over the others' at every forward (the bias itself stays equal on all ranks by construction).
- `with record_routing(model) as records:` makes every MoE call append {layer, loop, shape, experts (N,K),
  gates (N,K), router_input (N,C)} (detached, CPU). Off by default, skipped under torch.compile tracing.
  `layer` is the physical layer index, `loop` the loop index that loop.py sets on the module before each call.

Capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4): capacity_report() gives the attention/FFN active
ratio rho, stored params N and per-token executed (FLOP) params F from the config; unique_experts_per_token()
measures how many distinct experts a token touches over the loop iterations from routing records; match_flops()
fits the expert width to a target F and the expert count to a target N; rebalance() scales the MLA ranks, with the
expert width refitted at fixed F, until rho reaches a target, then restores N. F is strict by default: it counts
everything a token executes, IterAdaLN's modulators included (count_conditioning=False: the backbone only).
"""
import contextlib
import dataclasses
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------------------------
# construction

def expert_hidden(config):
    """Hidden size H of one expert: moe_d_ff, or d_ff / (top_k + n_shared_expert) so that the active FFN
    parameters equal the dense FFN's (Lee et al. 2026: F_expert = F/k)."""
    if config.moe_d_ff:
        return config.moe_d_ff
    active = config.top_k + config.n_shared_expert
    if config.d_ff % active:
        raise ValueError(f"d_ff={config.d_ff} is not divisible by top_k + n_shared_expert = {active}; "
                         "set moe_d_ff (the hidden size of one expert) explicitly")
    return config.d_ff // active


def make_ffn(config, layer_index):
    """The FFN module for physical layer `layer_index`: None means the dense MLP of model.py."""
    if config.n_expert == 0 or layer_index < config.moe_first_dense:
        return None
    return MoE(config, layer_index)


def expert_ffn(mm, x, w_up, w_down, kind):
    """The expert MLP with a pluggable matmul: mm(x, w) multiplies x by the (out, in) matrices w (one per expert
    for the batched and grouped paths). SwiGLU's value and gate come from two matmuls on the [value; gate] halves
    of w_up, so the elementwise product reads two contiguous tensors, not two strided chunks of one."""
    if kind == "swiglu":  # unbind, not slicing: slicing's backward zero-fills a full-size copy of w_up per half
        w_value, w_gate = w_up.unflatten(-2, (2, -1)).unbind(-3)
        h = F.silu(mm(x, w_gate)) * mm(x, w_value)
    else:
        h = mm(x, w_up)
        h = F.gelu(h) if kind == "gelu" else F.relu(h).square()
    return mm(h, w_down)


class MoE(nn.Module):
    """Top-k routed experts (+ shared experts). forward(h: (B, T, C)) -> (y (B, T, C), aux dict)."""

    returns_aux = True

    def __init__(self, config, layer_index=0):
        super().__init__()
        C, E, H = config.n_embd, config.n_expert, expert_hidden(config)
        U = 2 * H if config.mlp == "swiglu" else H
        self.n_expert, self.top_k, self.kind = E, config.top_k, config.mlp
        self.router_kind, self.route_scale = config.moe_router, config.moe_route_scale
        self.lb_coef, self.z_coef, self.seq_coef = config.moe_lb_coef, config.moe_z_coef, config.moe_seq_coef
        self.bias_rate, self.capacity_factor = config.moe_bias_rate, config.moe_capacity_factor
        self.dispatch = config.moe_dispatch
        self.layer, self.loop = layer_index, 0  # loop.py sets `loop` before each call
        self.router = nn.Linear(C, E, bias=False)
        # (E, out, in) like nn.Linear: p.size(-1) is the fan-in, as GPT.init_weights assumes for uniform init
        self.w_up = nn.Parameter(torch.empty(E, U, C))  # rows [value; gate] for SwiGLU
        self.w_down = nn.Parameter(torch.empty(E, C, H))
        S = config.n_shared_expert
        # shared experts: always on, so S of them are one wider FFN (hidden S*H), stored as plain matrices
        self.shared_up = nn.Parameter(torch.empty(S * U, C)) if S else None
        self.shared_down = nn.Parameter(torch.empty(C, S * H)) if S else None
        self.register_buffer("expert_bias", torch.zeros(E))  # saved: it changes which experts are picked
        self.register_buffer("expert_load", torch.zeros(E), persistent=False)  # slots routed since the last step
        self._records = None
        nn.init.normal_(self.w_up, 0.0, 0.02)  # GPT.init_weights re-initialises every matrix (muP)
        nn.init.normal_(self.w_down, 0.0, 0.02)
        for p in (self.shared_up, self.shared_down):
            if p is not None:
                nn.init.normal_(p, 0.0, 0.02)

    def reset_special(self):
        """Called by GPT.init_weights: a fresh model has zero bias and empty counters (also after to_empty())."""
        self.expert_bias.zero_()
        self.expert_load.zero_()

    def param_counts(self):
        """Stored and active (per token) parameters of this layer: active = router + top_k routed experts +
        shared experts. The router counts in both."""
        E = self.n_expert
        per_expert = (self.w_up.numel() + self.w_down.numel()) // E
        shared = sum(p.numel() for p in (self.shared_up, self.shared_down) if p is not None)
        router = self.router.weight.numel()
        return dict(stored=router + E * per_expert + shared, active=router + self.top_k * per_expert + shared,
                    router=router, per_expert=per_expert, shared=shared)

    # ---- routing ----
    def route(self, x_NC):
        """Router logits (fp32), the experts each token picks and their gates.
        Returns logits_NE, probs_NE (for the balance losses), experts_NK (long), gates_NK (fp32)."""
        dtype = torch.promote_types(x_NC.dtype, torch.float32)  # routing decisions in fp32 (or fp64)
        with torch.autocast(x_NC.device.type, enabled=False):
            logits_NE = F.linear(x_NC.to(dtype), self.router.weight.to(dtype))
        if self.router_kind == "sigmoid":
            scores_NE = torch.sigmoid(logits_NE)
            probs_NE = scores_NE / scores_NE.sum(-1, keepdim=True)
        else:
            scores_NE = probs_NE = torch.softmax(logits_NE, dim=-1)
        # the bias only steers the selection; a stable descending sort breaks ties toward the lower index
        experts_NK = torch.sort(scores_NE + self.expert_bias, dim=-1, descending=True, stable=True)[1]
        experts_NK = experts_NK[:, :self.top_k].contiguous()
        if self.router_kind == "sigmoid":
            picked_NK = scores_NE.gather(1, experts_NK)
            gates_NK = picked_NK / picked_NK.sum(-1, keepdim=True)
        else:  # softmax over the selected logits only (Lee et al. 2026, arXiv:2605.09165, eq. 1)
            gates_NK = torch.softmax(logits_NE.gather(1, experts_NK), dim=-1)
        return logits_NE, probs_NE, experts_NK, gates_NK * self.route_scale

    def balance_losses(self, logits_NE, probs_NE, experts_NK, load_E, B):
        """The weighted auxiliary losses of this call (only the terms with a nonzero coefficient)."""
        E, K, N = self.n_expert, self.top_k, logits_NE.size(0)
        aux = {}
        if self.lb_coef:  # load balancing (Fedus et al. 2022; Lee et al. 2026, arXiv:2605.09165, §2)
            f_E = load_E / (N * K)
            aux["moe_lb"] = self.lb_coef * E * (f_E * probs_NE.mean(0)).sum()
        if self.z_coef:  # router z-loss (Zoph et al. 2022, ST-MoE)
            aux["moe_z"] = self.z_coef * torch.logsumexp(logits_NE, dim=-1).square().mean()
        if self.seq_coef:  # sequence-wise balance loss (DeepSeek-AI 2024, DeepSeek-V3, arXiv:2412.19437, eq. 17-20)
            T = N // B
            seq_BS = experts_NK.view(B, T * K)
            ones_BS = torch.ones(B, T * K, device=seq_BS.device, dtype=probs_NE.dtype)
            load_BE = torch.zeros(B, E, device=seq_BS.device, dtype=probs_NE.dtype).scatter_add_(1, seq_BS, ones_BS)
            f_BE = load_BE / (T * K)
            p_BE = probs_NE.view(B, T, E).mean(1)
            aux["moe_seq"] = self.seq_coef * E * (f_BE * p_BE).sum(-1).mean()
        return aux

    def capacity(self, N):
        """Slots one expert may take in a call of N tokens (0 = unlimited)."""
        if self.capacity_factor <= 0:
            return 0
        return min(N, math.ceil(self.capacity_factor * N * self.top_k / self.n_expert))

    # ---- forward ----
    def forward(self, h):
        B, T, C = h.shape
        x_NC = h.reshape(B * T, C)
        logits_NE, probs_NE, experts_NK, gates_NK = self.route(x_NC)
        load_E = torch.zeros(self.n_expert, device=h.device, dtype=logits_NE.dtype).scatter_add_(
            0, experts_NK.reshape(-1), torch.ones(experts_NK.numel(), device=h.device, dtype=logits_NE.dtype))
        if self.training and torch.is_grad_enabled():  # balancing counters: training steps only
            self.expert_load += load_E
        aux = self.balance_losses(logits_NE, probs_NE, experts_NK, load_E, B)
        if not torch.compiler.is_compiling() and self._records is not None:
            self._records.append(dict(layer=self.layer, loop=self.loop, shape=(B, T),
                                      experts=experts_NK.detach().cpu(), gates=gates_NK.detach().cpu(),
                                      router_input=x_NC.detach().float().cpu()))
        dtype = compute_dtype(h)
        path = resolve_dispatch(self.dispatch, h.device, dtype)
        y_NC = DISPATCH[path](x_NC.to(dtype), experts_NK, gates_NK, self.w_up.to(dtype), self.w_down.to(dtype),
                              self.kind, self.capacity(B * T))
        if self.shared_up is not None:
            y_NC = y_NC + expert_ffn(F.linear, x_NC.to(dtype), self.shared_up.to(dtype), self.shared_down.to(dtype),
                                     self.kind)
        return y_NC.view(B, T, C), aux


def compute_dtype(x):
    """The dtype the expert matmuls run in: the autocast dtype when autocast is on, else the input's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def resolve_dispatch(mode, device, dtype):
    """'auto' -> the fastest path measured for the device and dtype (see the module docstring): on CUDA grouped
    in bf16 (its fast kernel), else batched; on CPU loop, but batched under torch.compile (loop breaks the
    graph, compiled grouped_mm needs bf16)."""
    if mode == "auto":
        if device.type == "cuda":
            return "grouped" if dtype == torch.bfloat16 else "batched"
        return "batched" if torch.compiler.is_compiling() else "loop"
    if mode == "grouped" and dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"moe_dispatch='grouped' (torch grouped_mm) supports float32/bfloat16/float16, not {dtype}; "
                         "use moe_dispatch='batched' or 'loop'")
    if mode == "grouped" and dtype != torch.bfloat16 and torch.compiler.is_compiling():
        raise ValueError("compiled torch grouped_mm needs bfloat16: train with dtype=bfloat16 or use "
                         "moe_dispatch='batched' (or 'auto')")
    return mode


# ---------------------------------------------------------------------------------------------------------------
# dispatch paths: (x_NC, experts_NK, gates_NK, w_up (E, U, C), w_down (E, C, H), kind, capacity) -> y_NC

def sort_slots(experts_NK, E, capacity):
    """Sort the S = N*K (token, slot) assignments by expert (stable: earlier tokens first within an expert).
    Returns order_S (slot ids in expert order), load_E (slots per expert), rank_S (position of each sorted slot
    inside its expert) and keep_S (False for slots beyond the capacity)."""
    flat_S = experts_NK.reshape(-1)
    order_S = torch.argsort(flat_S, stable=True)
    load_E = torch.zeros(E, dtype=torch.long, device=flat_S.device).scatter_add_(0, flat_S, torch.ones_like(flat_S))
    start_E = torch.cumsum(load_E, 0) - load_E
    sorted_expert_S = flat_S[order_S]
    rank_S = torch.arange(flat_S.numel(), device=flat_S.device) - start_E[sorted_expert_S]
    keep_S = rank_S < capacity if capacity else None
    return order_S, load_E, rank_S, keep_S


def combine(y_SC, order_S, gates_NK, keep_S):
    """The gated sum of each token's K expert outputs. y_SC: outputs in expert-sorted slot order (slot
    order_S[i] is row i). Slots over capacity (keep_S False) get gate 0."""
    N, K = gates_NK.shape
    gates_S = gates_NK.reshape(-1).index_select(0, order_S).to(y_SC.dtype)
    if keep_S is not None:
        gates_S = gates_S * keep_S
    weighted_SC = y_SC * gates_S[:, None]
    if y_SC.is_cuda:  # back to slot order, then sum each token's K rows: deterministic, no atomic adds
        unsort_S = torch.empty_like(order_S).scatter_(0, order_S, torch.arange(order_S.numel(), device=order_S.device))
        return weighted_SC.index_select(0, unsort_S).view(N, K, -1).sum(1)
    # CPU: one index_add (deterministic there), about 1.7x faster than unsort + sum
    return weighted_SC.new_zeros(N, y_SC.size(1)).index_add(0, order_S // K, weighted_SC)


def dispatch_grouped(x_NC, experts_NK, gates_NK, w_up, w_down, kind, capacity):
    """Sort by expert, one grouped matmul per projection over the jagged expert groups (no host sync)."""
    E, K = w_up.size(0), experts_NK.size(1)
    order_S, load_E, _, keep_S = sort_slots(experts_NK, E, capacity)
    x_SC = x_NC.index_select(0, order_S // K)  # rows grouped by expert
    offs_E = torch.cumsum(load_E, 0).to(torch.int32)  # end of each expert's rows
    y_SC = expert_ffn(lambda a, w: F.grouped_mm(a, w.transpose(-2, -1), offs=offs_E), x_SC, w_up, w_down, kind)
    return combine(y_SC, order_S, gates_NK, keep_S)  # dropped slots were computed (static shapes), gated to 0


def few_shapes(x):
    """True where each new matrix shape costs a kernel compilation: CPU matmuls in bf16/fp16 go to oneDNN, which
    JIT-compiles a kernel per new row count (about 2 ms, 10x the matmul itself at d=256); expert loads change at
    every step. fp32 goes to a BLAS that needs no compilation."""
    return x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float16)


def bucket(n):
    """n rows rounded up to one of few sizes: a power of two up to 64, a multiple of 64 above (padding wastes at
    most 63 rows per expert, and under 2x on the tiny loads of decoding)."""
    return 1 << max(n - 1, 0).bit_length() if n <= 64 else -(-n // 64) * 64


def dispatch_loop(x_NC, experts_NK, gates_NK, w_up, w_down, kind, capacity):
    """Sort by expert, then a Python loop over experts (not tokens): each expert's FFN on its contiguous rows
    with plain matmuls. Exact sizes (zero rows appended up to bucket() where few_shapes()); needs the loads on the
    host (one sync)."""
    E, K = w_up.size(0), experts_NK.size(1)
    order_S, load_E, _, keep_S = sort_slots(experts_NK, E, capacity)
    x_SC = x_NC.index_select(0, order_S // K)
    pad = few_shapes(x_SC)
    y = []
    # unbind, not w[e]: the backward of unbind is one stack, that of w[e] a zero-filled copy of w per expert
    for x_e, up_e, down_e in zip(x_SC.split(load_E.tolist()), w_up.unbind(0), w_down.unbind(0)):
        n = x_e.size(0)
        if n == 0:  # an idle expert (most of them when decoding one token): no rows, no matmuls
            continue
        if pad:
            x_e = F.pad(x_e, (0, 0, 0, bucket(n) - n))
        y.append(expert_ffn(F.linear, x_e, up_e, down_e, kind)[:n])
    return combine(torch.cat(y), order_S, gates_NK, keep_S)


def dispatch_batched(x_NC, experts_NK, gates_NK, w_up, w_down, kind, capacity):
    """Sort by expert, copy into a zero-padded (E, P, C) buffer, two batched matmuls, read the rows back."""
    E, K, (N, C) = w_up.size(0), experts_NK.size(1), x_NC.shape
    order_S, load_E, rank_S, keep_S = sort_slots(experts_NK, E, capacity)
    if capacity:
        P = capacity
    elif torch.compiler.is_compiling():
        P = N  # static worst case under compile (set moe_capacity_factor to make it smaller)
    else:
        P = min(N, -(-int(load_E.max()) // 8) * 8)  # the largest load, rounded up to 8: one host sync
    row_S = experts_NK.reshape(-1)[order_S] * P + rank_S  # row of each sorted slot in the padded buffer
    if keep_S is not None:
        row_S = torch.where(keep_S, row_S, E * P)  # dropped slots write to a spare row past the buffer...
    x_pad = x_NC.new_zeros(E * P + 1, C).index_copy(0, row_S, x_NC.index_select(0, order_S // K))
    y_EPC = expert_ffn(lambda a, w: torch.bmm(a, w.transpose(1, 2)), x_pad[:E * P].view(E, P, C), w_up, w_down, kind)
    if keep_S is not None:
        row_S = torch.where(keep_S, row_S, 0)  # ...and read row 0, which their zero gate discards
    return combine(y_EPC.view(E * P, C).index_select(0, row_S), order_S, gates_NK, keep_S)


DISPATCH = dict(grouped=dispatch_grouped, batched=dispatch_batched, loop=dispatch_loop)


# ---------------------------------------------------------------------------------------------------------------
# balancing and records across the model

def moe_layers(model):
    """Every MoE module of a model (each physical layer once, whatever the loop count)."""
    return [m for m in model.modules() if isinstance(m, MoE)]


@torch.no_grad()
def update_biases(model, world_size=1):
    """After each optimizer step: aux-loss-free balancing (Wang et al. 2024, arXiv:2408.15664; DeepSeek-V3):
    b_i += gamma * sign(mean load - load_i), then b -= mean(b). The loads of every layer (summed over the step's
    micro-batches, loops and, with world_size > 1, all ranks in ONE all_reduce) are then zeroed."""
    layers = moe_layers(model)
    if not layers:
        return
    if any(m.bias_rate > 0 for m in layers):
        loads = torch.cat([m.expert_load for m in layers])
        if world_size > 1:
            dist.all_reduce(loads)
        for m, load in zip(layers, loads.split([m.n_expert for m in layers])):
            m.expert_bias += m.bias_rate * torch.sign(load.mean() - load)
            m.expert_bias -= m.expert_bias.mean()  # keep the bias centred (torchtitan issue #1506)
    for m in layers:
        m.expert_load.zero_()


@contextlib.contextmanager
def record_routing(model):
    """`with record_routing(model) as records:` every MoE call inside appends one dict (see the module
    docstring). Use it on an eager model: compiled blocks skip recording."""
    layers = moe_layers(model)
    if not layers:
        raise ValueError("record_routing: this model has no MoE layers (set n_expert > 0)")
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


# ---------------------------------------------------------------------------------------------------------------
# capacity balancing (Chen et al. 2026, arXiv:2606.04438, §3.4 and App. A.4)

def attention_params(config):
    """Parameters of one attention sublayer (checked against the modules in tests/test_moe.py)."""
    C, H, D = config.n_embd, config.n_head, config.head_dim
    if config.attn != "mla":
        return 4 * C * H * D
    Dr, Dv, rq, rkv = config.rope_head_dim, config.v_head_dim or D, config.q_lora_rank, config.kv_lora_rank
    q = C * rq + rq * H * (D + Dr) if rq else C * H * (D + Dr)
    kv = C * (rkv + Dr) + rkv * H * (D + Dv)
    gains = (rq + rkv) if config.norm_gain else 0
    return q + kv + H * Dv * C + gains


def expert_params(config):
    """Parameters of one expert (routed or shared)."""
    H = expert_hidden(config)
    return (3 if config.mlp == "swiglu" else 2) * config.n_embd * H


def dense_ffn_params(config):
    return (3 if config.mlp == "swiglu" else 2) * config.n_embd * config.d_ff


def layer_plan(config):
    """One entry per physical layer in model.blocks order (prelude, loop body, coda): (is_moe, runs per forward,
    shared: a layer of the loop body)."""
    n_pre, n_coda = config.n_prelude, config.n_coda
    runs = [1] * n_pre + [config.n_loop] * config.n_layer + [1] * n_coda
    return [(config.n_expert > 0 and i >= config.moe_first_dense, r, n_pre <= i < n_pre + config.n_layer)
            for i, r in enumerate(runs)]


def conditioning_params(config):
    """Per-loop conditioning of the loop body (loop.py, loop_cond): dict(embedders = stored params of the loop
    embedders (once per model), modulator = stored params of one shared layer's modulator, executed = the params of
    that modulator a token computes with at each pass). Checked against the modules in tests/test_moe.py.
    - iteradaln (Chen et al. 2026, arXiv:2606.04438, §3.3, Eqs. 3-7): the token stream Linear(C, C) and the output
      Linear(C, 3C) of the attention branch, Linear(C, C) and Linear(C, 2C) of the MoE branch, run on every token's
      state at every pass: about 7C^2 executed params per token per shared layer and pass.
    - index / loopformer: an adaLN Linear(C, 4C) on the pass's embedding, once per pass and sequence: 0 per token.
    The loop embedders (sinusoidal(256) -> Linear -> SiLU -> Linear) also run once per pass and sequence."""
    C, kind = config.n_embd, config.loop_cond
    if kind == "none":
        return dict(embedders=0, modulator=0, executed=0)
    embedders = (2 if kind == "loopformer" else 1) * (256 * C + C + C * C + C)  # loopformer embeds t and dt
    if kind == "iteradaln":
        modulator = (C * C + C * 3 * C + 3 * C) + (C * C + C * 2 * C + 2 * C)  # attention branch + MoE branch
        return dict(embedders=embedders, modulator=modulator, executed=modulator)
    return dict(embedders=embedders, modulator=4 * C * C + 4 * C, executed=0)


def capacity_report(config, unique_experts=None, count_conditioning=True):
    """Active capacity of a configuration (Chen et al. 2026, §3.4): per-token unique attention params A_attn,
    per-token unique FFN params A_ffn, rho = A_attn/A_ffn, stored params N (everything the model stores:
    embeddings, routers, per-loop conditioning) and per-token executed params F (the FLOPs proxy, 2F per token
    forward). Attention weights are reused across loops, so they count once in A_attn; a shared MoE layer run K times
    touches `unique_experts` distinct routed experts per token (measured with unique_experts_per_token, default
    top_k, i.e. no new experts after the first pass) plus its shared experts. Shared experts count in A_ffn.
    count_conditioning: whether F counts the per-token work of the per-loop conditioning (IterAdaLN's modulators,
    conditioning_params). Chen et al. match F without saying whether it includes them; True (the default) is the
    strict reading, a token's FLOPs are everything it executes; False the loose one, F of the backbone only."""
    k, s, C = config.top_k, config.n_shared_expert, config.n_embd
    u = k if unique_experts is None else unique_experts
    a, dense = attention_params(config), dense_ffn_params(config)
    e = expert_params(config) if config.n_expert else 0
    router = C * config.n_expert
    cond = conditioning_params(config)
    executed_cond = cond["executed"] if count_conditioning else 0
    A_attn = A_ffn = N = Fx = 0
    for is_moe, runs, shared in layer_plan(config):
        modulated = shared and config.loop_cond != "none"
        # block RMSNorm gains: pre-norms (+ output norms with sandwich norm); a modulated layer's pre-norms have
        # none, the modulation supplies their scale (loop.py)
        gains = C * ((4 if config.sandwich_norm else 2) - (2 if modulated else 0)) if config.norm_gain else 0
        ffn = router + (config.n_expert + s) * e if is_moe else dense
        ffn_run = router + (s + k) * e if is_moe else dense
        A_attn += a
        A_ffn += (s + (u if runs > 1 else k)) * e if is_moe else dense
        N += a + gains + ffn + (cond["modulator"] if modulated else 0)
        Fx += runs * (a + gains + ffn_run + (executed_cond if modulated else 0))
    outer = config.padded_vocab * C * (1 if config.tie_embeddings else 2)
    outer += C if config.norm_gain else 0  # final norm
    outer += config.block_size * C if config.pos_emb == "learned" else 0
    return dict(A_attn=A_attn, A_ffn=A_ffn, rho=A_attn / A_ffn, N=N + outer + cond["embedders"], F=Fx + outer,
                unique_experts=u)


def _round(x, multiple):
    return max(multiple, int(round(x / multiple)) * multiple)


def match_params(config, target_params, extra_params=0):
    """Set n_expert so that the stored params (capacity_report N + extra_params) come closest to target_params
    (step 3 of LoopMoE's capacity balancing: the routed expert pool restores N; F changes only by the router)."""
    n_moe = sum(is_moe for is_moe, _, _ in layer_plan(config))
    if n_moe == 0:
        raise ValueError("match_params: the config has no MoE layers")
    per_expert = n_moe * (expert_params(config) + config.n_embd)  # one more expert in every MoE layer (+ router row)
    gap = target_params - extra_params - capacity_report(config)["N"]
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
    H0 = expert_hidden(config)
    config = dataclasses.replace(config, moe_d_ff=H0)
    moe_runs = sum(runs for is_moe, runs, _ in layer_plan(config) if is_moe)
    per_hidden = moe_runs * (config.top_k + config.n_shared_expert) * expert_params(config) // H0
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
    unique_experts: distinct routed experts per token over the loop (unique_experts_per_token, or
    independent_unique_experts as an upper-bound estimate). count_conditioning: see capacity_report.
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
