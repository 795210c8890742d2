"""
Scaling sweeps: plan a grid of training runs, run train.py for each point (one at a time or several at once), and
append one row per finished run to results.jsonl (and to the committed record). Re-running a sweep resumes it: a
finished point is skipped, a killed one continues from its checkpoint. The accounting each point's plan rests on is
accounting.py's; the fits of the rows are lab/fits.py's. The command runs through scaling.py (or python -m lab.sweep):

    python scaling.py sweep config/sweeps/isoflop_cpu.py --dry_run     # the plan: points, tokens, estimated time
    python scaling.py sweep config/sweeps/isoflop_cpu.py --parallel=2  # run what is not done yet
    python scaling.py sweep config/sweeps/isoflop_paper.py --launcher=slurm --partition=gpu  # as Slurm jobs

On a Slurm cluster (--launcher=slurm, through submitit; SlurmSweep) each point not done and not queued or running
is a job (one job array per submission) that runs train.py in a snapshot of HEAD made in the sweep directory, so the
code may change while jobs wait; the tree must be HEAD (tracked files unchanged, the points' config files
committed), or the submission is refused in one line. Each job writes its row to rows/<point>.json; every run of the
sweep command (or --wait) merges those into results.jsonl, and submits only what has neither a row nor a job in the
queue (slurm/submitted.jsonl is the ledger). Before a preemption or the time limit Slurm sends USR2: train.py saves
at the end of its step and exits with EXIT_RESUMABLE, and submitit requeues the job, which resumes the point.

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
import contextlib
import dataclasses
import io
import itertools
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from collections import namedtuple

import numpy as np

import train as train_py  # its keys: a point is parsed as train.py parses it
from accounting import count_params, flops_per_token, model_on_meta
from checkpoint import check_training
from configurator import EXIT_RESUMABLE, ConfigError, cli_arg, configure, run
from model import GPTConfig
from data import TOKENIZER_VOCAB  # a named tokenizer sets the vocabulary (data.training_vocab)
from runs import SNAPSHOT_REVISION, file_sha256, git, git_revision, json_lines, snapshot_revision  # provenance

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: specs and records are relative to it
TRAIN_PY = os.path.join(REPO, "train.py")  # describes the keys
ROW_FIELDS = ("arch", "n_embd", "n_layer", "n_loop", "lr", "flops_budget", "seed")

Point = namedtuple("Point", "name arch configs overrides flops_budget fields")


def load_spec(path):
    """A sweep spec's variables, as a dict."""
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
    argv = list(point.configs) + [cli_arg(k, v) for k, v in {**spec.get("common", {}), **point.overrides}.items()]
    train, model_cfg = configure(train_py.defaults(), GPTConfig, argv, doc_source=TRAIN_PY, choices=train_py._CHOICES)
    check_training(train)  # what train.py would refuse stops the plan, before any run starts
    vocab = TOKENIZER_VOCAB.get(train["tokenizer"])
    if vocab is not None and model_cfg.vocab_size != vocab:
        model_cfg = dataclasses.replace(model_cfg, vocab_size=vocab)
    return train, model_cfg


def plan(spec, only=""):
    """Every point (whose name matches the regular expression `only`) with its accounting: parameters, FLOPs per
    token, steps and tokens as train.py will compute them (steps = round(C / (F * tokens per step)), at least 1)."""
    rows, counted = [], {}  # a model's accounting, once per distinct model: grids repeat one over budgets and seeds
    for p in (p for p in grid_points(spec) if re.search(only, p.name)):
        train, model_cfg = point_settings(spec, p)
        key = (repr(model_cfg), train["flops_convention"])
        if key not in counted:
            model = model_on_meta(model_cfg)
            counted[key] = (flops_per_token(model, train["flops_convention"], model_cfg.block_size),
                            flops_per_token(model, "schwethelm"), count_params(model))
        F, F_schwethelm, params = counted[key]
        per_step = train["batch_size"] * model_cfg.block_size * train["grad_accum"]
        steps = max(1, round(p.flops_budget / F / per_step)) if p.flops_budget > 0 else train["max_iters"]
        if callable(spec.get("lr_for")):  # an LR that depends on the run's tokens (HyperP's data correction)
            p.overrides["lr"] = train["lr"] = float(spec["lr_for"](steps * per_step, model_cfg, train))
        rows.append(dict(point=p, model=model_cfg, train=train, steps=steps, tokens=steps * per_step,
                         flops_per_token=F, work=steps * per_step * F_schwethelm, **params))
    return rows


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


def check_rule(spec, planned, root, code_from_snapshot=False):
    """A sweep that writes to a record feeds a verdict: its spec must hold the rule (see the docstring), with
    exactly the seeds the grid plans, and the git tree must be clean apart from registered results files (unless
    the runs' code is a snapshot of the rule's commit: rule_snapshot)."""
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
    dirty = [] if code_from_snapshot else uncommitted(root)
    if dirty:
        raise ConfigError(f"refusing to start {name}: the git tree has {len(dirty)} uncommitted change(s) "
                          f"({dirty[0]}{', ...' if len(dirty) > 1 else ''}); commit the rule and the code first, so "
                          f"each row's git_rev is the code that ran")


def uncommitted(root, untracked="all"):
    """The paths of the git tree that differ from HEAD (untracked ones too unless untracked="no"), apart from the
    results files of registered sweeps (records/<paper>/<sweep>.jsonl with a config/sweeps/<sweep>.py): sweeps
    write those."""
    registered = os.path.join(root, "config", "sweeps")
    changed = [line[3:].split(" -> ")[-1].strip('"') for line in
               git(root, "status", "--porcelain", f"--untracked-files={untracked}").splitlines()]
    return [p for p in changed if not (re.fullmatch(r"records/[^/]+/([^/]+)\.jsonl", p) and os.path.exists(
        os.path.join(registered, os.path.basename(p)[:-len(".jsonl")] + ".py")))]


def rule_snapshot(spec, root):
    """(the worktree, the commit) that a campaign's runs use (--at_rule_commit): the commit that last changed the
    spec, which holds its rule, and the code as it was then. The spec must be committed unchanged."""
    path = os.path.relpath(os.path.abspath(spec.get("spec_file", "")), root)
    try:
        revision = git(root, "log", "-1", "--format=%H", "--", path).strip()
        changed = revision and git(root, "status", "--porcelain", "--", path).strip()
    except (OSError, subprocess.CalledProcessError):
        raise ConfigError("--at_rule_commit needs a git checkout: its runs use a snapshot of a commit") from None
    if not revision or changed:
        raise ConfigError(f"--at_rule_commit: {path} is {'not committed' if not revision else 'changed since its commit'}"
                          f": commit the spec (its rule) first")
    return worktree(root, os.path.join(root, "out", "worktrees", revision[:12]), revision), revision


def worktree(root, dest, revision):
    """A git worktree of the checkout at `revision` (detached) in dest, made once: the code a campaign's runs use, a
    real checkout, so the provenance that code writes (git_revision) names that commit. data/ and out/ are the
    checkout's, linked in as in a snapshot."""
    if not os.path.isdir(dest):
        git(root, "worktree", "add", "--detach", dest, revision)
        for linked in ("data", "out"):
            os.makedirs(os.path.join(root, linked), exist_ok=True)
            if not os.path.exists(os.path.join(dest, linked)):
                os.symlink(os.path.join(root, linked), os.path.join(dest, linked))
    return dest


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
        if isinstance(row["config"].get("train"), dict):  # how the last segment started, not a setting of the point:
            row["config"]["train"].pop("resume", None)  # a resumed point's row is an uninterrupted one's
    row.update(git_rev=revision, command=command)
    return row


def finished_row(planned, run_dir, rc, started, command, revision, spec_file, spec_sha):
    """Point_row of a run that ended (ok if it wrote result.json, else failed), with the spec that planned it and
    the process time since `started` (train.py's start-up included; None when nothing ran)."""
    status = "ok" if os.path.exists(os.path.join(run_dir, "result.json")) else "failed"
    row = point_row(planned, run_dir, status, rc, revision, command)
    row.update(spec=spec_file, spec_sha256=spec_sha, flops_per_token_schwethelm=planned["work"] / planned["tokens"],
               process_s=time.time() - started if rc is not None else None)
    return row


def point_command(spec, point, run_dir):
    """(train.py's command line, extra environment) of a point's run in run_dir; --resume is added where it runs,
    when the run directory holds a checkpoint (the row keeps the command without it)."""
    args = [cli_arg(k, v) for k, v in {**spec.get("common", {}), **point.overrides}.items()]
    cmd = list(spec.get("runner", [sys.executable, "train.py"])) + point.configs + args + [f"--out_dir={run_dir}"]
    if point.flops_budget > 0:
        cmd.append(f"--flops_budget={point.flops_budget!r}")
    return cmd, dict(spec.get("env", {}))


def record_row(spec, row):
    """The committed copy of a row, without the full config (git_rev and command reproduce it), in the record
    directory of its arch, if the spec has one."""
    record = spec.get("record") or ""  # one directory, or {arch: directory} for a sweep serving several papers
    record_dir = record.get(row["arch"], "") if isinstance(record, dict) else record
    if record_dir:
        write_record(os.path.join(record_dir, spec["name"] + ".jsonl"), row)


def exclusive(f):
    """Hold an exclusive lock on open file f until it is closed (released too if the process dies); other processes
    wait. Windows has no flock: there, run one sweep per spec at a time."""
    try:
        import fcntl  # Unix only: Windows has none
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


def run_sweep(spec, dry_run=False, only="", retry_failed=False, limit=0, parallel=0, launcher="local", wait=False,
              deadline_s=0.0, devices="", at_rule_commit=False, **cluster):
    """Plan, print, then run every point not yet done (one at a time, or `parallel` at once), appending a row to
    results.jsonl after each. A point killed midway is resumed (--resume) the next time; a point whose run failed
    (non-zero exit: divergence, a bug) gets a row with status 'failed' and is not retried unless retry_failed.
    deadline_s: start only runs that should end within that many seconds (by the measured throughput), stop the
    ones still running then (they resume the next time) and return. devices: the slots' CUDA_VISIBLE_DEVICES
    instead of the spec's ("0" with parallel=4: four runs share GPU 0). at_rule_commit: train.py runs from a
    worktree of the commit that last changed the spec (its rule), so every arm of a comparison runs one code.
    launcher="slurm": the points not done and not queued or running go to Slurm as jobs (SlurmSweep; `cluster`:
    CLUSTER_KEYS), and their rows are merged as they come."""
    if launcher not in LAUNCHERS:
        raise ConfigError(f"config error: --launcher={launcher!r} is not one of {' | '.join(LAUNCHERS)}")
    if set(cluster) - set(CLUSTER_KEYS):
        raise TypeError(f"run_sweep() got unknown keys {sorted(set(cluster) - set(CLUSTER_KEYS))}")
    root = REPO
    results = os.path.join(sweep_dir(spec), "results.jsonl")
    planned = plan(spec, only)
    if not planned:
        raise ConfigError(f"no point of sweep {spec['name']} matches --only={only!r}; `--dry_run` lists the names")
    slurm = SlurmSweep(spec, root, cluster) if launcher == "slurm" else None
    if slurm is not None and not dry_run:
        slurm.merge()  # the rows of jobs that ended since the last look: their points are done
    # a fresh clone has no out/ but holds the committed rows: their points are done too, so a campaign stopped on
    # one machine resumes on another (a finished run here whose row results.jsonl lost gets that row back below)
    committed = set().union(*(done_points(path, retry_failed) for path in record_files(spec)))
    done = done_points(results, retry_failed) | {
        name for name in committed if not os.path.exists(os.path.join(sweep_dir(spec), name, "result.json"))}
    sources = [results] + record_files(spec)
    rows = list({r["point"]: r for path in sources if os.path.exists(path) for r in read_results(path)}.values())
    measured = [r["tokens"] * r["flops_per_token_schwethelm"] / r["process_s"] for r in rows
                if r.get("status") == "ok" and r.get("process_s") and r.get("flops_per_token_schwethelm")]
    rate, source = ((float(np.median(measured)), f"measured on {len(measured)} finished runs") if measured else
                    (float(spec.get("flops_per_second", 5e9)), "the spec's flops_per_second guess"))
    print_plan(planned, spec, done, rate, source)
    todo = [q for q in planned if q["point"].name not in done]
    if slurm is not None and not dry_run:
        todo = slurm.not_in_flight(todo)
    todo = todo[:limit or None]
    if dry_run or not todo and not (slurm is not None and wait):
        return planned
    code, revision = (rule_snapshot(spec, root) if at_rule_commit and todo else (root, snapshot_revision(root)))
    if todo and spec.get("record"):  # a snapshot's code is its commit's: no working tree to be dirty
        # the rule names the seeds of the whole grid: --only (one seed at a time, .ci/gpu-campaign) runs a part of it
        check_rule(spec, plan(spec) if only else planned, root, code_from_snapshot=code != root or revision is not None)
    try:
        os.makedirs(sweep_dir(spec), exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot write the sweep's runs to {sweep_dir(spec)!r} ({e.strerror}): choose another "
                          "--out_dir") from None
    if slurm is None:
        SweepRuns(spec, todo, code, parallel, devices=devices.split(",") if devices else None, rate=rate,
                  deadline_s=deadline_s, revision=revision).run()
        return planned
    if todo:
        slurm.submit(todo)
    if wait:
        slurm.wait()
    return planned


class SweepRuns:
    """The runs of one sweep invocation: train.py processes in `slots` parallel slots, a row appended to
    results.jsonl (and the record's committed copy) as each one ends."""

    def __init__(self, spec, todo, root, parallel=0, devices=None, rate=None, deadline_s=0.0, revision=None):
        self.spec, self.todo, self.root = spec, todo, root  # root: where train.py runs (a snapshot, or the checkout)
        self.out = sweep_dir(spec)
        self.results = os.path.join(self.out, "results.jsonl")
        self.revision = revision or git_revision(root)
        self.spec_file = spec.get("spec_file") and os.path.relpath(os.path.abspath(spec["spec_file"]), REPO)
        self.spec_sha = file_sha256(spec["spec_file"]) if self.spec_file else None
        self.slots = max(1, parallel or spec.get("parallel", 1))
        self.devices = devices or spec.get("devices")  # e.g. ["0", "1", ...]: CUDA_VISIBLE_DEVICES of each slot
        self.rate = rate or float(spec.get("flops_per_second", 5e9))  # FLOP/s of one run, for its expected time
        self.deadline = time.time() + deadline_s if deadline_s else float("inf")
        self.t_start, self.finished = time.time(), 0

    def launch(self, slot, q):
        """Start point q's run in `slot`: (run_dir, process, command); process None when it already finished."""
        spec, p = self.spec, q["point"]
        run_dir = os.path.join(self.out, p.name)
        os.makedirs(run_dir, exist_ok=True)
        if os.path.exists(os.path.join(run_dir, "result.json")):  # finished, but the sweep died before its row
            return run_dir, None, ""
        cmd, extra_env = point_command(spec, p, run_dir)
        resume = ["--resume"] if os.path.exists(os.path.join(run_dir, "ckpt.pt")) else []
        env = dict(os.environ, **extra_env)
        if self.devices:
            env["CUDA_VISIBLE_DEVICES"] = self.devices[slot % len(self.devices)]
        log = open(os.path.join(run_dir, "train.log"), "a")
        print(f"[{p.name}] {' '.join(cmd + resume)}", flush=True)
        proc = subprocess.Popen(cmd + resume, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT)
        return run_dir, proc, " ".join(cmd)

    def finish(self, q, run_dir, rc, started, command):
        """Append point q's row (ok if its run wrote result.json, else failed) and print the progress."""
        if rc is not None and (rc < 0 or rc == EXIT_RESUMABLE):  # killed, or stopped and saved: not a result
            raise SystemExit(f"[{q['point'].name}] was {'stopped' if rc > 0 else f'killed (signal {-rc})'}; run the "
                             "same command to resume")
        row = finished_row(q, run_dir, rc, started, command, self.revision, self.spec_file, self.spec_sha)
        status = row["status"]
        with open(self.results, "a") as f:
            exclusive(f)  # two sweeps of one spec (different --only) share both files: no row may be lost
            f.write(json.dumps(row) + "\n")
            f.flush()
            record_row(self.spec, row)
        self.finished += 1
        left = len(self.todo) - self.finished
        eta = (time.time() - self.t_start) / self.finished * left
        print(f"[{q['point'].name}] {status}: val_loss {row.get('val_loss')} | {self.finished}/{len(self.todo)} done, "
              f"{left} left, eta {_hms(eta)}", flush=True)

    def expected_s(self, q):
        return q["work"] / self.rate

    def run(self):
        """Keep every slot busy until the queue is empty (several at once: the longest runs first, so the slots
        finish together); a stopped sweep (Ctrl-C, SIGTERM) stops its runs, which resume the next time. With a
        deadline, a run starts only if it should end by then; at the deadline the runs still going are stopped
        (no row: they resume the next time) and the sweep ends cleanly."""
        def stopped(signum, frame):  # a plain `kill` (SIGTERM) stops the runs too, as Ctrl-C does: no orphaned run
            raise SystemExit(f"sweep stopped (signal {signum}); its runs were stopped too: run the same command to "
                             "resume")
        queue = sorted(self.todo, key=lambda q: -q["work"]) if self.slots > 1 else list(self.todo)
        running = {}  # slot -> (planned, process, started, run_dir, command)
        in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set a signal handler
        previous = signal.signal(signal.SIGTERM, stopped) if in_main_thread else None
        try:
            while running or any(time.time() + self.expected_s(q) <= self.deadline for q in queue):
                for slot in range(self.slots):
                    startable = [q for q in queue if time.time() + self.expected_s(q) <= self.deadline]
                    if slot not in running and startable:
                        q = startable[0]
                        queue.remove(q)
                        run_dir, proc, command = self.launch(slot, q)
                        if proc is None:
                            self.finish(q, run_dir, None, time.time(), command)
                        else:
                            running[slot] = (q, proc, time.time(), run_dir, command)
                for slot, (q, proc, started, run_dir, command) in list(running.items()):
                    if proc.poll() is not None:
                        del running[slot]
                        self.finish(q, run_dir, proc.returncode, started, command)
                if running and time.time() >= self.deadline:
                    break
                if running:
                    time.sleep(0.05 if self.slots == 1 else 1.0)
        finally:
            for q, proc, *_ in running.values():  # the sweep itself was stopped: stop its runs (they resume later)
                proc.terminate()
            for q, proc, *_ in running.values():
                proc.wait()
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)
        left = len(queue) + len(running)
        if left:
            print(f"deadline: {len(running)} run(s) stopped, {len(queue)} not started ({left} point(s) left); run the "
                  "same command to continue", flush=True)


# ---- sweeps on a Slurm cluster, through submitit ----------------------------------------------------------------

ARRAY_MAX = 1000  # points per job array: Slurm's default MaxArraySize is 1001
REQUEUES = 100  # time limits a point may outlast (each one: saved, requeued, resumed)


def slurm_parameters(cluster, name):
    """submitit's SlurmExecutor parameters (sbatch's options, its names) from the --launcher=slurm keys: one task
    per job; --requeue, so clusters that forbid requeues by default still let submitit requeue a stopped point."""
    params = dict(job_name=f"sweep-{name}", partition=cluster["partition"], time=cluster["time"], nodes=1,
                  ntasks_per_node=1, stderr_to_stdout=True, additional_parameters=dict(requeue=True))
    optional = dict(account=cluster["account"], qos=cluster["qos"], gpus_per_node=cluster["gpus_per_run"],
                    cpus_per_task=cluster["cpus_per_run"], mem=cluster["mem"], constraint=cluster["constraint"])
    params.update({k: v for k, v in optional.items() if v})  # "" and 0: the partition's default
    return params


def slurm_executor(folder, cluster, name):
    """The submitit executor that submits a sweep's jobs (the tests put submitit's local executor in its place)."""
    import submitit  # optional: only Slurm sweeps need it
    try:
        executor = submitit.SlurmExecutor(folder, max_num_timeout=REQUEUES)
    except RuntimeError as e:  # no srun on this machine
        raise ConfigError(f"--launcher=slurm: {e} (submit from the cluster's login node)") from None
    executor.update_parameters(**slurm_parameters(cluster, name))
    return executor


def check_committed(root, files):
    """The jobs run a snapshot of HEAD, so submit only what HEAD holds: no tracked file changed (registered results
    files apart) and every file the points name (relative to the repository) committed. Untracked files may stay:
    the snapshot leaves them out and no point reads them."""
    try:
        dirty = uncommitted(root, "no")
        tracked = set(git(root, "ls-files").splitlines())
    except (OSError, subprocess.CalledProcessError):
        raise ConfigError("--launcher=slurm needs a git checkout: its jobs run a snapshot of HEAD") from None
    missing = [f for f in files if not os.path.isabs(f) and os.path.normpath(f) not in tracked]
    if dirty or missing:
        what = f"{dirty[0]} differs from HEAD" if dirty else f"{missing[0]} is not committed"
        raise ConfigError(f"refusing to submit: {what}{' (and more)' if len(dirty) + len(missing) > 1 else ''}, but "
                          "the jobs run a snapshot of HEAD: commit (or stash) first")




def snapshot(root, dest):
    """HEAD's files in dest (git archive): the code the jobs of a submission run, whatever becomes of the working
    tree while they wait in the queue; made once per commit, which SNAPSHOT_REVISION names (the snapshot has no git).
    data/, where train.py prepares its token files (ignored by git), is the repository's own, linked in."""
    if os.path.isdir(dest):
        return dest
    tmp = f"{dest}.{os.getpid()}.tmp"
    os.makedirs(tmp)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=root, capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(tmp, filter="data")
    with open(os.path.join(tmp, SNAPSHOT_REVISION), "w") as f:  # what git_revision says of code run from here
        f.write(git(root, "rev-parse", "HEAD").strip() + "\n")
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    if not os.path.exists(os.path.join(tmp, "data")):
        os.symlink(os.path.join(root, "data"), os.path.join(tmp, "data"))
    os.replace(tmp, dest)
    return dest


class PointJob:
    """One point as a submitit job: train.py run in the snapshot this job was submitted from (resuming from the
    point's checkpoint if it has one), then the point's row written to rows/<point>.json, atomically. A plain
    callable with a checkpoint() method: submitit calls that when Slurm signals the job (USR2) before a preemption
    or its time limit, and requeues the job it returns."""

    def __init__(self, planned, command, env, run_dir, row_path, revision, spec_file, spec_sha):
        self.planned, self.command, self.env, self.run_dir, self.row_path = planned, command, env, run_dir, row_path
        self.revision, self.spec_file, self.spec_sha = revision, spec_file, spec_sha
        self.proc = None

    def __getstate__(self):  # submitit pickles the job to requeue it; the ended process stays behind
        return dict(self.__dict__, proc=None)

    def __call__(self):
        root = REPO  # the snapshot, since this file is its copy
        if os.path.exists(self.row_path):  # requeued after it wrote its row: the same row again would merge twice
            with open(self.row_path) as f:
                row = json.load(f)
            if row["status"] == "ok":
                return row
        os.makedirs(self.run_dir, exist_ok=True)
        started, rc = time.time(), None
        try:
            if not os.path.exists(os.path.join(self.run_dir, "result.json")):  # else it ended before its row
                resume = ["--resume"] if os.path.exists(os.path.join(self.run_dir, "ckpt.pt")) else []
                with open(os.path.join(self.run_dir, "train.log"), "a") as log:
                    self.proc = subprocess.Popen(self.command + resume, cwd=root, env=dict(os.environ, **self.env),
                                                 stdout=log, stderr=subprocess.STDOUT)
                while self.proc.poll() is None:  # polled, not waited on: checkpoint() may run in between
                    time.sleep(0.2)
                rc = self.proc.returncode
        finally:  # this job stopped another way (cancelled): no run outlives it
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
        if rc in (EXIT_RESUMABLE, -signal.SIGTERM, -signal.SIGUSR2):
            # Slurm signalled the run itself (it signals all of a job's processes): a preemption's SIGTERM, whose
            # USR2 follows (checkpoint() then requeues this job), or the job's end. Either comes: wait for it.
            while True:
                time.sleep(60)
        row = finished_row(self.planned, self.run_dir, rc, started, " ".join(self.command), self.revision,
                           self.spec_file, self.spec_sha)
        with open(self.row_path + ".tmp", "w") as f:
            json.dump(row, f)
        os.replace(self.row_path + ".tmp", self.row_path)  # the sweep never reads half a row
        return row

    def checkpoint(self):
        """Stop the run (train.py saves at the end of its step and exits with EXIT_RESUMABLE) and requeue this
        job: it resumes the point, or, if the run ended meanwhile, writes its row."""
        from submitit.helpers import DelayedSubmission  # optional: only Slurm sweeps need it
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGUSR2)
            # Reaped with os.waitpid, not proc.wait(): this is a signal handler, which may have interrupted a
            # proc.poll() that holds the lock proc.wait() would wait for.
            try:
                proc.returncode = os.waitstatus_to_exitcode(os.waitpid(proc.pid, 0)[1])
            except ChildProcessError:  # that poll had reaped it already
                pass
        return DelayedSubmission(self)


class SlurmSweep:
    """The points of a sweep as Slurm jobs (one job array per submission), through submitit. In the sweep
    directory: rows/ (each job's row, merged into results.jsonl by the sweep command), slurm/submitted.jsonl (the
    ledger of every job submitted, so no point is submitted while a job of it is queued or running), slurm/code-<rev>/
    (the snapshots the jobs run) and slurm/jobs/ (submitit's pickles and logs)."""

    def __init__(self, spec, root, cluster):
        cluster = {**CLUSTER_KEYS, **cluster}
        if not cluster["partition"]:
            raise ConfigError("config error: --launcher=slurm needs --partition=NAME (`sinfo -s` lists them)")
        for key, least in (("time", 1), ("gpus_per_run", 0), ("cpus_per_run", 0)):
            if cluster[key] < least:
                raise ConfigError(f"config error: --{key}={cluster[key]} must be >= {least}")
        try:
            import submitit  # noqa: F401 (optional: only Slurm sweeps need it)
        except ImportError:
            raise ConfigError("--launcher=slurm needs submitit: pip install -r requirements.txt") from None
        self.spec, self.root, self.cluster = spec, root, cluster
        self.out = os.path.abspath(sweep_dir(spec))  # the jobs run elsewhere: every path they get is absolute
        self.rows = os.path.join(self.out, "rows")
        self.folder = os.path.join(self.out, "slurm")
        self.ledger = os.path.join(self.folder, "submitted.jsonl")
        self.jobs, self._executor = {}, None  # point -> its queued or running job

    @property
    def executor(self):
        if self._executor is None:
            self._executor = slurm_executor(os.path.join(self.folder, "jobs"), self.cluster, self.spec["name"])
        return self._executor

    def merge(self):
        """Append to results.jsonl (and the record) each row a job wrote that it does not hold yet."""
        if not os.path.isdir(self.rows):
            return
        results = os.path.join(self.out, "results.jsonl")
        with open(results, "a") as f:
            exclusive(f)  # another sweep command of this spec may be merging the same rows
            have = read_results(results)
            for name in sorted(os.listdir(self.rows)):
                if name.endswith(".json"):
                    with open(os.path.join(self.rows, name)) as r:
                        row = json.load(r)
                    if row not in have:
                        f.write(json.dumps(row) + "\n")
                        f.flush()
                        record_row(self.spec, row)
                        print(f"[{row['point']}] {row['status']}: val_loss {row.get('val_loss')}", flush=True)

    def not_in_flight(self, todo):
        """todo without the points whose last job (in the ledger) is queued or running; a job that ended without a
        row (cancelled, killed, failed to start) is named, and its point submitted again (it resumes)."""
        last = {}
        if os.path.exists(self.ledger):
            last = {entry["point"]: entry["job_id"] for _, entry in json_lines(self.ledger, "mend or remove it")}
        names = {q["point"].name for q in todo}
        jobs = {p: self.executor.job_class(folder=self.executor.folder, job_id=j) for p, j in last.items()
                if p in names}  # all made first: one sacct call asks for all of them
        for point, job in jobs.items():
            if not job.done():
                self.jobs[point] = job
            elif not os.path.exists(os.path.join(self.rows, point + ".json")):
                print(f"[{point}] job {job.job_id} ended without a row (its log: {job.paths.stdout}): submitted again")
        if self.jobs:
            print(f"{len(self.jobs)} point(s) queued or running: not submitted again", flush=True)
        return [q for q in todo if q["point"].name not in self.jobs]

    def submit(self, todo):
        """Submit todo's points from a snapshot of HEAD (its commit is each row's git_rev); ids to the ledger."""
        executor = self.executor  # no Slurm here: said before anything else
        check_committed(self.root, [c for q in todo for c in q["point"].configs])
        revision = git(self.root, "rev-parse", "HEAD").strip()
        code = snapshot(self.root, os.path.join(self.folder, f"code-{revision[:12]}"))
        spec_file = self.spec.get("spec_file") and os.path.relpath(os.path.abspath(self.spec["spec_file"]), self.root)
        spec_sha = file_sha256(self.spec["spec_file"]) if spec_file else None
        os.makedirs(self.rows, exist_ok=True)
        calls = []
        for q in todo:
            run_dir = os.path.join(self.out, q["point"].name)
            command, env = point_command(self.spec, q["point"], run_dir)
            calls.append(PointJob(q, command, env, run_dir, os.path.join(self.rows, q["point"].name + ".json"),
                                  revision, spec_file, spec_sha))
        with open(self.ledger, "a") as ledger, contextlib.chdir(code):  # a job runs where sbatch ran: the snapshot
            exclusive(ledger)
            for i in range(0, len(calls), ARRAY_MAX):
                for q, job in zip(todo[i:], executor.submit_array(calls[i:i + ARRAY_MAX])):
                    ledger.write(json.dumps(dict(point=q["point"].name, job_id=job.job_id, git_rev=revision,
                                                 submitted=time.strftime("%Y-%m-%d %H:%M:%S"))) + "\n")
                    self.jobs[q["point"].name] = job
        print(f"submitted {len(calls)} point(s) from {code}: the same command (--wait to stay) merges their rows")

    def wait(self):
        """Until every job held here ends, merging rows as they come; a job that ended without a row stops the
        sweep in one line (rerun the command: it submits the point again, which resumes)."""
        start = time.time()
        while any(not job.done() for job in self.jobs.values()):
            self.merge()
            time.sleep(min(30.0, 0.2 + 0.05 * (time.time() - start)))  # Slurm's status: at most twice a minute
        self.merge()
        lost = [(p, job) for p, job in self.jobs.items() if not os.path.exists(os.path.join(self.rows, p + ".json"))]
        if lost:
            raise SystemExit(f"[{lost[0][0]}] job {lost[0][1].job_id} ended without a row ({len(lost)} in all; its "
                             f"log: {lost[0][1].paths.stdout}); run the same command to submit it again")


LAUNCHERS = ("local", "slurm")
SWEEP_KEYS = dict(
    dry_run=False,  # print the plan (points, FLOPs, estimated time) and stop
    only="",  # run only the points whose name matches this regular expression (a plain substring works)
    retry_failed=False,  # run points whose earlier run failed again
    limit=0,  # run at most this many points now (0 = all)
    parallel=0,  # runs at once (0 = the spec's `parallel`, default 1)
    out_dir="",  # the sweep directory instead of the spec's (e.g. a scratch directory for a trial)
    launcher="local",  # local: the runs on this machine; slurm: one Slurm job per point through submitit (keys below)
    wait=False,  # slurm: wait for the jobs, merging their rows as they end (else: submit; the same command merges)
    deadline_s=0.0,  # start only runs expected to end within this many seconds; then stop (they resume next time)
    devices="",  # the slots' CUDA_VISIBLE_DEVICES, comma-separated, instead of the spec's (0 with --parallel=4: 4 on GPU 0)
    at_rule_commit=False,  # run train.py from a worktree of the commit that last changed the spec (its rule)
)
CLUSTER_KEYS = dict(  # --launcher=slurm's
    partition="",  # slurm: the partition of the jobs (required; `sinfo -s` lists them)
    account="",  # slurm: the account charged ("" = your default)
    qos="",  # slurm: the quality of service ("" = the partition's default)
    time=240,  # slurm: minutes a job may run; a point that needs longer is saved, requeued and resumed
    gpus_per_run=1,  # slurm: GPUs of each point's job (0: a CPU job; several: give the spec a torchrun runner)
    cpus_per_run=0,  # slurm: CPU cores of each job (0 = the partition's default)
    mem="",  # slurm: memory of each job, e.g. 200G ("" = the partition's default)
    constraint="",  # slurm: node features the jobs need, e.g. h100 ("" = any node of the partition)
)
SWEEP_KEYS.update(CLUSTER_KEYS)


def check_pattern(key, pattern):
    """--only and the like are regular expressions: a broken one is one line, not re.error's traceback."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"config error: --{key}={pattern!r} is not a regular expression ({e}); a plain substring "
                          "works") from None


def main_sweep(argv):
    specs = [a for a in argv if not a.startswith("-")]
    cfg, _ = configure(SWEEP_KEYS, None, [a for a in argv if a not in specs], doc_source=__file__,
                       usage="python scaling.py sweep config/sweeps/<spec>.py [--key=value ...]",
                       choices=dict(launcher=LAUNCHERS))  # first: a bad key is named, --help lists the keys
    if len(specs) != 1:
        raise ConfigError("usage: python scaling.py sweep config/sweeps/<spec>.py [--dry_run] [--key=value]: name "
                          f"one spec, not {len(specs)}")
    for key in ("limit", "parallel", "deadline_s"):
        if cfg[key] < 0:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= 0")
    local = [k for k in ("parallel", "deadline_s", "devices", "at_rule_commit") if cfg[k] != SWEEP_KEYS[k]]
    if cfg["launcher"] == "slurm" and local:
        raise ConfigError(f"config error: --{local[0]} is the local launcher's; Slurm runs the points as its queue "
                          "allows, each job from a snapshot of HEAD")
    stray = [k for k in ("wait", *CLUSTER_KEYS) if cfg["launcher"] != "slurm" and cfg[k] != SWEEP_KEYS[k]]
    if stray:
        raise ConfigError(f"config error: --{stray[0]} is a key of --launcher=slurm (the runs here are local)")
    check_pattern("only", cfg["only"])
    spec = load_spec(specs[0])
    out_dir = cfg.pop("out_dir")
    if out_dir:
        spec["out_dir"] = out_dir
    return run_sweep(spec, **cfg)


if __name__ == "__main__":  # the same command as `python scaling.py sweep SPEC ...`, the name the records cite
    run(main_sweep, sys.argv[1:])
