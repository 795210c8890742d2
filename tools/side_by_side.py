"""
Two trees' training steps side by side, alternated a few steps at a time: how to tell whether a refactor that keeps
outputs bit-identical also keeps the speed. Each tree runs in a process of its own (its own model.py, optim.py and
benchmark: tools/bench.py, or bench.py in a tree from before 2026-11-28), built and warmed up once as its benchmark
builds it (fp32, eager, train.py's step with clipping, a fixed batch); then the two are asked in turn for `steps`
steps, `rounds` times, the order flipped every round, so both see the machine at nearly the same moment. Whole runs
one after the other do not resolve a few percent here: a shared machine's speed drifts by more than that between
them, while a round of a second or two sees the same drift in both trees.

    git worktree add --detach /tmp/before 41fc670
    python -m tools.side_by_side /tmp/before                          # train.py's default model
    python -m tools.side_by_side /tmp/before --n_expert=8 --top_k=2   # any GPTConfig key, both trees alike

Prints each tree's median step and the median of the per-round ratios (this tree / the other) with a 95% bootstrap
interval. CPU seconds of each process, one thread each, both on one core (taskset, where there is one).
"""
import json
import os
import random
import shutil
import statistics
import subprocess
import sys

from configurator import ConfigError, configure, run
from model import GPTConfig

rounds = 30  # rounds; each runs both trees once
steps = 3  # training steps per tree per round
batch_size = 16  # sequences per step, as tools/bench.py
core = 0  # the one CPU core both processes run on (-1: wherever the OS puts them)
out = ""  # optional JSON file for the results

# the server, run in the other tree's folder with that tree's own modules: build as its benchmark does, then
# answer each line N on stdin with the CPU seconds of N steps (code text: it imports that tree, not this one)
_SERVER = """
import json, os, sys, time
import torch
sys.path.insert(0, os.getcwd())
torch.set_num_threads(1)
if os.path.exists(os.path.join("tools", "bench.py")):
    from tools import bench
else:
    import bench
from model import GPTConfig
model_cfg = GPTConfig(**json.loads(sys.argv[1]))
setup = bench.make_setup("side_by_side", model_cfg, "float32", torch.float32, False,
                         dict(device="cpu", batch_size=int(sys.argv[2]), warmup=3), lambda: None)
print("ready", flush=True)
for line in sys.stdin:
    t = time.process_time()
    for _ in range(int(line)):
        setup["step"]()
    print(time.process_time() - t, flush=True)
"""


def serve(tree, model_keys, cfg):
    """A server process in `tree` (see _SERVER), started: ready() waits until it has built its step."""
    pin = ["taskset", "-c", str(cfg["core"])] if cfg["core"] >= 0 and shutil.which("taskset") else []
    return subprocess.Popen(pin + [sys.executable, "-c", _SERVER, json.dumps(model_keys), str(cfg["batch_size"])],
                            cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))


def ready(proc, tree):
    if proc.stdout.readline().strip() != "ready":
        proc.wait()
        raise ConfigError(f"side_by_side: the tree at {tree} could not build its benchmark's step (see above)")


def median_interval(ratios, draws=4000, seed=0):
    """The median of the ratios and its 95% bootstrap interval (percentiles of resampled medians)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return statistics.median(ratios), medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    trees = [a for a in argv if not a.startswith("--")]
    defaults = {k: v for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, str))}
    cfg, model_cfg = configure(defaults, GPTConfig, [a for a in argv if a.startswith("--")], doc_source=__file__,
                               usage="python -m tools.side_by_side OTHER_TREE [--key=value ...]")
    if len(trees) != 1 or not os.path.isdir(trees[0]):
        raise ConfigError("usage: python -m tools.side_by_side OTHER_TREE [--key=value ...]: OTHER_TREE is the folder "
                          "of the code to compare with (e.g. a `git worktree add --detach` of the commit before)")
    for key in ("rounds", "steps", "batch_size"):
        if cfg[key] < 1:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= 1")
    given = {f.split("=", 1)[0][2:] for f in argv if f.startswith("--")}
    model_keys = {k: v for k, v in model_cfg.to_dict().items() if k in given}  # the other tree's own defaults else
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folders = {"this": here, "other": os.path.abspath(trees[0])}
    procs = {who: serve(folder, model_keys, cfg) for who, folder in folders.items()}  # both build at once
    for who, proc in procs.items():
        ready(proc, folders[who])
    times = {"this": [], "other": []}
    for r in range(cfg["rounds"]):
        for who in ("other", "this") if r % 2 == 0 else ("this", "other"):
            procs[who].stdin.write(f"{cfg['steps']}\n")
            procs[who].stdin.flush()
            times[who].append(float(procs[who].stdout.readline()) / cfg["steps"])
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    ratios = [a / b for a, b in zip(times["this"], times["other"])]
    mid, lo, hi = median_interval(ratios)
    print(f"step (CPU s, median of {cfg['rounds']} rounds of {cfg['steps']}): this tree "
          f"{statistics.median(times['this']):.4f}, {trees[0]} {statistics.median(times['other']):.4f}")
    print(f"this / other: {mid:.3f} (95% bootstrap interval of the median ratio [{lo:.3f}, {hi:.3f}])")
    if cfg["out"]:
        with open(cfg["out"], "w") as f:
            json.dump(dict(config=cfg, model=model_keys, other=trees[0], seconds=times, ratio=mid, interval=[lo, hi]),
                      f, indent=1)
    return mid, lo, hi


if __name__ == "__main__":
    run(main)
