"""
Every analysis figure of the five papers, from a checkpoint or from initialisation.

    python analyze.py jsd --ckpt=out/looped,out/base       # logit-lens convergence per effective layer
    python analyze.py routing --ckpt=out/looped_moe        # top-k expert-set overlap between loop passes
    python analyze.py routing_dynamics --ckpt=...          # router-input cosine and expert Jaccard between iterations
    python analyze.py iteradaln --ckpt=...                 # per-iteration conditioning (gamma, beta, alpha) statistics
    python analyze.py active_params --ckpt=...             # unique experts per token and attention/FFN ratio vs loops
    python analyze.py theorem1                             # the exact shared-ReLU-MLP model of Wang et al.'s Theorem 1
    python analyze.py residual [config.py] [--key=value]   # Wang et al.'s Transformer protocol from initialisation
    python analyze.py residual_ckpt --ckpt=...             # residual norm per loop step, increment cosine, trained
    python analyze.py representation --ckpt=a,b            # anisotropy, curvature, prompt entropy, CKA per loop step
    python analyze.py coordcheck                           # mean |activation| per module vs width and vs loop count
    python analyze.py redraw records/lee2026/jsd_s7.json   # a committed analysis's figure again, from its JSON alone

Each writes <out_dir>/<NAME>.png and <NAME>.json (the numbers in the figure). `python analyze.py NAME --help` lists
the keys: this script's own and every GPTConfig field. Without --ckpt, the checkpoint analyses run on a model
initialised from the config keys, so every analysis also works at initialisation. theorem1, residual and
coordcheck build and train their own models from initialisation (the section on how the residual stream grows).

One code path: hidden states come from the model's own depth walk (model.states -> (Label, h) per effective
layer, model.readout for the logit lens) and routing from record_routing; nothing here re-implements a forward.
Two things beside the analyses live here too: the slide conventions every figure of the project shares (readable
names, log ticks, a PNG beside its JSON), and LoopMoE's capacity balancing (Chen et al. §3.4: capacity_report,
match_flops, rebalance), which the configs of its ladder were designed with and active_params reads.
"""
import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

import kernels  # noqa: E402
import moe  # noqa: E402
from configurator import ConfigError, configure, run  # noqa: E402
from runs import load_model, run_provenance, use_device  # noqa: E402
from optim import make_optimizer, train_step  # noqa: E402
from loop import RESIDUAL_RULES, residual_multiplier  # noqa: E402
from model import GPT, Block, GPTConfig  # noqa: E402
from moe import MoE  # noqa: E402
from accounting import block_executions, count_params, model_on_meta, module_executions, moe_counts  # noqa: E402
from data import TokenData, default_data_dir, hf_of  # noqa: E402

LN2 = math.log(2.0)

# =====================================================================================================================
# The slide conventions every figure of the project shares (this script's, early_exit.py's and
# lab/figures.py's): one map of readable names (axis names with their units), log ticks a slide can read, a figure
# saved as a PNG beside a JSON of the numbers it shows, and the heatmap of the matrices between loop steps.

# What a slide says for a field, an arch or a group key: ONE map (issue 30), axis names with their unit in brackets,
# group keys as a format. A name not in it (an arm of a sweep) is shown with spaces for its underscores.
NAMES = {"params_active": "active parameters N (count)", "params_unique_nonembed": "unique parameters N (count)",
         "val_loss": "validation loss (nats)", "lr": "peak learning rate (dimensionless)",
         "flops_budget": "training compute C (FLOPs)", "n_embd": "width {}", "n_layer": "{} layers",
         "n_loop": "loop count {}", "val_ppl": "validation perplexity (e^nats per token)", "arch": "{}",
         # the architectures and arms by their papers' names (issue 48: a slide names what a reader knows)
         "base": "Base", "looped": "Looped", "moe": "MoE", "looped_moe": "Looped-MoE",  # Lee et al.
         "base_b4": "Base, 512-token batches", "looped_moe_b4": "Looped-MoE, 512-token batches",
         "base_plain": "Base, plain operations", "looped_plain": "Looped, plain operations",
         "moe_plain": "MoE, plain operations", "looped_moe_plain": "Looped-MoE, plain operations",
         "vanilla": "Vanilla MoE", "loop_base": "Loop Base", "iteradaln": "+ IterAdaLN", "loopmoe": "LoopMoE",  # Chen
         "iteradaln_loose": "+ IterAdaLN (loose)", "loopmoe_loose": "LoopMoE (loose)",
         "iteradaln_lr1": "+ IterAdaLN, modulators at the LR", "iteradaln_lr0.1": "+ IterAdaLN, modulators at LR/10",
         "r1": "r = 1", "r2": "r = 2", "r4": "r = 4", "passthrough": "passthrough loop",  # Schwethelm et al.
         "hc": "hyper-connections", "hc_r": "hyper-connections", "trunc_r": "truncated BPTT", "tdt_r": "t/Δt",
         "rscale_r": "1/r residual scale", "iteradaln_r": "IterAdaLN", "moe_r": "Looped-MoE",
         "loopformer": "LoopFormer", "loopformer_lr1": "LoopFormer, conditioning at the LR",  # Jeddi et al.
         "loopformer_3200": "LoopFormer, 3,200 steps",
         "loopformer_lr1e-3": "LoopFormer, LR 0.001, conditioning at LR/10",
         "plain_loop": "plain loop", "plain_loop_3200": "plain loop, 3,200 steps",
         "plain_loop_wd0": "plain loop, no weight decay",
         "plain_loop_lr1e-3": "plain loop, LR 0.001", "plain_loop_1N": "plain loop, 1/N residual scale",
         "plain_loop_M1": "loop trained at M = 1", "plain_loop_M2": "loop trained at M = 2",
         "plain_loop_M3": "loop trained at M = 3", "plain_loop_M1_3200": "loop trained at M = 1, 3,200 steps",
         "plain_loop_M2_3200": "loop trained at M = 2, 3,200 steps",
         "plain_loop_M3_3200": "loop trained at M = 3, 3,200 steps",
         "plain_loop_M1_lr1e-3": "loop trained at M = 1, LR 0.001",
         "lr1e-3": "LoopFormer, LR 0.001, conditioning at the LR",
         "conditioning_only": "conditioning only, at the LR",
         "conditioning_only_condlr0.1": "conditioning only, at LR/10",
         "cond_init_normal": "LoopFormer, conditioning drawn normal", "index_lr1": "loop-index conditioning",
         "cond_lr1.0": "conditioning at the LR", "cond_lr0.3": "conditioning at 0.3 LR",
         "cond_lr0.1": "conditioning at LR/10", "cond_lr0.01": "conditioning at LR/100",
         "cond_lr0.1_wd0": "conditioning at LR/10, no weight decay",
         "none": "no residual scale", "linear": "1/N", "factorized": "factorized", "sqrt": "1/√N",  # Wang et al.
         "none_fast": "no residual scale, CPU fast paths", "none_plain": "no residual scale, plain operations",
         # the checkpoints the analyses read (a run's name less its seed)
         "base16_d128": "Base, 16 layers", "moe16_d128": "MoE, 16 layers", "looped8x2_d128": "Looped, 8 layers × 2",
         "looped_moe8x2_d128": "Looped-MoE, 8 layers × 2", "loopmoe_k4": "LoopMoE, K = 4",
         "ee_loop_3200": "early-exit loop, 3,200 steps",
         # the comparisons the records' verdict figures draw (lab/figures.py's plot_differences)
         "looped_moe_minus_looped": "α: Looped-MoE − Looped", "moe_minus_looped_moe": "α: MoE − Looped-MoE",
         "base_minus_looped": "α: Base − Looped",
         "looped_minus_base_at_depth_8": "JSD at depth 8: Looped − Base",
         "looped_moe_minus_moe_at_depth_8": "JSD at depth 8: Looped-MoE − MoE",
         "looped_boundary_drop_minus_elsewhere": "Looped: JSD drop at the boundary − elsewhere",
         "looped_moe_boundary_drop_minus_elsewhere": "Looped-MoE: JSD drop at the boundary − elsewhere",
         "phi_above_0": "φ − 0", "phi_below_1": "φ − 1", "phi_vs_paper": "φ − the paper's 0.46",
         "none_N2": "no residual scale: optimum at N = 2 − at N = 1",
         "none_N4": "no residual scale: optimum at N = 4 − at N = 1",
         "none_minus_sqrt": "growth exponent: none − 1/√N", "sqrt_minus_linear": "growth exponent: 1/√N − 1/N",
         "shared_minus_nonshared": "increment cosine: shared − non-shared",
         **{f"{a}_minus_{b}_{c}": f"L*, {flops}: {name}"  # Lee et al.'s loss order, at each budget
            for a, b, name in (("looped_moe", "moe", "Looped-MoE − MoE"),
                               ("base", "looped_moe", "Base − Looped-MoE"), ("looped", "base", "Looped − Base"))
            for c, flops in (("3e11", "3×10¹¹ FLOPs"), ("1e12", "10¹² FLOPs"), ("3e12", "3×10¹² FLOPs"))},
         **{f"layer_{i}_identical_minus_half": f"layer {i}: share of tokens keeping both experts − ½"
            for i in range(1, 9)},
         "base_minus_paper": "α of Base − the paper's 0.076",
         "looped_moe_minus_paper": "α of Looped-MoE − the paper's 0.077",
         "unique_minus_linear": "experts per token at K = 4 − linear growth (24)",
         "unique_minus_independent": "experts per token at K = 4 − independent draws (21.0)",
         "rho_4_minus_rho_1": "ρ at K = 4 − ρ at K = 1",
         "phi_high_minus_low": "φ on the upper two budgets − on the lower two",
         "hc_minus_passthrough": "validation loss: hyper-connections − passthrough",
         "linear_flat": "1/N: growth exponent of the residual norm",
         "nonshared_uncorrelated": "non-shared stack: mean increment cosine",
         "factorized_N2": "factorized: optimum at N = 2 − at N = 1",
         "factorized_N4": "factorized: optimum at N = 4 − at N = 1",
         # Chen et al.'s routing phases and IterAdaLN gate, as records/chen2026.md tests them (passes from 1)
         "entry_cosine_01_minus_12": "entry: cos(passes 1, 2) − cos(passes 2, 3)",
         "core_jaccard_12_minus_23": "core: Jaccard(passes 2, 3) − Jaccard(passes 3, 4)",
         "exit_cosine_change_minus_jaccard_change": "exit: Δcos − ΔJaccard, passes 2-3 to 3-4",
         "range_iteradaln_layer1": "IterAdaLN, layer 1: gate range, pass 2 − pass 1",
         "range_iteradaln_layer2": "IterAdaLN, layer 2: gate range, pass 2 − pass 1",
         "range_loopmoe_layer1": "LoopMoE, layer 1: gate range, pass 2 − pass 1",
         "range_loopmoe_layer2": "LoopMoE, layer 2: gate range, pass 2 − pass 1",
         "gate_iteradaln_minus_paper": "IterAdaLN: mean gate ᾱ (layer 2, pass 2) − the paper's 1.61",
         "gate_loopmoe_minus_paper": "LoopMoE: mean gate ᾱ (layer 2, pass 2) − the paper's 1.61",
         # Chen et al.'s probes against Vanilla MoE (MODEL/PROBE) and Jeddi et al.'s representation metrics
         **{f"{m}/{probe}": f"{NAME}: {what}" for m, NAME in (("loop_base", "Loop Base"), ("iteradaln", "+ IterAdaLN"),
                                                              ("loopmoe", "LoopMoE"),
                                                              ("iteradaln_loose", "+ IterAdaLN (loose)"),
                                                              ("loopmoe_loose", "LoopMoE (loose)"))
            for probe, what in (("induction_head", "induction-head probe"), ("varassign", "variable assignment"),
                                ("text", "held-out text"))},
         "cka": "1 − CKA(first step, last step)", "anisotropy": "range of anisotropy over the steps",
         "curvature": "range of curvature over the steps", "prompt_entropy": "range of prompt entropy over the steps"}
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def readable(name):
    """A name as a slide says it: the map's, a run's (NAME_sSEED) as its arch's with its seed, or an early-exit
    comparison (A<B@SAVED, lab/verdicts.exit_comparisons) as the difference it tests."""
    name = str(name)
    run = re.fullmatch(r"(.+)_s(\d+)", name)
    if name not in NAMES and run:
        return f"{readable(run.group(1))}, seed {run.group(2)}"
    pair = re.fullmatch(r"(.+)<(.+)@(0\.\d+)", name)
    if name not in NAMES and pair:
        return f"{exit_model(pair.group(1))} − {exit_model(pair.group(2))}, {float(pair.group(3)):.0%} saved"
    return NAMES.get(name, name.replace("_", " "))


def exit_model(name):
    """A model of Lee et al.'s early-exit study as the paper names it: Looped, Base..., LxK for Looped-MoE with L
    layers run K times, @N its training steps, @nearest the schedule nearest in full-depth perplexity."""
    m = re.fullmatch(r"(\d+)x(\d+)(?:@(\w+))?", name)
    if not m:
        return name
    at = {None: "", "nearest": " (nearest perplexity)"}.get(m.group(3), f", {m.group(3)} steps")
    return f"Looped-MoE {m.group(1)}×{m.group(2)}{at}"


def group_name(keys, values):
    """('n_layer', 'n_loop'), (4, 2) -> '4 layers, loop count 2'."""
    values = values if isinstance(values, (list, tuple)) else [values]
    return ", ".join(NAMES.get(k, k.replace("_", " ") + " {}").format(v) for k, v in zip(keys, values))


def flops_name(C):
    """3e11 -> '3×10¹¹ FLOPs', as a slide writes a budget."""
    exponent = math.floor(math.log10(C) + 1e-9)
    mantissa = f"{C / 10 ** exponent:.3g}"
    return ("" if mantissa == "1" else mantissa + "×") + "10" + str(exponent).translate(SUPERSCRIPT) + " FLOPs"


def pyplot():
    """matplotlib.pyplot on the Agg backend (files, no display), imported when a figure is first drawn: a command
    that draws nothing (a sweep, scaling.py count, a fit without figures) starts without it."""
    import matplotlib  # heavy: only when a figure is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (figures only)
    return plt


def figure(panels, width=5.0, height=4.0):
    fig, axes = pyplot().subplots(1, panels, figsize=(width * panels, height), squeeze=False)
    return fig, axes[0]


def _log_ticks(fig):
    """Log axes a slide can read: over two decades or more, labels at the powers of ten; over less, at 1, 2 and 5
    times each power, where matplotlib would label its minor ticks until they run into each other; where that leaves
    fewer than two labels inside the axis, at a few round values. Between 10⁻⁴ and 10⁴ the labels are plain numbers."""
    from matplotlib.ticker import (LogFormatterSciNotation, LogLocator, MaxNLocator, NullFormatter,  # (figures only)
                                   StrMethodFormatter)
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if (axis.get_scale() != "log" or type(axis.get_major_locator()) is not LogLocator  # fixed ticks stay,
                    or axis.get_transform().base != 10):                                      # and base-2 axes
                continue
            lo, hi = sorted((lo, hi))
            subs = (1, 2, 5) if math.log10(hi / lo) < 2 else (1,)
            powers = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            inside = [m * 10.0 ** e for e in powers for m in subs if lo <= m * 10.0 ** e <= hi]
            axis.set_major_locator(LogLocator(subs=subs) if len(inside) >= 2 else MaxNLocator(4))
            plain = 1e-4 <= lo and hi <= 1e4  # 0.002 and 12 as a slide writes them; 2×10⁵ beyond
            axis.set_major_formatter(StrMethodFormatter("{x:g}") if plain else
                                     LogFormatterSciNotation(minor_thresholds=(math.inf, math.inf)))  # label each
            axis.set_minor_formatter(NullFormatter())


def layout(fig):
    """A figure laid out for a slide: readable log ticks, then nothing cut off or overlapping."""
    _log_ticks(fig)
    fig.tight_layout()


def save(fig, numbers, path):
    layout(fig)
    fig.savefig(path + ".png", dpi=120)
    with open(path + ".json", "w") as f:
        json.dump(numbers, f, indent=1, default=float)
    pyplot().close(fig)
    return [path + ".png", path + ".json"]


def heatmap(ax, matrix, title, axis_label, vmin=None, vmax=None, first=1):
    """A square matrix (cosines or CKA between loop steps) with its values written in when it is small enough to
    read; the steps numbered from `first`."""
    im = ax.imshow(matrix, cmap="viridis", vmin=vmin, vmax=vmax)
    n = len(matrix)
    if n <= 12:
        for i in range(n):
            for j in range(n):
                light = im.norm(matrix[i, j]) > 0.6  # dark text on the yellow end of viridis
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=6, color="k" if light else "w")
    ticks = range(0, n, max(1, n // 8))
    ax.set(title=title, xlabel=axis_label, ylabel=axis_label, xticks=ticks, yticks=ticks,
           xticklabels=[t + first for t in ticks], yticklabels=[t + first for t in ticks])
    ax.figure.colorbar(im, ax=ax, fraction=0.046)


# =====================================================================================================================
# Metrics: pure functions of tensors, each tested on inputs with a known answer (tests/test_analyze.py)


def normalized_jsd(logits_p, logits_q):
    """Jensen-Shannon divergence between softmax(logits_p) and softmax(logits_q) along the last dim, in nats divided
    by ln 2, so 0 for equal and 1 for disjoint distributions (Lee et al. 2026, arXiv:2605.09165, §6.2):
    JSD = KL(p||m)/2 + KL(q||m)/2, m = (p+q)/2. (..., V), (..., V) -> (...)."""
    dtype = torch.promote_types(logits_p.dtype, torch.float32)
    logp, logq = F.log_softmax(logits_p.to(dtype), -1), F.log_softmax(logits_q.to(dtype), -1)
    logm = torch.logaddexp(logp, logq) - LN2
    p, q = logp.exp(), logq.exp()
    kl_pm = torch.where(p > 0, p * (logp - logm), 0.0).sum(-1)  # 0 log 0 = 0 (masked logits give p = 0 exactly)
    kl_qm = torch.where(q > 0, q * (logq - logm), 0.0).sum(-1)
    return ((kl_pm + kl_qm) / (2 * LN2)).clamp(0.0, 1.0)


def linear_cka(x, y):
    """Linear CKA (Kornblith et al. 2019, arXiv:1905.00414) between x (N, D1) and y (N, D2), rows = tokens:
    ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F) with column-centred Xc, Yc. 1 for x = y; invariant to
    orthogonal transforms and isotropic scaling of either side."""
    x = x.double() - x.double().mean(0)
    y = y.double() - y.double().mean(0)
    if x.size(0) < max(x.size(1), y.size(1)):  # fewer tokens than features: the N x N Gram form is cheaper
        kx, ky = x @ x.T, y @ y.T
        num, den = (kx * ky).sum(), kx.norm() * ky.norm()
    else:
        num, den = (y.T @ x).square().sum(), (x.T @ x).norm() * (y.T @ y).norm()
    return (num / den).item() if den > 0 else float("nan")


def anisotropy(z):
    """Mean pairwise cosine similarity between distinct rows of z (N, D) (Godey et al. 2024, arXiv:2401.12143):
    1 when all tokens point the same way, about 0 for random directions."""
    n = z.size(0)
    u = F.normalize(z.double(), dim=-1)
    total = u.sum(0).square().sum()  # sum over all (i, j) of cos(z_i, z_j), including the n diagonal ones
    return ((total - n) / (n * (n - 1))).item()


def curvature(z):
    """Mean turning angle (radians, in [0, pi]) of the token trajectory z (N, D) (Hosseini & Fedorenko 2023, as in
    Skean et al. 2025, arXiv:2502.02013): v_k = z_{k+1} - z_k, mean_k arccos(cos(v_k, v_{k+1})). We take arccos of
    the signed cosine (the paper's definition); Skean et al.'s code takes |cos|, folding the range to [0, pi/2].
    A straight line traversed forwards has curvature 0."""
    v = z.double()[1:] - z.double()[:-1]  # (N-1, D)
    cos = F.cosine_similarity(v[1:], v[:-1], dim=-1).clamp(-1.0, 1.0)
    return torch.arccos(cos).mean().item()


def prompt_entropy(z, alpha=1.0):
    """Normalised matrix-based Renyi entropy of the token Gram matrix of z (N, D) (Skean et al. 2025,
    arXiv:2502.02013): eigenvalues of Z Z^T / tr(Z Z^T) (no centring), S_1 = -sum l ln l for alpha = 1,
    S_a = ln(sum l^a) / (1 - a) otherwise, divided by ln(min(N, D)). 0 for a rank-1 prompt, 1 for an isotropic one."""
    z = z.double()
    n, d = z.shape
    gram = z @ z.T if n <= d else z.T @ z  # same nonzero spectrum; take the smaller
    lam = torch.linalg.eigvalsh(gram).clamp(min=0)
    lam = lam / lam.sum()
    if alpha == 1:
        lam = lam[lam > 0]
        s = -(lam * lam.log()).sum()
    else:
        s = torch.log((lam ** alpha).sum()) / (1 - alpha)
    return (s / math.log(min(n, d))).item()


def shared_experts(a, b):
    """|A ∩ B| per token for expert-id sets a (T, k1), b (T, k2) (ids within a row distinct) -> (T,)."""
    return (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).sum(-1)


def overlap_categories(a, b):
    """Share of tokens whose top-k expert sets on two passes are identical (|∩| = k), partially overlapping or
    disjoint (|∩| = 0) (Lee et al. 2026, arXiv:2605.09165, §6.1). a, b: (T, k) expert ids."""
    if a.shape != b.shape:
        raise ValueError(f"expert sets must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    n = shared_experts(a, b)
    k = a.size(-1)
    return {"identical": (n == k).double().mean().item(), "partial": ((n > 0) & (n < k)).double().mean().item(),
            "disjoint": (n == 0).double().mean().item()}


def expert_jaccard(a, b):
    """Mean over tokens of |A ∩ B| / |A ∪ B| for expert-id sets a (T, k1), b (T, k2) (Chen et al. 2026,
    arXiv:2606.04438, §6.2)."""
    n = shared_experts(a, b).double()
    return (n / (a.size(-1) + b.size(-1) - n)).mean().item()


def mean_cosine(x, y):
    """Mean over rows of cos(x_t, y_t) for x, y (T, D)."""
    return F.cosine_similarity(x.double(), y.double(), dim=-1).mean().item()


# =====================================================================================================================
# Collecting states and records: the model's own walk (its states and conditioning), the MoE layers' routing
#
#     with record_routing(model) as records:
#         model(idx)
#
# appends one dict per MoE call: {layer, loop, shape, experts (N,K), gates (N,K), router_input (N,C)} (detached, on
# the CPU); `layer` is the physical layer index, `loop` the pass the block ran in. Nothing is recorded outside the
# `with`; an eager model only. What is measured from the records: how often a token's experts change between the
# passes of a loop (Lee et al. 2026, arXiv:2605.09165, routing divergence) and how many distinct experts a token
# touches over the passes (Chen et al. 2026, arXiv:2606.04438, §3.4: the input of capacity balancing, rebalance).


def collect_states(model, idx):
    """(Label, h) after every effective layer of one forward pass, from the model's depth walk (no grad)."""
    with torch.no_grad():
        return model.states(idx)


@contextlib.contextmanager
def record_routing(model):
    """`with record_routing(model) as records:` every MoE call inside appends one dict (see the comment
    above), on an eager model (a compiled block would record tensors of its trace)."""
    layers = moe.moe_layers(model)
    if not layers:
        raise ValueError("record_routing: this model has no MoE layers (set n_expert > 0)")
    if any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules()):  # nn.Module.compile's
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


def routing_records(model, batches):
    """{(layer, loop): {"experts": (N, k), "gates": (N, k), "router_input": (N, C)}} over every token of `batches`,
    recorded by record_routing during ordinary forward passes."""
    out = defaultdict(lambda: defaultdict(list))
    for idx in tqdm(batches, desc="routing", leave=False):
        with torch.no_grad(), record_routing(model) as records:
            model(idx)
        for r in records:
            for key in ("experts", "gates", "router_input"):
                t = r[key].detach()
                out[(int(r["layer"]), int(r["loop"]))][key].append(t.reshape(-1, t.size(-1)).cpu())
    return {key: {k: torch.cat(v) for k, v in rec.items()} for key, rec in out.items()}


def conditioning_records(model, idx):
    """[(Label, {"attn": [scale, shift, gate], "ffn": [...]})] for each effective layer run with per-loop
    conditioning: what its modulators returned to the block, (gamma, beta, alpha), any None, broadcast to the
    state's shape. The walk yields the conditioning (loop.py's LoopCond, which keeps them) with each state."""
    records = []
    with torch.no_grad():
        for label, h, cond in model.walk(model.embed(idx), model.rope(0, idx.size(1)), keep_cond=True):
            if cond is not None:
                records.append((label, {branch: [None if t is None else torch.broadcast_to(t, h.shape) for t in kept]
                                        for branch, kept in cond.out.items()}))
    return records


# =====================================================================================================================
# Inputs: models (checkpoints or fresh) and prompts


def load_models(cfg, model_cfg):
    """[(name, model, checkpoint dict or None)]: each run dir of --ckpt, or one model initialised from the config."""
    if not cfg["ckpt"]:
        model = GPT(model_cfg, cpu_kernels=kernels.wanted(cfg["device"])).init_weights(cfg["seed"]).to(cfg["device"])
        model.eval()
        return [("init", model, None)]
    dirs = [d for d in cfg["ckpt"].split(",") if d]
    names = cfg["names"].split(",") if cfg["names"] else [os.path.basename(os.path.normpath(d)) for d in dirs]
    if len(names) != len(dirs):
        raise ConfigError(f"config error: --names has {len(names)} names for {len(dirs)} checkpoints: give one name "
                          "per checkpoint (or none)")
    models = []
    for name, d in zip(names, dirs):
        model, ckpt = load_model(d, cfg["device"])
        models.append((name, model, ckpt))
    return models


def models_and_prompts(cfg, model_cfg):
    """The models to analyse and the token batches they all read (the first checkpoint's data)."""
    models = load_models(cfg, model_cfg)
    return models, prompt_batches(cfg, models[0][1], models[0][2])


def prompt_batches(cfg, model, ckpt=None):
    """Token batches (B, T) for the checkpoint analyses: the fixed validation set of data_dir (the checkpoint's own
    when data_dir is empty), or seeded random tokens when there is no prepared data."""
    T = min(cfg["seq_len"], model.config.block_size)
    B = cfg["batch_size"]
    train_cfg = (ckpt or {}).get("train_config") or {}
    data_dir = cfg["data_dir"] or train_cfg.get("data_dir") or (
        default_data_dir(train_cfg["data_source"], train_cfg["tokenizer"], hf_of(train_cfg))
        if "data_source" in train_cfg else "")
    if data_dir and os.path.exists(os.path.join(data_dir, "meta.json")):
        data = TokenData(data_dir)
        if data.vocab_size > model.config.vocab_size:
            raise ConfigError(f"{data_dir} has {data.vocab_size} token ids but the model only "
                              f"{model.config.vocab_size}: pass the data_dir the model was trained on")
        return [torch.from_numpy(x).to(cfg["device"]) for x, _ in data.val_batches(B, T, cfg["n_tokens"])]
    if cfg["data_dir"]:
        raise ConfigError(f"no prepared data in {cfg['data_dir']} (meta.json missing): run prepare.py first, or "
                          "drop --data_dir (random tokens)")
    print(f"no data_dir: prompts are random tokens (seed {cfg['seed']})")
    g = torch.Generator().manual_seed(cfg["seed"])
    n = max(1, cfg["n_tokens"] // (B * T))
    return [torch.randint(model.config.vocab_size, (B, T), generator=g).to(cfg["device"]) for _ in range(n)]


def vocab_logits(model, h, label):
    """The logit lens: the model's own readout of a hidden state, without the padding rows of the vocabulary."""
    return model.readout(h, label)[..., :model.config.vocab_size]


def boundaries(labels):
    """Effective-layer numbers (1-based) that end a loop pass, except the last layer."""
    return [lb["index"] + 1 for lb in labels[:-1] if lb["boundary"]]


# =====================================================================================================================
# Lee et al. 2026 (arXiv:2605.09165): logit-lens convergence and routing divergence between loop passes


def run_jsd(cfg, model_cfg):
    """Normalised JSD between every effective layer's logit-lens distribution and the final one: mean +- std over
    sequences per effective layer and the fraction of tokens below jsd_threshold (converged), several models."""
    models, batches = models_and_prompts(cfg, model_cfg)
    result = {}
    for name, model, _ in models:
        per_layer, labels = defaultdict(list), {}
        for idx in tqdm(batches, desc=f"jsd {name}"):
            states = collect_states(model, idx)
            with torch.no_grad():
                final = vocab_logits(model, states[-1][1], states[-1][0])
                for label, h in states:
                    per_layer[label.index].append(normalized_jsd(vocab_logits(model, h, label), final).cpu())
                    labels[label.index] = label._asdict()
        rows = []
        for i in sorted(per_layer):
            j = torch.cat(per_layer[i]).double()  # (sequences, T)
            seq = j.mean(1)
            rows.append(dict(label=labels[i], mean=seq.mean().item(), std=seq.std().item() if len(seq) > 1 else 0.0,
                             frac_converged=(j < cfg["jsd_threshold"]).double().mean().item()))
        means = [r["mean"] for r in rows]
        drops = {i + 1: means[i - 1] - means[i] for i in range(1, len(means))}  # layer n -> JSD(n-1) - JSD(n)
        ends = boundaries([r["label"] for r in rows])
        at = [drops[b] for b in ends if b in drops]  # the drop into the last layer of a pass
        off = [v for k, v in drops.items() if k not in ends]
        result[name] = dict(layers=rows, mean_drop_at_boundary=float(np.mean(at)) if at else None,
                            mean_drop_elsewhere=float(np.mean(off)) if off else None)
    return result, draw_jsd(result, cfg)


def draw_jsd(result, cfg):
    """The JSD figure: mean JSD per effective layer with its spread over sequences, and the converged tokens."""
    from matplotlib.ticker import MaxNLocator  # (figures only)
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4))
    for name, r in result.items():
        x = [row["label"]["index"] + 1 for row in r["layers"]]
        m, s = np.array([row["mean"] for row in r["layers"]]), np.array([row["std"] for row in r["layers"]])
        line, = axes[0].plot(x, m, marker="o", ms=3, label=readable(name))
        axes[0].fill_between(x, m - s, m + s, color=line.get_color(), alpha=0.2)
        axes[1].plot(x, [row["frac_converged"] for row in r["layers"]], marker="o", ms=3, color=line.get_color())
        for b in boundaries([row["label"] for row in r["layers"]]):
            for ax in axes:
                ax.axvline(b + 0.5, color=line.get_color(), ls=":", lw=1)
    axes[0].set(xlabel="effective layer (counted from 1)", ylabel="JSD to the final layer (normalised, 0-1)",
                title="Mean JSD (± std over sequences)")
    axes[1].set(xlabel="effective layer (counted from 1)",
                ylabel=f"tokens with JSD < {cfg['jsd_threshold']:g} (fraction)", title="Converged tokens",
                ylim=(0, 1.02))
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers
    axes[0].legend()
    fig.text(0.5, 0.005, "dotted: loop boundaries", ha="center", fontsize=8)
    return fig


def loop_layers(records):
    """{physical layer: sorted loop indices} for the layers that run on more than one pass."""
    loops = defaultdict(list)
    for layer, loop in records:
        loops[layer].append(loop)
    return {layer: sorted(v) for layer, v in sorted(loops.items()) if len(v) > 1}


def looped_routing(name, model, batches):
    """The routing records of a model and {physical layer: sorted loop indices} of its MoE layers that run on more
    than one pass; an error naming the model when it has none (these analyses need a looped MoE)."""
    recs = routing_records(model, batches) if moe.moe_layers(model) else {}
    layers = loop_layers(recs)
    if not layers:
        raise ConfigError(f"analyze.py: {name} has no MoE layer that runs on more than one pass (this analysis "
                          "needs a looped MoE: n_expert > 0 and n_loop > 1)")
    return recs, layers


def run_routing(cfg, model_cfg):
    """Per physical layer, the share of tokens whose top-k expert sets on two passes are identical, partially
    overlapping or disjoint; every pair of passes, pass 1 vs 2 plotted as in Lee et al.'s routing figure."""
    models, batches = models_and_prompts(cfg, model_cfg)
    result = {}
    for name, model, _ in models:
        recs, layers = looped_routing(name, model, batches)
        result[name] = {str(layer): {f"{a}-{b}": overlap_categories(recs[(layer, a)]["experts"],
                                                                    recs[(layer, b)]["experts"])
                                     for i, a in enumerate(loops) for b in loops[i + 1:]}
                        for layer, loops in layers.items()}
    return result, draw_routing(result, cfg)


def draw_routing(result, cfg):
    """Per physical layer, the share of tokens whose experts at pass 1 and 2 are identical, partial, disjoint."""
    fig, axes = pyplot().subplots(1, len(result), figsize=(6 * len(result), 4), squeeze=False)
    colors = {"identical": "tab:green", "partial": "tab:orange", "disjoint": "tab:red"}
    for ax, (name, per_layer) in zip(axes[0], result.items()):
        layers = list(per_layer)
        bottom = np.zeros(len(layers))
        for cat, color in colors.items():
            share = np.array([100 * per_layer[layer]["0-1"][cat] for layer in layers])
            ax.bar([int(layer) + 1 for layer in layers], share, bottom=bottom, color=color, label=cat)
            for x, b, s in zip(layers, bottom, share):
                if s >= 6:
                    ax.text(int(x) + 1, b + s / 2, f"{s:.0f}", ha="center", va="center", fontsize=7)
            bottom += share
        ax.set(xlabel="physical layer (counted from 1)", ylabel="tokens (%)", ylim=(0, 100),
               title=f"{readable(name)}: experts on pass 1 vs 2", xticks=[int(layer) + 1 for layer in layers])
        ax.legend(fontsize=8)
    return fig


# =====================================================================================================================
# Chen et al. 2026 (arXiv:2606.04438): routing dynamics, IterAdaLN statistics, active-parameter scaling


def run_routing_dynamics(cfg, model_cfg):
    """K x K matrices between loop iterations, per shared MoE layer and averaged: mean per-token cosine of the
    router inputs and mean Jaccard similarity of the selected expert sets."""
    models, batches = models_and_prompts(cfg, model_cfg)
    result = {}
    for name, model, _ in models:
        recs, layers = looped_routing(name, model, batches)
        per_layer = {}
        for layer, loops in layers.items():
            r = [recs[(layer, k)] for k in loops]
            per_layer[str(layer)] = dict(
                cosine=[[mean_cosine(a["router_input"], b["router_input"]) for b in r] for a in r],
                jaccard=[[expert_jaccard(a["experts"], b["experts"]) for b in r] for a in r])
        sizes = {len(v["cosine"]) for v in per_layer.values()}
        mean = {m: np.mean([v[m] for v in per_layer.values()], 0).tolist() for m in ("cosine", "jaccard")} \
            if len(sizes) == 1 else None
        result[name] = dict(layers=per_layer, mean=mean)
    return result, draw_routing_dynamics(result, cfg)


def draw_routing_dynamics(result, cfg):
    """Per model and shared layer (and their mean), the K x K cosine and Jaccard matrices."""
    cols = max(len(r["layers"]) + 1 for r in result.values())
    fig, axes = pyplot().subplots(2 * len(result), cols, figsize=(3.2 * cols, 6 * len(result)), squeeze=False)
    for m, (name, r) in enumerate(result.items()):
        panels = [(f"layer {int(k) + 1}", v) for k, v in r["layers"].items()]
        panels = ([("mean", r["mean"])] if r["mean"] else []) + panels
        for c in range(cols):
            for row, metric in enumerate(("cosine", "jaccard")):
                ax = axes[2 * m + row][c]
                if c >= len(panels):
                    ax.axis("off")
                    continue
                heatmap(ax, np.array(panels[c][1][metric]), f"{readable(name)} {panels[c][0]}: {metric}",
                        "pass (counted from 1)")
    return fig


STAT_NAMES = {"mean_abs_gamma": "mean |γ| (scale)", "mean_abs_beta": "mean |β| (shift)", "mean_alpha": "mean α (gate)",
              "tok_std_alpha": "α over tokens (std)", "tok_range_alpha": "α over tokens (max - min)"}


def run_iteradaln(cfg, model_cfg):
    """Per loop iteration, layer and branch: mean |gamma| (scale), mean |beta| (shift), mean alpha (gate) and the
    per-token std and range of alpha (alpha averaged over channels per token), as in Chen et al.'s Table 9. Works for
    any per-loop conditioning that goes through model.Block's `cond` (IterAdaLN, LoopFormer, loop index)."""
    models, batches = models_and_prompts(cfg, model_cfg)
    for name, model, _ in models:  # before any model runs: a block without a modulator receives no conditioning
        if all(getattr(block, "modulator", None) is None for block in model.blocks):
            raise ConfigError(f"analyze.py: {name}: no block receives per-loop conditioning (this analysis needs "
                              "loop_cond=iteradaln, index or loopformer)")
    result = {}
    for name, model, _ in models:
        acc = defaultdict(lambda: defaultdict(list))  # (layer, loop, branch) -> statistic -> per-token values
        for idx in tqdm(batches, desc=f"conditioning {name}"):
            for label, rec in conditioning_records(model, idx):
                for branch, (scale, shift, gate) in rec.items():
                    a = acc[(label.layer, label.loop, branch)]
                    for key, t, fn in (("gamma", scale, torch.abs), ("beta", shift, torch.abs), ("alpha", gate, None)):
                        if t is not None:
                            a[key].append((fn(t) if fn else t).double().mean(-1).flatten().cpu())
        if not acc:
            raise ConfigError(f"analyze.py: {name}: no block receives per-loop conditioning (this analysis needs "
                              "loop_cond=iteradaln, index or loopformer)")
        rows = []
        for (layer, loop, branch), a in sorted(acc.items()):
            row = dict(layer=layer, loop=loop, branch=branch)
            for key, values in a.items():
                v = torch.cat(values)
                row[f"mean_abs_{key}" if key != "alpha" else "mean_alpha"] = v.mean().item()
                if key == "alpha":
                    row.update(tok_std_alpha=v.std().item(), tok_range_alpha=(v.max() - v.min()).item())
            rows.append(row)
        result[name] = rows
    return result, draw_iteradaln(result, cfg)


def draw_iteradaln(result, cfg):
    """Each modulation statistic against the iteration, a line per layer and branch."""
    stats = ["mean_abs_gamma", "mean_abs_beta", "mean_alpha", "tok_std_alpha", "tok_range_alpha"]
    fig, axes = pyplot().subplots(len(result), len(stats), figsize=(3.3 * len(stats), 3 * len(result)), squeeze=False)
    for m, (name, rows) in enumerate(result.items()):
        for ax, stat in zip(axes[m], stats):
            series = defaultdict(list)
            for row in rows:
                if stat in row:
                    series[f"layer {row['layer'] + 1} {row['branch']}"].append((row["loop"] + 1, row[stat]))
            for key, pts in series.items():
                ax.plot(*zip(*sorted(pts)), marker="o", ms=3, label=key)
            ax.set(title=readable(name), xlabel="pass (counted from 1)", ylabel=STAT_NAMES[stat],
                   xticks=sorted({row["loop"] + 1 for row in rows}))
            if series:
                ax.legend(fontsize=6)
    return fig


def run_active_params(cfg, model_cfg):
    """Expected unique experts per token after K = 1..n_loop iterations of each shared MoE layer (measured from the
    routing records), and the model's active attention and FFN parameters A_attn, A_ffn and rho = A_attn / A_ffn
    they imply (capacity_report: attention counted once, a looped MoE layer's unique experts plus its shared
    experts) vs K (Chen et al. 2026, App. A.4, Fig. 3). rho* is K = 1, the matched non-looped MoE."""
    models, batches = models_and_prompts(cfg, model_cfg)
    result = {}
    for name, model, _ in models:
        recs, layers = looped_routing(name, model, batches)
        uniq = {str(layer): unique_experts([recs[(layer, k)]["experts"] for k in loops], model.config.n_expert)
                for layer, loops in layers.items()}
        mean_uniq = np.mean(list(uniq.values()), 0)
        reports = [capacity_report(dataclasses.replace(model.config, n_loop=k + 1), float(u))
                   for k, u in enumerate(mean_uniq)]
        result[name] = dict(iterations=list(range(1, len(mean_uniq) + 1)), unique_experts=mean_uniq.tolist(),
                            unique_experts_per_layer=uniq, a_attn=[r["A_attn"] for r in reports],
                            a_ffn=[r["A_ffn"] for r in reports], rho=[r["rho"] for r in reports],
                            rho_star=reports[0]["rho"], top_k=model.config.top_k, n_expert=model.config.n_expert)
    return result, draw_active_params(result, cfg)


def draw_active_params(result, cfg):
    """A_attn and A_ffn against the iterations K, with rho on a second axis."""
    fig, axes = pyplot().subplots(1, len(result), figsize=(5.5 * len(result), 4), squeeze=False)
    for ax, (name, r) in zip(axes[0], result.items()):
        k = r["iterations"]
        ax.plot(k, r["a_attn"], marker="s", label="attention, A attn")
        ax.plot(k, r["a_ffn"], marker="o", label="experts used, A ffn (unique)")
        ax.set(xlabel="loop iterations K (passes)", ylabel="active parameters per token (count)", title=readable(name),
               xticks=k)
        ax2 = ax.twinx()
        ax2.plot(k, r["rho"], color="k", marker="^", label="ρ")
        ax2.axhline(r["rho_star"], color="r", ls=":", label="ρ* (K = 1: non-looped MoE)")
        ax2.set_ylabel("ρ = A attn / A ffn (ratio)")
        ax.legend(loc="upper left", fontsize=7)
        ax2.legend(loc="upper right", fontsize=7)
    return fig


# =====================================================================================================================
# Chen et al. 2026 (arXiv:2606.04438, §3.4 and App. A.4): capacity balancing, counted on the meta-device model
# (accounting.py's units); the configs of LoopMoE's rungs were designed with it, and active_params reads it.
#
# capacity_report() gives the attention/FFN active ratio rho, stored params N and per-token executed (FLOP) params
# F of a config; unique_experts_per_token() measures how many distinct experts a token touches over the loop
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
    unique_experts_per_token, default top_k, i.e. no new experts after the first pass) plus its shared experts.
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


# =====================================================================================================================
# How the residual stream of a looped model grows with the loop count, from initialisation (Wang et al. 2026,
# arXiv:2606.18524): the exact ReLU model of their Theorem 1 (theorem1), their Transformer protocol (residual: fresh
# models trained a few AdamW steps, looped against non-shared stacks, per residual-scaling rule), and the coordinate
# check of muP and the residual rules (coordcheck, as microsoft/mup's get_coord_data). Every study builds its own
# models; none reads a checkpoint.

# =====================================================================================================================
# The measures: the residual stream per loop step, its norm and the cosines of its increments


def loop_steps(model, idx, every=None):
    """The residual stream at loop-step granularity: [h_0, h_1, ..., h_N] with h_0 the input of the first pass (the
    embedding, or the last prelude state) and h_n the state at the end of pass n. `every=L` instead cuts a plain
    stack into blocks of L layers (the non-shared deep stack of Wang et al. 2026)."""
    with torch.no_grad():
        states = model.states(idx)
        before = [h for label, h in states if label.part == "prelude"]
        h0 = before[-1] if before else model.embed(idx)
    body = [(label, h) for label, h in states if label.part == "loop"]
    if every:
        return [h0] + [h for i, (_, h) in enumerate(body) if (i + 1) % every == 0]
    return [h0] + [h for label, h in body if label.boundary]


def residual_norm(h):
    """Normalised residual-stream norm ||h|| / sqrt(d) per token, averaged over tokens (Wang et al. 2026,
    arXiv:2606.18524, §5.1). h: (..., d)."""
    return (h.double().norm(dim=-1) / math.sqrt(h.size(-1))).mean().item()


def increment_cosine(steps):
    """Cosine matrix C_ij = cos(D_i, D_j) of the loop-step increments D_n = h_n - h_(n-1) (Wang et al. 2026,
    arXiv:2606.18524, Fig. 3): each increment flattened over (tokens x d) per sequence, cosines averaged over the
    batch. steps: N+1 tensors (B, T, d), h_0 first -> (N, N) numpy array."""
    d = torch.stack([(b - a).double().flatten(1) for a, b in zip(steps[:-1], steps[1:])], 1)  # (B, N, T*d)
    d = F.normalize(d, dim=-1)
    return (d @ d.transpose(1, 2)).mean(0).numpy()


# =====================================================================================================================
# The exact model of Wang et al. 2026 (arXiv:2606.18524), Theorem 1: h_n = h_(n-1) + N^-alpha W relu(h_(n-1))


def theorem1_norms(n_loop, alpha, width, trials, shared=True, sigma=1.0, seed=0):
    """R_N = ||h_N|| / sqrt(d) for `trials` draws of h_0 = x ~ N(0, I_d) and W_ij ~ N(0, sigma^2/d) (the paper's
    mean-field W = G/sqrt(d)), with one W for all N steps (shared, Eq. 1) or a fresh W_n per step (the non-shared
    stack of its §7.1). float64. -> (trials,) tensor."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(trials, width, generator=g, dtype=torch.float64)
    scale = sigma / math.sqrt(width)
    w = torch.randn(trials, width, width, generator=g, dtype=torch.float64) * scale
    for _ in range(n_loop):
        if not shared:
            w = torch.randn(trials, width, width, generator=g, dtype=torch.float64) * scale
        h = h + n_loop ** -alpha * torch.einsum("bij,bj->bi", w, torch.relu(h))
    return h.norm(dim=-1) / math.sqrt(width)


def theorem1_prediction(n_loop, alpha, shared=True, sigma=1.0):
    """Predicted R_N, with R_0 = 1. Shared: Theorem 1's rate R_N^2 ~ R_0^2 + (c N^(1-alpha))^2 with the constants
    at initialisation (activation mass ||relu(x)|| = sqrt(d/2), cone gain 1, so c = sigma/sqrt(2)); it is tight when
    the activations stay O(1) (alpha >= 1) and only a lower bound otherwise, when the activation scale grows with N
    (the theorem's assumption 2 fails). Non-shared: the mean-field recursion E||h_n||^2 = ||h_(n-1)||^2
    (1 + sigma^2 N^(-2 alpha) / 2) of §7.1, so R_N = (1 + sigma^2 N^(-2 alpha) / 2)^(N/2): bounded for alpha >= 1/2."""
    if shared:
        return math.sqrt(1 + sigma ** 2 / 2 * n_loop ** (2 * (1 - alpha)))
    return (1 + sigma ** 2 / 2 * n_loop ** (-2 * alpha)) ** (n_loop / 2)


ALPHAS = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}  # residual multiplier R^-alpha of each scaling rule


def run_theorem1(cfg, model_cfg):
    """R_N = ||h_N|| / sqrt(d) of the shared (and non-shared) ReLU residual MLP vs N for alpha in {0, 1/2, 1},
    measured (mean, min-max over trials) against the predicted growth (theorem1_prediction)."""
    loops = [2 ** i for i in range(int(math.log2(cfg["max_loops"])) + 1)]
    result = {}
    bar = tqdm(total=2 * len(ALPHAS) * len(loops), desc="theorem1")
    for shared in (False, True):
        for alpha in ALPHAS.values():
            rows = []
            for n in loops:
                r = theorem1_norms(n, alpha, cfg["width"], cfg["trials"], shared, cfg["sigma"], cfg["seed"])
                rows.append(dict(n_loop=n, mean=r.mean().item(), min=r.min().item(), max=r.max().item(),
                                 predicted=theorem1_prediction(n, alpha, shared, cfg["sigma"])))
                bar.update()
            result[f"{'shared' if shared else 'nonshared'}_alpha{alpha:g}"] = rows
    bar.close()
    return result, draw_theorem1(result, cfg)


def draw_theorem1(result, cfg):
    """The measured norm against N beside Theorem 1's prediction, shared and independent weights."""
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4))
    for ax, kind in zip(axes, ("nonshared", "shared")):
        for alpha, color in zip(ALPHAS.values(), ("tab:red", "tab:orange", "tab:green")):
            rows = result[f"{kind}_alpha{alpha:g}"]
            n = [r["n_loop"] for r in rows]
            ax.plot(n, [r["mean"] for r in rows], marker="o", color=color, label=f"α = {alpha:g}, measured")
            ax.fill_between(n, [r["min"] for r in rows], [r["max"] for r in rows], color=color, alpha=0.2)
            bound = " (lower bound)" if kind == "shared" and alpha < 1 else ""
            ax.plot(n, [r["predicted"] for r in rows], ls="--", color=color, label=f"α = {alpha:g}, theory{bound}")
        ax.set(xscale="log", yscale="log", xlabel="loop count N (passes)", ylabel="‖h‖/√d after N passes (relative)",
               title=("shared W (Theorem 1)" if kind == "shared" else "independent Wₙ") + f", d = {cfg['width']}")
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    return fig


# =====================================================================================================================
# Wang et al.'s Transformer protocol from initialisation: looped and non-shared stacks, a few AdamW steps


def looped_config(model_cfg, n_loop, scaling):
    return dataclasses.replace(model_cfg, n_loop=n_loop, residual_scaling=scaling)


def nonshared_model(model_cfg, n_loop, scaling, cpu_kernels=False):
    """Wang et al.'s non-shared deep stack: n_loop independent copies of the n_layer block (effective depth
    n_layer * n_loop, one pass), every branch multiplied by n_loop^-alpha as the looped model with n_loop passes
    would be. A one-pass GPT of n_layer * n_loop layers built with that multiplier (GPT's res_scale)."""
    cfg = dataclasses.replace(model_cfg, n_layer=model_cfg.n_layer * n_loop, n_loop=1, residual_scaling="none")
    return GPT(cfg, res_scale=residual_multiplier(looped_config(model_cfg, n_loop, scaling)), cpu_kernels=cpu_kernels)


def adamw(model, cfg):
    """train.py's AdamW (optim.make_optimizer: the model's own parameter groups with their muP / residual-scaling LR
    and eps multipliers) with Wang et al. 2026's settings (arXiv:2606.18524, Table 4): betas (0.9, 0.95), eps 1e-8,
    decoupled weight decay on the matrices."""
    keys = dict(optimizer="adamw", lr=cfg["lr"], beta1=0.9, beta2=0.95, adam_eps=1e-8,
                weight_decay=cfg["weight_decay"], wd_independent=False)
    return make_optimizer(model, keys, torch.device(cfg["device"]).type)


def residual_run(model, cfg, seed, every=None):
    """Wang et al.'s protocol on one model: fixed random tokens (batch 1), `steps` AdamW steps; after each step the
    normalised norm of the final hidden state and the RMS change of that output since the previous step; at the end
    the loop-step increment cosine matrix."""
    g = torch.Generator().manual_seed(10_000 + seed)
    T, V = min(cfg["seq_len"], model.config.block_size), model.config.vocab_size
    seq = torch.randint(V, (cfg["batch_size"], T + 1), generator=g).to(cfg["device"])
    idx, targets = seq[:, :-1], seq[:, 1:]
    opt = adamw(model, cfg)
    y = loop_steps(model, idx, every=every)[-1]
    norms, updates, losses = [residual_norm(y)], [], []
    for _ in range(cfg["steps"]):
        losses.append(train_step(model, opt, lambda _: (idx, targets))[0].item())
        y_new = loop_steps(model, idx, every=every)[-1]
        updates.append((y_new - y).double().square().mean().sqrt().item())
        norms.append(residual_norm(y_new))
        y = y_new
    cos = increment_cosine(loop_steps(model, idx, every=every))
    n = len(cos)
    off_diagonal = (cos.sum() - np.trace(cos)) / max(1, n * n - n)  # Fig. 3's alignment in one number (0 at N = 1)
    return dict(norms=norms, updates=updates, losses=losses, mean_cosine=float(off_diagonal)), cos


def run_residual(cfg, model_cfg):
    """Residual-stream norm ||h||/sqrt(d) after `steps` AdamW steps vs loop count R for multipliers 1, 1/sqrt(R),
    1/R, looped and non-shared (Fig. 2); increment cosine matrices without scaling at the largest R (Fig. 3); the RMS
    output change after one step and over all steps (Fig. 4, Fig. 9). Seeds averaged."""
    kinds = ["looped"] + (["nonshared"] if cfg["nonshared"] else [])
    runs = [(k, s, r) for k in kinds for s in cfg["scalings"] for r in cfg["loops"]]
    total = sum(r for _, _, r in runs) * cfg["n_seeds"] * model_cfg.n_layer
    print(f"residual: {len(runs)} (kind, scaling, R) points x {cfg['n_seeds']} seeds, {total:,} effective layers "
          f"x {cfg['steps']} steps at d={model_cfg.n_embd}")
    bar = tqdm(total=total, desc="residual", unit="layer")
    result, cosines = {}, {}
    for kind, scaling, n_loop in runs:
        per_seed = []
        for seed in range(cfg["seed"], cfg["seed"] + cfg["n_seeds"]):  # seeds seed, seed + 1, ...: a fresh set
            torch.manual_seed(seed)
            fast = kernels.wanted(cfg["device"])
            if kind == "looped":
                model = GPT(looped_config(model_cfg, n_loop, scaling), cpu_kernels=fast).init_weights(seed)
                every = None
            else:
                model = nonshared_model(model_cfg, n_loop, scaling, fast).init_weights(seed)
                every = model_cfg.n_layer
            model.to(cfg["device"])
            run, cos = residual_run(model, cfg, seed, every)
            per_seed.append(run)
            if seed == cfg["seed"] and n_loop == max(cfg["loops"]) and scaling == "none":
                cosines[kind] = cos.tolist()
            bar.update(n_loop * model_cfg.n_layer)
        agg = {key: np.mean([r[key] for r in per_seed], 0).tolist() for key in ("norms", "updates", "losses")}
        agg["norms_std"] = np.std([r["norms"] for r in per_seed], 0).tolist()
        # each seed's own numbers, the observations the records' tests read (records/README.md: the seed is the unit)
        agg["final_norm_per_seed"] = [r["norms"][-1] for r in per_seed]
        agg["mean_cosine_per_seed"] = [r["mean_cosine"] for r in per_seed]
        result.setdefault(kind, {}).setdefault(scaling, {})[str(n_loop)] = agg
    bar.close()
    largest = str(max(cfg["loops"]))
    summary = {kind: {s: result[kind][s][largest]["norms"][-1] for s in cfg["scalings"]} for kind in kinds}
    exponents = {kind: {s: growth_exponent(result[kind][s]) for s in cfg["scalings"]} for kind in kinds}
    per_seed = {kind: {s: dict(growth_exponent=growth_exponent(result[kind][s], "final_norm_per_seed"),
                               mean_cosine_at_largest_R=result[kind][s][largest]["mean_cosine_per_seed"])
                       for s in cfg["scalings"]} for kind in kinds}
    out = dict(final_norm_at_largest_R=summary, growth_exponent=exponents, per_seed=per_seed, runs=result,
               increment_cosine=cosines, model_config=model_cfg.to_dict())
    return out, draw_residual(out, cfg)


def growth_exponent(per_r, per_seed=None):
    """The exponent of the final residual norm in the loop count between the smallest and largest R measured,
    log(norm(R_max) / norm(R_min)) / log(R_max / R_min): Wang et al. 2026 (arXiv:2606.18524, §5.1) predict 1 without
    scaling (correlated increments add up linearly), 1/2 under 1/sqrt(R) and 0 under 1/R. The paper plots norms and
    prints no exponent; this is the number its ratios compare with. Of the seeds' mean norms, or with per_seed (the
    key of each R's per-seed final norms) a list: each seed's own exponent."""
    r = sorted(per_r, key=int)
    span = math.log(int(r[-1]) / int(r[0]))
    if per_seed:
        return [math.log(hi / lo) / span for lo, hi in zip(per_r[r[0]][per_seed], per_r[r[-1]][per_seed])]
    lo, hi = per_r[r[0]]["norms"][-1], per_r[r[-1]]["norms"][-1]
    return math.log(hi / lo) / span


def draw_residual(out, cfg):
    """Norm growth, first-step and per-step output changes, and the increments' cosines, per stack kind."""
    result, cosines = out["runs"], out["increment_cosine"]
    kinds = list(result)
    fig, axes = pyplot().subplots(len(kinds), 4, figsize=(19, 4 * len(kinds)), squeeze=False)
    colors = {"none": "tab:red", "sqrt": "tab:orange", "linear": "tab:green", "factorized": "tab:blue"}
    for row, kind in enumerate(kinds):
        ax_n, ax_u, ax_steps, ax_cos = axes[row]
        for scaling, per_r in result[kind].items():
            r = [int(k) for k in per_r]
            c = colors.get(scaling)
            norm = np.array([v["norms"][-1] for v in per_r.values()])
            std = np.array([v["norms_std"][-1] for v in per_r.values()])
            ax_n.plot(r, norm, marker="o", color=c, label=scaling)
            ax_n.fill_between(r, norm - std, norm + std, color=c, alpha=0.2)
            ax_u.plot(r, [v["updates"][0] for v in per_r.values()], marker="o", color=c, label=scaling)
            for k, v in per_r.items():
                if k == str(max(r)):
                    ax_steps.plot(range(1, len(v["updates"]) + 1), v["updates"], marker=".", color=c,
                                  label=f"{scaling}, R={k}")
        ax_n.set(xscale="log", yscale="log", xlabel="loop count R (passes)", ylabel="‖h‖/√d (relative)",
                 title=f"{kind}: residual norm after {cfg['steps']} AdamW steps")
        ax_u.set(xscale="log", yscale="log", xlabel="loop count R (passes)", ylabel="output change (RMS)",
                 title=f"{kind}: output change after step 1")
        ax_steps.set(yscale="log", xlabel="optimizer step (index)", ylabel="output change (RMS)",
                     title=f"{kind}: output change per step")
        for ax in (ax_n, ax_u):
            ax.set_xscale("log", base=2)
        for ax in (ax_n, ax_u, ax_steps):
            ax.legend(fontsize=7)
        if kind in cosines:
            heatmap(ax_cos, np.array(cosines[kind]), f"{kind}, no scaling, R = {max(cfg['loops'])}: cos(Δᵢ, Δⱼ)",
                    "loop step (index)", vmin=-1, vmax=1)
        else:
            ax_cos.axis("off")
    return fig


# =====================================================================================================================
# Coordinate check (as microsoft/mup's get_coord_data): mean |activation| per module over the first steps


def coord_data(model, cfg, seed):
    """{module kind: [mean |output| per step]}: the forward of each training step (before its update) is observed
    by hooks on the embedding, every attention, FFN and whole block (averaged over calls) and the head."""
    kinds = {"embedding": [model.wte], "head": [model.lm_head]}
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    kinds.update(attn=[b.attn for b in blocks], ffn=[b.ffn for b in blocks], block=blocks)
    current = defaultdict(list)

    def observer(kind):
        def hook(module, args, output):
            out = output[0] if isinstance(output, tuple) else output
            current[kind].append(out.detach().abs().mean().item())
        return hook

    handles = [m.register_forward_hook(observer(kind)) for kind, ms in kinds.items() for m in ms]
    g = torch.Generator().manual_seed(20_000 + seed)
    T = min(cfg["seq_len"], model.config.block_size)
    seq = torch.randint(model.config.vocab_size, (cfg["batch_size"], T + 1), generator=g).to(cfg["device"])
    opt = adamw(model, cfg)
    trace = defaultdict(list)
    try:
        for _ in range(cfg["steps"]):
            current.clear()
            train_step(model, opt, lambda _: (seq[:, :-1], seq[:, 1:]))
            for kind, v in current.items():
                trace[kind].append(float(np.mean(v)))
    finally:
        for h in handles:
            h.remove()
    return dict(trace)


def run_coordcheck(cfg, model_cfg):
    """Mean |activation| of each module kind at each of the first steps, vs width with muP off and on (a correct muP
    keeps every curve flat in width), and vs loop count for each residual scaling."""
    sweeps = [(f"width, muP {'on' if mup else 'off'}", "n_embd", w,
               dataclasses.replace(model_cfg, n_embd=w, mup=mup, n_head=0, d_ff=0))
              for mup in (False, True) for w in cfg["widths"]]
    sweeps += [(f"loops, {s}", "n_loop", r, looped_config(model_cfg, r, s)) for s in cfg["scalings"]
               for r in cfg["loops"]]
    result = defaultdict(dict)
    for title, _, x, mcfg in tqdm(sweeps, desc="coordcheck"):
        traces = []
        for seed in range(cfg["seed"], cfg["seed"] + cfg["n_seeds"]):
            torch.manual_seed(seed)
            model = GPT(mcfg, cpu_kernels=kernels.wanted(cfg["device"])).init_weights(seed).to(cfg["device"])
            traces.append(coord_data(model, cfg, seed))
        result[title][str(x)] = {k: np.mean([t[k] for t in traces], 0).tolist() for k in traces[0]}
    slopes = {}  # d log|act| / d log width at the last step: 0 means width-independent
    for title, per_x in result.items():
        xs = np.log([float(x) for x in per_x])
        slopes[title] = {k: float(np.polyfit(xs, np.log([v[k][-1] for v in per_x.values()]), 1)[0])
                         for k in next(iter(per_x.values()))} if len(xs) > 1 else {}
    rows, steps = list(result), cfg["steps"]
    fig, axes = pyplot().subplots(len(rows), steps, figsize=(3.2 * steps, 2.8 * len(rows)), squeeze=False)
    for i, title in enumerate(rows):
        per_x = result[title]
        xs = [float(x) for x in per_x]
        for t in range(steps):
            ax = axes[i][t]
            for kind in next(iter(per_x.values())):
                ax.plot(xs, [v[kind][t] for v in per_x.values()], marker="o", ms=3, label=kind)
            ax.set(xscale="log", yscale="log", title=f"{title}, step {t + 1}",
                   xlabel={"width": "width d (channels)", "loops": "loop count R (passes)"}[title.split(",")[0]])
            ax.set_xscale("log", base=2)
        for ax in axes[i]:
            ax.set_ylabel("mean |activation| (per unit)")
        axes[i][0].legend(fontsize=6)
    return dict(runs=dict(result), log_log_slope_last_step=slopes, model_config=model_cfg.to_dict()), fig


# =====================================================================================================================
# Wang et al. 2026 (arXiv:2606.18524): the residual stream of trained checkpoints (from initialisation: the studies
# above, which the command line below runs too)


def run_residual_ckpt(cfg, model_cfg):
    """From trained checkpoints: the residual-stream norm at every loop step 0 (post-embedding) ... N (Fig. 7) and
    the increment cosine matrix (Fig. 6), averaged over the prompts."""
    models, batches = models_and_prompts(cfg, model_cfg)
    result = {}
    for name, model, _ in models:
        norms, cos, n = 0.0, 0.0, 0
        for idx in tqdm(batches, desc=f"residual {name}"):
            steps = loop_steps(model, idx)
            b = idx.size(0)
            norms = norms + b * np.array([h.double().norm(dim=-1).mean().item() for h in steps])
            if len(steps) > 2:
                cos = cos + b * increment_cosine(steps)
            n += b
        d = model.config.n_embd
        result[name] = dict(l2_norm=(norms / n).tolist(), normalized_norm=(norms / n / math.sqrt(d)).tolist(),
                            increment_cosine=(cos / n).tolist() if len(steps) > 2 else None)
    with_cos = [name for name, r in result.items() if r["increment_cosine"] is not None]
    fig, axes = pyplot().subplots(1, 1 + len(with_cos), figsize=(5 * (1 + len(with_cos)), 4), squeeze=False)
    for name, r in result.items():
        axes[0][0].plot(range(len(r["l2_norm"])), r["l2_norm"], marker="o", label=readable(name))
    axes[0][0].set(xlabel="loop step (0 = input of the loop)", ylabel="residual-stream norm (L2 per token)",
                   title="Residual-stream norm per loop step")
    axes[0][0].legend(fontsize=7)
    for ax, name in zip(axes[0][1:], with_cos):
        heatmap(ax, np.array(result[name]["increment_cosine"]), f"{readable(name)}: cos(Δᵢ, Δⱼ)", "loop step (index)",
                -1, 1)
    return result, fig


# =====================================================================================================================
# Jeddi et al. 2026 (arXiv:2602.11451): representation metrics per loop step


def representation_steps(model, idx, which):
    """The states the representation metrics compare: the end of each loop pass ('boundary'), or every effective
    layer ('all'); 'auto' is 'boundary' for a looped model and 'all' for a single pass."""
    states = collect_states(model, idx)
    if which == "auto":
        which = "boundary" if sum(label.boundary for label, _ in states) > 1 else "all"
    if which not in ("boundary", "all"):
        raise ConfigError(f"config error: --states must be auto | boundary | all, got {which!r}")
    return [h for label, h in states if which == "all" or (label.boundary and label.part == "loop")]


def run_representation(cfg, model_cfg):
    """Anisotropy, curvature and normalised prompt entropy (alpha = 1) per loop step vs normalised depth, each
    sequence a prompt, averaged over prompts; CKA between every pair of loop steps (a heatmap per model)."""
    models, batches = models_and_prompts(cfg, model_cfg)
    metrics = {"anisotropy": anisotropy, "curvature": curvature, "prompt_entropy": prompt_entropy}
    result = {}
    for name, model, _ in models:
        values, cka, n = defaultdict(list), 0.0, 0
        for idx in tqdm(batches, desc=f"representation {name}"):
            steps = representation_steps(model, idx, cfg["states"])
            for b in range(idx.size(0)):
                zs = [h[b] for h in steps]  # each (T, d)
                for key, fn in metrics.items():
                    values[key].append([fn(z) for z in zs])
                cka = cka + np.array([[linear_cka(a, c) for c in zs] for a in zs])
                n += 1
        s = len(values["anisotropy"][0])
        result[name] = dict(depth=[(i + 1) / s for i in range(s)], cka=(cka / n).tolist(),
                            **{k: np.mean(v, 0).tolist() for k, v in values.items()},
                            **{f"{k}_std": np.std(v, 0).tolist() for k, v in values.items()})
    return result, draw_representation(result, cfg)


def draw_representation(result, cfg):
    """The three metrics against depth, and each model's CKA between loop steps."""
    fig = pyplot().figure(figsize=(max(15, 4.5 * len(result)), 8))
    grid = fig.add_gridspec(2, max(3, len(result)))
    for i, (key, title, ylabel) in enumerate((("curvature", "curvature", "turning angle (rad)"),
                                              ("anisotropy", "anisotropy", "mean pairwise cosine (-1 to 1)"),
                                              ("prompt_entropy", "prompt entropy", "entropy (normalised, 0-1)"))):
        ax = fig.add_subplot(grid[0, i])
        for name, r in result.items():
            ax.plot(r["depth"], r[key], marker="o", ms=3, label=readable(name))
        ax.set(xlabel="depth (fraction of the effective layers)", ylabel=ylabel, title=title)
        ax.legend(fontsize=7)
    for i, (name, r) in enumerate(result.items()):
        heatmap(fig.add_subplot(grid[1, i]), np.array(r["cka"]), f"{readable(name)}: CKA", "loop step (index)")
    return fig


# =====================================================================================================================
# Command line

DEFAULTS = dict(
    ckpt="",  # train.py run dir(s), comma-separated; empty: a model initialised from the config keys
    names="",  # legend names for the checkpoints, comma-separated (default: the run dir names)
    out_dir="analysis",  # where NAME.png and NAME.json are written
    data_dir="",  # prepared data for the prompts; empty: the checkpoint's data_dir, else random tokens
    n_tokens=16384,  # prompt tokens read by the checkpoint analyses
    batch_size=8,  # sequences per forward pass (residual protocol: 1)
    seq_len=256,  # tokens per sequence, capped at block_size (residual protocol: 128)
    jsd_threshold=0.5,  # jsd: a token has converged below this normalised JSD (Lee et al.: 0.5)
    states="auto",  # representation: auto | boundary (end of each loop pass) | all (every effective layer)
    seed=0,  # seed of initialisation and random tokens (residual, coordcheck: the first of n_seeds seeds)
    device="auto",  # auto (cuda if there is one) | cpu | cuda
    threads=0,  # torch threads on CPU; 0 = auto, as train.py: OMP_NUM_THREADS if set, else the idle cores
    dtype="float32",  # float32 | bfloat16 (autocast around the analysis; its statistics stay in fp32)
    width=512,  # theorem1: width d of the shared ReLU MLP
    max_loops=64,  # theorem1: largest loop count N (powers of two up to it)
    trials=10,  # theorem1: random draws of (x, W) per point
    sigma=1.0,  # theorem1: W_ij ~ N(0, sigma^2 / d)
    loops=(1, 2, 4, 8, 16, 32),  # residual, coordcheck: loop counts R
    scalings=("none", "sqrt", "linear"),  # residual, coordcheck: residual multipliers 1, 1/sqrt(R), 1/R
    nonshared=True,  # residual: also the non-shared stacks (R independent copies of the n_layer block)
    n_seeds=10,  # residual, coordcheck: seeds averaged per point
    steps=10,  # residual, coordcheck: AdamW steps
    lr=1.25e-3,  # residual, coordcheck: base LR (Wang et al.'s eta_0; presets: residual 1e-4, coordcheck 1e-2)
    weight_decay=0.1,  # residual, coordcheck: AdamW weight decay on matrices
    widths=(64, 128, 256, 512),  # coordcheck: widths n_embd
)

# name -> (function, arguments placed before the user's: each analysis's own defaults, overridable)
ANALYSES = {
    "jsd": (run_jsd, []),
    "routing": (run_routing, []),
    "routing_dynamics": (run_routing_dynamics, []),
    "iteradaln": (run_iteradaln, []),
    "active_params": (run_active_params, []),
    "theorem1": (run_theorem1, []),
    # CPU size of Wang et al.'s protocol; their size on a GPU: --n_embd=768 --n_layer=12 --loops=(1,2,4,8,16,32,64)
    # lr 1e-4: the paper does not give the LR of this diagnostic; its own schedule warms up over 500 steps to 1.25e-3,
    # so its first 10 steps run at <= 2.5e-5. At 1.25e-3, 10 steps at d=256 outweigh the init and correlate even
    # the non-shared layers' increments (mean cos 0.56, vs ~0 in the paper's Fig. 3).
    "residual": (run_residual, ["--n_embd=256", "--n_layer=2", "--block_size=128", "--seq_len=128", "--batch_size=1",
                                "--mup=False", "--norm_gain=True", "--tie_embeddings=True", "--lr=1e-4"]),
    "residual_ckpt": (run_residual_ckpt, []),
    "representation": (run_representation, []),
    "coordcheck": (run_coordcheck, ["--n_layer=2", "--block_size=64", "--seq_len=64", "--batch_size=4",
                                    "--steps=4", "--lr=1e-2", "--n_seeds=2", "--loops=(1,2,4,8)", "--head_dim=32"]),
}


def to_json(obj):
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def check_settings(name, cfg, model_cfg):
    """One line for a setting that cannot work, before any model is built or read: counts and sizes, and the
    models the analysis would build from them (GPTConfig's own checks)."""
    for key, least in (("n_tokens", 1), ("batch_size", 1), ("seq_len", 1), ("seed", 0), ("width", 1),
                       ("max_loops", 1), ("trials", 1), ("n_seeds", 1), ("steps", 1), ("lr", 0), ("weight_decay", 0)):
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")
    if not 0 < cfg["jsd_threshold"] <= 1:
        raise ConfigError(f"config error: --jsd_threshold={cfg['jsd_threshold']} must be in (0, 1] (a normalised "
                          "JSD)")
    if not cfg["sigma"] > 0:
        raise ConfigError(f"config error: --sigma={cfg['sigma']} must be > 0")
    for key in ("loops", "widths"):
        if not cfg[key] or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in cfg[key]):
            raise ConfigError(f"config error: --{key}={cfg[key]!r} must be a tuple of whole numbers >= 1, e.g. "
                              f"--{key}={'(1,2,4)' if key == 'loops' else '(64,128)'}")
    if not cfg["scalings"] or not all(s in RESIDUAL_RULES for s in cfg["scalings"]):
        raise ConfigError(f"config error: --scalings={cfg['scalings']!r} must be a tuple of residual rules from "
                          f"{' | '.join(RESIDUAL_RULES)}, e.g. --scalings=('none','sqrt')")
    try:  # the models residual and coordcheck build from the keys
        if name in ("residual", "coordcheck"):
            for r in cfg["loops"]:
                for s in cfg["scalings"]:
                    looped_config(model_cfg, r, s)
                    if name == "residual" and cfg["nonshared"]:
                        dataclasses.replace(model_cfg, n_layer=model_cfg.n_layer * r, n_loop=1)
        if name == "coordcheck":
            for w in cfg["widths"]:
                dataclasses.replace(model_cfg, n_embd=w, n_head=0, d_ff=0)
    except ValueError as e:
        raise ConfigError(f"config error: {name}: {e}") from None
    try:
        os.makedirs(cfg["out_dir"], exist_ok=True)
    except OSError as e:
        raise ConfigError(f"config error: cannot write to out_dir {cfg['out_dir']!r} ({e.strerror}): choose another "
                          "--out_dir") from None


DRAWINGS = {"jsd": draw_jsd, "routing": draw_routing, "routing_dynamics": draw_routing_dynamics,
            "iteradaln": draw_iteradaln, "active_params": draw_active_params, "theorem1": draw_theorem1,
            "residual": draw_residual, "representation": draw_representation}


def redraw(path):
    """The figure of an analysis JSON written by main(), drawn again from that JSON alone (its result and config),
    next to it as .png: a record's figure regenerates without its checkpoints."""
    try:
        with open(path) as f:
            saved = json.load(f)
        draw = DRAWINGS[saved["analysis"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"analyze.py redraw: {path} is not the JSON of an analysis with a figure "
                          f"({', '.join(DRAWINGS)}): {e}") from None
    fig = draw(saved["result"], saved["config"])
    layout(fig)
    png = os.path.splitext(path)[0] + ".png"
    fig.savefig(png, dpi=120, bbox_inches="tight")
    pyplot().close(fig)
    print(f"redraw: wrote {png}")
    return png


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0)
    if argv and argv[0] == "redraw":
        if len(argv) < 2 or any(a.startswith("--") for a in argv[1:]):
            raise ConfigError("usage: python analyze.py redraw FILE.json [FILE.json ...] (analysis JSONs written by "
                              "analyze.py; each figure is written beside its JSON)")
        return [redraw(path) for path in argv[1:]]
    if not argv or argv[0] not in ANALYSES:
        raise ConfigError(f"analyze.py: name an analysis first, one of: {', '.join(ANALYSES)} (python analyze.py "
                          "--help describes them)" + (f"; not {argv[0]!r}" if argv else ""))
    name = argv[0]
    fn, preset = ANALYSES[name]
    if preset and ("--help" in argv or "-h" in argv):
        print(f"{name} presets, applied before your arguments: {' '.join(preset)}\n")
    cfg, model_cfg = configure(DEFAULTS, GPTConfig, preset + argv[1:], doc_source=os.path.abspath(__file__),
                               choices=dict(states=("auto", "boundary", "all"), dtype=("float32", "bfloat16")))
    check_settings(name, cfg, model_cfg)
    cfg["device"] = use_device(cfg)
    torch.manual_seed(cfg["seed"])
    t0 = time.time()
    with torch.autocast(torch.device(cfg["device"]).type, dtype=torch.bfloat16, enabled=cfg["dtype"] == "bfloat16"):
        result, fig = fn(cfg, model_cfg)
    layout(fig)
    png, js = (os.path.join(cfg["out_dir"], f"{name}.{ext}") for ext in ("png", "json"))
    # the commit before anything is written: rewriting a committed JSON or PNG would make the tree read as dirty
    prov = run_provenance([d for d in cfg["ckpt"].split(",") if d], "analyze.py", argv)
    fig.savefig(png, dpi=120, bbox_inches="tight")
    pyplot().close(fig)
    with open(js, "w") as f:
        json.dump(to_json(dict(analysis=name, config=cfg, result=result, provenance=prov)), f, indent=1)
    print(f"{name}: wrote {png} and {js} in {time.time() - t0:.1f}s")
    return result


if __name__ == "__main__":
    run(main)
