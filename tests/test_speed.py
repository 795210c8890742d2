"""Speed paths other than kernels.py's (tests/test_kernels.py): fused AdamW, and bench.py's output."""
import functools
import json
import os
import platform
import sys

import pytest
import torch

from tools import bench
import optim
import distributed
from model import GPT, GPTConfig


def test_fused_adamw_on_cpu_equals_the_loop_implementation():
    cfg = dict(weight_decay=0.1, wd_independent=False, adam_eps=1e-8, lr=1e-2, optimizer="adamw", beta1=0.9,
               beta2=0.95)
    models = [GPT(GPTConfig(vocab_size=50, n_layer=1, n_embd=32, head_dim=16, mup=False)).init_weights(0)
              for _ in range(2)]
    fused = optim.make_optimizer(models[0], cfg, "cpu")
    assert fused.defaults["fused"]
    loop = torch.optim.AdamW(models[1].param_groups(), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                             foreach=False)
    for step in range(3):
        for m, opt in zip(models, (fused, loop)):
            for i, p in enumerate(m.parameters()):
                p.grad = torch.sin(torch.arange(p.numel(), dtype=torch.float32) + 10 * step + i).view_as(p)
            opt.step()
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


TINY_BENCH = ["--compiles=False", "--steps=1", "--rounds=1", "--warmup=1", "--clock=cpu", "--n_layer=1",
              "--n_embd=32", "--head_dim=16", "--block_size=16", "--batch_size=2"]


@pytest.fixture
def small_reference(monkeypatch):
    """A 256^3 reference matmul instead of 2048^3: milliseconds instead of seconds (minutes for emulated bf16)."""
    monkeypatch.setattr(bench, "cpu_matmul_rate", functools.partial(bench.cpu_matmul_rate, n=256))


def test_bench_reports_every_setup(tmp_path, small_reference):
    out = tmp_path / "bench.json"
    bench.main(["--dtypes=float32,bfloat16", f"--out={out}"] + TINY_BENCH)
    rows = json.load(open(out))["results"]
    dtypes = ["float32", "bfloat16"] if bench.native_bf16() else ["float32"]  # emulated bf16 is never run
    assert [(r["dtype"], r["compiled"]) for r in rows] == [(d, False) for d in dtypes]
    for r in rows:
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] <= 1
    with pytest.raises(bench.ConfigError, match="--clock='gpu' is not one of wall | cpu"):
        bench.main(["--clock=gpu"])


AVX2_ONLY = {"architecture": "x86_64", "avx2": True, "avx512_f": False, "avx512_bf16": False, "amx_bf16": False}


def test_native_bf16_reads_the_cpu_flags():
    assert not bench.native_bf16(AVX2_ONLY)
    assert bench.native_bf16({**AVX2_ONLY, "avx512_f": True, "avx512_bf16": True})
    assert bench.native_bf16({**AVX2_ONLY, "amx_tile": True, "amx_bf16": True})
    assert bench.native_bf16({"architecture": "arm64", "neon": True, "bf16": True})
    assert not bench.native_bf16({"architecture": "arm64", "neon": True, "bf16": False})


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo") or platform.machine() != "x86_64", reason="x86 Linux flags")
def test_native_bf16_agrees_with_proc_cpuinfo():
    flags = next(line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags"))
    assert bench.native_bf16() == bool({"avx512_bf16", "amx_bf16"} & set(flags))


def test_bench_skips_bf16_on_a_cpu_without_it(tmp_path, small_reference, monkeypatch, capsys):
    """On an AVX2-only CPU torch emulates bf16 (1.3 vs 61 GFLOP/s in fp32 on an AMD EPYC): bench.py says so and
    times fp32 only, in bench.py's own process as in this test."""
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: AVX2_ONLY)
    out = tmp_path / "bench.json"
    bench.main(["--dtypes=float32,bfloat16", f"--out={out}"] + TINY_BENCH)
    assert [r["dtype"] for r in json.load(open(out))["results"]] == ["float32"]
    assert "bfloat16 skipped: this CPU has no native bf16" in capsys.readouterr().out


def test_bench_never_reports_mfu_above_one(tmp_path, monkeypatch, capsys):
    """A reference slower than the model (measured under load, or an emulated dtype) is reported as unreliable,
    not turned into an MFU above 100%."""
    monkeypatch.setattr(bench, "cpu_matmul_rate", lambda dtype, now: 1e3)  # 1 kFLOP/s: any step beats it
    out = tmp_path / "bench.json"
    bench.main(["--dtypes=float32", f"--out={out}"] + TINY_BENCH)
    rows = json.load(open(out))["results"]
    assert len(rows) == 1 and rows[0]["flops_per_s"] > rows[0]["peak_flops_per_s"] and rows[0]["mfu"] is None
    assert "MFU n/a: faster than the unreliable reference" in capsys.readouterr().out


@pytest.mark.parametrize("threads, cores, load, env, expected", [
    (0, 2, 0.1, {}, 2),  # quiet machine: all cores
    (0, 2, 1.2, {}, 1),  # one busy neighbour on 2 cores: the idle one
    (0, 2, 7.0, {}, 1),  # overloaded: still one thread
    (0, 16, 3.6, {}, 12),  # 4 of 16 cores busy
    (0, 16, 3.6, {"OMP_NUM_THREADS": "3"}, 3),  # the environment's explicit choice wins over auto
    (5, 2, 1.2, {"OMP_NUM_THREADS": "1"}, 5),  # and the threads key over both
])
def test_cpu_threads_uses_the_idle_cores(threads, cores, load, env, expected):
    said = []
    assert distributed.cpu_threads(threads, said.append, cores=cores, load=load, env=env) == expected
    assert len(said) == 1 and said[0].startswith(f"CPU threads: {expected} (")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_sets_glibc_options():
    """train.py keeps large freed blocks (the logits and their gradient) in the heap on CPU; mallopt returns 1
    only for options it knows and accepts."""
    assert distributed.keep_freed_memory() is True


def test_side_by_side_alternates_two_trees_and_reports_their_ratio(tmp_path):
    """tools/side_by_side.py against a second copy of this tree's code: each tree's step runs in a process of its
    own, the rounds alternate, and the JSON holds every round of both and the median ratio inside its interval. The
    other tree is a copy whose benchmark counts its steps in a file, so the test sees that tree did the work."""
    import shutil
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    other = tmp_path / "other"
    shutil.copytree(root, other, ignore=shutil.ignore_patterns(".git", "out", "data", "records", "course", "tests",
                                                               ".hypothesis", "__pycache__"))
    bench_py = other / "tools" / "bench.py"
    bench_py.write_text(bench_py.read_text().replace(
        "    def step():\n", "    def step():\n        open('steps.txt', 'a').write('.')\n"))
    out = tmp_path / "sbs.json"
    run = subprocess.run([sys.executable, "-m", "tools.side_by_side", str(other), "--rounds=2", "--steps=2",
                          "--batch_size=2", "--n_layer=1", "--n_embd=32", "--head_dim=16", "--block_size=16",
                          "--core=-1", f"--out={out}"], cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads(out.read_text())
    assert len(res["seconds"]["this"]) == len(res["seconds"]["other"]) == 2 and res["model"]["n_embd"] == 32
    assert res["interval"][0] <= res["ratio"] <= res["interval"][1]
    assert (other / "steps.txt").read_text() == "." * (3 + 2 * 2)  # the warm-up steps, then two rounds of two
    assert "this / other:" in run.stdout
