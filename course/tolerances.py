"""
How close a student's numbers should come to the ones COURSE.md prints (issue 49): each lecture's training command
(lecture 7: its early-exit study of lectures 1 and 2's runs) run again with two more seeds and, at the course's
seed, with the CPU fast paths off (--cpu_kernels=False, the plain operations of model.py). A printed number's
tolerance is the larger of the three seeds' spread (max - min) and the fast paths' difference: a student on another
machine, or with another seed, lands within it.

    python course/tolerances.py [--lectures=1,2,3,4,7]   # about 35 minutes on one core; writes course/tolerances.json

Each run writes to out/course_tolerances/<lecture>_<variant>/; a finished run is not run again.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join("out", "course_tolerances")
COURSE_SEED = 1337  # train.py's default: the runs COURSE.md prints
VARIANTS = {"seed_1337": [], "seed_1": ["--seed=1"], "seed_2": ["--seed=2"], "plain_ops": ["--cpu_kernels=False"]}
LECTURES = {  # lecture -> its training command's arguments, as COURSE.md prints them (without --out_dir)
    "1": ["--max_iters=300"],
    "2": ["--n_layer=2", "--n_loop=2", "--max_iters=300"],
    "3": ["config/recur_cpu.py"],
    "4": ["config/sparse_looped_moe_cpu.py", "--max_iters=300"],
    "7": [],  # early_exit.py on lectures 1 and 2's runs (early_exit_table)
}


def run(args, out_dir):
    if not os.path.exists(os.path.join(out_dir, "result.json")):
        subprocess.run([sys.executable, "train.py", *args, f"--out_dir={out_dir}", "--overwrite=True",
                        "--sample_tokens=0"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, out_dir, "log.jsonl")) as f:
        return {f"val_loss@{r['step']}": r["val_loss"] for r in map(json.loads, f) if "val_loss" in r
                and r["step"] > 0}


def routing(out_dir):
    """Lecture 4's printed numbers: per layer, the shares of tokens whose experts at the two passes are identical,
    overlap in one or are disjoint (analyze.py routing, as the lecture runs it)."""
    where = os.path.join(out_dir, "routing")
    if not os.path.exists(os.path.join(ROOT, where, "routing.json")):
        subprocess.run([sys.executable, "analyze.py", "routing", f"--ckpt={out_dir}", f"--out_dir={where}"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, where, "routing.json")) as f:
        (per_layer,) = json.load(f)["result"].values()  # one run: {layer: {"0-1": {identical, partial, disjoint}}}
    return {f"layer {int(layer) + 1} {kind}": share for layer, pairs in per_layer.items()
            for kind, share in pairs["0-1"].items()}


def early_exit_table(variant):
    """Lecture 7's printed numbers: perplexity at full depth and at 5-30% saved, on the depth skipped and on the true
    FLOPs, for lectures 1 and 2's runs of one variant (early_exit.py as the lecture runs it)."""
    where = os.path.join(OUT, f"l7_{variant}")
    if not os.path.exists(os.path.join(ROOT, where, "early_exit_exit.json")):
        runs = ",".join(os.path.join(OUT, f"l{n}_{variant}") for n in ("1", "2"))
        subprocess.run([sys.executable, "early_exit.py", f"--ckpt={runs}", "--names=Base,Looped", f"--out_dir={where}"],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, where, "early_exit_exit.json")) as f:
        results = json.load(f)["results"]
    out = {}
    for name, r in results.items():
        out[f"{name} full"] = r["full_ppl"]
        for table in ("saved_depth", "saved_flops"):
            for saved, ppl in r["criteria"]["entropy"][f"table_{table}"].items():
                out[f"{name} {table} {saved}"] = ppl
    return out


def main(argv):
    lectures = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--lectures=")), list(LECTURES))
    path = os.path.join(ROOT, "course", "tolerances.json")
    result = json.load(open(path)) if os.path.exists(path) else {}
    for lecture in lectures:
        numbers = {}
        for variant, extra in VARIANTS.items():
            if lecture == "7":  # early exit on lectures 1 and 2's runs of the same variant
                numbers[variant] = early_exit_table(variant)
                continue
            out_dir = os.path.join(OUT, f"l{lecture}_{variant}")
            numbers[variant] = run(LECTURES[lecture] + extra, out_dir)
            if lecture == "4":
                numbers[variant].update(routing(out_dir))
        tolerance = {}
        for key, printed in numbers["seed_1337"].items():
            seeds = [numbers[v].get(key) for v in ("seed_1337", "seed_1", "seed_2")]
            spread = max(seeds) - min(seeds) if None not in seeds else None
            plain = numbers["plain_ops"].get(key)
            kernels = abs(plain - printed) if plain is not None else None
            tolerance[key] = dict(course_seed=printed, seed_spread=spread, fast_paths=kernels,
                                  tolerance=max(v for v in (spread, kernels) if v is not None))
        command = (["python", "early_exit.py", "--ckpt=<lecture 1's run>,<lecture 2's run>", "--names=Base,Looped"]
                   if lecture == "7" else ["python", "train.py", *LECTURES[lecture]])
        result[f"lecture_{lecture}"] = dict(command=command, runs=numbers, tolerance=tolerance)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"lecture {lecture}: " + ", ".join(f"{k} ± {v['tolerance']:.4f}" for k, v in tolerance.items()))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
