"""
Mixture-of-experts FFN layers for plain and looped models:

    y = sum_{i in top-k} g_i * FFN_i(x)  [+ FFN_shared(x): the always-on shared experts]

- Routers (ROUTERS, by config.moe_router): softmax (Lee et al. 2026, arXiv:2605.09165, §2) and sigmoid (DeepSeek-V3,
  arXiv:2412.19437, as Chen et al. 2026, arXiv:2606.04438 use it, with fine-grained and shared experts). Both add a
  per-expert bias to the scores for the top-k *selection* only, never to the gates, which update_biases moves after
  each optimizer step (aux-loss-free balancing, Wang et al. 2024, arXiv:2408.15664). Ties go to the lower expert
  index (a stable sort), so every dispatch path and the test reference pick the same experts.
- Auxiliary losses (MoE.balance_losses), returned already weighted in the aux dict (the model sums them over layers
  and passes): load balance (Switch), router z-loss (ST-MoE), sequence-wise balance (DeepSeek-V3).
- Dispatch: every path sorts the N*K (token, slot) assignments by expert, runs the experts and combines the gated
  outputs per token, never looping over tokens: "loop" (a Python loop over the experts: the readable path, and the
  fastest on a CPU), "grouped" (torch grouped_mm: CUDA in bf16; static shapes, no host sync) and "batched" (a
  zero-padded buffer and bmm: a compiled block on a CPU). "auto" picks by device, dtype and compilation
  (resolve_dispatch; tools/bench_moe.py measures them). Each path matches a float64 per-token reference in
  tests/test_moe.py, values and gradients. A capacity factor (off by default) drops the slots beyond an expert's
  capacity in slot order (earlier tokens first); grouped and loop still compute the dropped rows, with gate 0.
- Counters: `expert_load` counts routed slots per expert in training steps only, once per token (not again when
  activation checkpointing recomputes a forward: recomputing(block)); analyze.record_routing records each call.

Shape suffixes: N tokens = B*T, C width, E experts, K = top_k, S = N*K slots, H expert hidden, U = 2H for SwiGLU's
[value; gate] rows (else H), P padded rows per expert.
"""
import contextlib
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------------------------
# construction

def expert_hidden(config):
    """Hidden size H of one expert: moe_d_ff, or d_ff / (top_k + n_shared_expert) so that the active FFN
    parameters equal the dense FFN's (Lee et al. 2026: F_expert = F/k; GPTConfig refuses a d_ff it does not divide)."""
    return config.moe_d_ff or config.d_ff // (config.top_k + config.n_shared_expert)


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
        self.layer = layer_index
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
        self._records = None  # a list while analyze.record_routing asks; each call then appends what it routed
        self.recomputing = False  # True while activation checkpointing re-runs this layer (recomputing)
        nn.init.normal_(self.w_up, 0.0, 0.02)  # GPT.init_weights re-initialises every matrix (muP)
        nn.init.normal_(self.w_down, 0.0, 0.02)
        for p in (self.shared_up, self.shared_down):
            if p is not None:
                nn.init.normal_(p, 0.0, 0.02)

    def reset_special(self):
        """Called by GPT.init_weights: a fresh model has zero bias and empty counters (also after to_empty())."""
        self.expert_bias.zero_()
        self.expert_load.zero_()

    # ---- routing ----
    def route(self, x_NC):
        """Router logits (fp32), the experts each token picks and their gates (the router kind: ROUTERS).
        Returns logits_NE, probs_NE (for the balance losses), experts_NK (long), gates_NK (fp32)."""
        dtype = torch.promote_types(x_NC.dtype, torch.float32)  # routing decisions in fp32 (or fp64)
        with torch.autocast(x_NC.device.type, enabled=False):
            logits_NE = F.linear(x_NC.to(dtype), self.router.weight.to(dtype))
        router = ROUTERS[self.router_kind]
        scores_NE, probs_NE = router.scores(logits_NE)
        # the bias only steers the selection; a stable descending sort breaks ties toward the lower index
        experts_NK = torch.sort(scores_NE + self.expert_bias, dim=-1, descending=True, stable=True)[1]
        experts_NK = experts_NK[:, :self.top_k].contiguous()
        return logits_NE, probs_NE, experts_NK, router.gates(logits_NE, scores_NE, experts_NK) * self.route_scale

    def balance_losses(self, logits_NE, probs_NE, experts_NK, load_E, B):
        """The weighted auxiliary losses of this call (only the terms with a nonzero coefficient):
        moe_lb = coef * E * sum_i f_i * p_i, f_i the share of the N*K routed slots that go to expert i (1 at perfect
        balance, E at total collapse with K=1), p_i the mean router probability; moe_z = coef * mean(logsumexp(h)^2);
        moe_seq = the same E * sum_i f_i * p_i within each sequence, averaged over the sequences."""
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
    def forward(self, h, loop=0):
        """h (B, T, C); loop: the pass of a looped model this call belongs to (only the routing records read it)."""
        B, T, C = h.shape
        x_NC = h.reshape(B * T, C)
        logits_NE, probs_NE, experts_NK, gates_NK = self.route(x_NC)
        load_E = torch.zeros(self.n_expert, device=h.device, dtype=logits_NE.dtype).scatter_add_(
            0, experts_NK.reshape(-1), torch.ones(experts_NK.numel(), device=h.device, dtype=logits_NE.dtype))
        if self.training and torch.is_grad_enabled() and not self.recomputing:  # training steps, each token once
            self.expert_load += load_E
        aux = self.balance_losses(logits_NE, probs_NE, experts_NK, load_E, B)
        if self._records is not None and not self.recomputing:
            self._records.append(dict(layer=self.layer, loop=loop, shape=(B, T),
                                      experts=experts_NK.detach().cpu(), gates=gates_NK.detach().cpu(),
                                      router_input=x_NC.detach().float().cpu()))
        dtype = compute_dtype(h)
        compiled = torch.compiler.is_compiling()  # inside a compiled block (GPT.compile) the dispatch keeps static shapes
        path = resolve_dispatch(self.dispatch, h.device, dtype, compiled)
        y_NC = DISPATCH[path](x_NC.to(dtype), experts_NK, gates_NK, self.w_up.to(dtype), self.w_down.to(dtype),
                              self.kind, self.capacity(B * T), compiled)
        if self.shared_up is not None:
            y_NC = y_NC + expert_ffn(F.linear, x_NC.to(dtype), self.shared_up.to(dtype), self.shared_down.to(dtype),
                                     self.kind)
        return y_NC.view(B, T, C), aux


class SoftmaxRouter:
    """Lee et al. 2026 (arXiv:2605.09165, eq. 1): experts picked by logit, gates = softmax over the k selected
    logits only; the balance losses' p = softmax over all logits."""

    @staticmethod
    def scores(logits_NE):
        """(the scores experts are picked by, the probabilities p of the balance losses)"""
        probs_NE = torch.softmax(logits_NE, dim=-1)
        return probs_NE, probs_NE

    @staticmethod
    def gates(logits_NE, scores_NE, experts_NK):
        return torch.softmax(logits_NE.gather(1, experts_NK), dim=-1)


class SigmoidRouter:
    """DeepSeek-V3 (arXiv:2412.19437; Chen et al. 2026, arXiv:2606.04438): scores s = sigmoid(logits), gates = the
    selected scores renormalised to sum 1; p = the scores normalised per token."""

    @staticmethod
    def scores(logits_NE):
        scores_NE = torch.sigmoid(logits_NE)
        return scores_NE, scores_NE / scores_NE.sum(-1, keepdim=True)

    @staticmethod
    def gates(logits_NE, scores_NE, experts_NK):
        picked_NK = scores_NE.gather(1, experts_NK)
        return picked_NK / picked_NK.sum(-1, keepdim=True)


ROUTERS = {"softmax": SoftmaxRouter, "sigmoid": SigmoidRouter}  # by config.moe_router


def compute_dtype(x):
    """The dtype the expert matmuls run in: the autocast dtype when autocast is on, else the input's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def resolve_dispatch(mode, device, dtype, compiled=False):
    """'auto' -> the fastest path measured for the device and dtype (see the module docstring): on CUDA grouped
    in bf16 (its fast kernel), else batched; on CPU loop, but batched in a compiled block (loop breaks the
    graph, compiled grouped_mm needs bf16)."""
    if mode == "auto":
        if device.type == "cuda":
            return "grouped" if dtype == torch.bfloat16 else "batched"
        return "batched" if compiled else "loop"
    if mode == "grouped" and dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"moe_dispatch='grouped' (torch grouped_mm) supports float32/bfloat16/float16, not {dtype}; "
                         "use moe_dispatch='batched' or 'loop'")
    if mode == "grouped" and dtype != torch.bfloat16 and compiled:
        raise ValueError("compiled torch grouped_mm needs bfloat16: train with dtype=bfloat16 or use "
                         "moe_dispatch='batched' (or 'auto')")
    return mode


# ---------------------------------------------------------------------------------------------------------------
# dispatch paths: (x_NC, experts_NK, gates_NK, w_up (E, U, C), w_down (E, C, H), kind, capacity, compiled) -> y_NC

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


def inverse_permutation(order_S):
    """inverse[order[i]] = i."""
    return torch.empty_like(order_S).scatter_(0, order_S, torch.arange(order_S.numel(), device=order_S.device))


class PermuteRows(torch.autograd.Function):
    """x[order] for a permutation `order` of x's rows, whose gradient is the inverse permutation of the incoming
    one: a gather, where autograd's backward of index_select is an index_add (atomic adds, which torch.compile
    leaves to a slow eager kernel for bf16 on CUDA; the GPU profile in the README's MoE section)."""

    @staticmethod
    def forward(ctx, x, order, inverse):
        ctx.save_for_backward(inverse)
        return x.index_select(0, order)

    @staticmethod
    def backward(ctx, grad):
        inverse, = ctx.saved_tensors
        return grad.index_select(0, inverse), None, None


def combine(y_SC, order_S, gates_NK, keep_S):
    """The gated sum of each token's K expert outputs. y_SC: outputs in expert-sorted slot order (slot
    order_S[i] is row i). Slots over capacity (keep_S False) get gate 0."""
    N, K = gates_NK.shape
    gates_S = gates_NK.reshape(-1).index_select(0, order_S).to(y_SC.dtype)
    if keep_S is not None:
        gates_S = gates_S * keep_S
    weighted_SC = y_SC * gates_S[:, None]
    if y_SC.is_cuda:  # back to slot order, then sum each token's K rows: deterministic, no atomic adds
        return PermuteRows.apply(weighted_SC, inverse_permutation(order_S), order_S).view(N, K, -1).sum(1)
    # CPU: one index_add (deterministic there), faster than unsort + sum (tools/bench_moe.py)
    return weighted_SC.new_zeros(N, y_SC.size(1)).index_add(0, order_S // K, weighted_SC)


def dispatch_grouped(x_NC, experts_NK, gates_NK, w_up, w_down, kind, capacity, compiled=False):
    """Sort by expert, one grouped matmul per projection over the jagged expert groups (no host sync)."""
    E, K, (N, C) = w_up.size(0), experts_NK.size(1), x_NC.shape
    order_S, load_E, _, keep_S = sort_slots(experts_NK, E, capacity)
    x_SC = x_NC[:, None].expand(N, K, C).reshape(N * K, C)  # one row per slot, then the rows grouped by expert
    x_SC = PermuteRows.apply(x_SC, order_S, inverse_permutation(order_S))
    offs_E = torch.cumsum(load_E, 0).to(torch.int32)  # end of each expert's rows
    y_SC = expert_ffn(lambda a, w: F.grouped_mm(a, w.transpose(-2, -1), offs=offs_E), x_SC, w_up, w_down, kind)
    return combine(y_SC, order_S, gates_NK, keep_S)  # dropped slots were computed (static shapes), gated to 0


def few_shapes(x):
    """True where each new matrix shape costs a kernel compilation: CPU matmuls in bf16/fp16 go to oneDNN, which
    JIT-compiles a kernel per new row count (several times the matmul itself at small widths); expert loads change at
    every step. fp32 goes to a BLAS that needs no compilation."""
    return x.device.type == "cpu" and x.dtype in (torch.bfloat16, torch.float16)


def bucket(n):
    """n rows rounded up to one of few sizes: a power of two up to 64, a multiple of 64 above (padding wastes at
    most 63 rows per expert, and under 2x on the tiny loads of decoding)."""
    return 1 << max(n - 1, 0).bit_length() if n <= 64 else -(-n // 64) * 64


def dispatch_loop(x_NC, experts_NK, gates_NK, w_up, w_down, kind, capacity, compiled=False):
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


def dispatch_batched(x_NC, experts_NK, gates_NK, w_up, w_down, kind, capacity, compiled=False):
    """Sort by expert, copy into a zero-padded (E, P, C) buffer, two batched matmuls, read the rows back.
    compiled: the shapes stay static (P = N without a capacity), as a compiled block needs."""
    E, K, (N, C) = w_up.size(0), experts_NK.size(1), x_NC.shape
    order_S, load_E, rank_S, keep_S = sort_slots(experts_NK, E, capacity)
    if capacity:
        P = capacity
    elif compiled:
        P = N  # the static worst case (set moe_capacity_factor to make it smaller)
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

@contextlib.contextmanager
def recomputing(module):
    """Activation checkpointing (GPT.run_block) runs each block's forward a second time in the backward
    to rebuild its activations: inside this context the MoE layers of `module` (the block being recomputed) neither
    count their loads nor record routing again, so every token is counted once per training step, as without
    checkpointing. The state is each layer's own, set for the recomputation only (no module-global flag)."""
    layers = moe_layers(module)
    before = [m.recomputing for m in layers]
    for m in layers:
        m.recomputing = True
    try:
        yield
    finally:
        for m, was in zip(layers, before):
            m.recomputing = was


def moe_layers(model):
    """Every MoE module of a model (each physical layer once, whatever the loop count)."""
    return [m for m in model.modules() if isinstance(m, MoE)]


@torch.no_grad()
def update_biases(model, world_size=1, skipped=None):
    """After each optimizer step: aux-loss-free balancing (Wang et al. 2024, arXiv:2408.15664; DeepSeek-V3):
    b_i += gamma * sign(mean load - load_i), then b -= mean(b). The loads of every layer (summed over the step's
    micro-batches, loops and, with world_size > 1, all ranks in ONE all_reduce) are then zeroed. skipped: a bool
    tensor, True when the optimizer step was skipped (fp16's scaler found an inf): the bias stays (decided on the
    device, without a host read)."""
    layers = moe_layers(model)
    if not layers:
        return
    if any(m.bias_rate > 0 for m in layers):
        loads = torch.cat([m.expert_load for m in layers])
        if world_size > 1:
            dist.all_reduce(loads)
        for m, load in zip(layers, loads.split([m.n_expert for m in layers])):
            step = m.bias_rate * torch.sign(load.mean() - load)
            m.expert_bias += step if skipped is None else torch.where(skipped, 0.0, step)
            m.expert_bias -= m.expert_bias.mean()  # keep the bias centred (torchtitan issue #1506)
    for m in layers:
        m.expert_load.zero_()
