"""
Early exit and elastic depth, the studies: how much compute a token may save, what it costs in quality, how fast it
decodes. The mechanism they measure (exit candidates and their FLOPs, the criteria, the exit walk, decoding with
exits) is exits.py.

    python early_exit.py --ckpt=out/base,out/looped --criteria=entropy,kl      # tau sweep, Pareto, table, PNG
    python early_exit.py --mode=elastic --ckpt=out/loopformer --budget=4      # every budget, every schedule of M=4
    python early_exit.py --mode=bench --ckpt=out/looped --fill=propagate      # decoding tokens/s vs FLOPs

The tau sweep (--mode=exit) scores every candidate with every criterion in one teacher-forced pass (exits.py's
scored_candidates), then turns any number of thresholds into depth and FLOPs saved against perplexity, with the
Pareto frontier of each criterion. Perplexity at 5/10/20/30% saved is interpolated linearly in mean NLL (log
perplexity) between neighbouring points of the Pareto frontier: mixing the two thresholds token by token at random
achieves exactly that point.

Elastic depth (Jeddi et al. 2026, arXiv:2602.11451, §4.4), --mode=elastic: the study of every budget and
every schedule of one.

Decoding speed (--mode=bench): tokens per second of exits.generate_with_exit at thresholds that reach 10% and 30%
FLOPs saved on the validation set, against full depth, beside the speed-up the executed FLOPs predict.
"""
import itertools
import json
import math
import os
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch

from runs import load_model, run_provenance, use_device
from configurator import ConfigError, configure
from data import TokenData, default_data_dir, hf_of
from exits import (CRITERIA, FILLS, check_criterion, decode_criteria, decode_flops, depth_labels, exit_candidates,
                   exit_costs, generate_with_exit, log_probs, readout, scored_candidates, threshold_exits)
from analyze import layout, readable

TARGETS = (0.05, 0.10, 0.20, 0.30)  # FLOPs-saved levels of Lee et al.'s table


# ---------------------------------------------------------------------------------------------------------------
# teacher-forced evaluation: one full pass, statistics at every candidate, then any number of thresholds


@torch.no_grad()
def exit_records(model, x, y, cands, criteria):
    """One full forward pass over x (B, T) with targets y. Returns, at each candidate exit and the full depth
    (K+1 rows, row K = full depth), per token: nll, top1 (the argmax) and conf (1 - its probability), and the
    scores {rule: (K, B*T)} of the rules among `criteria` (the bounds derive theirs in sweep())."""
    h = model.embed(x)
    rules = [c for c in criteria if CRITERIA[c].bound is None]
    nll, top1, conf, scores = [], [], [], {c: [] for c in rules}
    for cand in scored_candidates(model, h, model.walk(h, model.rope(0, x.size(1))), cands, rules, read_all=True):
        logp = cand.logp if cand.logp is not None else log_probs(readout(model, cand.h, cand.label))  # (B, T, V)
        nll.append(-logp.gather(-1, y.unsqueeze(-1)).squeeze(-1).flatten())
        top_logp, top = logp.max(-1)
        top1.append(top.flatten())
        conf.append(1.0 - top_logp.exp().flatten())
        for c, s in (cand.scores or {}).items():
            scores[c].append(s.flatten())
    return dict(nll=torch.stack(nll).cpu(), top1=torch.stack(top1).cpu(), conf=torch.stack(conf).cpu(),
                scores={c: torch.stack(v).cpu() if v else None for c, v in scores.items()})


def collect(model, batches, cands, criteria, progress=True):
    """exit_records over many batches, concatenated along tokens."""
    parts, t0, n = [], time.time(), 0
    for i, (x, y) in enumerate(batches):
        dev = next(model.parameters()).device
        parts.append(exit_records(model, x.to(dev), y.to(dev), cands, criteria))
        n += x.numel()
        if progress:
            print(f"\r  {n:,} tokens, {n / (time.time() - t0):,.0f} tok/s", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    if not parts:
        raise ValueError("no validation batches: check data_dir, eval_tokens and block_size")
    scores = {c: torch.cat([p["scores"][c] for p in parts], 1) for c in parts[0]["scores"]
              if parts[0]["scores"][c] is not None}
    return dict(scores=scores, **{key: torch.cat([p[key] for p in parts], 1) for key in ("nll", "top1", "conf")})


def sweep(records, criterion, depth, flops, full_flops, n_tau=64):
    """(tau, perplexity, depth saved, FLOPs saved, exit histogram) for each threshold of the grid."""
    nll = records["nll"].double()
    K, N = nll.size(0) - 1, nll.size(1)
    depth_t = torch.tensor(depth, dtype=torch.float64)
    flops_t = torch.tensor(flops, dtype=torch.float64)
    bound = CRITERIA[criterion].bound
    exits = bound(records, depth_t, n_tau) if bound else threshold_exits(records["scores"][criterion], n_tau)
    points = []
    for tau, k in exits:
        chosen = nll.gather(0, k[None].long())[0]
        points.append(dict(tau=tau, ppl=math.exp(chosen.mean().item()),
                           saved_depth=1.0 - depth_t[k.long()].mean().item() / depth_t[-1].item(),
                           saved_flops=1.0 - flops_t[k.long()].mean().item() / full_flops,
                           exits=(torch.bincount(k.long(), minlength=K + 1).double() / N).tolist()))
    return points


def frontier(points, key):
    """The Pareto frontier (more saved, lower perplexity), sorted by saved ascending."""
    best, out = math.inf, []
    for p in sorted(points, key=lambda p: (-p[key], p["ppl"])):
        if p["ppl"] < best:
            best = p["ppl"]
            out.append(p)
    return out[::-1]


def ppl_at(front, key, target):
    """Perplexity at `target` saved, linear in log perplexity between frontier neighbours; None beyond reach."""
    xs = [p[key] for p in front]
    if not front or target > xs[-1] + 1e-12:
        return None
    if target <= xs[0]:
        return front[0]["ppl"]
    j = next(i for i, x in enumerate(xs) if x >= target)
    a, b = front[j - 1], front[j]
    w = (target - a[key]) / (b[key] - a[key])
    return math.exp((1 - w) * math.log(a["ppl"]) + w * math.log(b["ppl"]))


def evaluate_exits(model, batches, criteria=("entropy",), every_layer=False, n_tau=64, progress=True):
    """The whole study for one model: per criterion the sweep, both frontiers and the table rows."""
    for c in criteria:
        check_criterion(c)
    labels = depth_labels(model)
    cands = exit_candidates(model, labels, every_layer)
    batches = list(batches)
    context = (batches[0][0].size(1) + 1) / 2  # mean causal context of a teacher-forced window
    records = collect(model, batches, cands, criteria, progress)
    full_ppl = math.exp(records["nll"][-1].double().mean().item())
    result = dict(full_ppl=full_ppl, tokens=records["nll"].size(1), effective_depth=len(labels),
                  candidates=[labels[i]._asdict() for i in cands], criteria={})
    for c in criteria:
        depth, flops, full = exit_costs(model, labels, cands, c, context)
        pts = sweep(records, c, depth, flops, full, n_tau)
        entry = dict(points=pts)
        for key in ("saved_depth", "saved_flops"):
            front = frontier(pts, key)
            entry[f"frontier_{key}"] = front
            entry[f"table_{key}"] = {f"{t:.2f}": ppl_at(front, key, t) for t in TARGETS}
        result["criteria"][c] = entry
    return result


# ---------------------------------------------------------------------------------------------------------------
# benchmark: decoding speed against full depth


def benchmark_decoding(model, prompts, new_tokens, taus, criterion="entropy", fill="propagate", repeats=3,
                       every_layer=False):
    """Tokens/s of greedy decoding at full depth and at each tau; measured speed-up / the speed-up predicted by
    the FLOPs actually executed (target >= 0.8). prompts: (B, T) token ids on the model's device. The settings
    are timed round-robin, `repeats` times each, and the median counts, so drifting machine load hits all alike."""
    settings = [(None, 0.0)] + [(criterion, tau) for tau in taus]
    for crit, tau in settings:  # warm-up (allocator, kernels, compiled blocks)
        generate_with_exit(model, prompts, min(8, new_tokens), crit, tau, fill, every_layer)
    times, runs = [[] for _ in settings], [None] * len(settings)
    for _ in range(repeats):
        for i, (crit, tau) in enumerate(settings):
            runs[i] = generate_with_exit(model, prompts, new_tokens, crit, tau, fill, every_layer)
            times[i].append(runs[i]["decode_s"])
    steps = (new_tokens - 1) * prompts.size(0)  # decoded tokens (the first new token comes from the prefill)
    tps = [steps / float(np.median(t)) for t in times]
    rows = []
    for (crit, tau), res, rate in zip(settings, runs, tps):
        flops_run, flops_full = decode_flops(model, res["labels"], res["stats"])
        measured, predicted = rate / tps[0], flops_full / flops_run
        rows.append(dict(tau=tau, criterion=crit, tokens_per_s=rate, speedup=measured, predicted=predicted,
                         ratio=measured / predicted, saved_flops=1 - flops_run / flops_full,
                         exited=sum(s["exited"] for s in res["stats"]) / max(len(res["stats"]), 1),
                         same_tokens_as_full=bool(torch.equal(res["tokens"], runs[0]["tokens"]))))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Elastic depth (Jeddi et al. 2026, arXiv:2602.11451, §3.2 and §4.4), --mode=elastic:
# evaluate a looped model at every budget M <= L with the uniform schedule (or a given one) and enumerate every
# schedule of a budget: the compositions of L into M parts, step sizes k/L (C(L-1, M-1) of them); report the spread
# and the winners. loop.py runs a schedule (its elastic depth); this section chooses and scores them.

def compositions(L, M):
    """Every ordered way to write L as M positive integers (a schedule of M steps of sizes k/L summing to 1);
    C(L-1, M-1) of them, in lexicographic order of the cut points."""
    if not 1 <= M <= L:
        raise ValueError(f"a budget M must satisfy 1 <= M <= L, got M={M}, L={L}")
    out = []
    for cuts in itertools.combinations(range(1, L), M - 1):
        edges = (0,) + cuts + (L,)
        out.append(tuple(b - a for a, b in zip(edges, edges[1:])))
    return out


def schedule_steps(text):
    """'4,2,1,1' -> (4, 2, 1, 1): positive integers, or one line saying what a schedule is."""
    try:
        steps = tuple(int(s) for s in text.replace(" ", "").split(",") if s)
    except ValueError:
        steps = ()
    if not steps or any(s <= 0 for s in steps):
        raise ConfigError(f"config error: --schedule={text!r} must be positive integers, comma-separated (steps in "
                          "units of 1/n_loop), e.g. 4,2,1,1")
    return steps


def parse_schedule(text, L):
    """'4,2,1,1' (units of 1/L) -> (4, 2, 1, 1), checked to sum to L."""
    steps = schedule_steps(text)
    if sum(steps) != L:
        raise ConfigError(f"--schedule={text!r} must be positive integers (units of 1/{L}) summing to "
                          f"n_loop={L}")
    return steps


@torch.no_grad()
def schedule_loss(model, batches, schedule):
    """Mean validation NLL of the model run with `schedule` (step sizes summing to 1, one pass each; loop.py's
    elastic depth). A one-pass model has the one schedule [1.0]: it is the fixed-depth baseline at M = 1."""
    total, n = 0.0, 0
    dev = next(model.parameters()).device
    for x, y in batches:
        total += model(x.to(dev), y.to(dev), schedule=list(schedule))[1].item() * x.numel()
        n += x.numel()
    return total / n


def elastic_study(model, batches, budget=0, schedule=None, progress=True):
    """Perplexity at every budget M <= L (uniform steps 1/M, or the given schedule for its own length) and, for
    `budget`, at every composition of L into that many steps: spread and the best and worst schedules."""
    L = model.config.n_loop
    batches = list(batches)
    result = dict(L=L, budgets={})
    for M in range(1, L + 1):
        sched = [1.0 / M] * M
        result["budgets"][M] = math.exp(schedule_loss(model, batches, sched))
        if progress:
            print(f"  M={M}: ppl {result['budgets'][M]:.3f}", file=sys.stderr)
    if schedule:
        result["schedule"] = dict(steps=schedule, ppl=math.exp(schedule_loss(model, batches,
                                                                         [s / L for s in schedule])))
    if budget:
        rows = []
        for comp in compositions(L, budget):
            rows.append(dict(steps=comp, ppl=math.exp(schedule_loss(model, batches, [s / L for s in comp]))))
        rows.sort(key=lambda r: r["ppl"])
        result["all_schedules"] = rows
        result["spread"] = rows[-1]["ppl"] - rows[0]["ppl"]
        result["best"], result["worst"] = rows[:5], rows[-5:]
        # do winners take larger steps early? (Jeddi et al.: coarse early, fine late) mean first-half minus
        # second-half step size over the top fifth
        top = rows[:max(1, len(rows) // 5)]
        result["front_loading_of_best"] = float(np.mean([np.mean(r["steps"][:budget // 2 or 1]) -
                                                         np.mean(r["steps"][budget // 2:]) for r in top]))
    return result


def draw_elastic(results):
    """Perplexity at each budget M (uniform steps), one line per model; and for a model studied at one budget, every
    schedule of that budget, best to worst (dots: the spread is small against the perplexity, so no bars cut short)."""
    import matplotlib  # heavy: only when a figure is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (figures only)
    with_schedules = [(n, r) for n, r in results.items() if "all_schedules" in r]
    fig, axes = plt.subplots(1, 1 + len(with_schedules), figsize=(5.5 * (1 + len(with_schedules)), 4.2),
                             squeeze=False)
    ax = axes[0][0]
    for name, r in results.items():
        Ms = sorted(r["budgets"], key=int)
        ax.plot([int(m) for m in Ms], [r["budgets"][m] for m in Ms], "o-", label=readable(name))
    ax.set_xticks(sorted({int(m) for r in results.values() for m in r["budgets"]}))
    ax.set_xlabel("budget M (loop steps, uniform schedule)")
    ax.set_ylabel(readable("val_ppl"))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    for ax, (name, r) in zip(axes[0][1:], with_schedules):
        rows = sorted(r["all_schedules"], key=lambda row: row["ppl"])
        ax.plot(range(1, len(rows) + 1), [row["ppl"] for row in rows], "o", color="C0")
        if len(rows) <= 12:  # few enough to name each schedule by its steps (units of 1/L)
            for k, row in enumerate(rows, 1):
                ax.annotate("+".join(map(str, row["steps"])), (k, row["ppl"]), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_title(f"{readable(name)}: every schedule of {len(rows[0]['steps'])} steps (in 1/{r['L']})",
                     fontsize=9)
        ax.set_xticks(range(1, len(rows) + 1))  # ranks are whole numbers
        ax.set_xlim(0.5, len(rows) + 0.7)  # room for the last schedule's name
        ax.set_xlabel("schedule, best to worst (rank)")
        ax.set_ylabel(readable("val_ppl"))
        ax.grid(alpha=0.3)
    layout(fig)
    return fig


# ---------------------------------------------------------------------------------------------------------------
# command line

ckpt = ""  # run directory (or ckpt.pt); several as a comma-separated list, one curve each
names = ""  # comma-separated legend names (default: the run directories' names)
mode = "exit"  # exit (tau sweep: Pareto frontiers and table) | elastic (budgets and schedules) | bench (decode speed)
criteria = "entropy"  # comma-separated: entropy, kl, change, agree, oracle, optimal (bench: the first one)
every_layer = False  # looped models: every loop layer is a candidate exit, not only loop boundaries (ablation)
eval_tokens = 65536  # validation tokens scored (Lee et al. used 800K)
batch_size = 8  # sequences per evaluation batch
block_size = 0  # evaluation window in tokens; 0 = the model's block_size
n_tau = 64  # thresholds per criterion in the sweep
data_dir = ""  # token files; "" = the first checkpoint's training data
out_dir = ""  # where early_exit_<mode>.json and .png go; "" = the first run's directory
device = "auto"  # auto (cuda if there is one) | cpu | cuda | cuda:N
threads = 0  # torch threads on CPU; 0 = auto, as train.py: OMP_NUM_THREADS if set, else the idle cores
dtype = "float32"  # float32 | bfloat16 (autocast)
budget = 0  # elastic: enumerate every schedule with this many steps (0 = the per-budget curve only)
schedule = ""  # elastic: one more schedule to evaluate, in units of 1/L, e.g. "4,2,1,1"
fill = "propagate"  # bench: filling the KV slots of skipped layers: propagate | recompute
taus = ""  # bench: comma-separated thresholds; "" = those reaching 10% and 30% FLOPs saved on the val set
prompt_len = 64  # bench: prompt tokens (taken from the validation set)
new_tokens = 128  # bench: tokens decoded per run
bench_batch = 1  # bench: sequences decoded together (a batch exits where all its rows may)
repeats = 3  # bench: timed runs per setting (the median counts)
redraw = ""  # comma-separated exit or elastic JSONs this script wrote: draw their figures again beside them, and stop


def load_runs(cfg):
    paths = [p for p in cfg["ckpt"].split(",") if p]
    if not paths:
        raise ConfigError("config error: give --ckpt=RUN_DIR (several: --ckpt=A,B,C)")
    names = [n for n in cfg["names"].split(",") if n] or [os.path.basename(os.path.normpath(p)) for p in paths]
    if len(names) != len(paths):
        raise ConfigError(f"config error: --names has {len(names)} entries for {len(paths)} checkpoints: give one "
                          "name per checkpoint (or none)")
    runs = []
    for name, path in zip(names, paths):
        model, state = load_model(path, cfg["device"])
        runs.append((name, path, model, state))
    return runs


def validation(cfg, runs):
    tc = runs[0][3].get("train_config", {})
    data_dir = cfg["data_dir"] or tc.get("data_dir") or default_data_dir(tc.get("data_source", "offline"),
                                                                         tc.get("tokenizer", "gpt2"), hf_of(tc))
    if not os.path.exists(os.path.join(data_dir, "meta.json")):
        raise ConfigError(f"no prepared data in {data_dir}: run `python prepare.py` or pass --data_dir")
    data = TokenData(data_dir)
    for name, _, model, _ in runs:
        if model.config.vocab_size != data.vocab_size:
            raise ConfigError(f"{name} has vocab_size {model.config.vocab_size}, {data_dir} {data.vocab_size}: "
                              "every checkpoint must use the data's tokenizer")
    T = cfg["block_size"] or min(m.config.block_size for _, _, m, _ in runs)
    for name, _, model, _ in runs:
        if T > model.config.block_size:
            raise ConfigError(f"config error: --block_size={T} is longer than {name}'s context "
                              f"(block_size={model.config.block_size}): lower it (0 = the models' own)")
    if len(data.splits["val"]) <= T or cfg["eval_tokens"] < T:
        raise ConfigError(f"config error: no validation window of {T} tokens: {data_dir} holds "
                          f"{len(data.splits['val']):,} val tokens and --eval_tokens={cfg['eval_tokens']}; raise "
                          "--eval_tokens or lower --block_size")
    return data, T


def autocast(cfg):
    if cfg["dtype"] == "bfloat16":
        return torch.autocast(cfg["device"].split(":")[0], dtype=torch.bfloat16)
    if cfg["dtype"] != "float32":
        raise ConfigError(f"config error: --dtype={cfg['dtype']!r} is not one of float32 | bfloat16")
    return nullcontext()


def print_table(results, key):
    what = {"saved_depth": "fraction of effective depth skipped (Lee et al.'s measure)",
            "saved_flops": "true forward FLOPs, exit-check readouts included"}[key]
    print(f"\nPerplexity at FLOPs saved = {what}")
    print(f"{'model [criterion]':34s} {'full':>7s} " + " ".join(f"{t:>7.0%}" for t in TARGETS))
    for name, r in results.items():
        for c, e in r["criteria"].items():
            row = [e[f"table_{key}"][f"{t:.2f}"] for t in TARGETS]
            print(f"{name + ' [' + c + ']':34s} {r['full_ppl']:7.2f} "
                  + " ".join(f"{v:7.2f}" if v is not None else "      -" for v in row))


def draw_exits(results):
    """The Pareto frontiers of an exit study: perplexity against the FLOPs saved, in Lee et al.'s measure (depth
    skipped) and in true FLOPs (exit checks included), one line per model (and criterion); a star at full depth."""
    import matplotlib  # heavy: only when a figure is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (figures only)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles, markers = ["-", "--", ":", "-."], "os^vDx"
    one_model = len(results) == 1
    for ax, key, title in zip(axes, ("saved_depth", "saved_flops"),
                              ("depth skipped (Lee et al.'s measure)", "true FLOPs saved (checks included)")):
        for i, (name, r) in enumerate(results.items()):
            for j, (c, e) in enumerate(r["criteria"].items()):
                front = [p for p in e[f"frontier_{key}"] if p[key] >= 0]
                label = readable(name) if len(r["criteria"]) == 1 else f"{readable(name)}, {c}"
                color = f"C{j}" if one_model else f"C{i}"  # one model: a colour per criterion
                ax.plot([100 * p[key] for p in front], [p["ppl"] for p in front], styles[j % 4], color=color,
                        marker=markers[j % 6], ms=2.5, label=label)
            color = "k" if one_model else f"C{i}"
            ax.plot([0], [r["full_ppl"]], "*", color=color, ms=9, clip_on=False, zorder=5)  # the plain full forward
        ax.set_yscale("log")
        ax.set_xlim(0, None)
        ax.set_xlabel(f"FLOPs saved: {title} (%)")
        ax.set_ylabel(readable("val_ppl"))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, title="star: full depth", title_fontsize=8)
    layout(fig)
    return fig


def save_figure(fig, path):
    fig.savefig(path, dpi=130)
    import matplotlib.pyplot as plt  # (figures only)
    plt.close(fig)


def write_json(path, obj):
    def clean(o):
        if isinstance(o, float) and not math.isfinite(o):
            return "inf" if o > 0 else "-inf"
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o
    with open(path, "w") as f:
        json.dump(clean(obj), f, indent=1)


def output_prefix(cfg, runs, name):
    """out_dir/name (out_dir made if missing; default: the first run's directory)."""
    first = runs[0][1] if os.path.isdir(runs[0][1]) else os.path.dirname(runs[0][1])
    try:
        os.makedirs(cfg["out_dir"] or first, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"config error: cannot write to {cfg['out_dir'] or first!r} ({e.strerror}): choose "
                          "another --out_dir") from None
    return os.path.join(cfg["out_dir"] or first, name)


def redraw_study(path):
    """The figure of an exit or elastic study JSON (this script's output), drawn again beside it as .png."""
    try:
        with open(path) as f:
            results = json.load(f)["results"]
        draw = draw_exits if all("criteria" in r for r in results.values()) else draw_elastic
        fig = draw(results)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"early_exit.py --redraw: {path} is not an exit or elastic study's JSON ({e})") from None
    png = os.path.splitext(path)[0] + ".png"
    save_figure(fig, png)
    print(f"redraw: wrote {png}")
    return png


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    # the command-line keys are the lower-case simple globals above (constants are upper case)
    defaults = {k: v for k, v in globals().items() if k.islower() and not k.startswith("_")}
    cfg, _ = configure(defaults, None, argv, doc_source=__file__,
                       choices=dict(mode=("exit", "elastic", "bench"), fill=FILLS, dtype=("float32", "bfloat16")))
    if cfg["redraw"]:  # a committed study's figure, from its JSON alone
        return [redraw_study(path) for path in cfg["redraw"].split(",")]
    crits = check_settings(cfg)
    cfg["device"] = use_device(cfg)
    torch.manual_seed(1337)
    runs = load_runs(cfg)
    data, T = validation(cfg, runs)
    check_models(cfg, runs, T)
    prefix = output_prefix(cfg, runs, f"early_exit_{cfg['mode']}")
    batches = [(torch.from_numpy(x), torch.from_numpy(y))
               for x, y in data.val_batches(cfg["batch_size"], T, cfg["eval_tokens"])]
    results = {}
    with autocast(cfg):
        for name, path, model, _ in runs:
            print(f"{name}: {path}", file=sys.stderr)
            if cfg["mode"] == "exit":
                results[name] = evaluate_exits(model, batches, crits, cfg["every_layer"], cfg["n_tau"])
            elif cfg["mode"] == "elastic":  # budget and schedule checked (check_models)
                sched = parse_schedule(cfg["schedule"], model.config.n_loop) if cfg["schedule"] else None
                results[name] = elastic_study(model, batches, cfg["budget"], sched)
            else:
                results[name] = bench_one(cfg, model, batches, data, crits[0] if crits else "entropy")
    meta = dict(config=cfg, tokens=sum(x.numel() for x, _ in batches), block_size=T,
                provenance=run_provenance([path for _, path, _, _ in runs], "early_exit.py", argv))
    write_json(prefix + ".json", dict(meta=meta, results=results))
    if cfg["mode"] == "exit":
        print_table(results, "saved_depth")
        print_table(results, "saved_flops")
        save_figure(draw_exits(results), prefix + ".png")
    elif cfg["mode"] == "elastic":
        for name, r in results.items():
            print(f"\n{name}: ppl by budget " + ", ".join(f"M={m}: {p:.2f}" for m, p in r["budgets"].items()))
            if "all_schedules" in r:
                print(f"  {len(r['all_schedules'])} schedules of M={cfg['budget']}: spread {r['spread']:.3f} ppl")
                rows = r["all_schedules"]
                for row in rows if len(rows) <= 8 else rows[:5] + rows[-2:]:
                    print(f"  {str(row['steps']):24s} {row['ppl']:.3f}")
        save_figure(draw_elastic(results), prefix + ".png")
    else:
        for name, rows in results.items():
            print(f"\n{name}: decoding {cfg['new_tokens']} tokens x {cfg['bench_batch']} ({cfg['fill']} fill)")
            print(f"{'tau':>9s} {'exited':>7s} {'saved':>7s} {'tok/s':>9s} {'speedup':>8s} {'predicted':>9s} "
                  f"{'ratio':>6s}")
            for r in rows:
                print(f"{r['tau']:9.4g} {r['exited']:7.1%} {r['saved_flops']:7.1%} {r['tokens_per_s']:9.1f} "
                      f"{r['speedup']:8.3f} {r['predicted']:9.3f} {r['ratio']:6.2f}")
    print(f"\nwrote {prefix}.json" + ("" if cfg["mode"] == "bench" else f" and {prefix}.png"))


def check_settings(cfg):
    """One line for a setting of the command line that cannot work, before any checkpoint is read; the criteria."""
    for key, least in (("eval_tokens", 1), ("batch_size", 1), ("block_size", 0), ("n_tau", 1), ("budget", 0),
                       ("prompt_len", 1), ("new_tokens", 2), ("bench_batch", 1), ("repeats", 1)):
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")
    crits = [c for c in cfg["criteria"].split(",") if c]
    for c in crits:
        if c not in CRITERIA:
            raise ConfigError(f"config error: unknown criterion {c!r} in --criteria: use a comma-separated list of "
                              f"{', '.join(CRITERIA)}")
    if cfg["mode"] == "exit" and not crits:
        raise ConfigError("config error: --criteria names no criterion: use a comma-separated list of "
                          f"{', '.join(CRITERIA)}")
    if cfg["mode"] == "bench" and crits and crits[0] not in decode_criteria():
        raise ConfigError(f"config error: --mode=bench decodes with the first of --criteria, {crits[0]!r}, which "
                          f"needs the full pass or the labels: put one of {', '.join(decode_criteria())} first")
    try:
        taus = [float(t) for t in cfg["taus"].split(",") if t.strip()]
    except ValueError:
        taus = [-1.0]
    if any(not tau >= 0 for tau in taus):
        raise ConfigError(f"config error: --taus={cfg['taus']!r} must be comma-separated thresholds >= 0")
    if cfg["schedule"]:
        schedule_steps(cfg["schedule"])
    if cfg["mode"] == "bench" and cfg["bench_batch"] > cfg["batch_size"]:
        raise ConfigError(f"config error: --bench_batch={cfg['bench_batch']} is more than the --batch_size="
                          f"{cfg['batch_size']} rows it takes its prompts from: raise --batch_size")
    return crits


def check_models(cfg, runs, T):
    """One line for a checkpoint that the mode cannot study, before any of them is: no candidate exit (a one-layer
    plain model), a bench prompt and decode that do not fit its context, an elastic budget or schedule beyond its
    loops."""
    for name, _, model, _ in runs:
        if cfg["mode"] in ("exit", "bench") and not exit_candidates(model, depth_labels(model), cfg["every_layer"]):
            raise ConfigError(f"early_exit.py: {name} has no candidate exit (one layer, one pass): nothing can exit "
                              "early; study a deeper or looped model")
        if cfg["mode"] == "bench" and min(cfg["prompt_len"], T) + 2 > model.config.block_size:
            raise ConfigError(f"config error: --prompt_len={cfg['prompt_len']} leaves {name} (block_size="
                              f"{model.config.block_size}) no room to decode 2 tokens: lower --prompt_len")
        if cfg["mode"] == "elastic":
            L = model.config.n_loop
            if not 0 <= cfg["budget"] <= L:
                raise ConfigError(f"early_exit.py: --budget={cfg['budget']}: {name} has n_loop={L}; a budget M "
                                  f"must satisfy 1 <= M <= {L} (0: the per-budget curve only)")
            if cfg["schedule"]:
                parse_schedule(cfg["schedule"], L)


def bench_one(cfg, model, batches, data, criterion):
    if cfg["taus"]:
        taus = [float(t) for t in cfg["taus"].split(",") if t.strip()]
    else:  # thresholds reaching 10% and 30% FLOPs saved in the teacher-forced sweep
        r = evaluate_exits(model, batches, (criterion,), cfg["every_layer"], cfg["n_tau"], progress=False)
        pts = r["criteria"][criterion]["points"]
        taus = []
        for target in (0.10, 0.30):
            ok = [p["tau"] for p in pts if p["saved_flops"] >= target]
            if ok:
                taus.append(min(ok))
    x = next(iter(batches))[0][:cfg["bench_batch"], :cfg["prompt_len"]].to(cfg["device"])
    n = min(cfg["new_tokens"], model.config.block_size - x.size(1))
    return benchmark_decoding(model, x, n, taus, criterion, cfg["fill"], cfg["repeats"], cfg["every_layer"])


if __name__ == "__main__":
    from configurator import run
    run(main)
