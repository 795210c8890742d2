"""
The picture of a looped model, drawn from a real model's depth plan: the Labels its walk yields (model.py, loop.py).

    python -m tools.architecture config/sandwich_loop_cpu.py --out=figures/architecture  # any config file or key
    python -m tools.architecture --n_layer=2 --n_loop=3 --n_prelude=1 --n_coda=1 --injection=linear --exit_at=1

One box per step of the plan, left to right: the prelude's layers, n_loop passes of the shared block, the coda's
layers. Each box names the physical layer it runs (the same layer in every pass: shared weights) and the KV-cache
slot it writes (one slot per executed (pass, layer) step). Arrows show what enters each pass (the prelude's output
e under an injection or hyper-connections) and its conditioning vector c_k; an early exit at a loop boundary leaves
to the head there, and the steps it skips are hatched: their KV slots are filled from the exit state (exits.py's
propagate fill), so later tokens can still attend to them. It writes the figure and the plan it drew as JSON.
"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

from configurator import ConfigError, configure, run  # noqa: E402
from exits import depth_labels, exit_candidates  # noqa: E402
from loop import is_looped  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
import train  # noqa: E402

out = "figures/architecture"  # path without extension: writes <out>.png and <out>.json
exit_at = 0  # the loop boundary (1 = the end of the first pass) where the drawn token exits; 0 = no exit drawn
width = 64  # the model is built at this width only for its plan: any width draws the same picture

COLORS = {"prelude": "#8fb8de", "coda": "#9ccc9c", "loop": ("#f6c28b", "#f2a65a")}  # the passes alternate two shades


def plan_of(model, exit_boundary=0):
    """What the figure draws, as JSON: one entry per step (its Label), the shared layers, what enters each pass and,
    for an exit at the exit_boundary-th loop boundary, where it leaves and which KV slots the fill writes."""
    cfg = model.config
    labels = depth_labels(model)
    steps = [label._asdict() for label in labels]
    shared = {}
    for label in labels:
        if label.part == "loop":
            shared.setdefault(label.layer, []).append(label.index)
    plan = dict(steps=steps, shared=shared, n_loop=cfg.n_loop, injection=model.between_name if cfg.hc_lanes else
                cfg.injection, conditioning=cfg.loop_cond, exit=None)
    if exit_boundary:
        candidates = [i for i in exit_candidates(model, labels) if labels[i].boundary]
        if not is_looped(cfg) or exit_boundary > len(candidates):
            raise ConfigError(f"--exit_at={exit_boundary}: this model has {len(candidates)} loop boundaries to exit "
                              f"at before its last pass (a plain or one-pass model has none)")
        at = candidates[exit_boundary - 1]
        skipped = [label.index for label in labels[at + 1:] if label.part == "loop"]
        plan["exit"] = dict(at=labels[at].index, skipped_slots=skipped, fill="propagate")
    return plan


def draw(plan):
    """The figure of a plan (plan_of): boxes, slots, pass brackets, injection and conditioning arrows, the exit."""
    steps = plan["steps"]
    n = len(steps)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.0 * n + 3), 3.6))
    skipped = set(plan["exit"]["skipped_slots"]) if plan["exit"] else set()
    for s in steps:
        x = s["index"] + 1.5
        color = COLORS["loop"][s["loop"] % 2] if s["part"] == "loop" else COLORS[s["part"]]
        ax.add_patch(Rectangle((x - 0.4, 0), 0.8, 1, facecolor=color, edgecolor="black",
                               hatch="//" if s["index"] in skipped else None, gid=f"step{s['index']}"))
        ax.text(x, 0.62, f"layer {s['layer']}", ha="center", va="center", fontsize=8)
        ax.text(x, 0.3, f"slot {s['index']}", ha="center", va="center", fontsize=7, color="#333333")
    for part in ("prelude", "coda"):
        xs = [s["index"] + 1.5 for s in steps if s["part"] == part]
        if xs:
            ax.plot([xs[0] - 0.4, xs[-1] + 0.4], [1.15, 1.15], color="black", lw=1)
            ax.text((xs[0] + xs[-1]) / 2, 1.25, part, ha="center", va="bottom", fontsize=8)
    for x, text in ((0.5, "embed"), (n + 1.5, "norm\n+ head")):
        ax.add_patch(Rectangle((x - 0.4, 0), 0.8, 1, facecolor="white", edgecolor="black"))
        ax.text(x, 0.5, text, ha="center", va="center", fontsize=8)
    for loop in range(plan["n_loop"]):
        xs = [s["index"] + 1.5 for s in steps if s["part"] == "loop" and s["loop"] == loop]
        ax.plot([xs[0] - 0.4, xs[-1] + 0.4], [1.15, 1.15], color="black", lw=1)
        name = f"pass {loop + 1}" + (" (shared block)" if loop == 0 else "") if plan["n_loop"] > 1 else "one pass"
        ax.text((xs[0] + xs[-1]) / 2, 1.25, name, ha="center", va="bottom", fontsize=8)
        if plan["conditioning"] != "none":
            ax.text(xs[0] - 0.4, 1.55, f"c{loop + 1}", ha="center", fontsize=8, color="#7a3db8")
            ax.add_patch(FancyArrowPatch((xs[0] - 0.4, 1.5), (xs[0] - 0.2, 1.02), arrowstyle="-|>", mutation_scale=10,
                                         color="#7a3db8"))
        first_loop = min(s["index"] for s in steps if s["part"] == "loop") + 1.5
        if plan["injection"] != "none" and loop > 0:  # e, the prelude's output, enters every pass
            ax.add_patch(FancyArrowPatch((first_loop - 0.5, -0.05), (xs[0] - 0.4, -0.05), arrowstyle="-|>",
                                         mutation_scale=10, connectionstyle="arc3,rad=0.3", color="#1f5fa8"))
    if plan["injection"] != "none":
        ax.text(first_loop - 0.5, -0.75, f"e ({plan['injection']})", ha="center", fontsize=8, color="#1f5fa8")
    if plan["exit"]:
        x = plan["exit"]["at"] + 1.5
        ax.add_patch(FancyArrowPatch((x + 0.4, 0.5), (x + 0.8, -0.9), arrowstyle="-|>", mutation_scale=12,
                                     color="#c0392b", lw=1.5))
        rest = "the coda and the head read" if any(s["part"] == "coda" for s in steps) else "the head reads"
        ax.text(x + 0.85, -1.0, f"exit here: {rest} this state;\nthe hatched steps' KV slots are filled from it",
                fontsize=7, color="#c0392b", va="top")
    ax.set_xlim(-0.2, n + 2.2)
    ax.set_ylim(-1.7, 1.9)
    ax.axis("off")
    ax.set_title("depth plan: one box per step (physical layer, KV slot)", fontsize=10)
    return fig


def main(argv=None):
    # train.py's keys are read too (and not used), so that every training config file draws as it is
    defaults = {**train.defaults(), **{k: v for k, v in globals().items() if not k.startswith("_")}}
    cfg, model_cfg = configure(defaults, GPTConfig, argv, doc_source=__file__)
    model = GPT(GPTConfig(**{**model_cfg.to_dict(), "n_embd": cfg["width"], "n_head": 0, "d_ff": 0}))
    plan = plan_of(model, cfg["exit_at"])
    fig = draw(plan)
    os.makedirs(os.path.dirname(cfg["out"]) or ".", exist_ok=True)
    fig.savefig(cfg["out"] + ".png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    with open(cfg["out"] + ".json", "w") as f:
        json.dump(dict(config=model.config.to_dict(), plan=plan), f, indent=1)
    print(f"wrote {cfg['out']}.png and {cfg['out']}.json ({len(plan['steps'])} steps)")
    return plan


if __name__ == "__main__":
    run(main)
