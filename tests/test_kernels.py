"""kernels.py's CPU fast paths are model.py's plain operations: each fast path against torch's own operation (values
and gradients, fp64 gradcheck, bf16 within its rounding), and a model with them installed against the plain one,
eager and compiled."""
import pytest
import torch
import torch.nn.functional as F

import kernels
import model
from model import GPT, GPTConfig, apply_rope, rope_tables


def fused_rms_norm(x, w):
    return kernels._RMSNorm.apply(x, w, 1e-6)


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
    out = kernels.chunked_cross_entropy(b, t)
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
    out = kernels.chunked_cross_entropy(b, t)
    out.backward()
    assert out.dtype == torch.float32 and b.grad.dtype == torch.bfloat16
    assert out.item() == pytest.approx(ref.item(), rel=1e-6)
    torch.testing.assert_close(b.grad.double(), a.grad, rtol=1e-2, atol=1e-9)
    assert b.grad[3, 5].item() == pytest.approx(a.grad[3, 5].item(), rel=1e-2)


def test_chunked_cross_entropy_edge_cases():
    z, t = logits_and_targets(5, 11, torch.float64)
    x = z.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: kernels.chunked_cross_entropy(x, t), (x,))
    with torch.no_grad():  # evaluation: same value, no gradient work
        want = F.cross_entropy(x, t, ignore_index=-1).item()
        assert kernels.chunked_cross_entropy(x, t).item() == pytest.approx(want)
    assert torch.isnan(kernels.chunked_cross_entropy(x, torch.full((5,), -1)))  # nothing to predict: nan, as torch


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # torch's own bf16 x fp32 path
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gain", [False, True])
def test_fused_rms_norm_matches_torch(dtype, gain):
    x = torch.randn(3, 5, 64, dtype=dtype)
    w = (1 + 0.1 * torch.randn(64)) if gain else None
    g = torch.randn(3, 5, 64, dtype=dtype)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    wa, wb = [w.clone().requires_grad_() if gain else None for _ in range(2)]
    ya, yb = F.rms_norm(a, (64,), wa, 1e-6), fused_rms_norm(b, wb)
    ya.backward(g)
    yb.backward(g)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert yb.dtype == ya.dtype
    torch.testing.assert_close(yb, ya, **tol)
    torch.testing.assert_close(b.grad, a.grad, **tol)
    if gain:
        torch.testing.assert_close(wb.grad, wa.grad, **tol)


def test_fused_rms_norm_gradient_fp64():
    x = torch.randn(4, 8, 32, dtype=torch.float64, requires_grad=True)
    w = torch.rand(32, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: fused_rms_norm(x, w), (x, w))
    assert torch.autograd.gradcheck(lambda x: fused_rms_norm(x, None), (x,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_rope_in_place_matches_the_formula_and_its_gradient(dtype):
    cos, sin = rope_tables(16, 8, 10000.0)
    x = torch.randn(2, 8, 3, 16, dtype=dtype).transpose(1, 2)  # (B, H, T, D) view, as in attention
    g = torch.randn(2, 3, 8, 16, dtype=dtype)
    a, b = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    ya, yb = apply_rope(a, cos, sin), kernels.rope_in_place(b, cos, sin)
    ya.backward(g)
    yb.backward(g)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-2, atol=2e-2)
    torch.testing.assert_close(yb, ya, **tol)
    torch.testing.assert_close(b.grad, a.grad, **tol)
    if dtype == torch.float64:
        x64 = x.detach().requires_grad_()
        assert torch.autograd.gradcheck(lambda q: kernels.rope_in_place(q, cos.double(), sin.double()), (x64,))


def same_step(a, b):
    """Two models with the same weights give the same logits and gradients on one batch, up to rounding."""
    idx = torch.randint(0, 61, (2, 16))
    (la, loss_a, _), (lb, loss_b, _) = a(idx, idx), b(idx, idx)
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(lb, la, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_compiled_plain_model_matches_the_eager_fast_paths():
    """The same model two ways: eager with kernels.py's fast paths, and compiled (torch.compile per block and the
    loss; aot_eager runs the traced graphs without generating code, so this stays fast) with model.py's plain
    operations, as a GPU runs it: values and gradients agree."""
    cfg = GPTConfig(vocab_size=61, n_layer=2, n_embd=32, head_dim=16, block_size=16, qk_norm=True, norm_gain=True)
    eager, compiled = GPT(cfg, cpu_kernels=True).init_weights(0), GPT(cfg).init_weights(0)
    assert eager.blocks[0].norm_attn.fast and not compiled.blocks[0].norm_attn.fast
    compiled.compile(backend="aot_eager")
    same_step(eager, compiled)


@pytest.mark.parametrize("kw", [dict(), dict(attn="mla", kv_lora_rank=16, rope_head_dim=8, q_lora_rank=8),
                                dict(n_loop=2, n_prelude=1, n_coda=1, loop_norm=True, qk_norm=True)])
def test_building_with_the_fast_paths_changes_no_state_and_no_result_beyond_rounding(kw):
    """GPT(config, cpu_kernels=True): the same modules, classes and parameters; every RMSNorm and attention takes
    the fast path (no module swapped later: issue 52), and a training step agrees with the plain one."""
    cfg = GPTConfig(vocab_size=61, n_layer=2, n_embd=32, head_dim=16, block_size=16, **kw)
    plain, fast = GPT(cfg).init_weights(0), GPT(cfg, cpu_kernels=True).init_weights(0)
    assert list(fast.state_dict()) == list(plain.state_dict())
    assert [type(m) for m in fast.modules()] == [type(m) for m in plain.modules()]
    norms = [m for m in fast.modules() if isinstance(m, model.RMSNorm)]
    attention = [m for m in fast.modules() if isinstance(m, (model.CausalSelfAttention, model.MLA))]
    assert norms and all(m.fast for m in norms) and not any(getattr(m, "fast", False) for m in plain.modules())
    assert attention and all(m.rotate is kernels.rope_in_place for m in attention)
    assert all(m.rotate is model.apply_rope for m in plain.modules()
               if isinstance(m, (model.CausalSelfAttention, model.MLA)))
    same_step(plain, fast)
