"""
Which committed result rows were trained by different code (issue 30, item 3: judge the arms of one comparison with
rows from one commit of the code).

Each row of records/<paper>/*.jsonl records `git_rev` (HEAD when its sweep started; "+dirty" when the tree had
uncommitted changes) and `command`. The rows of one comparison often come from several commits, and a change of
rounding alone (the same math in another order) moves a looped run by as much as a new seed (records/chen2026.md:
0.05-0.07 nats for Chen et al.'s looped rungs). This script lists, for every rows file and every seed (the rows
one verdict compares at one seed, and a fit's rows at one seed), the commits of its rows and whether the
*training code* differs between each pair of them:

    the files of TRAINING_CODE and the config files the rows' commands name (with the configs they exec) that
    differ between commits A and B (their git blobs), and in each the top-level definitions whose syntax trees
    differ (ast.dump with docstrings dropped: a change of comments, docstrings or line numbers is no difference)

TRAINING_CODE is every root file train.py imported at its top at the commits the rows of 2026-11-26 name (checked:
no root .py file was ever deleted or renamed, so code split out of train.py or model.py later is caught as a new
file in the diff); at each commit the audit adds any other root file train.py imports there, through the top-level
imports of what it imports (a file split out later, such as runlog.py, counts from the commits that have it).
(Until 2026-11-28 scaling.py held the accounting train.py imports; its lazy imports of fits.py, figures.py and sweep.py
ran only from its command line, never in training. Since then the accounting is accounting.py and the lab is lab/.) A
definition moved between training files with its code unchanged is no difference (Repo.moved).

Fields of a group (one rows file, one seed): `commits` (rows per git_rev), `n_commits`, `same_training_code` (false
when two of its commits, at their base, differ; else "untraceable" when it holds more than one rev and one is
"+dirty"; else true), `files_differ`, `differs` ({commit pair: {file: definitions}}), and the same restricted to
train.py's path: `same_code_run`, `files_differ_run`, `differs_run` (the definitions train.py reaches from any of
its own by a name in their text: a superset of what it calls; imports excluded). A "+dirty" rev cannot be traced
(its uncommitted changes are lost): it is listed in `untraceable` and compared at its base commit. `arms` gives the
rows per git_rev of each arch.

    python -m lab.code_audit                          write records/code_mix.json
    python -m lab.code_audit --check                  exit 1 when records/code_mix.json differs from what it computes
    python -m lab.code_audit --out=PATH               write elsewhere

tests/test_code_mix.py checks the committed JSON is today's and that every record names the groups whose code
differs (records/README.md, rule 9).
"""
import ast
import functools
import glob
import itertools
import json
import os
import re
import subprocess
import sys

TRAINING_CODE = ("model.py", "loop.py", "moe.py", "optim.py", "kernels.py", "train.py", "data.py", "prepare.py",
                 "configurator.py", "distributed.py", "checkpoint.py", "scaling.py")
EXEC = re.compile(r"""exec\(open\(.*?["']([\w./-]+\.py)["']""")


class Repo:
    """git in one directory, with each answer cached (a diff per commit pair and file set)."""

    def __init__(self, root):
        self.root = root

    def git(self, *args, check=True):
        p = subprocess.run(["git", "-C", self.root, *args], capture_output=True, text=True)
        if check and p.returncode:
            raise RuntimeError(f"git {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    @functools.lru_cache(maxsize=None)
    def commit(self, rev):
        """The full hash of a row's git_rev (without "+dirty"), or None when the repository does not have it."""
        out = self.git("rev-parse", "--verify", "-q", rev + "^{commit}", check=False).strip()
        return out or None

    @functools.lru_cache(maxsize=None)
    def blobs(self, commit):
        """{path: blob id} of a commit's files (a file's text is parsed once per blob, not per commit)."""
        return {line.split("\t", 1)[1]: line.split()[2] for line in self.git("ls-tree", "-r", commit).splitlines()}

    @functools.lru_cache(maxsize=None)
    def text(self, blob):
        return self.git("cat-file", "blob", blob) if blob else ""

    def show(self, commit, path):
        return self.text(self.blobs(commit).get(path))

    def summary(self, commit, path):
        return summarize(self.text(self.blobs(commit).get(path)))

    @functools.lru_cache(maxsize=None)
    def diff(self, a, b, paths):
        """{file: the top-level names whose code differs} of the files that differ between commits a and b beyond
        comments and docstrings."""
        out = {}
        for path in sorted(p for p in paths if self.blobs(a).get(p) != self.blobs(b).get(p)):
            names = [n for n in changed_names(self.summary(a, path), self.summary(b, path))
                     if not self.moved(a, b, path, n, paths)]
            if names:
                out[path] = names
        return out

    def moved(self, a, b, path, name, paths):
        """A definition that left one file of `paths` for another, its code unchanged (checks.py's into model.py,
        scaling.py's accounting into accounting.py): the same code at both commits, so no difference. Imports and
        module-level statements are never matched this way."""
        if name.startswith("<"):
            return False
        here = [self.summary(c, path) for c in (a, b)]
        if any(s is None for s in here) or all(name in s[0] for s in here):
            return False  # changed in place (or unparsable): a difference
        old, new = (a, b) if name in here[0][0] else (b, a)  # the commit that has it in `path`, the one that has not
        code = self.summary(old, path)[0][name][0]
        return any(s is not None and name in s[0] and s[0][name][0] == code
                   for s in (self.summary(new, other) for other in paths if other != path))

    @functools.lru_cache(maxsize=None)
    def training_files(self, commit):
        """TRAINING_CODE and every root file train.py imports at the commit, through the top-level imports of the
        files it imports (a file split out later, such as runlog.py, counts from the commit that has it)."""
        files = set(TRAINING_CODE)
        todo = [f for f in TRAINING_CODE if f in self.blobs(commit)]
        while todo:
            summary = self.summary(commit, todo.pop())
            for module in (summary[2] if summary else ()):
                file = module.replace(".", "/") + ".py"  # a package's module: lab.sweep -> lab/sweep.py
                if file in self.blobs(commit) and file not in files:
                    files.add(file)
                    todo.append(file)
        return frozenset(files)

    @functools.lru_cache(maxsize=None)
    def reach(self, commit):
        """What train.py can run at a commit (reached())."""
        return reached({f: self.summary(commit, f) for f in self.training_files(commit)})


def top_name(node):
    """The name a top-level statement is known by: a def's or class's name, an assignment's target; imports are
    "<imports>", an `if __name__ == "__main__":` block "<main>", other statements "<module>"."""
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and all(isinstance(t, ast.Name) for t in targets):
        return " ".join(t.id for t in targets)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return "<imports>"
    if isinstance(node, ast.If) and "__main__" in ast.dump(node.test):
        return "<main>"
    return "<module>"


def statements(node):
    """A statement and every statement nested in it (not expressions: cheaper than ast.walk)."""
    yield node
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, None) or []:
            if isinstance(child, ast.AST):
                yield from statements(child)


WORD, DOTTED = re.compile(r"[A-Za-z_]\w*"), re.compile(r"([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=None)
def summarize(source):
    """A Python file as {top-level name: (its statements with docstrings dropped, the words of their text (a
    superset of the names they use), the `name.attribute` pairs of their text)} and its imports {local name:
    (module, name or None)} and the modules its top-level statements import (what importing it runs); None when the
    text does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    imports, defs, lines = {}, {}, source.splitlines()
    at_top = {a.name for t in tree.body if isinstance(t, ast.Import) for a in t.names}
    at_top |= {t.module for t in tree.body if isinstance(t, ast.ImportFrom) and t.module and not t.level}
    for top in tree.body:
        if isinstance(top, ast.Expr) and isinstance(top.value, ast.Constant) and isinstance(top.value.value, str):
            continue  # the module's docstring
        nodes, names, attrs = defs.setdefault(top_name(top), ([], set(), set()))
        nodes.append(top)
        text = "\n".join(lines[top.lineno - 1:top.end_lineno])
        names.update(WORD.findall(text))
        attrs.update(DOTTED.findall(text))
        for node in statements(top):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                        and isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
            elif isinstance(node, ast.Import):
                imports.update({a.asname or a.name: (a.name, None) for a in node.names})
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imports.update({a.asname or a.name: (node.module, a.name) for a in node.names})
    return {k: (Code(v[0], lines), v[1], v[2]) for k, v in defs.items()}, imports, at_top


class Code:
    """Statements compared by their syntax trees (ast.dump: no comments, no line numbers), dumped only when their
    texts differ."""

    def __init__(self, nodes, lines):
        self.nodes = nodes
        self.text = "\n".join("\n".join(lines[n.lineno - 1:n.end_lineno]) for n in nodes)

    @functools.cached_property
    def dump(self):
        return [ast.dump(n) for n in self.nodes]

    def __eq__(self, other):
        return isinstance(other, Code) and (self.text == other.text or self.dump == other.dump)


def changed_names(old, new):
    """The sorted top-level names whose code differs between two summaries of a file (comments, docstrings and
    line numbers do not count); ["<text>"] when one does not parse as Python."""
    if old is None or new is None:
        return ["<text>"]
    return sorted(k for k in set(old[0]) | set(new[0]) if old[0].get(k, (None,))[0] != new[0].get(k, (None,))[0])


def reached(summaries):
    """{(file, top-level name)} that train.py can run, by static reference from train.py (all of it): a name a
    reached definition uses (bare, imported with `from M import name`, or as `M.name` of an imported module) is
    reached, and so is every imported module's import-time code. summaries: {file: summarize(its text)}."""
    defs = {f: (s or ({}, {}))[0] for f, s in summaries.items()}
    aliases = {f: {k: (m.replace(".", "/") + ".py", n) for k, (m, n) in (s or ({}, {}))[1].items()
                   if m.replace(".", "/") + ".py" in defs}
               for f, s in summaries.items()}
    seen, todo = set(), [("train.py", name) for name in defs.get("train.py", {})]
    while todo:
        f, name = todo.pop()
        if (f, name) in seen or name not in defs.get(f, {}):
            continue
        seen.add((f, name))
        _, names, attrs = defs[f][name]
        if name == "<imports>":
            todo += [(m, n) for m, _ in aliases[f].values() for n in ("<imports>", "<module>")]
        for n in names:
            target = aliases[f].get(n)
            todo.append((f, n))
            if target:
                todo += [(target[0], "<imports>"), (target[0], "<module>")] + ([target] if target[1] else [])
        for base, attr in attrs:
            target = aliases[f].get(base)
            if target and target[1] is None:
                todo.append((target[0], attr))
    return seen


def config_files(command):
    """The config files a row's command names (train.py's positional .py arguments)."""
    args = (command or "").split()  # config paths hold no spaces; shlex is slow over thousands of rows
    return [a for a in args if a.endswith(".py") and not a.startswith("-") and os.path.basename(a) != "train.py"]


def with_execs(repo, commits, configs):
    """The config files and every config they exec, at any of the commits."""
    out, todo = set(), list(configs)
    while todo:
        path = todo.pop()
        if path in out:
            continue
        out.add(path)
        for c in commits:
            todo += [os.path.normpath(os.path.join(os.path.dirname(path), p)) for p in EXEC.findall(repo.show(c, path))]
    return sorted(out)


def audit_group(repo, rows):
    """The commits of one group of rows and whether their training code differs (module docstring)."""
    revs = {}
    for r in rows:
        revs[r.get("git_rev") or "none"] = revs.get(r.get("git_rev") or "none", 0) + 1
    base = {rev: repo.commit(rev.removesuffix("+dirty")) for rev in revs}
    commits = sorted({c for c in base.values() if c})
    configs = with_execs(repo, commits, sorted({p for r in rows for p in config_files(r.get("command"))}))
    code = sorted(set().union(*(repo.training_files(c) for c in commits))) if commits else list(TRAINING_CODE)
    paths = tuple(code) + tuple(configs)
    differs, runs = {}, {}
    for a, b in itertools.combinations(commits, 2):
        files = repo.diff(a, b, paths)
        if files:
            pair = f"{a[:10]} {b[:10]}"
            differs[pair] = files
            ran = repo.reach(a) | repo.reach(b)
            run = {f: [n for n in names if f not in code or (f, n) in ran and n != "<imports>"]
                   for f, names in files.items()}
            if any(run.values()):
                runs[pair] = {f: names for f, names in run.items() if names}
    untraceable = sorted(rev for rev in revs if rev.endswith("+dirty") or not base[rev])

    def verdict(found):
        return False if found else ("untraceable" if untraceable and len(revs) > 1 else True)
    arms = {}
    for r in rows:
        arm = arms.setdefault(str(r.get("arch")), {})
        arm[r.get("git_rev")] = arm.get(r.get("git_rev"), 0) + 1
    return {"rows": len(rows), "commits": dict(sorted(revs.items())), "n_commits": len(revs),
            "same_training_code": verdict(differs), "files_differ": sorted({f for fs in differs.values() for f in fs}),
            "same_code_run": verdict(runs), "files_differ_run": sorted({f for fs in runs.values() for f in fs}),
            "untraceable": untraceable, "configs": configs, "differs": differs, "differs_run": runs,
            "empty_commands": sum(1 for r in rows if not r.get("command")),
            "arms": {k: dict(sorted(v.items())) for k, v in sorted(arms.items()) if len(arms) > 1 or len(v) > 1}}


def audit(root=".", pattern="records/*/*.jsonl"):
    """{rows file: {seed: group}} for every rows file under root (module docstring)."""
    repo, out = Repo(root), {}
    for path in sorted(glob.glob(os.path.join(root, pattern))):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        seeds = sorted({r.get("seed") for r in rows}, key=str)
        out[os.path.relpath(path, root)] = {str(s): audit_group(repo, [r for r in rows if r.get("seed") == s])
                                            for s in seeds}
    return {"training_code": list(TRAINING_CODE), "command": "python -m lab.code_audit", "files": out}


def mixed(result):
    """[(rows file, seed, group)] of the groups whose training code differs or cannot be traced."""
    return [(path, seed, g) for path, seeds in result["files"].items() for seed, g in seeds.items()
            if g["same_training_code"] is not True]


def dumps(result):
    """The JSON text: indented, each list and each dict of plain values on one line."""
    text = json.dumps(result, indent=1)
    return re.sub(r"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}", lambda m: json.dumps(json.loads(m.group(0))), text) + "\n"


def main(argv, root=None):
    args = dict(a.removeprefix("--").partition("=")[::2] for a in argv)
    if "help" in args:
        print(__doc__)
        return 0
    if set(args) - {"check", "out"}:
        print(f"code_audit.py: {sorted(set(args) - {'check', 'out'})[0]!r} is not an option; it takes --check, "
              "--out=FILE, --help", file=sys.stderr)
        return 2
    out = args.get("out") or "records/code_mix.json"
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = dumps(audit(root))
    if "check" in args:
        with open(os.path.join(root, out)) as f:
            same = f.read() == text
        print(f"{out}: {'up to date' if same else 'differs from the rows and the code history: rerun code_audit.py'}")
        return 0 if same else 1
    with open(os.path.join(root, out), "w") as f:
        f.write(text)
    for path, seed, g in mixed(json.loads(text)):
        if g["same_training_code"] is False:
            what = (f"code differs in {', '.join(g['files_differ'])}; on train.py's path: "
                    f"{', '.join(g['files_differ_run']) or 'none'}")
        else:
            what = "untraceable: " + ", ".join(g["untraceable"])
        print(f"{path} seed {seed}: rows from {g['n_commits']} commits; {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
