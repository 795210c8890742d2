"""sweep.py --launcher=slurm (issue 31): the sbatch script the keys make, submission from a snapshot of HEAD with a
ledger that never submits a point twice (against stand-ins for sbatch and sacct), bad inputs in one line, and whole
sweeps through submitit's local executor, one point preempted (USR2) and requeued, whose rows equal a local sweep's."""
import json
import os
import subprocess
import sys
import threading
import time
import types
from unittest import mock

import pytest
import submitit  # its submodules too: submitit.local.local, submitit.slurm.slurm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import configurator  # noqa: E402
import scaling  # noqa: E402
from lab import sweep  # noqa: E402
from configurator import ConfigError  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and Slurm")
CLUSTER = dict(sweep.CLUSTER_KEYS, partition="gpu", account="proj", qos="high", time=240, gpus_per_run=4,
               cpus_per_run=32, mem="200G", constraint="h100")


def test_the_slurm_script_asks_for_the_keys(tmp_path, monkeypatch):
    """The sbatch script submitit writes from the keys (rendered here without a cluster): partition, account, GPUs,
    time, a job array, the USR2 warning before the end and --requeue."""
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))  # as if srun were here
    executor = sweep.slurm_executor(str(tmp_path), CLUSTER, "t")
    executor.parameters["map_count"] = 3  # what submit_array sets for an array of 3 points
    lines = executor._make_submission_file_text("python -u -m submitit.core._submit /x", "uid").splitlines()
    for line in ("--partition=gpu", "--account=proj", "--qos=high", "--time=240", "--gpus-per-node=4",
                 "--cpus-per-task=32", "--mem=200G", "--constraint=h100", "--nodes=1", "--ntasks-per-node=1",
                 "--array=0-2%3", "--signal=USR2@90", "--requeue", "--job-name=sweep-t"):
        assert "#SBATCH " + line in lines, line
    assert lines[-1].startswith("srun ") and lines[-1].endswith("python -u -m submitit.core._submit /x")
    defaults = sweep.slurm_parameters(dict(sweep.CLUSTER_KEYS, partition="cpu", gpus_per_run=0), "t")
    assert not {"account", "qos", "gpus_per_node", "cpus_per_task", "mem", "constraint"} & set(defaults)


def fake_slurm(tmp_path, monkeypatch):
    """sbatch, sacct and srun stand-ins on PATH: sbatch logs its directory and script and answers job 123, 124, ...;
    sacct prints state/sacct.txt."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    (state / "next").write_text("123")
    (state / "sacct.txt").write_text("JobID|State|NodeList\n")
    scripts = dict(sbatch=f'n=$(cat {state}/next); echo $((n + 1)) > {state}/next\n'
                          f'echo "$PWD $1" >> {state}/sbatch.log\necho "Submitted batch job $n"\n',
                   sacct=f"cat {state}/sacct.txt\n", srun="exit 0\n")
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def sacct(states):  # {job id: state}; the watcher forgets what it read, as a new sweep command would
        (state / "sacct.txt").write_text("JobID|State|NodeList\n" + "".join(f"{j}|{s}|\n" for j, s in states.items()))
        submitit.SlurmJob.watcher.clear()

    def submissions():
        log = state / "sbatch.log"
        return [line.split(" ", 1) for line in log.read_text().splitlines()] if log.exists() else []
    return sacct, submissions


def tiny_spec(tmp_path, **common):
    return dict(name="t", out_dir=str(tmp_path / "sweep"), archs={"base": ["config/sparse_base.py"]},
                widths=[32, 48], common=dict(n_layer=2, head_dim=16, tokenizer="byte", block_size=32, batch_size=2,
                                             **common))


def test_a_point_is_submitted_once_while_its_job_is_queued_or_running(tmp_path, monkeypatch, capsys):
    """Against sbatch and sacct stand-ins: one job array from the snapshot; a rerun submits nothing while the jobs
    are queued or running; a finished job's row is merged, a cancelled job's point (no row) is submitted again."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(submitit.SlurmJob, "watcher", submitit.slurm.slurm.SlurmInfoWatcher())  # this test's own
    sacct, submissions = fake_slurm(tmp_path, monkeypatch)
    monkeypatch.setattr(sweep, "check_committed", lambda root, files: None)  # this tree may be mid-edit
    monkeypatch.setattr(sweep, "snapshot", lambda root, dest: os.makedirs(dest, exist_ok=True) or dest)
    spec = tiny_spec(tmp_path)
    names = [p.name for p in sweep.grid_points(spec)]
    sweep.run_sweep(spec, launcher="slurm", partition="gpu")
    ((cwd, script),) = submissions()
    assert os.path.basename(cwd).startswith("code-") and "#SBATCH --array=0-1%2" in open(script).read()
    ledger = tmp_path / "sweep" / "slurm" / "submitted.jsonl"
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["point"], e["job_id"]) for e in entries] == [(names[0], "123_0"), (names[1], "123_1")]
    delayed = submitit.helpers.DelayedSubmission.load(tmp_path / "sweep" / "slurm" / "jobs" / "123_1_submitted.pkl")
    job = delayed.function
    assert job.command == sweep.point_command(spec, sweep.grid_points(spec)[1], str(tmp_path / "sweep" / names[1]))[0]

    sacct({"123_0": "RUNNING", "123_1": "PENDING"})
    sweep.run_sweep(spec, launcher="slurm", partition="gpu")
    assert len(submissions()) == 1 and "2 point(s) queued or running: not submitted again" in capsys.readouterr().out

    row = dict(point=names[0], status="ok", arch="base", val_loss=4.0)
    (tmp_path / "sweep" / "rows" / f"{names[0]}.json").write_text(json.dumps(row))  # job 123_0's row
    sacct({"123_0": "COMPLETED", "123_1": "CANCELLED"})
    sweep.run_sweep(spec, launcher="slurm", partition="gpu")
    assert sweep.read_results(str(tmp_path / "sweep" / "results.jsonl")) == [row]
    assert f"[{names[1]}] job 123_1 ended without a row" in capsys.readouterr().out
    assert len(submissions()) == 2 and "--array" not in open(submissions()[1][1]).read()  # one job: no array
    sacct({"124": "RUNNING"})
    sweep.run_sweep(spec, launcher="slurm", partition="gpu")
    sweep.run_sweep(spec, launcher="slurm", partition="gpu")  # a merged row is merged once
    assert len(submissions()) == 2 and len(sweep.read_results(str(tmp_path / "sweep" / "results.jsonl"))) == 1


def test_the_jobs_run_a_snapshot_of_head_and_a_changed_tree_is_refused(tmp_path):
    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    (repo / "train.py").write_text("committed\n")
    (repo / "config" / "a.py").write_text("n_layer = 2\n")
    (repo / ".gitignore").write_text("data/\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "code"]):
        sweep.git(str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args)
    sweep.check_committed(str(repo), ["config/a.py"])
    (repo / "train.py").write_text("edited\n")
    (repo / "config" / "b.py").write_text("n_layer = 3\n")  # untracked: fine unless a point names it
    with pytest.raises(ConfigError, match=r"^refusing to submit: train.py differs from HEAD, but the jobs run a "):
        sweep.check_committed(str(repo), ["config/a.py"])
    code = sweep.snapshot(str(repo), str(tmp_path / "code"))
    assert open(os.path.join(code, "train.py")).read() == "committed\n"  # HEAD's, not the working tree's
    assert sweep.git_revision(code) == sweep.git(str(repo), "rev-parse", "HEAD").strip()  # provenance run from it
    assert not os.path.exists(os.path.join(code, "config", "b.py"))
    assert os.path.realpath(os.path.join(code, "data")) == os.path.realpath(repo / "data")
    sweep.git(str(repo), "checkout", "train.py")
    with pytest.raises(ConfigError, match="config/b.py is not committed"):
        sweep.check_committed(str(repo), ["config/a.py", "config/b.py"])
    with pytest.raises(ConfigError, match="needs a git checkout"):
        sweep.check_committed(str(tmp_path / "code"), [])


def test_bad_slurm_lines_are_one_line_each(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    spec = tmp_path / "t.py"
    spec.write_text(f"archs = {{'base': ['config/sparse_base.py']}}\nwidths = [32]\ncommon = "
                    f"{tiny_spec(tmp_path)['common']!r}\n")
    base = ["sweep", str(spec), f"--out_dir={tmp_path / 'out'}"]

    def refusal(*args):
        with pytest.raises(SystemExit) as exit_:
            configurator.run(scaling.main, base + list(args))
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        return err

    assert "is not one of local | slurm; did you mean 'slurm'" in refusal("--launcher=slurn")
    assert "needs --partition=NAME" in refusal("--launcher=slurm", "--dry_run")
    assert "--time=0 must be >= 1" in refusal("--launcher=slurm", "--partition=p", "--time=0")
    assert "--partition is a key of --launcher=slurm" in refusal("--partition=p")
    assert "--parallel is the local launcher's" in refusal("--launcher=slurm", "--partition=p", "--parallel=2")
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun: not a cluster
    assert 'Could not detect "srun"' in refusal("--launcher=slurm", "--partition=p")
    monkeypatch.setitem(sys.modules, "submitit", None)  # not installed
    assert "needs submitit: pip install" in refusal("--launcher=slurm", "--partition=p", "--dry_run")
    with pytest.raises(ConfigError, match="--launcher='ssh' is not one of"):
        sweep.run_sweep(sweep.load_spec(str(spec)), launcher="ssh")


# submitit 1.5.4's local controller has no handler for the preemption signal and dies of it, so LocalJob._interrupt()
# would end the job rather than preempt it; Slurm signals a job's processes. This controller passes the signal on.
FORWARDING_CONTROLLER = """
import pathlib, signal, sys
from submitit.local.local import Controller, LocalJobEnvironment
controller = Controller(pathlib.Path(sys.argv[1]))
signal.signal(LocalJobEnvironment._usr_sig(), controller._forward_signal)
controller.run()
"""


class LocalCluster(submitit.LocalExecutor):
    """submitit's local executor as the tests' Slurm: each job on this machine, its controller forwarding USR2 to
    it; the jobs it submits are kept in `jobs`."""

    def __init__(self, folder, jobs):
        super().__init__(folder)
        self.update_parameters(timeout_min=10)
        self.jobs = jobs

    def _submit_command(self, command):
        def popen(cmd, **kwargs):  # [python, -m, submitit.local._local, folder] -> this file's controller
            return subprocess.Popen([cmd[0], "-c", FORWARDING_CONTROLLER, *cmd[3:]], **kwargs)
        with mock.patch.object(submitit.local.local, "subprocess", types.SimpleNamespace(Popen=popen)):
            job = super()._submit_command(command)
        self.jobs.append(job)
        return job


def without_times(rows):
    return {r["point"]: {k: v for k, v in r.items() if k not in ("wall_s", "process_s", "git_rev")} for r in rows}


def test_a_slurm_sweep_with_a_preempted_point_ends_with_the_local_sweeps_rows(tmp_path, monkeypatch):
    """Two points through the launcher's code path on submitit's local executor, one preempted after its first log
    line (USR2, submitit's default) and requeued: the merged rows equal a local sweep's in all fields but times and
    git_rev, and a rerun submits nothing."""
    import prepare
    monkeypatch.chdir(ROOT)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = open(os.path.join(ROOT, "train.py")).read() + open(os.path.join(ROOT, "model.py")).read()
    for i in range(8):
        (corpus / f"doc{i}.txt").write_text(text[i * 3000:(i + 1) * 3000 + 20000])
    source, tokens = f"files:{corpus}/*.txt", str(tmp_path / "tokens")
    prepare.ensure_data(tokens, source, "byte")  # prepared once, before two runs at once read it
    spec = tiny_spec(tmp_path, sample_tokens=0, eval_tokens=512, log_interval=1, max_iters=80, eval_interval=40,
                     data_source=source, data_dir=tokens)  # (the preemption lands at step 0 or 1 of 80)
    spec["runner"] = [sys.executable, "tests/train_without_mfu_timing.py"]  # train.py less MFU's matmul timing
    sweep.run_sweep(spec, parallel=2)
    local = without_times(sweep.read_results(str(tmp_path / "sweep" / "results.jsonl")))
    os.rename(tmp_path / "sweep", tmp_path / "local")  # the same run directories again, for the same commands

    jobs, errors = [], []
    monkeypatch.setattr(sweep, "slurm_executor", lambda folder, cluster, name: LocalCluster(folder, jobs))
    monkeypatch.setattr(sweep, "check_committed", lambda root, files: None)  # this tree may be mid-edit:
    monkeypatch.setattr(sweep, "snapshot", lambda root, dest: os.symlink(ROOT, dest) or dest)  # its code runs

    def submit_and_wait():
        try:
            sweep.run_sweep(spec, launcher="slurm", partition="test", wait=True)
        except BaseException as e:  # noqa: B036 (shown below, in the test's thread)
            errors.append(e)
    sweeper = threading.Thread(target=submit_and_wait)
    sweeper.start()
    first = sweep.grid_points(spec)[0].name
    log, deadline = tmp_path / "sweep" / first / "log.jsonl", time.time() + 120
    try:
        while len(jobs) < 2 or not log.exists() or not log.read_text():  # its first log line: the run is training
            assert sweeper.is_alive() and time.time() < deadline, errors
            time.sleep(0.02)
        jobs[0]._interrupt()
        sweeper.join(timeout=240)
    finally:  # a failing check leaves no job behind (the controller's SIGINT stops the job, the job its run)
        for job in jobs:
            job.cancel()
    assert not sweeper.is_alive() and not errors, errors
    train_log = open(tmp_path / "sweep" / first / "train.log").read()
    assert "SIGUSR2: stopped before step" in train_log and "resumed" in train_log, train_log
    assert "Requeued job" in jobs[0].stdout()
    assert without_times(sweep.read_results(str(tmp_path / "sweep" / "results.jsonl"))) == local
    sweep.run_sweep(spec, launcher="slurm", partition="test", wait=True)
    assert len(jobs) == 2  # all done: nothing submitted
