"""Test-wide settings. The models here are tiny: a second thread only adds synchronisation, and on a busy machine
OpenMP's spinning threads can slow them a hundredfold, so tests (and the scripts they start) use one thread."""
import functools
import os
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
    if getattr(config.option, "dist", "no") == "load":  # the controller: schedule by group
        config.option.dist = "loadgroup"
    if hasattr(config, "workerinput"):  # a worker: name each test's group in its id, as --dist=loadgroup does
        config.option.loadgroup = True


@pytest.fixture(autouse=True, scope="session")
def quick_cpu_matmul_timing():
    """MFU's reference on a CPU (distributed.cpu_matmul_rate) timed on 256^3 matmuls instead of 2048^3 in this
    process: milliseconds instead of 0.75 s at every train.main here, at about the same rate; peak_flops' logic and
    the processes that tests start are unchanged."""
    import distributed
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(distributed, "cpu_matmul_rate", functools.partial(distributed.cpu_matmul_rate, n=256))
        yield


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
