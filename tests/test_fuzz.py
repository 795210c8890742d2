"""Random damage to every kind of input file a script reads (meta.json, token files, checkpoints, eval rows, config
files) gives one line and no traceback: the reading succeeds, or stops with a ConfigError (one line, exit code 2
through configurator.run). Random damage to every script's command line (train, sample, eval, early_exit, analyze,
scaling and its subcommands, fits, bench, bench_moe, export) stops it with exit code 2 and one line on stderr
before it starts its work. Property-based (hypothesis), derandomized, bounded so it runs in seconds."""
import dataclasses
import functools
import json
import os
import shutil

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import configurator
import data
import prepare
import runs
import eval as ev
from hf import harness
from configurator import ConfigError, configure
from model import GPTConfig

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ = dict(max_examples=60, deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
damages = st.tuples(st.sampled_from(["truncate", "flip", "replace", "empty", "append"]),
                    st.integers(0, 2 ** 31 - 1))


def damage(path, how):
    """One random damage to a file: cut it, flip bytes in it, replace it with noise, empty it or grow it."""
    kind, seed = how
    rng = np.random.default_rng(seed)
    raw = bytearray(open(path, "rb").read())
    if kind == "truncate":
        raw = raw[:int(rng.integers(0, max(len(raw), 1)))]
    elif kind == "flip":
        for i in rng.integers(0, len(raw), size=int(rng.integers(1, 8))):
            raw[i] ^= int(rng.integers(1, 256))
    elif kind == "replace":
        raw = bytearray(rng.integers(0, 256, size=int(rng.integers(0, 400)), dtype=np.uint8).tobytes())
    elif kind == "empty":
        raw = bytearray()
    else:
        raw += rng.integers(0, 256, size=int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
    open(path, "wb").write(bytes(raw))


def one_line_or_fine(read):
    try:
        read()
    except ConfigError as e:
        assert str(e) and "\n" not in str(e), str(e)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prepared")
    train, val = np.arange(2000) % 257, np.arange(600) % 257
    np.asarray(train, np.uint16).tofile(folder / "train.bin")
    np.asarray(val, np.uint16).tofile(folder / "val.bin")
    (folder / "meta.json").write_text(json.dumps(dict(tokenizer="byte", vocab_size=257, eot=256, dtype="uint16",
                                                      train_tokens=2000, val_tokens=600,
                                                      sha256=prepare.token_checksums(str(folder)))))
    return folder


@settings(**FUZZ)
@given(name=st.sampled_from(["meta.json", "train.bin", "val.bin"]), how=damages)
def test_damaged_prepared_data(prepared, tmp_path, name, how):
    folder = tmp_path / "d"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(prepared, folder)
    damage(folder / name, how)
    one_line_or_fine(lambda: data.TokenData(str(folder)).unigram_entropy())


@settings(**FUZZ)
@given(name=st.sampled_from(["plain.pt", "looped_moe.pt"]), how=damages)
def test_damaged_checkpoints(tmp_path, name, how):
    path = tmp_path / name
    shutil.copy(os.path.join(HERE, "fixtures", "checkpoints", name), path)
    damage(path, how)
    one_line_or_fine(lambda: runs.load_model(str(path)))


@settings(**FUZZ)
@given(how=damages)
def test_damaged_eval_rows(tmp_path, how):
    folder = tmp_path / "rows"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(os.path.join(HERE, "fixtures", "eval", "arc_easy"), folder / "arc_easy")
    damage(folder / "arc_easy" / "test.jsonl", how)
    one_line_or_fine(lambda: ev.build_items(ev.TASKS["arc_easy"], str(folder), 0, 0, None))


@settings(**FUZZ)
@given(how=damages)
def test_damaged_results_rows(tmp_path, how):
    """A sweep's results.jsonl (what fit, power and figures read), damaged."""
    from lab import fits
    from lab import sweep
    path = tmp_path / "results.jsonl"
    shutil.copy(os.path.join(os.path.dirname(HERE), "records", "lee2026", "isoflop_batch_pilot_cpu.jsonl"), path)
    damage(path, how)
    one_line_or_fine(lambda: fits.select_rows(sweep.read_results(str(path)), fits.FIT_KEYS, allow_empty=True))


@settings(**FUZZ)
@given(how=damages)
def test_damaged_config_files(tmp_path, how):
    path = tmp_path / "cfg.py"
    shutil.copy(os.path.join(HERE, "..", "config", "sparse_looped_moe_cpu.py"), path)
    damage(path, how)
    one_line_or_fine(lambda: configure({"out_dir": "x"}, GPTConfig, [str(path)]))


# ---------------------------------------------------------------------------------------------------------------
# Every script's command line (issue 32, part 4): a valid line with random damage added — unknown keys, values of
# the wrong type, a key with no value, empty values, values out of range, unknown choices and subcommands, missing
# or nonexistent paths — stops with exit code 2 and one line on stderr (configurator.run), never a traceback, and
# never starts the script's work: where that work would begin (training, scoring, fitting, timing, drawing) the
# test puts a stub that raises Accepted, so a bad line that got through fails fast. Each target's undamaged line is
# checked to reach that stub, so a refusal comes from the damage.

class Accepted(Exception):
    """A script began its real work on a command line that should have been refused."""


def started(*args, **kwargs):
    raise Accepted()


REPO = os.path.dirname(HERE)
CKPTS = os.path.join(HERE, "fixtures", "checkpoints")


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The paths the command lines name: good inputs, bad ones, and a fresh directory per line (OUT)."""
    d = tmp_path_factory.mktemp("cli")

    def prepared(name, tokenizer, vocab, n_train, n_val):
        folder = d / name
        folder.mkdir()
        np.asarray(np.arange(n_train) % min(vocab, 257), np.uint16).tofile(folder / "train.bin")
        np.asarray(np.arange(n_val) % min(vocab, 257), np.uint16).tofile(folder / "val.bin")
        (folder / "meta.json").write_text(json.dumps(dict(source="offline", tokenizer=tokenizer, vocab_size=vocab,
                                                          eot=vocab - 1, dtype="uint16", train_tokens=n_train,
                                                          val_tokens=n_val,
                                                          sha256=prepare.token_checksums(str(folder)))))
        return str(folder)
    (d / "notes.txt").write_text("not a checkpoint, a config file or a results file\n")
    (d / "long.txt").write_text("And the " * 20)
    (d / "broken.py").write_text("n_layer = (\n")
    (d / "empty").mkdir()
    (d / "spec.py").write_text("name = 'fz'\narchs = {'a': []}\nseeds = [1, 2]\n"
                               "common = dict(n_layer=1, n_embd=32, head_dim=16, block_size=16, max_iters=1)\n")
    (d / "badspec.py").write_text("name = 'fz'\narchs = {'a': []}\ncommon = dict(schedule='cosin')\n")
    results = os.path.join(REPO, "records", "lee2026", "isoflop_batch_pilot_cpu.jsonl")
    (d / "results.jsonl").write_bytes(open(results, "rb").read())
    (d / "broken.jsonl").write_bytes(open(results, "rb").read()[:700] + b"\n{\"point\": \n")
    (d / "root").mkdir()
    (d / "root" / "isoflop_batch_pilot_cpu.jsonl").write_bytes(open(results, "rb").read())
    (d / "nospec").mkdir()
    (d / "nospec" / "zzz.jsonl").write_bytes(open(results, "rb").read())
    (d / "list.json").write_text("[1, 2, 3]\n")
    (d / "broken.json").write_text('{"results": {\n')
    names = dict(DATA=prepared("data", "byte", 257, 4000, 2000), GPT2DATA=prepared("gpt2", "gpt2", 50257, 2000, 600),
                 FILE=str(d / "notes.txt"), LONG=str(d / "long.txt"), BROKENPY=str(d / "broken.py"),
                 EMPTY=str(d / "empty"), NOWHERE=str(d / "nowhere"), SPEC=str(d / "spec.py"),
                 BADSPEC=str(d / "badspec.py"), RESULTS=str(d / "results.jsonl"), BROKENJSONL=str(d / "broken.jsonl"),
                 ROOT=str(d / "root"), NOSPEC=str(d / "nospec"), LISTJSON=str(d / "list.json"),
                 BROKENJSON=str(d / "broken.json"), EVALROWS=os.path.join(HERE, "fixtures", "eval"),
                 PILOT=os.path.join(REPO, "records", "schwethelm2026", "isodepth_pilot_cpu.jsonl"),
                 **{name.upper(): os.path.join(CKPTS, f"{name}.pt") for name in ("plain", "looped", "looped_moe",
                                                                                  "iteradaln_sandwich")})
    counter = iter(range(10 ** 9))
    return lambda text: text.format(OUT=str(d / f"out{next(counter)}"), **names)


def wrong_values(keys):
    """Generic damage for a script's keys ({key: default}): values of another type, no value, an empty value, a
    misspelt or upper-case key. A string key takes any text, so only its name can be wrong."""
    bad = []
    for key, default in keys.items():
        if isinstance(default, bool):
            values = ["1", "abc", "None", "", "(1,)"]
        elif isinstance(default, int):
            values = ["abc", "1.5", "True", "", "(1, 2)", "None"]
        elif isinstance(default, float):
            values = ["abc", "True", "", "nan", "1e999", "(1,)"]
        elif isinstance(default, (tuple, list)):
            values = ["abc", "3", "", "None"]
        elif isinstance(default, str):
            values = []
        else:  # None: any value goes
            continue
        bad += [f"--{key}={v}" for v in values] + [f"--{key}zz=1", f"--{key.upper()}=1"]
        bad += [] if isinstance(default, bool) else [f"--{key}"]
    GENERIC.update(bad)
    return bad


GENERIC = set()  # every argument wrong_values made: the rest of a target's bad arguments are named ones


def simple(namespace, lower=False):
    from configurator import SIMPLE_TYPES
    return {k: v for k, v in namespace.items() if not k.startswith("_") and isinstance(v, SIMPLE_TYPES)
            and not isinstance(v, type) and (k.islower() or not lower)}


MODEL_KEYS = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
MODEL_BAD = ["--n_layer=0", "--n_embd=100", "--n_loop=0", "--block_size=0", "--n_expert=-1", "--mlp=swiglux"]
COMMON_BAD = ["--device=gpu", "--device=cuda:x", "--device=cuda:99", "nowhere.py", "{BROKENPY}", "{NOWHERE}",
              "--=1", "--"]


@functools.lru_cache(maxsize=None)
def cli_targets():
    """{target: (main, subcommand, undamaged line, bad arguments, [(object, attribute, stub)])}. The subcommand is
    a list, or a strategy of bad ones (then the undamaged line is empty and the arguments drawn are fillers). A bad
    argument is a string or a tuple of strings given together; {NAME} is one of places' paths."""
    import analyze
    from tools import bench
    from tools import bench_moe
    import early_exit
    from hf import export
    from lab import fits
    import sample
    import scaling
    from lab import verdicts
    from lab import sweep
    import train
    from model import GPT
    out = {}
    model_bad = wrong_values(MODEL_KEYS) + MODEL_BAD

    out["train"] = (train.main, [], ["--data_dir={DATA}", "--out_dir={OUT}", "--n_layer=1", "--n_embd=16",
                                     "--head_dim=8", "--block_size=16", "--max_iters=2", "--eval_tokens=64",
                                     "--batch_size=2", "--sample_tokens=0", "--tokenizer=byte", "--eval_interval=1"],
                    wrong_values(simple(vars(train))) + model_bad + COMMON_BAD + [
                        "--resume", "--data_dir={FILE}/x", "--out_dir={FILE}/x", "--out_dir={FILE}",
                        "--data_source=files:{NOWHERE}/*.txt", "--data_source=nonsense", "--data_source=kjv",
                        "--tokenizer=gpt2", "--data_dir={GPT2DATA}", "--block_size=5000", "--eval_tokens=8",
                        "--seed=-1", "--fsdp=True", "--resume_changes=n_layer", "--grad_accum=0", "--lr=-1",
                        "--decay_frac=2", ("--tokenizer=auto", "--vocab_size=300"), "--schedule=cosin",
                        "--optimizer=sgd"],
                    [(train, "RunLog", started)])
    out["sample"] = (sample.main, [], ["--ckpt={LOOPED}", "--max_new_tokens=4", "--num_samples=1"],
                     wrong_values(simple(vars(sample))) + COMMON_BAD + [
                         "--ckpt=", "--ckpt={NOWHERE}", "--ckpt={FILE}", "--ckpt={EMPTY}", "--temperature=-1",
                         "--top_k=-1", "--num_samples=0", "--max_new_tokens=0", "--seed=-1", "--exit_tau=-1",
                         "--dtype=float64", "--exit_criterion=nonsense", "--exit_criterion=oracle",
                         "--exit_fill=nonsense", "--prompt=FILE:{NOWHERE}", "--prompt=FILE:{EMPTY}",
                         "--prompt=FILE:{LONG}"],
                     [(GPT, "generate", started), (early_exit, "generate_with_exit", started)])

    eval_bad = wrong_values(simple(vars(ev), lower=True)) + COMMON_BAD + [
        "--ckpt=", "--ckpt={NOWHERE}", "--ckpt={FILE}", "--names=a,b", "--limit=-1", "--shots=-2", "--loops=0",
        "--loops=abc", "--budget=x", "--budget=0", "--budget=9", "--exit_tau=-1", "--exit_tau=abc",
        "--criterion=nonsense", "--criterion=oracle", "--exit_fill=nonsense", "--batch_size=0", "--batch_tokens=0",
        "--text_tokens=0", "--seed=-1", "--bench_items=0", "--dtype=float64", "--out_dir={FILE}/x", "--schedule=abc",
        "--schedule=0", "--schedule=1,1"]
    eval_base = ["--ckpt={LOOPED}", "--tasks=probes", "--limit=2", "--out_dir={OUT}", "--data_dir={EVALROWS}"]
    eval_stubs = [(ev, "Scorer", started), (ev, "download", started), (ev, "benchmark", started),
                  (harness, "task_manager", started)]
    out["eval"] = (ev.main, [], eval_base, eval_bad + [
        "--tasks=nonsense", "--tasks=,", ("--tasks=arc_easy", "--data_dir={NOWHERE}"), ("--fetch", "--data_dir="),
        ("--tasks=perplexity", "--text="), ("--tasks=perplexity", "--text={NOWHERE}/*.txt")], eval_stubs)
    out["hf.harness"] = (harness.main, [], eval_base, eval_bad + [
        "--tasks=mmlu:x", "--tasks=:3", "--tasks=,", "--include_path={NOWHERE}"], eval_stubs)

    exit_bad = wrong_values(simple(vars(early_exit), lower=True)) + COMMON_BAD + [
        "--ckpt=", "--ckpt={NOWHERE}", "--ckpt={FILE}", "--ckpt={EMPTY}", "--names=a,b", "--mode=nonsense",
        "--criteria=nonsense", "--eval_tokens=0", "--eval_tokens=8", "--batch_size=0", "--block_size=-1",
        "--block_size=100", "--n_tau=0", "--data_dir={NOWHERE}", "--data_dir={GPT2DATA}", "--dtype=float64",
        "--out_dir={FILE}/x", "--schedule=abc", "--schedule=0", "--budget=-1", "--fill=nonsense", "--taus=abc",
        "--taus=-1", "--prompt_len=0", "--new_tokens=1", "--bench_batch=0", "--repeats=0"]
    exit_base = ["--ckpt={LOOPED}", "--data_dir={DATA}", "--out_dir={OUT}", "--eval_tokens=64", "--n_tau=4"]
    exit_stubs = [(module, name, started) for module, name in ((early_exit, "evaluate_exits"),
                                                                (early_exit, "elastic_study"),
                                                                (early_exit, "benchmark_decoding"))]
    out["early_exit"] = (early_exit.main, [], exit_base, exit_bad + ["--ckpt={PLAIN}", "--criteria=,"], exit_stubs)
    out["early_exit elastic"] = (early_exit.main, [], exit_base + ["--mode=elastic"],
                                 exit_bad + ["--budget=9", "--schedule=1,1"], exit_stubs)
    out["early_exit bench"] = (early_exit.main, [], exit_base + ["--mode=bench", "--taus=1", "--prompt_len=4",
                                                                 "--new_tokens=4", "--repeats=1"],
                               exit_bad + ["--ckpt={PLAIN}", "--criteria=oracle", "--prompt_len=23", "--bench_batch=9"],
                               exit_stubs)

    analyze_bad = wrong_values({**analyze.DEFAULTS, **MODEL_KEYS}) + MODEL_BAD + COMMON_BAD + [
        "--n_tokens=0", "--batch_size=0", "--seq_len=0", "--jsd_threshold=0", "--jsd_threshold=2", "--states=nonsense",
        "--seed=-1", "--out_dir={FILE}/x", "--width=0", "--max_loops=0", "--trials=0", "--sigma=0", "--loops=()",
        "--loops=(0,)", "--scalings=('nonsense',)", "--scalings=()", "--widths=(0,)", "--n_seeds=0", "--steps=0",
        "--lr=-1", "--weight_decay=-1"]
    drawing = [(analyze.pyplot(), "subplots", started), (analyze.pyplot(), "figure", started)]  # after the analysis's checks
    from_ckpt = ["--ckpt={NOWHERE}", "--ckpt={FILE}", "--names=a,b", "--data_dir={NOWHERE}", "--data_dir={GPT2DATA}"]
    small = ["--data_dir={DATA}", "--out_dir={OUT}", "--n_tokens=64", "--seq_len=16", "--batch_size=2"]
    for name, ckpt, extra in (("jsd", "LOOPED", []), ("routing", "LOOPED_MOE", ["--ckpt={PLAIN}"]),
                              ("routing_dynamics", "LOOPED_MOE", ["--ckpt={LOOPED}"]),
                              ("iteradaln", "ITERADALN_SANDWICH", ["--ckpt={PLAIN}"]),
                              ("active_params", "LOOPED_MOE", ["--ckpt={PLAIN}"]), ("residual_ckpt", "LOOPED", []),
                              ("representation", "LOOPED", [])):
        out[f"analyze {name}"] = (analyze.main, [name], [f"--ckpt={{{ckpt}}}"] + small,
                                  analyze_bad + from_ckpt + extra, drawing)
    tiny = ["--out_dir={OUT}", "--n_embd=32", "--head_dim=16", "--n_layer=1", "--block_size=16", "--seq_len=16",
            "--loops=(1,2)", "--n_seeds=1", "--steps=1"]
    for name, base, extra in (("theorem1", ["--out_dir={OUT}", "--width=8", "--max_loops=2", "--trials=2"], []),
                              ("residual", tiny + ["--nonshared=False"], []),
                              ("coordcheck", tiny + ["--widths=(32,64)"], ["--widths=(30,)"])):
        out[f"analyze {name}"] = (analyze.main, [name], base, analyze_bad + extra, drawing)
    out["analyze ?"] = (analyze.main, ([], [""], ["nonsense"], ["JSD"], ["--jsd"], ["jsd.py"]), [],
                        ["--ckpt={LOOPED}", "--out_dir={OUT}"], [])

    out["scaling ?"] = (scaling.main, ([], [""], ["nonsense"], ["Count"], ["--count"], ["fits"]), [],
                        ["--n_layer=2", "{SPEC}"], [])
    count_keys = {**train.defaults(), **scaling.COUNT_KEYS, **MODEL_KEYS}
    out["scaling count"] = (scaling.main, ["count"], ["--memory"], wrong_values(count_keys) + MODEL_BAD + [
        a for a in COMMON_BAD if a != "--device=cuda:99"] + [  # a count may be for another machine's GPUs
        "--batch_size=0", "--seq_len=-1", "--gpus=0", "--gpu_gib=0", "--flops_budget=-1", "--flops_convention=nonsense",
        "--dtype=nonsense", "--data_source=nonsense", "--seed=-1", "--resume_changes=n_layer", "--schedule=cosin"], [])
    out["scaling sweep"] = (scaling.main, ["sweep"], ["{SPEC}", "--out_dir={OUT}"], wrong_values(sweep.SWEEP_KEYS) + [
        "{BADSPEC}", "--limit=-1", "--parallel=-1", "--only=[", "--only=zzz", "--out_dir={FILE}/x", "--=1"],
                            [(sweep, "SweepRuns", started)])
    out["scaling sweep ?"] = (scaling.main, (
        ["sweep"], ["sweep", "{NOWHERE}"], ["sweep", "{BROKENPY}"], ["sweep", "{EMPTY}"], ["sweep", "{BADSPEC}"],
        ["sweep", "{FILE}"], ["sweep", "{SPEC}", "{SPEC}"]), [], ["--dry_run", "--limit=1", "--out_dir={OUT}"],
                              [(sweep, "SweepRuns", started)])
    fit_stubs = [(fits, name, started) for name in ("fit_isoflop", "fit_chinchilla", "fit_joint", "fit_delta_phi",
                                                    "fit_lr", "compare_arms")]
    out["scaling fit"] = (scaling.main, ["fit"], ["{RESULTS}", "--out={OUT}"], wrong_values(fits.FIT_KEYS) + [
        "{RESULTS}", "{FILE}", "--law=nonsense", "--restarts=0", "--bootstrap=-1", "--boot_restarts=0", "--workers=0",
        "--seed=-1", "--max_loss=0", "--max_lr=-1", "--out={FILE}/x", "--archs=('zzz',)", "--budgets=(1.0,)", "--=1"],
                          fit_stubs)
    out["scaling fit ?"] = (scaling.main, (
        ["fit"], ["fit", "{NOWHERE}.jsonl"], ["fit", "{BROKENJSONL}"], ["fit", "{FILE}"], ["fit", "{EMPTY}"],
        ["fit", "{LISTJSON}l"]), [], ["--law=joint", "--restarts=2", "--out={OUT}"], fit_stubs)
    power_base = ["{SPEC}", "--calibrate={PILOT}", "--out={OUT}.json"]
    power_stubs = [(fits, "calibrate_law", started), (fits, "power_delta_phi", started)]
    out["scaling power"] = (scaling.main, ["power"], power_base, wrong_values(fits.POWER_KEYS) + [
        "{SPEC}", "{FILE}", "--calibrate=", "--calibrate={NOWHERE}.jsonl", "--calibrate={BROKENJSONL}", "--trials=0",
        "--restarts=0", "--bootstrap=-1", "--boot_restarts=0", "--workers=0", "--seeds=0", "--seed=-1", "--noise=-1",
        "--only=[", "--only=zzz", "--out={FILE}/x", "--=1"], power_stubs)
    out["scaling power ?"] = (scaling.main, (
        ["power"], ["power", "{NOWHERE}", "--calibrate={PILOT}"], ["power", "{BROKENPY}", "--calibrate={PILOT}"],
        ["power", "{BADSPEC}", "--calibrate={PILOT}"], ["power", "{SPEC}"], ["power", "{SPEC}", "{SPEC}"]), [],
                              ["--trials=1", "--out={OUT}.json"], power_stubs)
    out["scaling figures"] = (scaling.main, ["figures"], ["{ROOT}"], [
        "--law=joint", "--out=x", "--", "-h2", "{NOWHERE}", "{EMPTY}", "{NOSPEC}", "{FILE}"],
                              [(fits, "fit_results", started)])

    out["fits ?"] = (verdicts.main_test, ([], [""], ["nonsense"], ["TTEST"], ["--ttest"]), [],
                     ["0.1", "0.2", "--looks=2"], [])
    values = ["abc", "nan?", "--margin", "--margin=x", "--margin=-1", "--margin=nan", "--looks=0", "--looks=x",
              "--looks=1.5", "--nonsense=1", "--out={FILE}/x", "--reference=a"]
    out["fits ttest"] = (verdicts.main_test, ["ttest"], ["0.1", "0.2", "0.3"], values, [])
    out["fits tost"] = (verdicts.main_test, ["tost"], ["--margin=0.1", "0.1", "0.2", "0.3"], values, [])
    out["fits holm"] = (verdicts.main_test, ["holm"], ["0.01", "0.04"], values + ["2", "-0.1"], [])
    out["fits on files"] = (verdicts.main_test, (["elastic"], ["probes"], ["exits"], ["representation"]),
                            [], ["{NOWHERE}.json", "{FILE}", "{LISTJSON}", "{BROKENJSON}", "{EMPTY}", "{RESULTS}",
                                 "--out={FILE}/x", "--pairs=A<B", "--margin=x", "--model=x"], [])

    out["bench"] = (bench.main, [], ["--dtypes=float32", "--compiles=False", "--n_layer=1", "--n_embd=32",
                                     "--head_dim=16", "--block_size=16", "--batch_size=1", "--steps=1", "--rounds=1",
                                     "--warmup=0"],
                    wrong_values(simple(vars(bench))) + model_bad + COMMON_BAD + [
                        "--preset=nonsense", "--dtypes=", "--dtypes=float64", "--compiles=maybe", "--compiles=",
                        "--clock=nonsense", "--steps=0", "--rounds=0", "--warmup=-1", "--batch_size=0",
                        "--threads=-1", "--out={FILE}/x", ("--preset=gpu", "--device=cpu")],
                    [(bench, "cpu_matmul_rate", lambda *a: 1e9), (bench, "make_setup", started)])
    out["bench_moe"] = (bench_moe.main, [], ["--n_layer=2", "--n_embd=32", "--head_dim=16", "--n_expert=4", "--top_k=2",
                                             "--seq_len=16", "--block_size=16", "--batch_size=1", "--dtypes=float32",
                                             "--steps=1", "--warmup=0", "--repeats=1", "--ffn_tokens=0"],
                        wrong_values({k: getattr(bench_moe, k) for k in bench_moe.SCRIPT_KEYS}) + model_bad +
                        COMMON_BAD + [
                            "--n_expert=0", "--clock=cpu", "--paths=nonsense", "--paths=", "--dtypes=float64",
                            "--seq_len=1000", "--seq_len=0", "--steps=0", "--repeats=0", "--warmup=-1",
                            "--ffn_tokens=-1", "--threads=-1", "--batch_size=0", "--out={FILE}/x", "--top_k=9"],
                        [(bench_moe, "bench_models", started)])
    out["export"] = (export.main, [], ["--run={LOOPED}", "--out={OUT}"],
                     wrong_values(simple(export.DEFAULTS)) + COMMON_BAD + [
                         "--run=", "--run={NOWHERE}", "--run={FILE}", "--run={EMPTY}", "--out=", "--out={FILE}",
                         "--import={NOWHERE}", ("--run=", "--import={NOWHERE}"), ("--run=", "--import={FILE}"),
                         ("--run=", "--import={EMPTY}"), ("--run=", "--import={LOOPED}")],
                     [(export, "save_weights", started), (export, "write_run", started)])
    return out


CLI_TARGETS = sorted(cli_targets())


def run_line(main, argv, capsys):
    """(exit code, stderr) of configurator.run(main, argv), as the script's __main__ runs it (code None: it
    returned); Accepted propagates."""
    capsys.readouterr()
    threads = torch.get_num_threads()
    try:
        configurator.run(main, argv)
        code = None
    except SystemExit as e:
        code = e.code
    finally:
        torch.set_num_threads(threads)  # train.py and the benchmarks set the thread count
    return code, capsys.readouterr().err


def refused_in_one_line(target, main, argv, capsys):
    try:
        code, err = run_line(main, argv, capsys)
    except Accepted:
        raise AssertionError(f"{target}: began its work on the bad line {argv}") from None
    assert code == 2, f"{target} {argv}: exit code {code!r}, not 2 (stderr: {err!r})"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, f"{target} {argv}: stderr {err!r}"


@pytest.fixture
def target_of(monkeypatch):
    """A target's (main, subcommand, line, bad arguments) with its stubs in place; nothing reaches the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def get(target):
        main, sub, base, bad, stubs = cli_targets()[target]
        for obj, name, stub in stubs:
            monkeypatch.setattr(obj, name, stub)
        return main, sub, base, bad
    return get


def arguments(damage):
    return [a for d in damage for a in ((d,) if isinstance(d, str) else d)]


@pytest.mark.parametrize("target", [t for t in CLI_TARGETS if isinstance(cli_targets()[t][1], list)])
def test_each_scripts_undamaged_line_reaches_its_work(target, target_of, places, capsys):
    """The undamaged line of each target is valid (it reaches the stub where the work begins, or runs to its end
    where the work is only counting), so what refuses a damaged one is its damage."""
    main, sub, base, _ = target_of(target)
    argv = [places(a) for a in sub + base]
    if cli_targets()[target][4]:
        with pytest.raises(Accepted):
            run_line(main, argv, capsys)
    else:
        assert run_line(main, argv, capsys)[0] is None


@pytest.mark.parametrize("target", CLI_TARGETS)
def test_each_named_bad_argument_stops_in_one_line(target, target_of, places, capsys):
    """Every named bad argument of a target (a value out of range, an unknown choice, a missing or wrong path, an
    unknown subcommand ...) alone on the undamaged line."""
    main, sub, base, bad = target_of(target)
    if isinstance(sub, list):
        lines = [sub + base + arguments([d]) for d in bad if d not in GENERIC]
    else:
        lines = [s + base for s in sub]
    for line in lines:
        refused_in_one_line(target, main, [places(a) for a in line], capsys)


@settings(**dict(FUZZ, max_examples=40))
@given(data=st.data())
@pytest.mark.parametrize("target", CLI_TARGETS)
def test_bad_command_lines_stop_in_one_line_with_exit_code_2(target, target_of, places, capsys, data):
    """Random damage: one to three bad arguments (half of them generic: a wrong type, no value, an unknown key;
    half named), or a bad subcommand with valid arguments after it, in random order after the undamaged line."""
    main, sub, base, bad = target_of(target)
    fixed = isinstance(sub, list)  # a good subcommand: at least one bad argument; else the subcommand is the damage
    sub = sub if fixed else data.draw(st.sampled_from(sub))
    generic, named = [b for b in bad if b in GENERIC], [b for b in bad if b not in GENERIC]
    one = st.one_of(*(st.sampled_from(x) for x in (generic, named) if x))
    damage = data.draw(st.lists(one, min_size=1 if fixed else 0, max_size=3)) if bad else []
    refused_in_one_line(target, main, [places(a) for a in sub + base + arguments(damage)], capsys)
