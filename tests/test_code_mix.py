"""The code of the rows (records/README.md, rule 9; issue 30, item 3): code_audit.py finds the rows of one seed whose
training code differs between their commits, records/code_mix.json is what it finds today, and every record names
its groups of rows whose code differs or cannot be traced.

- A planted repository: two commits that differ in model.py's code must be reported as different training code,
  commits that differ only in README.md, or only in model.py's comments and docstrings, as the same; a change to a
  function train.py never reaches as different code but the same code on train.py's path; a config file a row's
  command names (and the config it execs) is training code, and so is a file split out later that the model imports;
  a "+dirty" rev beside another is untraceable.
- The committed records/code_mix.json equals what `python -m lab.code_audit` computes now (a new row from another commit
  fails here until the audit is rerun and committed), and `--check` says so.
- Every group whose `same_training_code` is not true is named in its record: a line holding the rows file's name
  (`NAME.jsonl`), then "seed S" and, before any other "seed", "from N commits" (N: its distinct `git_rev`s).
"""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lab import code_audit  # noqa: E402


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo, files, message):
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(repo, path)) or ".", exist_ok=True)
        with open(os.path.join(repo, path), "w") as f:
            f.write(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


MODEL = 'def forward(x):\n    """The model."""\n    return x * 2  # doubled\n'
TRAIN = "import model\nimport scaling\n\nprint(model.forward(1), scaling.flops(1))\n"
SCALING = "def flops(n):\n    return 6 * n\n\n\ndef fit(rows):\n    return rows\n"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A repository with one change of each kind, and one rows file whose seeds pair its commits."""
    repo = tmp_path_factory.mktemp("planted")
    git(repo, "init", "-q")
    x = 'import os\nexec(open(os.path.join(os.path.dirname(__file__), "base.py")).read())\nlr = 1e-3\n'
    files = {"model.py": MODEL, "train.py": TRAIN, "scaling.py": SCALING, "README.md": "# x\n",
             "config/base.py": "n_layer = 2\n", "config/x.py": x}
    c0 = commit(repo, files, "start")
    c1 = commit(repo, {"model.py": MODEL.replace("x * 2", "2 * x")}, "the model's code changes")
    c2 = commit(repo, {"README.md": "# y\n"}, "only the README")
    c3 = commit(repo, {"model.py": MODEL.replace("x * 2", "2 * x").replace("The model.", "Doubles.")
                       .replace("# doubled", "")}, "only a docstring and a comment")
    c4 = commit(repo, {"scaling.py": SCALING.replace("return rows", "return rows[:1]")}, "a function train.py skips")
    c5 = commit(repo, {"config/base.py": "n_layer = 3\n"}, "the config the row's config execs")
    c6 = commit(repo, {"model.py": "from helpers import double\n\n\ndef forward(x):\n    return double(x)\n",
                       "helpers.py": "def double(x):\n    return x * 2\n"}, "the model's code split into a new file")
    c7 = commit(repo, {"helpers.py": "def double(x):\n    return 2 * x\n"}, "the new file's code changes")
    cmd = "python train.py config/x.py --seed=1"
    rows = [(1, c0), (1, c1), (2, c1), (2, c2), (3, c2), (3, c3), (4, c3), (4, c4), (5, c4), (5, c5),
            (6, c0), (6, c0[:7] + "+dirty"), (7, c0[:7] + "+dirty"), (8, c6), (8, c7)]
    os.makedirs(repo / "records" / "p")
    with open(repo / "records" / "p" / "s.jsonl", "w") as f:
        f.writelines(json.dumps({"seed": s, "git_rev": rev, "command": cmd, "arch": "a"}) + "\n" for s, rev in rows)
    return repo, code_audit.audit(str(repo))["files"]["records/p/s.jsonl"]


def test_a_change_of_model_code_is_reported(planted):
    g = planted[1]["1"]
    assert g["same_training_code"] is False and g["same_code_run"] is False
    assert g["files_differ"] == ["model.py"] and list(g["differs"].values()) == [{"model.py": ["forward"]}]
    assert g["n_commits"] == 2 and sorted(g["commits"].values()) == [1, 1]


def test_a_change_of_the_readme_or_of_comments_and_docstrings_is_the_same_code(planted):
    repo, groups = planted
    assert groups["2"]["same_training_code"] is True and groups["2"]["differs"] == {}
    assert groups["3"]["same_training_code"] is True  # git diff sees model.py change; its code does not
    assert git(repo, "diff", "--name-only", "HEAD~5", "HEAD~4") == "model.py"


def test_a_function_train_py_never_reaches_differs_but_not_on_its_path(planted):
    g = planted[1]["4"]
    assert g["same_training_code"] is False and g["files_differ"] == ["scaling.py"]
    assert g["same_code_run"] is True and g["differs_run"] == {}


def test_a_config_the_command_names_and_what_it_execs_are_training_code(planted):
    g = planted[1]["5"]
    assert g["configs"] == ["config/base.py", "config/x.py"]
    assert g["same_training_code"] is False and g["files_differ_run"] == ["config/base.py"]


def test_a_dirty_rev_is_untraceable(planted):
    groups = planted[1]
    dirty = [r for r in groups["6"]["commits"] if r.endswith("+dirty")]
    assert groups["6"]["same_training_code"] == "untraceable" and groups["6"]["untraceable"] == dirty != []
    assert groups["7"]["same_training_code"] is True and groups["7"]["untraceable"]  # one rev: no mix, not traced


def test_a_file_split_out_later_and_imported_by_the_model_is_training_code(planted):
    g = planted[1]["8"]
    assert g["same_training_code"] is False and g["files_differ"] == ["helpers.py"]
    assert g["differs_run"] and list(g["differs_run"].values()) == [{"helpers.py": ["double"]}]


def test_a_definition_moved_to_another_file_or_a_package_is_the_same_code(tmp_path):
    """Issue 52's move: flops() leaves scaling.py for accounting.py, checks leave for the model's file, a helper goes
    into a package; no definition's code changes, so no definition differs (only the lines that import them)."""
    repo = tmp_path / "moved"
    git(repo.parent, "init", "-q", str(repo))
    train = "import model\nfrom scaling import flops\nfrom helpers import double\n\nprint(model.forward(1), flops(1), double(2))\n"
    a = commit(repo, {"model.py": MODEL, "train.py": train, "scaling.py": SCALING,
                      "helpers.py": "def double(x):\n    return x * 2\n"}, "before")
    moved_train = train.replace("from scaling import", "from accounting import").replace("from helpers", "from lab.helpers")
    b = commit(repo, {"accounting.py": "def flops(n):\n    return 6 * n\n", "scaling.py": SCALING.split("\n\n\n")[1],
                      "train.py": moved_train, "lab/__init__.py": "", "lab/helpers.py": "def double(x):\n    return x * 2\n"},
               "the move")
    os.remove(repo / "helpers.py")
    git(repo, "rm", "-q", "--cached", "helpers.py")
    c = commit(repo, {}, "helpers.py removed")
    repo_ = code_audit.Repo(str(repo))
    assert "lab/helpers.py" in repo_.training_files(c) and "accounting.py" in repo_.training_files(c)
    for later in (b, c):
        files = sorted(repo_.training_files(a) | repo_.training_files(later))
        assert repo_.diff(a, later, tuple(files)) == {"train.py": ["<imports>"]}
    changed = commit(repo, {"accounting.py": "def flops(n):\n    return 6 * n + 1\n"}, "then its code changes")
    files = sorted(repo_.training_files(a) | repo_.training_files(changed))
    assert repo_.diff(a, changed, tuple(files)) == {"accounting.py": ["flops"], "scaling.py": ["flops"],
                                                    "train.py": ["<imports>"]}


def test_check_fails_on_a_stale_audit(planted, tmp_path):
    repo = planted[0]
    stale = tmp_path / "code_mix.json"
    assert code_audit.main([f"--out={stale}"], root=str(repo)) == 0
    assert code_audit.main(["--check", f"--out={stale}"], root=str(repo)) == 0
    with open(repo / "records" / "p" / "s.jsonl", "a") as f:
        first = git(repo, "rev-list", "--max-parents=0", "HEAD")
        f.write(json.dumps({"seed": 2, "git_rev": first, "command": ""}) + "\n")
    assert code_audit.main(["--check", f"--out={stale}"], root=str(repo)) == 1


@pytest.fixture(scope="module")
def today():
    if git(ROOT, "rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("a shallow clone lacks the commits the rows name (git fetch --unshallow)")
    return code_audit.audit(ROOT)


@pytest.mark.xdist_group("code_mix")  # the audit of today's history (~6 s) is made once, in one worker
def test_the_committed_audit_is_today_s(today):
    with open(os.path.join(ROOT, "records", "code_mix.json")) as f:
        committed = f.read()
    assert committed == code_audit.dumps(today), (
        "records/code_mix.json is not what code_audit.py finds in today's rows and history: "
        "run `python -m lab.code_audit`, name any new mixed group in its record (rule 9) and commit both")


def unnamed(result, read):
    """[(rows file, seed)] of the groups whose code differs or cannot be traced that their record does not name."""
    out = []
    for path, seed, g in code_audit.mixed(result):
        name = re.escape(os.path.basename(path))
        said = rf"seed {seed}\b(?:(?!seed ).)*?from {g['n_commits']} commits"
        text = read(os.path.join(*path.split("/")[:2]) + ".md")
        if not any(re.search(said, line[m.end():]) for line in text.splitlines()
                   for m in re.finditer(rf"`{name}`", line)):
            out.append((path, seed))
    return out


@pytest.mark.xdist_group("code_mix")
def test_every_group_of_mixed_code_is_named_in_its_record(today):
    def read(path):
        with open(os.path.join(ROOT, path)) as f:
            return f.read()
    missing = unnamed(today, read)
    assert not missing, (f"groups of rows whose training code differs (or cannot be traced) that their record does not "
                         f"name as '`NAME.jsonl` ... seed S ... from N commits' (records/README.md, rule 9): {missing}")


def test_the_naming_check_fails_without_the_sentence():
    g = {"same_training_code": False, "n_commits": 3}
    result = {"files": {"records/p/s.jsonl": {"1337": g}}}
    good = "Rows: `s.jsonl` seed 1337: rows from 3 commits whose training code differs in model.py.\n"
    assert unnamed(result, lambda path: good) == []
    for bad in ("`s.jsonl` seed 1337: rows from 2 commits\n", "`t.jsonl` seed 1337: rows from 3 commits\n",
                "`s.jsonl` seed 7: and seed 1337 ... seed 42 from 3 commits\n",
                "`s.jsonl`\nseed 1337 from 3 commits\n"):
        assert unnamed(result, lambda path: bad) == [("records/p/s.jsonl", "1337")], bad
