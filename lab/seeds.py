"""
A checkpoint design trained seed after seed (.ci/gpu-campaign; records/campaign/README.md): the seeds still to do,
one finished seed's analyses, and the files its rows go to. Apart from lab.campaign (the plan's statistics and the
tally), so that these commands load the sweep's code only: the batch runs them between a lent GPU's seeds, where
the plan's scipy and the figures' matplotlib would cost seconds at every call.

    python -m lab.seeds todo SPEC       # the spec's seeds some point of which has no ok row yet, in order
    python -m lab.seeds analyses SPEC SEED --out=DIR [--at_rule_commit]   # one seed's analyses, after its runs
    python -m lab.seeds rows SPEC       # the files the spec's rows are written to
"""
import os
import subprocess
import sys

from configurator import ConfigError, run
from lab.sweep import REPO, done_points, grid_points, load_spec, record_files, rule_snapshot, sweep_dir


def rows_files(spec):
    """Where a spec's rows are written: its record files, else its sweep's results.jsonl."""
    return record_files(spec) or [os.path.join(sweep_dir(spec), "results.jsonl")]


def seeds_to_do(spec_path):
    """The seeds of a spec (its SEEDS) some point of which has no ok row yet (in its record file or its sweep's
    results.jsonl), in order."""
    spec = load_spec(spec_path)
    paths = record_files(spec) + [os.path.join(sweep_dir(spec), "results.jsonl")]
    done = set().union(*(done_points(path, retry_failed=True) for path in paths))  # ok rows only
    names = {p.name for p in grid_points(spec)}
    return [s for s in spec["SEEDS"] if any(n not in done for n in names if n.endswith(f"_s{s}"))]


def main_todo(argv):
    print(" ".join(str(s) for s in seeds_to_do(argv[0])))


def main_analyses(argv):
    """Run a spec's analyses(seed, run_dir, out) commands for one seed whose points all finished (--at_rule_commit:
    in the worktree of the spec's commit, as its runs); a failing command ends with its exit status."""
    spec_path, seed = argv[0], int(argv[1])
    out = os.path.abspath(next(a.split("=", 1)[1] for a in argv if a.startswith("--out=")))
    spec = load_spec(spec_path)
    code = rule_snapshot(spec, REPO)[0] if "--at_rule_commit" in argv else None  # the code of the runs' commit
    for cmd in spec["analyses"](seed, lambda point: os.path.join(sweep_dir(spec), point), out):
        print(" ".join(cmd), flush=True)
        rc = subprocess.run(cmd, cwd=code).returncode
        if rc:
            raise SystemExit(rc)


def main_rows(argv):
    print(*rows_files(load_spec(argv[0])))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    commands = dict(todo=main_todo, analyses=main_analyses, rows=main_rows)
    usage = "usage: python -m lab.seeds todo SPEC | analyses SPEC SEED --out=DIR [--at_rule_commit] | rows SPEC"
    if not argv or argv[0] in ("--help", "-h"):
        print(__doc__.strip() + "\n\n" + usage)
        return None
    if argv[0] not in commands or len(argv) < 2:
        raise ConfigError(f"{usage} ({' '.join(argv)!r} is not a command)")
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    run(main)
