"""
How close a student's numbers should come to the ones COURSE.md prints (issue 49): each lecture's training command
and the analysis that reads its run, run again with two more seeds and, at the course's seed, with the CPU fast paths
off (--cpu_kernels=False, the plain operations of model.py). A printed number's tolerance is the larger of the three
seeds' spread (max - min) and the fast paths' difference: a student on another machine, or with another seed, lands
within it. Lecture 8 trains its control too (the plain loop), each variant beside LoopFormer's. Lectures 7 and 10
analyse earlier lectures' runs (1 and 2; 4) of the same variant. Lecture 9's analysis trains its own small models
from its own seeds (the course's 0 and 1; the variants draw 2 and 3, 4 and 5) and has no fast-path switch; lecture 6
refits committed rows, the same on every machine (tests/test_fits.py).

    python course/tolerances.py [--lectures=1,2,3,4,5,7,8,9,10]   # about 85 minutes on one core; writes
                                                                  # course/tolerances.json

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
TRAINED = {  # lecture -> its training command's arguments, as COURSE.md prints them (without --out_dir)
    "1": ["--max_iters=300"],
    "2": ["--n_layer=2", "--n_loop=2", "--max_iters=300"],
    "3": ["config/recur_cpu.py"],
    "4": ["config/sparse_looped_moe_cpu.py", "--max_iters=300"],
    "5": ["config/loopmoe_cpu.py", "--max_iters=300"],
    "8": ["config/loopformer_cpu.py"],
}
CONTROLS = {"8": ("plain loop", ["--loop_cond=none", "--elastic=none"])}  # a lecture's second run, its control
RESIDUAL_SEEDS = {"seed_1337": [], "seed_1": ["--seed=2"], "seed_2": ["--seed=4"]}  # lecture 9: seeds 0-1, 2-3, 4-5


def run(args, out_dir):
    """A lecture's training run (once): its printed validation losses."""
    if not os.path.exists(os.path.join(out_dir, "result.json")):
        subprocess.run([sys.executable, "train.py", *args, f"--out_dir={out_dir}", "--overwrite=True",
                        "--sample_tokens=0"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, out_dir, "log.jsonl")) as f:
        return {f"val_loss@{r['step']}": r["val_loss"] for r in map(json.loads, f) if "val_loss" in r
                and r["step"] > 0}


def analysis(args, where, name):
    """Run an analysis command (python + args) into `where` unless its JSON `name` is there; return that JSON."""
    if not os.path.exists(os.path.join(ROOT, where, name)):
        subprocess.run([sys.executable, *args, f"--out_dir={where}"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(ROOT, where, name)) as f:
        return json.load(f)


def routing(out_dir):
    """Lecture 4's printed numbers: per layer, the shares of tokens whose experts at the two passes are identical,
    overlap in one or are disjoint (analyze.py routing, as the lecture runs it)."""
    (per_layer,) = analysis(["analyze.py", "routing", f"--ckpt={out_dir}"], os.path.join(out_dir, "routing"),
                            "routing.json")["result"].values()  # one run: {layer: {"0-1": {identical, ...}}}
    return {f"layer {int(layer) + 1} {kind}": share for layer, pairs in per_layer.items()
            for kind, share in pairs["0-1"].items()}


def routing_dynamics(out_dir):
    """Lecture 5's printed numbers: per shared layer and their mean, the cosine of a token's router inputs and the
    Jaccard similarity of its expert sets at passes 1 and 2 (analyze.py routing_dynamics, as the lecture runs it)."""
    (run_,) = analysis(["analyze.py", "routing_dynamics", f"--ckpt={out_dir}"], os.path.join(out_dir, "dynamics"),
                       "routing_dynamics.json")["result"].values()
    rows = {**{f"layer {int(layer) + 1}": m for layer, m in run_["layers"].items()}, "mean": run_["mean"]}
    return {f"{row} {kind}": m[kind][0][1] for row, m in rows.items() for kind in ("cosine", "jaccard")}


def iteradaln(out_dir):
    """Lecture 5's other printed numbers: per shared layer, branch and pass, IterAdaLN's mean |gamma|, |beta| and
    alpha (analyze.py iteradaln, as the lecture runs it)."""
    (rows,) = analysis(["analyze.py", "iteradaln", f"--ckpt={out_dir}", "--names=LoopMoE"],
                       os.path.join(out_dir, "iteradaln"), "iteradaln.json")["result"].values()
    return {f"layer {r['layer'] + 1} {r['branch']} pass {r['loop'] + 1} {stat}": r[stat] for r in rows
            for stat in ("mean_abs_gamma", "mean_abs_beta", "mean_alpha") if stat in r}


def elastic(out_dir):
    """Lecture 8's printed numbers: perplexity at each budget M (M equal steps), at each schedule of two steps, and
    those schedules' spread (early_exit.py --mode=elastic --budget=2, as the lecture runs it)."""
    (run_,) = analysis(["early_exit.py", "--mode=elastic", f"--ckpt={out_dir}", "--budget=2"],
                       os.path.join(out_dir, "elastic"), "early_exit_elastic.json")["results"].values()
    out = {f"M={m}": ppl for m, ppl in run_["budgets"].items()}
    out.update({f"steps {tuple(s['steps'])}": s["ppl"] for s in run_["all_schedules"]})
    return dict(out, spread=run_["spread"])


def early_exit_table(variant):
    """Lecture 7's printed numbers: perplexity at full depth and at 5-30% saved, on the depth skipped and on the true
    FLOPs, for lectures 1 and 2's runs of one variant (early_exit.py as the lecture runs it)."""
    runs = ",".join(os.path.join(OUT, f"l{n}_{variant}") for n in ("1", "2"))
    results = analysis(["early_exit.py", f"--ckpt={runs}", "--names=Base,Looped"], os.path.join(OUT, f"l7_{variant}"),
                       "early_exit_exit.json")["results"]
    out = {}
    for name, r in results.items():
        out[f"{name} full"] = r["full_ppl"]
        for table in ("saved_depth", "saved_flops"):
            for saved, ppl in r["criteria"]["entropy"][f"table_{table}"].items():
                out[f"{name} {table} {saved}"] = ppl
    return out


def residual_norms(variant):
    """Lecture 9's printed numbers: the residual stream's norm after R = 32 passes, looped and non-shared, under each
    rule (analyze.py residual --n_seeds=2, as the lecture runs it, from the variant's two seeds; no fast-path
    variant: the analysis has no switch)."""
    if variant not in RESIDUAL_SEEDS:
        return {}
    result = analysis(["analyze.py", "residual", "--n_seeds=2", *RESIDUAL_SEEDS[variant]],
                      os.path.join(OUT, f"l9_{variant}"), "residual.json")["result"]
    return {f"{kind} {rule}": norm for kind, rules in result["final_norm_at_largest_R"].items()
            for rule, norm in rules.items()}


def depth_eval(variant):
    """Lecture 10's printed numbers: each setting's loss of the gold continuation on each probe, their mean, and the
    validation perplexity (eval.py config/eval_depth_cpu.py on lecture 4's run of the variant)."""
    (run_,) = analysis(["eval.py", "config/eval_depth_cpu.py", f"--ckpt={os.path.join(OUT, f'l4_{variant}')}"],
                       os.path.join(OUT, f"l10_{variant}"), "eval.json")["results"].values()
    out = {}
    for setting, r in run_.items():
        out.update({f"{setting} {task}": s["perplexity"] if task.startswith("ppl") else s["cont_loss"]
                    for task, s in r["tasks"].items()})  # as the lecture prints them: perplexity, else nats
        out[f"{setting} probes mean"] = r["suites"]["probes"]["mean"]
    return out


AFTER_TRAINING = {"4": (routing,), "5": (routing_dynamics, iteradaln), "8": (elastic,)}  # analyses of the run
ANALYSES = {"7": early_exit_table, "9": residual_norms, "10": depth_eval}  # lectures without a training run
COMMANDS = {"7": ["python", "early_exit.py", "--ckpt=<lecture 1's run>,<lecture 2's run>", "--names=Base,Looped"],
            "9": ["python", "analyze.py", "residual", "--n_seeds=2"],
            "10": ["python", "eval.py", "config/eval_depth_cpu.py", "--ckpt=<lecture 4's run>"]}


def numbers_of(lecture, variant):
    """The printed numbers of one lecture in one variant."""
    if lecture in ANALYSES:
        return ANALYSES[lecture](variant)
    out_dir = os.path.join(OUT, f"l{lecture}_{variant}")
    numbers = run(TRAINED[lecture] + VARIANTS[variant], out_dir)
    for analyse in AFTER_TRAINING.get(lecture, ()):
        numbers.update(analyse(out_dir))
    if lecture in CONTROLS:  # the control: the same command with its changes, its numbers under its name
        name, changes = CONTROLS[lecture]
        control = run(TRAINED[lecture] + changes + VARIANTS[variant], out_dir + "_control")
        for analyse in AFTER_TRAINING[lecture]:
            control.update(analyse(out_dir + "_control"))
        numbers.update({f"{name} {key}": value for key, value in control.items()})
    return numbers


def main(argv):
    lectures = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--lectures=")),
                    sorted({*TRAINED, *ANALYSES}, key=int))
    path = os.path.join(ROOT, "course", "tolerances.json")
    result = json.load(open(path)) if os.path.exists(path) else {}
    for lecture in lectures:
        numbers = {variant: numbers_of(lecture, variant) for variant in VARIANTS}
        tolerance = {}
        for key, printed in numbers["seed_1337"].items():
            seeds = [numbers[v].get(key) for v in ("seed_1337", "seed_1", "seed_2")]
            spread = max(seeds) - min(seeds) if None not in seeds else None
            plain = numbers["plain_ops"].get(key)
            kernels = abs(plain - printed) if plain is not None else None
            tolerance[key] = dict(course_seed=printed, seed_spread=spread, fast_paths=kernels,
                                  tolerance=max(v for v in (spread, kernels) if v is not None))
        command = COMMANDS.get(lecture, ["python", "train.py", *TRAINED.get(lecture, [])])
        if lecture in CONTROLS:
            command = [command, command + CONTROLS[lecture][1]]
        result[f"lecture_{lecture}"] = dict(command=command, runs=numbers, tolerance=tolerance)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"lecture {lecture}: " + ", ".join(f"{k} ± {v['tolerance']:.4f}" for k, v in tolerance.items()))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
