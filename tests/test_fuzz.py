"""Random damage to every kind of input file a script reads (meta.json, token files, checkpoints, eval rows, config
files) gives one line and no traceback: the reading succeeds, or stops with a ConfigError (one line, exit code 2
through configurator.run). Property-based (hypothesis), derandomized, bounded so it runs in seconds."""
import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import checkpoint
import data
import eval as ev
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
                                                      train_tokens=2000, val_tokens=600)))
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
    one_line_or_fine(lambda: checkpoint.load_model(str(path)))


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
def test_damaged_config_files(tmp_path, how):
    path = tmp_path / "cfg.py"
    shutil.copy(os.path.join(HERE, "..", "config", "sparse_looped_moe_cpu.py"), path)
    damage(path, how)
    one_line_or_fine(lambda: configure({"out_dir": "x"}, GPTConfig, [str(path)]))
