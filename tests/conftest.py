"""Test-wide settings. The models here are tiny: a second thread only adds synchronisation, and on a busy machine
OpenMP's spinning threads can slow them a hundredfold, so tests (and the scripts they start) use one thread."""
import functools
import os
import runpy
import sys

import pytest
import torch

os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the train.py / torchrun processes the tests start
torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config):
    """With -n (pytest-xdist), tests that share an expensive module fixture (a torchrun launch) run on one worker:
    `-n auto` means --dist=load, which would start the launch once per worker; loadgroup keeps each
    @pytest.mark.xdist_group together and spreads everything else as load does."""
    # without xdist (-p no:xdist, the shuffled one-process run) the mark is still known
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker")
    if getattr(config.option, "dist", "no") == "load":  # the controller: schedule by group
        config.option.dist = "loadgroup"
    if hasattr(config, "workerinput"):  # a worker: name each test's group in its id, as --dist=loadgroup does
        config.option.loadgroup = True


# The slowest tests (or xdist groups), longest first, as one process measured them (`pytest -p no:xdist
# --durations=0`, s, 2-core Xeon, 2026-11-29): under -n, each worker runs them before the rest, so that the two workers
# end together instead of one running a 20-second test alone at the end. A test missing here only runs later; a name
# here that no test has any more is harmless (keep the list to the slow ones).
SLOWEST_FIRST = (
    "@fsdp",  # the xdist group of tests/test_train.py's torchrun launches: 60
    "test_campaign.py::test_a_gpu_batch_trains_and_analyses_seed_after_seed_until_its_deadline",  # 28
    "test_slurm.py::test_a_slurm_sweep_with_a_preempted_point_ends_with_the_local_sweeps_rows",  # 21
    "@transformers",  # the xdist group of tests/test_export.py's clean transformers and lm_eval process: 16
    "test_docs.py::test_exercise_solutions_apply_and_work",  # 13
    "test_sweep.py::test_a_sweep_stopped_by_its_deadline_and_continued_gives_the_rows_of_one_run_through",  # 12
    "test_speed.py::test_side_by_side_alternates_two_trees_and_reports_their_ratio",  # 10
    "test_moe.py::test_bias_update_is_equal_on_two_gloo_ranks",  # 9
    "test_train.py::test_a_paper_preset_trains_on_prepared_fineweb_edu_tokens",  # 8
    "test_sweep.py::test_sweep_and_scaling_on_the_command_line_say_what_they_take",  # 8
    "test_fits.py::test_power_of_delta_phi_simulates_each_design_against_the_real_reference",  # 8
    "test_fits.py::test_a_bootstrap_refit_lands_where_it_did",  # 7
    "test_sweep.py::test_every_committed_row_ran_under_its_committed_rule",  # 7
    "test_docs.py::test_the_self_checks_of_lectures_5_to_10_tell_right_from_wrong",  # 7
    "test_fits.py::test_figures_draw_the_probes_that_have_run",  # 7
    "@nano_self_checks",  # the xdist group of lectures 1-4's self-checks, twelve cases in one process
    "test_train.py::test_resume_after_kill_reproduces_uninterrupted_losses",  # 6
    "test_fits.py::test_power_simulation_recovers_phi_and_its_spread_grows_with_the_noise",  # 5
    "test_fits.py::test_joint_fit_recovers_phi",  # 5
    "@code_mix",  # the xdist group of tests/test_code_mix.py's audit of today's history: 5
    "test_layout.py::test_a_training_run_loads_at_most_4300_lines_of_the_project",  # 5
    "test_analyze.py::test_residual_seeds_start_at_seed_so_a_fresh_set_adds_new_ones",  # 5
    "test_analyze.py::test_coordcheck_subcommand",  # 4
    "test_gpu_path.py::test_graph_breaks_are_counted_per_block_and_for_the_gpu_loss",  # 4
    "test_fits.py::test_fit_cli_writes_figures",  # 4
    "test_sweep.py::test_a_terminated_sweep_stops_its_runs",  # 4
    "test_fits.py::test_delta_phi_",  # 3-4 each
    "test_campaign.py::test_the_committed_plan_is_what_its_command_writes_from_the_committed_list",  # 4
    "test_docs.py::test_every_command_block_runs[",  # 1-3 each
)


def slowness_rank(item):
    """The index in SLOWEST_FIRST of the first entry that names this test (its group, or a prefix of its id)."""
    group = item.get_closest_marker("xdist_group")
    test = item.path.name + item.nodeid[item.nodeid.index("::"):]  # test_x.py::test_y[params]
    for i, name in enumerate(SLOWEST_FIRST):
        if (group is not None and name == "@" + group.args[0]) or test.startswith(name):
            return i
    return len(SLOWEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """Under -n (in each worker, which all collect alike: the controller hands out tests in this order), the slow
    tests first (SLOWEST_FIRST), the rest in their usual order. A run without -n keeps the usual order, which keeps
    each module's tests (and its module fixtures) together."""
    if hasattr(config, "workerinput"):
        items.sort(key=slowness_rank)  # stable: an xdist group stays together, in its order
    elif os.environ.get("TESTS_SHUFFLE_SEED"):  # one process, tests in a random order: none may lean on another's
        import random  # state (.ci/run runs the suite so once, besides the README's command)
        random.Random(int(os.environ["TESTS_SHUFFLE_SEED"])).shuffle(items)


@pytest.fixture(autouse=True, scope="session")
def quick_cpu_matmul_timing():
    """MFU's reference on a CPU (distributed.cpu_matmul_rate) timed on 256^3 matmuls instead of 2048^3 in this
    process: milliseconds instead of 0.75 s at every train.main here, at about the same rate; peak_flops' logic and
    the processes that tests start are unchanged."""
    import distributed
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(distributed, "cpu_matmul_rate", functools.partial(distributed.cpu_matmul_rate, n=256))
        yield


@pytest.fixture
def run_script(monkeypatch, capsys):
    """run_script(SCRIPT, *ARGS) -> (exit code, stdout, stderr): `python SCRIPT ARGS` (a root script, or a package's
    `lab/x.py` run as `python -m lab.x`) in this process, from the repository, its imports loaded once for all (a
    fresh interpreter would add torch's import, seconds a command)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(repo)

    def run(script, *args):
        monkeypatch.setattr(sys, "argv", [script, *args])
        module = script.removesuffix(".py").replace("/", ".")
        try:
            if "/" in script:
                # as `python -m` does, from a fresh module: runpy warns when another test already imported it
                monkeypatch.delitem(sys.modules, module, raising=False)
                runpy.run_module(module, run_name="__main__", alter_sys=False)
            else:
                runpy.run_path(os.path.join(repo, script), run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err
    return run


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """train.py's data keys for a small byte-level corpus made from local files (fast; the real offline corpus is
    tested in test_data): tiny runs in test_train, test_docs and others."""
    d = tmp_path_factory.mktemp("corpus")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(repo, "train.py")).read() + open(os.path.join(repo, "model.py")).read()
    for i in range(8):
        (d / f"doc{i}.txt").write_text(text[i * 3000:(i + 1) * 3000 + 20000])
    return ["--data_source=files:" + str(d / "*.txt"), "--tokenizer=byte", "--data_dir=" + str(d / "tokens")]
