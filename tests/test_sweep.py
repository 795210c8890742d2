"""Tests of sweep.py: the planner follows the accounting, a sweep runs each point once through kills, failures and
reruns, stops its runs when stopped, shares its files safely with another sweep, and every committed spec plans."""
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import accounting  # noqa: E402
import scaling  # noqa: E402
from lab import sweep  # noqa: E402
from configurator import ConfigError  # noqa: E402


def test_planner_tokens_follow_the_budget(monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = sweep.load_spec("config/sweeps/isoflop_cpu.py")
    for q in sweep.plan(spec):
        per_step = q["train"]["batch_size"] * q["model"].block_size * q["train"]["grad_accum"]
        exact = q["point"].flops_budget / (6 * q["params_active"])  # Lee et al.: D = C / (6 N_active)
        assert q["tokens"] == q["steps"] * per_step and q["model"].vocab_size == 257  # the byte tokenizer
        if exact >= per_step:  # the nearest whole number of steps
            assert abs(q["tokens"] - exact) <= per_step / 2
        else:  # a budget below one step still trains one
            assert q["steps"] == 1


FAKE_TRAIN = r'''
import json, os, signal, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
out = args["out_dir"]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({"point": os.path.basename(out), "resume": "--resume" in sys.argv,
                        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")
os.makedirs(out, exist_ok=True)
if os.environ.get("FAKE_KILL") == os.path.basename(out):  # killed halfway: a checkpoint but no result
    open(os.path.join(out, "ckpt.pt"), "w").write("partial")
    os.kill(os.getpid(), signal.SIGKILL)
if os.environ.get("FAKE_FAIL") == os.path.basename(out):
    sys.exit(1)
if os.environ.get("FAKE_HANG"):  # a long run: says it started, then waits to be stopped
    open(os.environ["FAKE_HANG"], "w").write(str(os.getpid()))
    signal.pause()
result = {"val_loss": 3 + 64 / float(args["n_embd"]), "tokens": 1000, "flops": float(args["flops_budget"]),
          "wall_s": 0.01, "steps": 1, "params_unique": 1}
json.dump(result, open(os.path.join(out, "result.json"), "w"))
json.dump({"train": args, "model": {}}, open(os.path.join(out, "config.json"), "w"))
'''


def fake_sweep(tmp_path, monkeypatch, record, budgets=(1e9,), widths=(32,)):
    """A sweep spec whose runner is FAKE_TRAIN (its calls logged to tmp_path/log.jsonl), run from the repository."""
    monkeypatch.chdir(ROOT)
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log.jsonl"))
    monkeypatch.setattr(sweep, "check_rule", lambda *a, **k: None)  # its own tests below; this tree may be mid-edit
    return dict(name="t", out_dir=str(tmp_path / "sweep"), archs={"base": ["config/sparse_base.py"]},
                budgets=list(budgets), widths=list(widths), runner=[sys.executable, str(fake)],
                common=dict(n_layer=2, head_dim=16, tokenizer="byte", block_size=32, batch_size=2), record=record)


def test_interrupted_sweep_runs_each_point_once(tmp_path, monkeypatch, capsys):
    spec = fake_sweep(tmp_path, monkeypatch, str(tmp_path / "records" / "paper"), budgets=[1e9, 2e9], widths=[32, 64])
    log = tmp_path / "log.jsonl"
    names = [p.name for p in sweep.grid_points(spec)]
    results = tmp_path / "sweep" / "results.jsonl"

    def invocations():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    monkeypatch.setenv("FAKE_KILL", names[2])
    with pytest.raises(SystemExit, match="killed"):
        sweep.run_sweep(spec)
    assert [r["point"] for r in sweep.read_results(str(results))] == names[:2]
    monkeypatch.delenv("FAKE_KILL")
    sweep.run_sweep(spec)  # resumes: the killed point again (with --resume), then the rest
    calls = invocations()
    assert [c["point"] for c in calls] == names[:3] + names[2:]
    assert [c["resume"] for c in calls] == [False, False, False, True, False]
    rows = sweep.read_results(str(results))
    assert sorted(r["point"] for r in rows) == sorted(names) and all(r["status"] == "ok" for r in rows)
    row = rows[0]
    assert row["arch"] == "base" and row["n_embd"] == 32 and row["flops_budget"] == 1e9 and row["git_rev"]
    planned = next(q for q in sweep.plan(spec) if q["point"].name == row["point"])
    counted = accounting.count_params(accounting.model_on_meta(planned["model"]))["params_unique_nonembed"]
    assert row["params_unique_nonembed"] == counted and "config" in row and row["val_loss"] == 5.0

    sweep.run_sweep(spec)  # nothing left to do
    assert len(invocations()) == 5
    results.write_text("".join(line + "\n" for line in results.read_text().splitlines()[:-1]))
    sweep.run_sweep(spec)  # a finished run whose row was lost: the row comes back without a rerun
    assert len(invocations()) == 5 and len(sweep.read_results(str(results))) == 4
    record = tmp_path / "records" / "paper" / "t.jsonl"  # the committed copy, each point once, without its config
    assert sorted(r["point"] for r in sweep.read_results(str(record))) == sorted(names)
    assert all("config" not in r and r["val_loss"] == 3 + 64 / r["n_embd"] for r in sweep.read_results(str(record)))

    spec["widths"] = [32, 64, 96]  # one more width; its first budget fails
    failing = [p.name for p in sweep.grid_points(spec) if p.name not in names][0]
    monkeypatch.setenv("FAKE_FAIL", failing)
    sweep.run_sweep(spec)
    rows = {r["point"]: r for r in sweep.read_results(str(results))}
    assert rows[failing]["status"] == "failed" and rows[failing]["val_loss"] is None and len(rows) == 6
    sweep.run_sweep(spec)  # a failed point is not retried by default
    assert len(invocations()) == 7
    monkeypatch.delenv("FAKE_FAIL")
    assert [r["status"] for r in sweep.read_results(str(record)) if r["point"] == failing] == ["failed"]
    sweep.run_sweep(spec, retry_failed=True, only=r"_d96$")  # --only is a regular expression on the names
    assert len(invocations()) == 8
    assert [r["status"] for r in sweep.read_results(str(record)) if r["point"] == failing] == ["ok"]  # replaced
    capsys.readouterr()
    sweep.run_sweep(spec, retry_failed=True, only=r"_C1e09_d(32|64)$")  # all done: nothing runs
    assert len(invocations()) == 8
    assert "sweep t: 2 points (2 done)" in capsys.readouterr().out  # the selection's count, not results.jsonl's 6
    with pytest.raises(SystemExit, match="no point of sweep t matches"):
        sweep.run_sweep(spec, only="_d48")


def test_a_fresh_clone_resumes_from_the_committed_rows(tmp_path, monkeypatch, capsys):
    """A campaign resumes across machines: a clone holds the committed record but no out/ (no results.jsonl, no run
    directories), and the points with a row there are done: they do not run again."""
    spec = fake_sweep(tmp_path, monkeypatch, str(tmp_path / "records" / "paper"), widths=[32, 64])
    log = tmp_path / "log.jsonl"
    sweep.run_sweep(spec, only="_d32$")
    shutil.rmtree(tmp_path / "sweep")  # the other machine: only what was committed
    capsys.readouterr()
    sweep.run_sweep(spec)
    assert "sweep t: 2 points (1 done)" in capsys.readouterr().out
    assert [json.loads(line)["point"] for line in log.read_text().splitlines()] == ["base_C1e09_d32", "base_C1e09_d64"]
    record = tmp_path / "records" / "paper" / "t.jsonl"
    assert [r["point"] for r in sweep.read_results(str(record))] == ["base_C1e09_d32", "base_C1e09_d64"]


def test_a_parallel_sweep_starts_the_longest_runs_first(tmp_path, monkeypatch, capsys):
    """With two slots, a long run started last keeps one core busy alone at the end; longest first, they finish
    together. One slot keeps the spec's order."""
    spec = fake_sweep(tmp_path, monkeypatch, "", budgets=[1e9, 4e9], widths=[32, 64])

    def launched():
        return [line[1:line.index("]")] for line in capsys.readouterr().out.splitlines()
                if line.startswith("[") and sys.executable in line]

    names = [p.name for p in sweep.grid_points(spec)]
    sweep.run_sweep(spec, only="_d32$", parallel=1)
    assert launched() == [n for n in names if n.endswith("_d32")]  # spec order: the small budget first
    sweep.run_sweep(spec, parallel=2)
    work = {q["point"].name: q["work"] for q in sweep.plan(spec)}
    order = launched()
    assert sorted(order) == sorted(n for n in names if n.endswith("_d64"))
    assert [work[n] for n in order] == sorted((work[n] for n in order), reverse=True) and "C4e09" in order[0]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_terminated_sweep_stops_its_runs(tmp_path, monkeypatch):
    """`kill <sweep>` (SIGTERM) once left its training runs going with no sweep to record them, and a rerun beside
    them would train the same point twice: now the runs stop with the sweep, which says how to resume."""
    import signal
    import subprocess
    import time
    spec = fake_sweep(tmp_path, monkeypatch, "")
    hang = tmp_path / "run.pid"
    monkeypatch.setenv("FAKE_HANG", str(hang))
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    code = f"import json; from lab import sweep; sweep.run_sweep(json.load(open({str(tmp_path / 'spec.json')!r})))"
    sweeper = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not hang.exists() or not hang.read_text():
        assert sweeper.poll() is None and time.time() < deadline, "the run never started"
        time.sleep(0.05)
    run = int(hang.read_text())
    sweeper.send_signal(signal.SIGTERM)
    try:
        assert sweeper.wait(timeout=30) != 0 and "run the same command to resume" in sweeper.stderr.read()
        with pytest.raises(ProcessLookupError):  # the run is gone (and reaped: the sweep waited for it)
            os.kill(run, 0)
    finally:  # a failing check leaves no orphan behind
        if sweeper.poll() is None:
            sweeper.kill()
        try:
            os.kill(run, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.skipif(sys.platform == "win32", reason="no flock on Windows")
def test_a_finished_point_waits_for_another_sweeps_write(tmp_path, monkeypatch):
    """Two sweeps of one spec (different --only) write the same results.jsonl and record: a finished point's two
    writes wait while another process holds them, so neither file can lose the other's row."""
    import threading
    import time
    spec = fake_sweep(tmp_path, monkeypatch, str(tmp_path / "records"))
    results, record = tmp_path / "sweep" / "results.jsonl", tmp_path / "records" / "t.jsonl"
    results.parent.mkdir()
    with open(results, "a") as held:  # the other sweep, in the middle of its write
        sweep.exclusive(held)
        sweeper = threading.Thread(target=sweep.run_sweep, args=(spec,))
        sweeper.start()
        for _ in range(300):  # until the point's run has finished: only its rows are left to write
            if (tmp_path / "sweep" / sweep.grid_points(spec)[0].name / "result.json").exists():
                break
            time.sleep(0.1)
        sweeper.join(timeout=1)
        assert sweeper.is_alive() and not record.exists() and results.read_text() == ""
    sweeper.join(timeout=30)
    assert not sweeper.is_alive() and len(sweep.read_results(str(record))) == 1
    assert len(sweep.read_results(str(results))) == 1


def git(root, *args):
    return sweep.git(str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args).strip()


def rule_repo(root):
    """A git repository with one registered sweep (config/sweeps/t.py, rule included) and its results file."""
    (root / "config" / "sweeps").mkdir(parents=True)
    (root / "records" / "paper").mkdir(parents=True)
    (root / "config" / "sweeps" / "t.py").write_text("rule = dict(finding='f', test='t', seeds=(7,), margin=None)\n")
    (root / "records" / "paper" / "t.jsonl").write_text("")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "rule")
    return dict(name="t", record="records/paper", rule=dict(finding="f", test="t", seeds=(7,), margin=None))


def test_a_rule_is_checked_against_the_whole_grid_when_only_runs_a_part(tmp_path, monkeypatch):
    """.ci/gpu-campaign runs a campaign seed after seed (--only='_s301$'): the rule names every seed of the grid, so
    the check reads the whole grid's seeds, not the part --only selects (it refused every campaign spec's first seed)."""
    spec = fake_sweep(tmp_path, monkeypatch, str(tmp_path / "records" / "paper"))
    spec["seeds"] = [1, 2]
    checked = []
    monkeypatch.setattr(sweep, "check_rule", lambda spec, planned, root, **k: checked.append(
        sorted({q["train"]["seed"] for q in planned})))
    sweep.run_sweep(spec, only="_s1$")
    assert checked == [[1, 2]]
    assert [r["seed"] for r in sweep.read_results(str(tmp_path / "sweep" / "results.jsonl"))] == [1]


def test_a_record_sweep_refuses_a_missing_rule_or_a_dirty_tree(tmp_path, capsys):
    """Rules before runs (issue 30): a sweep that writes to a record needs its rule, with the seeds it plans, and a
    tree clean apart from registered results files; each refusal is one line and exit code 2."""
    from configurator import run
    spec, planned = rule_repo(tmp_path), [{"train": {"seed": 7}}]

    def refusal(spec, planned):
        with pytest.raises(SystemExit) as exit_:
            run(sweep.check_rule, spec, planned, str(tmp_path))
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
        return err

    sweep.check_rule(spec, planned, str(tmp_path))  # clean: starts
    (tmp_path / "records" / "paper" / "t.jsonl").write_text("{}\n")  # a registered sweep's results: allowed
    sweep.check_rule(spec, planned, str(tmp_path))
    assert "holds no rule" in refusal({k: v for k, v in spec.items() if k != "rule"}, planned)
    assert "seeds" in refusal(spec, [{"train": {"seed": 7}}, {"train": {"seed": 42}}])
    assert "missing ['margin']" in refusal(dict(spec, rule=dict(finding="f", test="t", seeds=(7,))), planned)
    (tmp_path / "records" / "paper" / "u.jsonl").write_text("{}\n")  # results of no registered sweep
    assert "1 uncommitted change(s) (records/paper/u.jsonl)" in refusal(spec, planned)
    os.remove(tmp_path / "records" / "paper" / "u.jsonl")
    (tmp_path / "config" / "sweeps" / "t.py").write_text("rule = dict(finding='g')\n")  # the rule edited, not committed
    assert "config/sweeps/t.py" in refusal(spec, planned)


def test_rows_record_head_and_the_specs_hash(tmp_path, monkeypatch, capsys):
    spec = fake_sweep(tmp_path, monkeypatch, str(tmp_path / "records"))
    path = tmp_path / "t.py"
    path.write_text("# the spec's text\n")
    spec["spec_file"] = str(path)
    sweep.run_sweep(spec)
    (row,) = sweep.read_results(str(tmp_path / "records" / "t.jsonl"))
    assert row["git_rev"].split("+")[0] == git(ROOT, "rev-parse", "HEAD")
    assert row["spec_sha256"] == hashlib.sha256(b"# the spec's text\n").hexdigest()


def rows_sha256(rows):
    return hashlib.sha256("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()).hexdigest()


def provenance_errors(root, scratch):
    """Each committed row either ran at a commit that holds its spec (hash equal: the rule was committed first, so
    the row's commit descends from the rule's) with the rule unchanged since, or is one of the grandfathered rows of
    records/grandfathered.json, exactly (nothing new slips in, nothing old is rewritten). scratch: a directory."""
    old_rows, errors, verdicts = sweep.grandfathered(str(root)), [], {}
    for path in sorted(glob.glob(os.path.join(root, "records", "*", "*.jsonl"))):
        name, rows = os.path.relpath(path, root), sweep.read_results(path)
        old = [r for r in rows if "spec_sha256" not in r]
        entry = old_rows.get(name, dict(rows=0, rows_sha256=rows_sha256([])))
        if [len(old), rows_sha256(old)] != [entry["rows"], entry["rows_sha256"]]:
            errors.append(f"{name}: {len(old)} rows without a spec hash are not the grandfathered ones")
        for r in (r for r in rows if "spec_sha256" in r):
            key = tuple(r.get(k) for k in ("git_rev", "spec", "spec_sha256"))
            if key not in verdicts:  # rows of one commit and spec have one answer: each asked once
                verdicts[key] = ran_under_its_rule(root, scratch, r)
            if verdicts[key]:
                errors.append(f"{name}: {r.get('point')}: {verdicts[key]}")
    return errors


def ran_under_its_rule(root, scratch, r):
    """"" if row r ran at a commit of main that holds its spec as hashed, with the rule unchanged since; else why."""
    try:
        assert sweep.git(str(root), "merge-base", "--is-ancestor", r["git_rev"], "HEAD") == ""
        spec_then = os.path.join(specs_at(root, r["git_rev"], scratch), r["spec"])
        assert sweep.file_sha256(spec_then) == r["spec_sha256"], "the spec at git_rev is not the one run"
        assert sweep.load_spec(spec_then)["rule"] == sweep.load_spec(os.path.join(root, r["spec"]))["rule"], \
            "the rule changed after the row"
    except (AssertionError, KeyError, subprocess.CalledProcessError) as e:
        return repr(e)
    return ""


def specs_at(root, rev, scratch):
    """The sweep specs as committed at rev, byte for byte (a spec may read a sibling), under scratch/rev."""
    out = os.path.join(scratch, rev)
    if not os.path.exists(out):
        tar = subprocess.run(["git", "archive", rev, "config/sweeps"], cwd=root, capture_output=True, check=True)
        tarfile.open(fileobj=io.BytesIO(tar.stdout)).extractall(out)
    return out


def test_every_committed_row_ran_under_its_committed_rule(tmp_path):
    assert provenance_errors(ROOT, tmp_path) == []


def test_provenance_check_catches_a_changed_rule_and_an_ungrandfathered_row(tmp_path):
    rule_repo(tmp_path)
    rev = git(tmp_path, "rev-parse", "HEAD")
    sha = sweep.file_sha256(tmp_path / "config" / "sweeps" / "t.py")
    good = dict(point="a", git_rev=rev, spec="config/sweeps/t.py", spec_sha256=sha)
    results = tmp_path / "records" / "paper" / "t.jsonl"
    results.write_text(json.dumps(good) + "\n")
    assert provenance_errors(tmp_path, tmp_path / "scratch") == []
    results.write_text(json.dumps(good) + "\n" + json.dumps(dict(point="b", git_rev=rev)) + "\n")
    assert ["not the grandfathered ones"] == [e[-26:] for e in provenance_errors(tmp_path, tmp_path / "scratch")]
    results.write_text(json.dumps(dict(good, spec_sha256="0" * 64)) + "\n")
    assert "not the one run" in provenance_errors(tmp_path, tmp_path / "scratch")[0]
    results.write_text(json.dumps(good) + "\n")
    (tmp_path / "config" / "sweeps" / "t.py").write_text("rule = dict(finding='g', test='t', seeds=(7,), margin=0.1)\n")
    git(tmp_path, "commit", "-qam", "the rule moved after the row")
    assert "the rule changed after the row" in provenance_errors(tmp_path, tmp_path / "scratch")[0]


def test_every_sweep_spec_plans(monkeypatch, capsys):
    """Each spec under config/sweeps/ parses as train.py would parse its points (bad keys stop here)."""
    monkeypatch.chdir(ROOT)
    specs = sorted(f for f in os.listdir("config/sweeps") if f.endswith(".py"))
    assert len(specs) >= 10
    for name in specs:
        spec = sweep.load_spec(os.path.join("config/sweeps", name))
        points = sweep.grid_points(spec)
        assert points, name
        sweep.point_settings(spec, points[0])
        sweep.point_settings(spec, points[-1])


def test_sweep_help_needs_no_spec_and_describes_the_keys(capsys):
    """The sweep command runs from scaling.py: --help, with or without a spec, names it and reads sweep.py's keys."""
    for argv in (["sweep", "--help"], ["sweep", "config/sweeps/isoflop_cpu.py", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            scaling.main(argv)
        out = capsys.readouterr().out
        assert exit_.value.code == 0 and out.startswith("usage: python scaling.py sweep config/sweeps/<spec>.py")
        assert "--retry_failed" in out and "run points whose earlier run failed again" in out
    with pytest.raises(SystemExit, match="usage: python scaling.py sweep"):
        scaling.main(["sweep"])


def tiny_real_sweep(tmp_path, data_dir, name, seeds=(1,)):
    """A sweep of real train.py runs small enough for a test: one layer, 30 steps, one per seed."""
    data = dict(a[2:].split("=", 1) for a in data_dir)
    return dict(name=name, out_dir=str(tmp_path / name), archs={"base": []}, seeds=list(seeds),
                env=dict(OMP_NUM_THREADS="1"), flops_per_second=1e15,
                common=dict(data, n_layer=1, n_embd=32, head_dim=16, block_size=32, batch_size=4, max_iters=30,
                            warmup_iters=3, eval_interval=15, eval_tokens=1024, sample_tokens=0, log_interval=1))


METRICS = ("point", "status", "val_loss", "best_val_loss", "train_loss", "steps", "tokens", "flops", "seed",
           "params_unique", "device", "dtype")


def test_a_sweep_stopped_by_its_deadline_and_continued_gives_the_rows_of_one_run_through(tmp_path, data_dir,
                                                                                       monkeypatch, capsys):
    """A campaign batch on a lent machine must end by its deadline and the next batch carry on: the rows of a sweep
    cut by --deadline_s (a run stopped midway resumes from its checkpoint, or starts again) and continued equal
    those of a sweep run straight through, metrics for metrics (timings and provenance aside)."""
    monkeypatch.chdir(ROOT)
    straight = tiny_real_sweep(tmp_path, data_dir, "straight")
    sweep.run_sweep(straight)
    cut = tiny_real_sweep(tmp_path, data_dir, "cut")
    sweep.run_sweep(cut, deadline_s=2.0)  # train.py's start-up alone takes longer: the run is stopped midway
    assert "deadline: 1 run(s) stopped, 0 not started (1 point(s) left); run the same command to continue" in \
        capsys.readouterr().out
    results = os.path.join(cut["out_dir"], "results.jsonl")
    assert not os.path.exists(results)  # no row for a stopped run: it is not a result
    sweep.run_sweep(cut)
    rows = {r["point"]: r for r in sweep.read_results(results)}
    expected = {r["point"]: r for r in sweep.read_results(os.path.join(straight["out_dir"], "results.jsonl"))}
    assert sorted(rows) == sorted(expected) == ["base_s1"]
    for name, row in rows.items():
        assert {k: row[k] for k in METRICS} == {k: expected[name][k] for k in METRICS}
    assert row["device"] == "cpu" and row["dtype"] == "float32"  # the row says what the run ran on, as resolved

    # a run that cannot end by the deadline (by the throughput) is not started at all
    late = tiny_real_sweep(tmp_path, data_dir, "late", seeds=(3,))
    late["flops_per_second"] = 1.0
    sweep.run_sweep(late, deadline_s=60)
    assert "0 run(s) stopped, 1 not started" in capsys.readouterr().out
    assert not os.path.exists(os.path.join(late["out_dir"], "results.jsonl"))


def test_several_runs_share_one_gpu_through_the_slots_devices(tmp_path, monkeypatch, capsys):
    """--devices=0 with --parallel=3: three slots, each run with CUDA_VISIBLE_DEVICES=0 (several runs on one GPU)."""
    spec = fake_sweep(tmp_path, monkeypatch, "", budgets=[1e9], widths=[32, 48, 64])
    sweep.run_sweep(spec, parallel=3, devices="0")
    calls = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(calls) == 3 and {c["cuda"] for c in calls} == {"0"}


def test_campaign_runs_use_a_worktree_of_their_rules_commit(tmp_path):
    """--at_rule_commit: train.py runs from the commit that last changed the spec (so every arm of a comparison runs
    one code while main moves on); a spec changed since its commit is refused."""
    repo = tmp_path / "repo"
    (repo / "config" / "sweeps").mkdir(parents=True)
    (repo / "train.py").write_text("at the rule\n")
    spec = repo / "config" / "sweeps" / "s.py"
    spec.write_text("rule = 1\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "rule"]):
        sweep.git(str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args)
    rule = sweep.git(str(repo), "rev-parse", "HEAD").strip()
    (repo / "train.py").write_text("moved on\n")
    for args in (["add", "."], ["commit", "-qm", "later code"]):
        sweep.git(str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args)
    code, revision = sweep.rule_snapshot(dict(spec_file=str(spec)), str(repo))
    assert revision == rule and open(os.path.join(code, "train.py")).read() == "at the rule\n"
    assert sweep.git_revision(code) == rule  # provenance written by code run there names the rule's commit
    assert os.path.realpath(os.path.join(code, "out")) == os.path.realpath(repo / "out")  # runs write to the checkout
    assert sweep.rule_snapshot(dict(spec_file=str(spec)), str(repo))[0] == code  # made once, then reused
    spec.write_text("rule = 2\n")
    with pytest.raises(ConfigError, match="changed since its commit: commit the spec"):
        sweep.rule_snapshot(dict(spec_file=str(spec)), str(repo))


def test_sweep_and_scaling_on_the_command_line_say_what_they_take(run_script):
    """`python -m lab.sweep --bogus=1` and `python -m lab.sweep config/sweeps/x.py` once printed nothing and exited 0,
    and `python scaling.py --help` exited 2: now one line and exit 2 for bad input, help and exit 0 for --help."""
    for arg in ("--bogus=1", "config/sweeps/x.py"):
        code, out, err = run_script("lab/sweep.py", arg)
        assert code == 2 and len(err.strip().splitlines()) == 1 and not out, (arg, err)
    assert "no sweep spec at config/sweeps/x.py" in err
    code, out, err = run_script("scaling.py", "--help")
    assert code == 0 and "sweep" in out and "figures" in out
