"""
How the residual stream of a looped model grows with the loop count, from initialisation (Wang et al. 2026,
arXiv:2606.18524): the exact ReLU model of their Theorem 1, their Transformer protocol (fresh models trained a few
AdamW steps, looped against non-shared stacks, per residual-scaling rule), and the coordinate check of muP and the
residual rules (as microsoft/mup's get_coord_data). Every study builds its own models; none reads a checkpoint.
analyze.py runs them and writes their figures and JSON:

    python analyze.py theorem1                             # Theorem 1's model: measured norm against the prediction
    python analyze.py residual [config.py] [--key=value]   # the protocol: norm, output change, increment cosines
    python analyze.py coordcheck                           # mean |activation| per module vs width and vs loop count

The same measures of trained checkpoints (residual norm per loop step, increment cosines) are analyze.py's
residual_ckpt, which reads the loop steps with loop_steps below.
"""
import dataclasses
import math
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402

import kernels  # noqa: E402
from figures import heatmap  # noqa: E402
from loop import residual_multiplier  # noqa: E402
from model import GPT  # noqa: E402
from optim import make_optimizer, train_step  # noqa: E402


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
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
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


def nonshared_model(model_cfg, n_loop, scaling):
    """Wang et al.'s non-shared deep stack: n_loop independent copies of the n_layer block (effective depth
    n_layer * n_loop, one pass), every branch multiplied by n_loop^-alpha as the looped model with n_loop passes
    would be. A one-pass GPT of n_layer * n_loop layers built with that multiplier (GPT's res_scale)."""
    cfg = dataclasses.replace(model_cfg, n_layer=model_cfg.n_layer * n_loop, n_loop=1, residual_scaling="none")
    return GPT(cfg, res_scale=residual_multiplier(looped_config(model_cfg, n_loop, scaling)))


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
            if kind == "looped":
                model = GPT(looped_config(model_cfg, n_loop, scaling)).init_weights(seed).to(cfg["device"])
                every = None
            else:
                model = nonshared_model(model_cfg, n_loop, scaling).init_weights(seed).to(cfg["device"])
                every = model_cfg.n_layer
            kernels.on_cpu(model, cfg["device"])
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
    fig, axes = plt.subplots(len(kinds), 4, figsize=(19, 4 * len(kinds)), squeeze=False)
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
    from model import Block
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
            model = kernels.on_cpu(GPT(mcfg).init_weights(seed).to(cfg["device"]), cfg["device"])
            traces.append(coord_data(model, cfg, seed))
        result[title][str(x)] = {k: np.mean([t[k] for t in traces], 0).tolist() for k in traces[0]}
    slopes = {}  # d log|act| / d log width at the last step: 0 means width-independent
    for title, per_x in result.items():
        xs = np.log([float(x) for x in per_x])
        slopes[title] = {k: float(np.polyfit(xs, np.log([v[k][-1] for v in per_x.values()]), 1)[0])
                         for k in next(iter(per_x.values()))} if len(xs) > 1 else {}
    rows, steps = list(result), cfg["steps"]
    fig, axes = plt.subplots(len(rows), steps, figsize=(3.2 * steps, 2.8 * len(rows)), squeeze=False)
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
