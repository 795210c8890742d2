"""
Scaling sweeps: plan a grid of training runs, run train.py for each point (one at a time or several at once), and
append one row per finished run to results.jsonl (and to the committed record). Re-running a sweep resumes it: a
finished point is skipped, a killed one continues from its checkpoint. The accounting each point's plan rests on is
scaling.py's; the fits of the rows are fits.py's. The command runs through scaling.py:

    python scaling.py sweep config/sweeps/isoflop_cpu.py --dry_run     # the plan: points, tokens, estimated time
    python scaling.py sweep config/sweeps/isoflop_cpu.py --parallel=2  # run what is not done yet

A sweep spec (config/sweeps/*.py) is a plain Python file that sets:
  name            the sweep; its directory is out/sweeps/<name> unless out_dir is set (specs that share out_dir
                  share results.jsonl: the probes of a study reuse its baseline runs)
  archs           {arch name: [config files]} or {arch name: dict(configs=[...], overrides={key: value})}
  budgets         training FLOPs per run (train.py --flops_budget; [0] or absent: its max_iters)
  widths          [n_embd ...] or {budget: [n_embd ...]};  lrs, seeds: lists;  variants: {name: overrides}
  common          keys given to every run (train.py's or GPTConfig's)
  runner          the command before the config files (default: python train.py; e.g. torchrun ... train.py)
  parallel, devices   runs at once (the longest first), and the CUDA_VISIBLE_DEVICES of each slot
  env             environment variables of the runs (CPU specs: OMP_NUM_THREADS=1, one core per run)
  flops_per_second    first guess of the throughput for the time estimate (later: measured on finished runs)
  lr_for(tokens, model_config, train_config)   optional: the LR of a run from its planned tokens (HyperP)
  points()        optional, instead of the grid keys: dicts with name, arch, configs, overrides, flops_budget,
                  fields (extra columns for results.jsonl)
  record          optional: a committed directory (records/<paper>), or {arch: directory}, that also gets each
                  finished row, without the config, in <directory>/<name>.jsonl: the course's results
  figures         optional: {figure name: `scaling.py fit` arguments}, which `scaling.py figures records/` draws
                  from each record file of this sweep as <directory>/<name>_<figure name>.png/.json
  rule            needed with `record` (its rows feed a verdict): the decision rule, committed before the runs,
                  dict(finding=..., test=..., seeds=(...), margin=...): the finding judged, the test of
                  records/README.md's standard with its family and threshold, the training seeds (exactly those the
                  grid plans; None = train.py's 1337), the equivalence margin (None for a difference). The grid is
                  the spec's own points. The record files whose rows predate rules are listed, with the reason, in
                  records/grandfathered.json: their specs still run without a rule (the course versions), but a
                  row they add to a record fails tests/test_sweep.py until its spec holds one.

Rules before runs: a sweep with a `record` refuses to start unless the git tree is clean apart from the results
files of registered sweeps (records/<paper>/<sweep>.jsonl with a config/sweeps/<sweep>.py), so every row's
git_rev (HEAD) and spec_sha256 (the spec file's hash) name the code and rule that made it; tests/test_sweep.py
checks that every committed row's rule is committed at its git_rev and unchanged since.
"""
import dataclasses
import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import namedtuple

import numpy as np

from configurator import ConfigError
from data import TOKENIZER_VOCAB, json_lines  # a named tokenizer sets the vocabulary (data.training_vocab)
from scaling import cli_arg, count_params, flops_per_token, model_on_meta, train_defaults

TRAIN_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")  # describes the keys
ROW_FIELDS = ("arch", "n_embd", "n_layer", "n_loop", "lr", "flops_budget", "seed")

Point = namedtuple("Point", "name arch configs overrides flops_budget fields")


def load_spec(path):
    """A sweep spec's variables, as a dict."""
    import runpy
    import traceback
    if not os.path.isfile(path):
        raise ConfigError(f"no sweep spec at {path}; the specs live in config/sweeps/")
    try:
        spec = {k: v for k, v in runpy.run_path(path).items() if not k.startswith("_")}
    except Exception as e:  # a syntax error, a name it lacks, ...: the spec's own fault, said in one line
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
        where = getattr(e, "lineno", None) if isinstance(e, SyntaxError) else (lines[-1] if lines else None)
        raise ConfigError(f"sweep spec {path}{f', line {where}' if where else ''}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}") from None
    spec.setdefault("name", os.path.splitext(os.path.basename(path))[0])
    spec["spec_file"] = path  # hashed into every row: the rule and grid the row was run under
    return spec


def grid_points(spec):
    """The spec's points: its own `points()` if it defines one, else archs x variants x budgets x widths x lrs x
    seeds."""
    if callable(spec.get("points")):
        points = [Point(p["name"], p["arch"], list(p.get("configs", [])), dict(p.get("overrides", {})),
                        float(p.get("flops_budget", 0.0)), dict(p.get("fields", {}))) for p in spec["points"]()]
    else:
        points = []
        for arch, arch_spec in spec["archs"].items():
            configs, arch_over = (arch_spec, {}) if isinstance(arch_spec, (list, tuple)) else (
                arch_spec["configs"], arch_spec.get("overrides", {}))
            for (variant, var_over), C in itertools.product(spec.get("variants", {"": {}}).items(),
                                                            spec.get("budgets", [0.0])):
                widths = spec["widths"][C] if isinstance(spec.get("widths"), dict) else spec.get("widths", [None])
                for d, lr, seed in itertools.product(widths, spec.get("lrs", [None]), spec.get("seeds", [None])):
                    over = dict(arch_over, **var_over)
                    over.update({k: v for k, v in (("n_embd", d), ("lr", lr), ("seed", seed)) if v is not None})
                    parts = (arch, variant, f"C{C:.3g}" if C else "", f"d{d}" if d else "",
                             f"lr{lr:.3g}" if lr else "", f"s{seed}" if seed is not None else "")
                    points.append(Point("_".join(x for x in parts if x).replace("+", ""), arch, list(configs), over,
                                        float(C), {"variant": variant} if variant else {}))
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise SystemExit("two sweep points share a name; give variants distinct names")
    return points


def point_settings(spec, point):
    """(train.py's config dict, GPTConfig) of a point: its config files, then the spec's common keys, then the
    point's overrides, parsed as train.py parses them. The vocabulary follows the tokenizer, as in train.py."""
    from configurator import configure
    from model import GPTConfig
    import train as train_py
    argv = list(point.configs) + [cli_arg(k, v) for k, v in {**spec.get("common", {}), **point.overrides}.items()]
    train, model_cfg = configure(train_defaults(), GPTConfig, argv, doc_source=TRAIN_PY, choices=train_py._CHOICES)
    train_py.check_config(train)  # what train.py would refuse stops the plan, before any run starts
    vocab = TOKENIZER_VOCAB.get(train["tokenizer"])
    if vocab is not None and model_cfg.vocab_size != vocab:
        model_cfg = dataclasses.replace(model_cfg, vocab_size=vocab)
    return train, model_cfg


def plan(spec, only=""):
    """Every point (whose name matches the regular expression `only`) with its accounting: parameters, FLOPs per
    token, steps and tokens as train.py will compute them (steps = round(C / (F * tokens per step)), at least 1)."""
    rows = []
    for p in (p for p in grid_points(spec) if re.search(only, p.name)):
        train, model_cfg = point_settings(spec, p)
        model = model_on_meta(model_cfg)
        F = flops_per_token(model, train["flops_convention"], model_cfg.block_size)
        per_step = train["batch_size"] * model_cfg.block_size * train["grad_accum"]
        steps = max(1, round(p.flops_budget / F / per_step)) if p.flops_budget > 0 else train["max_iters"]
        if callable(spec.get("lr_for")):  # an LR that depends on the run's tokens (HyperP's data correction)
            p.overrides["lr"] = train["lr"] = float(spec["lr_for"](steps * per_step, model_cfg, train))
        rows.append(dict(point=p, model=model_cfg, train=train, steps=steps, tokens=steps * per_step,
                         flops_per_token=F, work=steps * per_step * flops_per_token(model, "schwethelm"),
                         **count_params(model)))
    return rows


def git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def git_revision(repo):
    """HEAD's full hash, '+dirty' when tracked files differ from it."""
    try:
        dirty = git(repo, "status", "--porcelain", "--untracked-files=no").strip()
        return git(repo, "rev-parse", "HEAD").strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        return "unknown"


def record_files(spec):
    """The committed results files this sweep writes: <record directory>/<name>.jsonl."""
    record = spec.get("record") or {}
    dirs = sorted(set(record.values())) if isinstance(record, dict) else [record]
    return [os.path.join(d, spec["name"] + ".jsonl") for d in dirs]


def grandfathered(root):
    """records/grandfathered.json: the record files whose rows predate rules and row provenance, with the reason."""
    path = os.path.join(root, "records", "grandfathered.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def check_rule(spec, planned, root):
    """A sweep that writes to a record feeds a verdict: its spec must hold the rule (see the docstring), with
    exactly the seeds the grid plans, and the git tree must be clean apart from registered results files."""
    name = spec.get("spec_file", spec["name"])
    rule = spec.get("rule")
    old = set(record_files(spec)) & set(grandfathered(root))
    if rule is None and not old:
        raise ConfigError(f"{name} writes to a record but holds no rule = dict(finding=..., test=..., seeds=..., "
                          f"margin=...): commit the decision rule before the runs (sweep.py's docstring)")
    if rule is not None:
        missing = [k for k in ("finding", "test", "seeds", "margin") if k not in rule]
        seeds = {q["train"]["seed"] for q in planned}
        rule_seeds = {1337 if s is None else s for s in rule.get("seeds", ())}
        if missing or seeds != rule_seeds:
            raise ConfigError(f"{name}: rule needs finding, test, seeds, margin (missing {missing}) and seeds "
                              f"{sorted(rule_seeds)} equal to the seeds the grid plans {sorted(seeds)}")
    registered = os.path.join(root, "config", "sweeps")
    changed = [line[3:].split(" -> ")[-1].strip('"') for line in
               git(root, "status", "--porcelain", "--untracked-files=all").splitlines()]
    dirty = [p for p in changed if not (re.fullmatch(r"records/[^/]+/([^/]+)\.jsonl", p) and os.path.exists(
        os.path.join(registered, os.path.basename(p)[:-len(".jsonl")] + ".py")))]
    if dirty:
        raise ConfigError(f"refusing to start {name}: the git tree has {len(dirty)} uncommitted change(s) "
                          f"({dirty[0]}{', ...' if len(dirty) > 1 else ''}); commit the rule and the code first, so "
                          f"each row's git_rev is the code that ran")


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sweep_dir(spec):
    return spec.get("out_dir") or os.path.join("out", "sweeps", spec["name"])


def read_results(path):
    """Rows of a results.jsonl (one JSON object per finished run)."""
    if not os.path.isfile(path):
        raise ConfigError(f"no results file at {path}: run `python scaling.py sweep SPEC` first")
    rows = []
    for n, row in json_lines(path, "mend or remove the line"):
        if not isinstance(row, dict):
            raise ConfigError(f"{path}, line {n}: not a result row (a JSON object): mend or remove the line")
        rows.append(row)
    return rows


def done_points(results_path, retry_failed=False):
    """Names of the points that already have a row (failed ones too, unless retry_failed)."""
    if not os.path.exists(results_path):
        return set()
    return {r["point"] for r in read_results(results_path) if r.get("status") == "ok" or not retry_failed}


def point_row(planned, run_dir, status, rc, revision, command):
    """One tidy row: the point's fields, the accounting, train.py's result.json, the config and the revision."""
    p = planned["point"]
    row = dict(point=p.name, status=status, rc=rc, **{k: None for k in ROW_FIELDS})
    row.update({k: getattr(planned["model"], k) for k in ("n_embd", "n_layer", "n_loop")})
    row.update(arch=p.arch, lr=planned["train"].get("lr"), flops_budget=p.flops_budget,
               seed=planned["train"].get("seed"), **p.fields)
    row.update({k: v for k, v in planned.items() if k.startswith("params_")})
    row.update(planned_tokens=planned["tokens"], flops_per_token=planned["flops_per_token"], val_loss=None)
    result_path = os.path.join(run_dir, "result.json")
    if os.path.exists(result_path):
        with open(result_path) as f:
            row.update(json.load(f))
        if row.get("tokens"):
            row["flops_per_token"] = row.get("flops", 0) / row["tokens"] or row["flops_per_token"]
    config_path = os.path.join(run_dir, "config.json")
    if os.path.exists(config_path):
        with open(config_path) as f:
            row["config"] = json.load(f)
    row.update(git_rev=revision, command=command)
    return row


def exclusive(f):
    """Hold an exclusive lock on open file f until it is closed (released too if the process dies); other processes
    wait. Windows has no flock: there, run one sweep per spec at a time."""
    try:
        import fcntl
    except ImportError:
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def write_record(path, row):
    """Append a finished row, without its config, to a committed record file, once per point: a rerun of a failed
    point (--retry_failed) replaces its failed row."""
    rows = read_results(path) if os.path.exists(path) else []
    if any(r["point"] == row["point"] and r.get("status") == "ok" for r in rows):
        return
    rows = [r for r in rows if r["point"] != row["point"]] + [{k: v for k, v in row.items() if k != "config"}]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    os.replace(path + ".tmp", path)


def print_plan(planned, spec, done, rate, rate_source):
    n_done = sum(q["point"].name in done for q in planned)  # results.jsonl may hold other selections' rows
    print(f"sweep {spec['name']}: {len(planned)} points ({n_done} done) -> {sweep_dir(spec)}")
    print(f"{'point':<44} {'params':>9} {'active':>9} {'FLOPs/tok':>9} {'steps':>7} {'tokens':>9} {'est':>7}")
    total_flops = total_s = 0.0
    for q in planned:
        est = q["work"] / rate
        mark = " done" if q["point"].name in done else ""
        print(f"{q['point'].name:<44} {q['params_unique']:>9.3g} {q['params_active']:>9.3g} "
              f"{q['flops_per_token']:>9.3g} {q['steps']:>7d} {q['tokens']:>9.3g} {_hms(est):>7}{mark}")
        total_flops += q["tokens"] * q["flops_per_token"]
        total_s += 0 if mark else est
    print(f"total {total_flops:.3g} FLOPs ({planned[0]['train']['flops_convention']} convention); estimated "
          f"{_hms(total_s)} to go at {rate:.3g} FLOP/s ({rate_source})")


def _hms(seconds):
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def run_sweep(spec, dry_run=False, only="", retry_failed=False, limit=0, parallel=0):
    """Plan, print, then run every point not yet done (one at a time, or `parallel` at once), appending a row to
    results.jsonl after each. A point killed midway is resumed (--resume) the next time; a point whose run failed
    (non-zero exit: divergence, a bug) gets a row with status 'failed' and is not retried unless retry_failed."""
    root = os.path.dirname(os.path.abspath(__file__))
    results = os.path.join(sweep_dir(spec), "results.jsonl")
    planned = plan(spec, only)
    if not planned:
        raise ConfigError(f"no point of sweep {spec['name']} matches --only={only!r}; `--dry_run` lists the names")
    done = done_points(results, retry_failed)
    rows = read_results(results) if os.path.exists(results) else []
    measured = [r["tokens"] * r["flops_per_token_schwethelm"] / r["process_s"] for r in rows
                if r.get("status") == "ok" and r.get("process_s") and r.get("flops_per_token_schwethelm")]
    rate, source = ((float(np.median(measured)), f"measured on {len(measured)} finished runs") if measured else
                    (float(spec.get("flops_per_second", 5e9)), "the spec's flops_per_second guess"))
    print_plan(planned, spec, done, rate, source)
    todo = [q for q in planned if q["point"].name not in done][:limit or None]
    if dry_run or not todo:
        return planned
    if spec.get("record"):
        check_rule(spec, planned, root)
    try:
        os.makedirs(sweep_dir(spec), exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot write the sweep's runs to {sweep_dir(spec)!r} ({e.strerror}): choose another "
                          "--out_dir") from None
    SweepRuns(spec, todo, root, parallel).run()
    return planned


class SweepRuns:
    """The runs of one sweep invocation: train.py processes in `slots` parallel slots, a row appended to
    results.jsonl (and the record's committed copy) as each one ends."""

    def __init__(self, spec, todo, root, parallel=0):
        self.spec, self.todo, self.root = spec, todo, root
        self.out = sweep_dir(spec)
        self.results = os.path.join(self.out, "results.jsonl")
        self.record = spec.get("record") or ""  # one directory, or {arch: directory} for a sweep serving several papers
        self.revision = git_revision(root)
        self.spec_file = spec.get("spec_file") and os.path.relpath(os.path.abspath(spec["spec_file"]), root)
        self.spec_sha = file_sha256(spec["spec_file"]) if self.spec_file else None
        self.slots = max(1, parallel or spec.get("parallel", 1))
        self.t_start, self.finished = time.time(), 0

    def launch(self, slot, q):
        """Start point q's run in `slot`: (run_dir, process, command); process None when it already finished."""
        spec, p = self.spec, q["point"]
        run_dir = os.path.join(self.out, p.name)
        os.makedirs(run_dir, exist_ok=True)
        if os.path.exists(os.path.join(run_dir, "result.json")):  # finished, but the sweep died before its row
            return run_dir, None, ""
        args = [cli_arg(k, v) for k, v in {**spec.get("common", {}), **p.overrides}.items()]
        cmd = list(spec.get("runner", [sys.executable, "train.py"])) + p.configs + args + [f"--out_dir={run_dir}"]
        if p.flops_budget > 0:
            cmd.append(f"--flops_budget={p.flops_budget!r}")
        if os.path.exists(os.path.join(run_dir, "ckpt.pt")):
            cmd.append("--resume")
        env = dict(os.environ, **spec.get("env", {}))
        devices = spec.get("devices")  # e.g. ["0", "1", ...]: CUDA_VISIBLE_DEVICES of each parallel slot
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = devices[slot % len(devices)]
        log = open(os.path.join(run_dir, "train.log"), "a")
        print(f"[{p.name}] {' '.join(cmd)}", flush=True)
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT)
        return run_dir, proc, " ".join(cmd)

    def finish(self, q, run_dir, rc, started, command):
        """Append point q's row (ok if its run wrote result.json, else failed) and print the progress."""
        if rc is not None and rc < 0:  # killed by a signal: an interruption, not a result
            raise SystemExit(f"[{q['point'].name}] was killed (signal {-rc}); run the same command to resume")
        status = "ok" if os.path.exists(os.path.join(run_dir, "result.json")) else "failed"
        row = point_row(q, run_dir, status, rc, self.revision, command)
        row.update(spec=self.spec_file, spec_sha256=self.spec_sha, flops_per_token_schwethelm=q["work"] / q["tokens"],
                   process_s=time.time() - started if rc is not None else None)  # train.py's start-up included
        record_dir = self.record.get(row["arch"], "") if isinstance(self.record, dict) else self.record
        with open(self.results, "a") as f:
            exclusive(f)  # two sweeps of one spec (different --only) share both files: no row may be lost
            f.write(json.dumps(row) + "\n")
            f.flush()
            if record_dir:  # the committed copy, without the full config (git_rev and command reproduce it)
                write_record(os.path.join(record_dir, self.spec["name"] + ".jsonl"), row)
        self.finished += 1
        left = len(self.todo) - self.finished
        eta = (time.time() - self.t_start) / self.finished * left
        print(f"[{q['point'].name}] {status}: val_loss {row.get('val_loss')} | {self.finished}/{len(self.todo)} done, "
              f"{left} left, eta {_hms(eta)}", flush=True)

    def run(self):
        """Keep every slot busy until the queue is empty (several at once: the longest runs first, so the slots
        finish together); a stopped sweep (Ctrl-C, SIGTERM) stops its runs, which resume the next time."""
        def stopped(signum, frame):  # a plain `kill` (SIGTERM) stops the runs too, as Ctrl-C does: no orphaned run
            raise SystemExit(f"sweep stopped (signal {signum}); its runs were stopped too: run the same command to "
                             "resume")
        queue = sorted(self.todo, key=lambda q: -q["work"]) if self.slots > 1 else list(self.todo)
        running = {}  # slot -> (planned, process, started, run_dir, command)
        in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set a signal handler
        previous = signal.signal(signal.SIGTERM, stopped) if in_main_thread else None
        try:
            while queue or running:
                for slot in range(self.slots):
                    if slot not in running and queue:
                        q = queue.pop(0)
                        run_dir, proc, command = self.launch(slot, q)
                        if proc is None:
                            self.finish(q, run_dir, None, time.time(), command)
                        else:
                            running[slot] = (q, proc, time.time(), run_dir, command)
                for slot, (q, proc, started, run_dir, command) in list(running.items()):
                    if proc.poll() is not None:
                        del running[slot]
                        self.finish(q, run_dir, proc.returncode, started, command)
                if running:
                    time.sleep(0.05 if self.slots == 1 else 1.0)
        finally:
            for q, proc, *_ in running.values():  # the sweep itself was stopped: stop its runs (they resume later)
                proc.terminate()
            for q, proc, *_ in running.values():
                proc.wait()
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)


SWEEP_KEYS = dict(
    dry_run=False,  # print the plan (points, FLOPs, estimated time) and stop
    only="",  # run only the points whose name matches this regular expression (a plain substring works)
    retry_failed=False,  # run points whose earlier run failed again
    limit=0,  # run at most this many points now (0 = all)
    parallel=0,  # runs at once (0 = the spec's `parallel`, default 1)
    out_dir="",  # the sweep directory instead of the spec's (e.g. a scratch directory for a trial)
)


def check_pattern(key, pattern):
    """--only and the like are regular expressions: a broken one is one line, not re.error's traceback."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"config error: --{key}={pattern!r} is not a regular expression ({e}); a plain substring "
                          "works") from None


def main_sweep(argv):
    from configurator import configure
    specs = [a for a in argv if not a.startswith("-")]
    if len(specs) != 1 and not {"--help", "-h"} & set(argv):  # --help alone lists the keys
        raise ConfigError("usage: python scaling.py sweep config/sweeps/<spec>.py [--dry_run] [--key=value]: name "
                          f"one spec, not {len(specs)}")
    cfg, _ = configure(SWEEP_KEYS, None, [a for a in argv if a not in specs], doc_source=__file__,
                       usage="python scaling.py sweep config/sweeps/<spec>.py [--key=value ...]")
    for key in ("limit", "parallel"):
        if cfg[key] < 0:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= 0")
    check_pattern("only", cfg["only"])
    spec = load_spec(specs[0])
    out_dir = cfg.pop("out_dir")
    if out_dir:
        spec["out_dir"] = out_dir
    return run_sweep(spec, **cfg)
