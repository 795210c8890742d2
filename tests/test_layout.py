"""The layout (issue 52): a classroom at the root, the lab beside it.

- The root holds the reading path and the scripts a user runs: at most 20 `.py` files.
- The packages beside it: lab/ (sweeps, fits, verdicts, records, the code audit, the campaign), hf/ (the transformers
  face), tools/ (benchmarks, the architecture drawing). They import the root; the root never imports them. One
  exception stands above them all: scaling.py, the command line of the scaling studies (counts, sweeps, fits), which
  nothing but the tests imports.
- No import circle, counting imports inside functions too; no project module imported inside a function; every other
  import inside a function (an optional or heavy dependency) says why on its line; no importlib or __import__ of a
  project module.
- What runs is what was built: no `x.__class__ = ...` or `x.forward = ...` anywhere in the project's code, and no
  module-global state rebound by a function of the root's modules (`global`): fast paths, compilation and activation
  checkpointing are chosen where a model is built (GPT's arguments, GPT.compile).
"""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("lab", "hf", "tools")
ON_TOP = {"scaling"}  # the command line above the lab
MOST_ROOT_FILES = 20


def modules(root):
    """{module name: path} of the project's code: the root's .py files and the packages' (not tests/, config/,
    course/, whose files import what they test or configure)."""
    out = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.endswith(".py"):
            out[name[:-3]] = path
        elif name in PACKAGES and os.path.isdir(path):
            for file in sorted(os.listdir(path)):
                if file.endswith(".py"):
                    out[name + ("" if file == "__init__.py" else "." + file[:-3])] = os.path.join(path, file)
    return out


def imports(path, known):
    """[(imported project module, line number, inside a function, the line)] of one file."""
    source = open(path, encoding="utf-8").read()
    lines = source.splitlines()
    tree = ast.parse(source)
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside |= {id(n) for n in ast.walk(fn) if n is not fn}
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module + "." + a.name for a in node.names] + [node.module]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names = ["<relative>"]
        else:
            continue
        hits = sorted({n for n in names if n in known})
        hits = [n for n in hits if not any(o != n and o.startswith(n + ".") for o in hits)] or ([names[0]] if names else [])
        for name in hits:
            out.append((name, node.lineno, id(node) in inside, lines[node.lineno - 1]))
    return out


def level(name):
    """0: the reading path and what runs it (the root); 1: a package; 2: the command line on top."""
    return 2 if name in ON_TOP else 1 if name.split(".")[0] in PACKAGES else 0


def problems(root):
    """Every breach of the layout's rules in the tree at root, one line each."""
    mods = modules(root)
    out = []
    roots = [n for n, p in mods.items() if os.path.dirname(p) == root]
    if len(roots) > MOST_ROOT_FILES:
        out.append(f"{len(roots)} .py files at the root, more than {MOST_ROOT_FILES}: {', '.join(roots)}")
    graph = {n: set() for n in mods}
    for name, path in mods.items():
        for target, line, in_function, text in imports(path, mods):
            where = f"{os.path.relpath(path, root)}:{line}"
            if target in mods:
                if target != name:
                    graph[name].add(target)
                if in_function:
                    out.append(f"{where}: imports the project's {target} inside a function: import it at the top")
                if level(target) > level(name):
                    out.append(f"{where}: {name} imports {target}, which stands above it (upward)")
                if level(name) == 1 and level(target) == 1 and target.split(".")[0] != name.split(".")[0]:
                    out.append(f"{where}: the package {name.split('.')[0]} imports another package's {target}")
            elif in_function and "#" not in text:
                out.append(f"{where}: an import inside a function without its reason in a comment: {text.strip()}")
        text = open(path, encoding="utf-8").read()
        for node in ast.walk(ast.parse(text)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in ("__class__", "forward"):
                    out.append(f"{os.path.relpath(path, root)}:{node.lineno}: replaces {t.attr} of an object at run "
                               "time: choose the code where the module is built")
            if isinstance(node, ast.Global) and level(name) == 0:
                out.append(f"{os.path.relpath(path, root)}:{node.lineno}: rebinds the module's {', '.join(node.names)} "
                           "from a function (a module-global mode): pass it where it is used")
        for call in re.findall(r"(?:importlib\.import_module|__import__)\(\s*['\"]([\w.]+)", text):
            if call.split(".")[0] in {m.split(".")[0] for m in mods}:
                out.append(f"{os.path.relpath(path, root)}: imports the project's {call} by name (importlib)")
    out += [f"an import circle: {' -> '.join(c + c[:1])}" for c in circles(graph)]
    return out


def circles(graph):
    """The strongly connected components of more than one module (Tarjan), each as a list of names."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_repository_keeps_the_layout():
    assert problems(ROOT) == []


def write(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


CLEAN = {"model.py": "import torch\n", "train.py": "import model\n", "scaling.py": "import train\nfrom lab import fits\n",
         "lab/__init__.py": "", "lab/fits.py": "import model\n\n\ndef f():\n    import matplotlib  # heavy: figures only\n"}


@pytest.mark.parametrize("planted, expected", [
    ({"model.py": "import train\n"}, "an import circle: model -> train -> model"),
    ({"model.py": "def f():\n    import train\n"}, "an import circle"),
    ({"train.py": "import model\nfrom lab import fits\n"}, "train imports lab.fits, which stands above it (upward)"),
    ({"lab/fits.py": "import scaling\n"}, "lab.fits imports scaling, which stands above it (upward)"),
    ({"train.py": "def f():\n    import model\n"}, "imports the project's model inside a function"),
    ({"lab/fits.py": "def f():\n    import matplotlib\n"}, "without its reason in a comment"),
    ({"train.py": "import importlib\nm = importlib.import_module('model')\n"}, "imports the project's model by name"),
    ({f"extra{i}.py": "" for i in range(18)}, "more than 20"),
    ({"train.py": "import model\nm = model.GPT()\nm.blocks[0].forward = print\n"}, "replaces forward of an object"),
    ({"lab/fits.py": "def f(m):\n    m.__class__ = object\n"}, "replaces __class__ of an object"),
    ({"model.py": "FAST = False\n\n\ndef fast():\n    global FAST\n    FAST = True\n"}, "rebinds the module's FAST"),
])
def test_the_check_catches_a_planted_breach(tmp_path, planted, expected):
    write(tmp_path, CLEAN)
    assert problems(str(tmp_path)) == []
    write(tmp_path, planted)
    found = problems(str(tmp_path))
    assert any(expected in p for p in found), found


def test_a_plain_forward_runs_at_most_15_project_functions():
    """From GPT.forward to the loss, GPT(GPTConfig()) with the CPU fast paths off runs at most 15 distinct functions
    (code objects) of the project's files, counted with sys.setprofile (nanoGPT's runs 5): a one-pass model walks
    the one plan, without the between-pass machinery, the conditioning or the MoE's aux bookkeeping it does not use.
    Looped models still go through the same walk (tests/test_loop.py: one pass equals the plain model)."""
    import sys

    import torch

    from model import GPT, GPTConfig
    model = GPT(GPTConfig()).init_weights(0)
    idx = torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(0))
    seen = set()

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event == "call" and path.startswith(ROOT + os.sep) and os.sep + "tests" + os.sep not in path:
            seen.add((os.path.relpath(path, ROOT), frame.f_code.co_firstlineno, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        model(idx, idx)
    finally:
        sys.setprofile(None)
    assert ("model.py", GPT.forward.__code__.co_firstlineno, "forward") in seen  # the count sees the forward
    assert len(seen) <= 15, sorted(seen)


# issue 52's bound: what reads finished runs (runs.py), the routing records (analyze.py) and the data preparation
# (prepare.py) stay out of a training run
MOST_TRAINING_LINES = 4300
LOADED = """
import json, os, runpy, sys
sys.argv = ["train.py"] + sys.argv[1:]
try:
    runpy.run_path("train.py", run_name="__main__")
finally:
    root = os.getcwd() + os.sep
    files = sorted({m.__file__ for m in list(sys.modules.values())
                    if (getattr(m, "__file__", None) or "").startswith(root)})
    print(json.dumps([os.path.relpath(f, root) for f in files]))
"""


def test_a_training_run_loads_at_most_4300_lines_of_the_project(data_dir, tmp_path):
    """`python train.py` loads the reading path and what runs it (train, model, loop, moe, optim, data and the
    modules they name), at most MOST_TRAINING_LINES lines: nothing of the lab, the analyses, the scaling command line
    or the data preparation, which train.py runs as a script of its own (prepare.py) when a run's data are missing,
    nor runs.py, which reads finished runs."""
    import json
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-c", LOADED, "--n_layer=1", "--n_embd=32", "--head_dim=16",
                          "--block_size=16", "--batch_size=2", "--max_iters=1", "--eval_tokens=32", "--sample_tokens=0",
                          *data_dir, f"--out_dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    files = ["train.py"] + json.loads(run.stdout.strip().splitlines()[-1])  # (run as __main__: not a module there)
    assert "model.py" in files and "data.py" in files
    outside = ("prepare.py", "scaling.py", "analyze.py", "runs.py")
    assert not [f for f in files if f.split(os.sep)[0] in PACKAGES + ("tests",) or f in outside], files
    lines = sum(len(open(os.path.join(ROOT, f), encoding="utf-8").readlines()) for f in files)
    assert lines <= MOST_TRAINING_LINES, (lines, files)
