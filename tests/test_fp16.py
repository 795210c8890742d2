"""fp16 training with a loss scaler (GPUs without native bf16, such as the T4 of free notebook services), tested on
the CPU through the GPU's code path: the scaler's mechanics change nothing at scale 1; scaled fp16 gradients are
fp32's within fp16 rounding; a step whose gradients overflow is skipped whole (the weights, their independent decay,
the MoE bias step) and the scale halves; the CPU cross-entropy kernel hands fp16 logits to the plain loss."""
import copy

import torch

import kernels
import optim
from model import GPT, GPTConfig

TINY = dict(block_size=16, vocab_size=61, n_layer=2, n_embd=32, head_dim=16, n_loop=2, n_expert=4, top_k=2,
            moe_bias_rate=0.01)
OPT = dict(lr=1e-2, weight_decay=0.0, wd_independent=True, adam_eps=1e-8, beta1=0.9, beta2=0.95, optimizer="adamw")


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 61, (2, 17), generator=g)
    return x[:, :-1], x[:, 1:]


def step(model, scaler, weight_decay=0.1):
    opt = optim.make_optimizer(model, OPT, "cpu")
    ctx = torch.autocast("cpu", dtype=torch.float16)
    return opt, optim.train_step(model, opt, lambda _: batch(), ctx=ctx, grad_clip=1.0, weight_decay=weight_decay,
                                 schedule=1.0, scaler=scaler)


def test_a_step_with_the_scaler_at_scale_one_is_the_step_without_it():
    """The scaler's mechanics (scaled backward, unscale before clipping, decay, step, MoE bias) change nothing when
    the scale is 1 and no gradient overflows: bit for bit."""
    a = GPT(GPTConfig(**TINY)).init_weights(0)
    b = copy.deepcopy(a)
    step(a, None)
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1000)
    step(b, scaler)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    assert all(torch.equal(m.expert_bias, n.expert_bias) for m, n in zip(a.modules(), b.modules())
               if hasattr(m, "expert_bias"))


def test_scaled_fp16_gradients_are_the_fp32_gradients_within_fp16_rounding():
    model = GPT(GPTConfig(**TINY)).init_weights(0)
    x, y = batch()

    def grads(dtype, scale):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16, enabled=dtype == torch.float16):
            _, loss, aux = model(x, y)
        ((loss + sum(aux.values())) * scale).backward()
        return torch.cat([p.grad.flatten() / scale for p in model.parameters() if p.grad is not None])
    exact, scaled = grads(torch.float32, 1.0), grads(torch.float16, 2.0 ** 12)
    assert ((scaled - exact).norm() / exact.norm()).item() < 1e-2


def test_an_overflowing_step_is_skipped_whole_and_the_scale_halves(monkeypatch):
    model = GPT(GPTConfig(**TINY)).init_weights(0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    biases = [m.expert_bias.clone() for m in model.modules() if hasattr(m, "expert_bias")]
    real_backward = torch.Tensor.backward

    def poisoned(self, *args, **kwargs):  # every gradient becomes inf, as an fp16 overflow would make it
        real_backward(self, *args, **kwargs)
        for p in model.parameters():
            if p.grad is not None:
                p.grad.fill_(float("inf"))
    monkeypatch.setattr(torch.Tensor, "backward", poisoned)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    step(model, scaler, weight_decay=0.5)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # no update, no decay
    assert all(torch.equal(m.expert_bias, b) for m, b in
               zip([m for m in model.modules() if hasattr(m, "expert_bias")], biases))
    assert all(m.expert_load.sum() == 0 for m in model.modules() if hasattr(m, "expert_load"))
    assert scaler.get_scale() == 2.0 ** 9


def test_the_cpu_loss_kernel_leaves_fp16_logits_to_the_plain_loss():
    plain = GPT(GPTConfig(**TINY)).init_weights(0)
    fast = kernels.install(copy.deepcopy(plain))
    logits = torch.randn(2, 16, 61).half().requires_grad_()
    targets = batch()[1]
    (ga,) = torch.autograd.grad(fast.loss(logits, targets), logits)
    (gb,) = torch.autograd.grad(plain.loss(logits, targets), logits)
    assert torch.equal(ga, gb)
