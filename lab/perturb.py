"""
Does a committed result land where it did when its inputs move in their last bits? (Issue 48: the same rows must
give the same fits, bootstrap resamples included, on any CPU, and another CPU's rounding moves a loss by about
1e-12 relative.) This reruns the command a result JSON names in its provenance, in a scratch worktree of HEAD whose
JSON-lines inputs have every val_loss multiplied by 1 + scale, and compares every number of the two JSONs, entry by
entry: each list (a bootstrap's resamples, an interval, a fit) by its largest move and how many entries moved more
than tol.

    python -m lab.perturb records/schwethelm2026/isodepth_cpu_joint.json               # 2 minutes on one core
    python -m lab.perturb records/schwethelm2026/isodepth_cpu_delta_phi_own_r1.json    # 17 minutes

Exit status 1 when any number moved more than tol. The scratch worktree is removed afterwards.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from configurator import ConfigError, run
from runs import git

scale = 1e-12  # every val_loss of the inputs times (1 + scale)
tol = 1e-4  # a number that moves more than this (absolute) has landed elsewhere


def perturb_rows(path, factor):
    """Rewrite a JSON-lines file with every row's val_loss (a number) times factor; the rest as it was."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for r in rows:
        if isinstance(r.get("val_loss"), float):
            r["val_loss"] *= factor
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def numbers(obj, at=""):
    """{path: [numbers]} of every number in a JSON object, a list's numbers under the list's path (provenance left
    out: the commit and the inputs' sha256 differ by design)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k != "provenance":
                out.update(numbers(v, f"{at}.{k}" if at else str(k)))
        return out
    if isinstance(obj, list) and obj and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj):
        return {at: [float(v) for v in obj]}
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(numbers(v, f"{at}.{i}"))
        return out
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return {at: [float(obj)]}
    return {}


def moves(before, after, tol):
    """[(path, entries, largest move, entries moved more than tol)] of every number list in both results; NaN
    where both are NaN is no move, a list whose length changed moves everywhere."""
    a, b = numbers(before), numbers(after)
    out = []
    for path in sorted(set(a) | set(b)):
        x, y = a.get(path, []), b.get(path, [])
        if len(x) != len(y):
            out.append((path, max(len(x), len(y)), math.inf, max(len(x), len(y))))
            continue
        d = [0.0 if (math.isnan(u) and math.isnan(v)) else abs(u - v) for u, v in zip(x, y)]
        d = [math.inf if math.isnan(e) else e for e in d]
        out.append((path, len(d), max(d, default=0.0), sum(e > tol for e in d)))
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    paths = [a for a in argv if not a.startswith("--")]
    opts = dict(scale=scale, tol=tol)
    for a in argv:
        if a.startswith("--"):
            key, _, value = a[2:].partition("=")
            if key not in opts:
                raise ConfigError(f"config error: unknown key {key!r}: python -m lab.perturb RESULT.json [--scale=S] "
                                  "[--tol=T]")
            try:
                opts[key] = float(value)
            except ValueError:
                raise ConfigError(f"config error: --{key}={value!r} must be a number") from None
    if len(paths) != 1 or not os.path.isfile(paths[0]):
        raise ConfigError("usage: python -m lab.perturb RESULT.json [--scale=1e-12] [--tol=1e-4]: a committed result "
                          "JSON whose provenance names its command")
    with open(paths[0]) as f:
        before = json.load(f)
    prov = before.get("provenance") if isinstance(before, dict) else None
    if not (isinstance(prov, dict) and prov.get("command")):
        raise ConfigError(f"{paths[0]} names no command in its provenance: nothing to rerun")
    try:
        root = git(os.path.dirname(os.path.abspath(paths[0])), "rev-parse", "--show-toplevel").strip()
    except (OSError, subprocess.CalledProcessError):
        raise ConfigError(f"{paths[0]} is not in a git checkout: its command reruns in a worktree of HEAD") from None
    rel = os.path.relpath(os.path.abspath(paths[0]), root)
    scratch = tempfile.mkdtemp(prefix="perturb_")
    tree = os.path.join(scratch, "tree")
    git(root, "worktree", "add", "--detach", tree, "HEAD")
    try:
        for path in prov.get("inputs", {}):
            if path.endswith(".jsonl"):
                perturb_rows(os.path.join(tree, path), 1.0 + opts["scale"])
        done = subprocess.run(prov["command"], shell=True, cwd=tree, env=dict(os.environ, OMP_NUM_THREADS="1"),
                              stdout=subprocess.DEVNULL)
        if done.returncode:
            raise ConfigError(f"the command of {rel} failed on the perturbed inputs (exit {done.returncode})")
        with open(os.path.join(tree, rel)) as f:
            after = json.load(f)
    finally:
        git(root, "worktree", "remove", "--force", tree)
        shutil.rmtree(scratch, ignore_errors=True)
    moved = 0
    for path, n, largest, over in moves(before, after, opts["tol"]):
        moved += over
        if n > 1 or over:
            print(f"{path}: {n} entries, largest move {largest:.2e}, {over} moved more than {opts['tol']:g}")
    print(f"{rel} with every val_loss times 1 + {opts['scale']:g}: "
          + (f"{moved} numbers moved more than {opts['tol']:g}" if moved else "every number landed where it did"))
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(run(main))
