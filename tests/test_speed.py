"""The fast CPU paths are the plain formulas: chunked cross-entropy, hand-written RMSNorm and RoPE backward, the
compiled block, fused AdamW, and bench.py's output."""
import functools
import json
import os
import platform
import sys

import pytest
import torch
import torch.nn.functional as F

import bench
import optim
import train
from model import GPT, GPTConfig, apply_rope, cross_entropy, rms_norm, rope_tables


def reference_rope(x, cos, sin):  # the textbook formula (Su et al. 2021), as model.py had it
    d = x.size(-1) // 2
    x1, x2 = x[..., :d], x[..., d:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def logits_and_targets(N, V, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = (4 * torch.randn(N, V, generator=g, dtype=torch.float64)).to(dtype)
    z[3] = 0.0
    z[3, 5] = 17.0  # a confident row: 1 - p(target) ~ 2e-4, below bf16's resolution of p ~ 1
    t = torch.randint(0, V, (N,), generator=g)
    t[3] = 5
    t[::4] = -1  # ignored positions
    return z, t


@pytest.mark.parametrize("V", [7, 300, 5000])  # one row per chunk, several rows per chunk, a single chunk
def test_chunked_cross_entropy_matches_torch_in_fp64(V):
    z, t = logits_and_targets(37, V, torch.float64)
    a, b = z.clone().requires_grad_(), z.clone().requires_grad_()
    ref = F.cross_entropy(a, t, ignore_index=-1)
    (2.5 * ref).backward()
    out = cross_entropy(b, t)
    (2.5 * out).backward()
    assert out.item() == pytest.approx(ref.item(), rel=1e-12)
    torch.testing.assert_close(b.grad, a.grad, rtol=1e-9, atol=1e-13)  # 1 - p cancels: fp64 rounding differs
    assert b.grad[0].abs().max() == 0  # ignored rows get no gradient


def test_chunked_cross_entropy_on_bf16_logits_rounds_once():
    """bf16 logits: the loss is in fp32 and the gradient is computed in fp32 and rounded to bf16 once, so the
    confident row's tiny 1 - p survives (rounding p to bf16 before subtracting the one-hot would give 0). The
    reference is fp64 on the same bf16 values."""
    z, t = logits_and_targets(37, 5000, torch.bfloat16)
    a, b = z.double().requires_grad_(), z.clone().requires_grad_()
    ref = F.cross_entropy(a, t, ignore_index=-1)
    ref.backward()
    out = cross_entropy(b, t)
    out.backward()
    assert out.dtype == torch.float32 and b.grad.dtype == torch.bfloat16
    assert out.item() == pytest.approx(ref.item(), rel=1e-6)
    torch.testing.assert_close(b.grad.double(), a.grad, rtol=1e-2, atol=1e-9)
    assert b.grad[3, 5].item() == pytest.approx(a.grad[3, 5].item(), rel=1e-2)


def test_chunked_cross_entropy_edge_cases():
    z, t = logits_and_targets(5, 11, torch.float64)
    x = z.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: cross_entropy(x, t), (x,))
    with torch.no_grad():  # evaluation: same value, no gradient work
        assert cross_entropy(x, t).item() == pytest.approx(F.cross_entropy(x, t, ignore_index=-1).item())
    assert torch.isnan(cross_entropy(x, torch.full((5,), -1)))  # nothing to predict: nan, as torch


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's own bf16 x fp32 path
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gain", [False, True])
def test_rms_norm_matches_torch(dtype, gain):
    x = torch.randn(3, 5, 64, dtype=dtype)
    w = (1 + 0.1 * torch.randn(64)) if gain else None
    g = torch.randn(3, 5, 64, dtype=dtype)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    wa, wb = [w.clone().requires_grad_() if gain else None for _ in range(2)]
    ya, yb = F.rms_norm(a, (64,), wa, 1e-6), rms_norm(b, wb, 1e-6)
    ya.backward(g)
    yb.backward(g)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert yb.dtype == ya.dtype
    torch.testing.assert_close(yb, ya, **tol)
    torch.testing.assert_close(b.grad, a.grad, **tol)
    if gain:
        torch.testing.assert_close(wb.grad, wa.grad, **tol)


def test_rms_norm_gradient_fp64():
    x = torch.randn(4, 8, 32, dtype=torch.float64, requires_grad=True)
    w = torch.rand(32, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w, 1e-6), (x, w))
    assert torch.autograd.gradcheck(lambda x: rms_norm(x, None, 1e-6), (x,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_rope_matches_reference_formula_and_gradient(dtype):
    cos, sin = rope_tables(16, 8, 10000.0)
    x = torch.randn(2, 8, 3, 16, dtype=dtype).transpose(1, 2)  # (B, H, T, D) view, as in attention
    g = torch.randn(2, 3, 8, 16, dtype=dtype)
    a, b = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    ya, yb = reference_rope(a, cos, sin), apply_rope(b, cos, sin)
    ya.backward(g)
    yb.backward(g)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-2, atol=2e-2)
    torch.testing.assert_close(yb, ya, **tol)
    torch.testing.assert_close(b.grad, a.grad, **tol)
    if dtype == torch.float64:
        x64 = x.detach().requires_grad_()
        assert torch.autograd.gradcheck(lambda q: apply_rope(q, cos.double(), sin.double()), (x64,))


def test_compiled_blocks_match_eager():
    """compile_blocks traces the compile-time branches (plain RoPE and cross-entropy formulas); aot_eager runs
    the traced forward and backward graphs without generating code, so this stays fast."""
    cfg = GPTConfig(vocab_size=61, n_layer=2, n_embd=32, head_dim=16, block_size=16, qk_norm=True)
    eager, compiled = GPT(cfg).init_weights(0), GPT(cfg).init_weights(0)
    compiled.compile_blocks(backend="aot_eager")
    idx = torch.randint(0, 61, (2, 16))
    (la, loss_a, _), (lb, loss_b, _) = eager(idx, idx), compiled(idx, idx)
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(lb, la, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


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
    with pytest.raises(ValueError, match="clock"):
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
    assert train.cpu_threads(threads, said.append, cores=cores, load=load, env=env) == expected
    assert len(said) == 1 and said[0].startswith(f"CPU threads: {expected} (")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_sets_glibc_options():
    """train.py keeps large freed blocks (the logits and their gradient) in the heap on CPU; mallopt returns 1
    only for options it knows and accepts."""
    assert train.keep_freed_memory() is True
