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
coordcheck build and train their own models from initialisation: their code is residual_growth.py.

One code path: hidden states come from the model's own depth walk (model.states -> (Label, h) per effective
layer, model.readout for the logit lens) and routing from routing.record_routing; nothing here re-implements a forward.
"""
import dataclasses
import json
import math
import os
import sys
import time
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402

import kernels  # noqa: E402
import moe  # noqa: E402
import routing  # noqa: E402
from configurator import ConfigError, configure, run  # noqa: E402
from checkpoint import load_model, run_provenance  # noqa: E402
from distributed import use_device  # noqa: E402
from figures import heatmap, layout, readable  # noqa: E402
from loop import RESIDUAL_RULES  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from residual_growth import (draw_residual, draw_theorem1, increment_cosine, loop_steps,  # noqa: E402
                             looped_config, run_coordcheck, run_residual, run_theorem1)
from scaling import capacity_report  # noqa: E402

LN2 = math.log(2.0)

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
# Collecting states and records: the model's own walk (its states and conditioning), routing.py's records


def collect_states(model, idx):
    """(Label, h) after every effective layer of one forward pass, from the model's depth walk (no grad)."""
    with torch.no_grad():
        return model.states(idx)


def routing_records(model, batches):
    """{(layer, loop): {"experts": (N, k), "gates": (N, k), "router_input": (N, C)}} over every token of `batches`,
    recorded by routing.record_routing during ordinary forward passes."""
    out = defaultdict(lambda: defaultdict(list))
    for idx in tqdm(batches, desc="routing", leave=False):
        with torch.no_grad(), routing.record_routing(model) as records:
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
        for label, h, cond in model.walk(model.embed(idx), model.rope(0, idx.size(1))):
            if cond is not None:
                records.append((label, {branch: [None if t is None else torch.broadcast_to(t, h.shape) for t in kept]
                                        for branch, kept in cond.out.items()}))
    return records


# =====================================================================================================================
# Inputs: models (checkpoints or fresh) and prompts


def load_models(cfg, model_cfg):
    """[(name, model, checkpoint dict or None)]: each run dir of --ckpt, or one model initialised from the config."""
    if not cfg["ckpt"]:
        model = kernels.on_cpu(GPT(model_cfg).init_weights(cfg["seed"]).to(cfg["device"]).eval(), cfg["device"])
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
    from data import TokenData, default_data_dir, hf_of
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
        return [x.to(cfg["device"]) for x, _ in data.val_batches(B, T, cfg["n_tokens"])]
    if cfg["data_dir"]:
        raise ConfigError(f"no prepared data in {cfg['data_dir']} (meta.json missing): run data.py first, or "
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
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in result.items():
        x = [row["label"]["index"] + 1 for row in r["layers"]]
        m, s = np.array([row["mean"] for row in r["layers"]]), np.array([row["std"] for row in r["layers"]])
        line, = axes[0].plot(x, m, marker="o", ms=3, label=readable(name))
        axes[0].fill_between(x, m - s, m + s, color=line.get_color(), alpha=0.2)
        axes[1].plot(x, [row["frac_converged"] for row in r["layers"]], marker="o", ms=3, color=line.get_color())
        for b in boundaries([row["label"] for row in r["layers"]]):
            for ax in axes:
                ax.axvline(b + 0.5, color=line.get_color(), ls=":", lw=1)
    axes[0].set(xlabel="effective layer (index)", ylabel="JSD to the final layer (normalised, 0-1)",
                title="Mean JSD (± std over sequences)")
    axes[1].set(xlabel="effective layer (index)", ylabel=f"tokens with JSD < {cfg['jsd_threshold']:g} (fraction)",
                title="Converged tokens",
                ylim=(0, 1.02))
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
    fig, axes = plt.subplots(1, len(result), figsize=(6 * len(result), 4), squeeze=False)
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
        ax.set(xlabel="physical layer (index)", ylabel="tokens (%)", title=f"{readable(name)}: experts on pass 1 vs 2",
               ylim=(0, 100), xticks=[int(layer) + 1 for layer in layers])
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
    fig, axes = plt.subplots(2 * len(result), cols, figsize=(3.2 * cols, 6 * len(result)), squeeze=False)
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
                        "iteration (pass)", first=0)
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
    fig, axes = plt.subplots(len(result), len(stats), figsize=(3.3 * len(stats), 3 * len(result)), squeeze=False)
    for m, (name, rows) in enumerate(result.items()):
        for ax, stat in zip(axes[m], stats):
            series = defaultdict(list)
            for row in rows:
                if stat in row:
                    series[f"L{row['layer'] + 1} {row['branch']}"].append((row["loop"], row[stat]))
            for key, pts in series.items():
                ax.plot(*zip(*sorted(pts)), marker="o", ms=3, label=key)
            ax.set(title=readable(name), xlabel="iteration (pass)", ylabel=STAT_NAMES[stat],
                   xticks=sorted({row["loop"] for row in rows}))
            if series:
                ax.legend(fontsize=6)
    return fig


def run_active_params(cfg, model_cfg):
    """Expected unique experts per token after K = 1..n_loop iterations of each shared MoE layer (measured from the
    routing records), and the model's active attention and FFN parameters A_attn, A_ffn and rho = A_attn / A_ffn
    they imply (scaling.capacity_report: attention counted once, a looped MoE layer's unique experts plus its shared
    experts) vs K (Chen et al. 2026, App. A.4, Fig. 3). rho* is K = 1, the matched non-looped MoE."""
    models, batches = models_and_prompts(cfg, model_cfg)
    result = {}
    for name, model, _ in models:
        recs, layers = looped_routing(name, model, batches)
        uniq = {str(layer): routing.unique_experts([recs[(layer, k)]["experts"] for k in loops], model.config.n_expert)
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
    fig, axes = plt.subplots(1, len(result), figsize=(5.5 * len(result), 4), squeeze=False)
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
# Wang et al. 2026 (arXiv:2606.18524): the residual stream of trained checkpoints (from initialisation:
# residual_growth.py, whose studies the command line below runs too)


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
    fig, axes = plt.subplots(1, 1 + len(with_cos), figsize=(5 * (1 + len(with_cos)), 4), squeeze=False)
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
    fig = plt.figure(figsize=(max(15, 4.5 * len(result)), 8))
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
    plt.close(fig)
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
    plt.close(fig)
    with open(js, "w") as f:
        json.dump(to_json(dict(analysis=name, config=cfg, result=result, provenance=prov)), f, indent=1)
    print(f"{name}: wrote {png} and {js} in {time.time() - t0:.1f}s")
    return result


if __name__ == "__main__":
    run(main)
