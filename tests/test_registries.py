"""A new variant is one class or function plus one registry row, added from outside the project's files: a toy
injection, per-pass conditioning, residual rule, elastic objective, MoE router and exit criterion, each registered
here alone. Each builds (GPTConfig accepts its name), trains one step, and the FLOPs scaling.py counts for it equal
what torch's FlopCounterMode measures while it runs."""
import math

import pytest
import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import exits
import loop
import moe
import optim
import accounting  # noqa: E402
import scaling
from model import GPT, GPTConfig, KVCache

V, T = 97, 16


def tiny(**kw):
    return GPTConfig(**{**dict(n_layer=2, n_embd=32, head_dim=16, vocab_size=V, block_size=T, n_loop=3), **kw})


def trains_one_step(model):
    """One optimizer step of optim.train_step moves the weights and gives a finite loss."""
    cfg = dict(lr=1e-2, weight_decay=0.0, wd_independent=True, adam_eps=1e-8, optimizer="adamw", beta1=0.9,
               beta2=0.95)
    opt = optim.make_optimizer(model, cfg, "cpu")
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(0))
    loss, _, _ = optim.train_step(model.train(), opt, lambda micro: (x, x), grad_clip=1.0,
                                  rng=lambda micro: loop.trajectory_rng(0, micro))
    assert math.isfinite(float(loss))
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def counted_flops_match(model, rel=0.02):
    """scaling.py's training FLOPs per token against FlopCounterMode over one forward and backward (the math SDPA
    kernel, whose matmuls the counter sees; per-sequence work and elementwise ops make the small difference)."""
    x = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss, aux = model.train()(x, x, rng=loop.trajectory_rng(0, 0))
        (loss + sum(aux.values()) if aux else loss).backward()
    measured = counter.get_total_flops() / x.numel()
    assert accounting.flops_per_token(model, "schwethelm") == pytest.approx(measured, rel=rel)


# -----------------------------------------------------------------------------------------------------------------
# the toys: each one class or function and one row


class ProjectedAdditive(loop.Passthrough):
    """u = h + W e with W zero at init (a learned additive injection): a matmul once per pass."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def start(self, e):
        return torch.zeros_like(e)

    def read(self, state, e, i):
        return state + self.proj(e)

    def runs(self, per_pass):
        return per_pass

    def reset_special(self):
        nn.init.zeros_(self.proj.weight)


class ScaleModulator(nn.Module):
    """Only a per-pass scale of each pre-norm, from the pass's vector c."""

    def __init__(self, n_embd, init="zero"):
        super().__init__()
        self.proj = nn.Linear(n_embd, 2 * n_embd)

    def attn(self, x, c):
        return self.proj(c).unsqueeze(1).chunk(2, dim=-1)[0], None, None

    def ffn(self, m, c):
        return self.proj(c).unsqueeze(1).chunk(2, dim=-1)[1], None, None


class PassScale:
    embedders = ("pass_embed",)  # a name of its own: the model holds whatever embedders a row names
    modulator = ScaleModulator
    per_sequence = True

    @staticmethod
    def vector(model, loop_index, t, dt):
        return model.pass_embed(loop_index)


def one_pass_deeper(model, x, rope, targets, rng, schedule, aux):
    """Train one pass deeper than the model's depth."""
    label, h = loop.last(model.walk(x, rope, None, aux, schedule=model.loop_count(schedule) + 1))
    logits = model.readout(h, label)
    return logits, model.loss(logits, targets)


class UniformGateRouter(moe.SoftmaxRouter):
    """Experts picked by softmax score, each selected expert weighted 1/k."""

    @staticmethod
    def gates(logits_NE, scores_NE, experts_NK):
        return torch.full(experts_NK.shape, 1.0 / experts_NK.size(1), dtype=scores_NE.dtype)


def top_probability_score(logp, prev_logp, h, prev_h):
    """1 - max_v p_v: exit once the readout is confident."""
    return 1.0 - logp.max(-1).values.exp()


# -----------------------------------------------------------------------------------------------------------------
# each registered from here, built, trained one step, its FLOPs measured


def test_a_toy_injection(monkeypatch):
    monkeypatch.setitem(loop.BETWEEN_PASSES, "projected", ProjectedAdditive)
    model = GPT(tiny(injection="projected", n_prelude=1)).init_weights(0)
    assert isinstance(model.between, ProjectedAdditive) and accounting.module_executions(model)["inject"] == (3, 3)
    trains_one_step(model)
    counted_flops_match(model)


def test_a_toy_conditioning(monkeypatch):
    monkeypatch.setitem(loop.CONDITIONING, "pass_scale", PassScale)
    model = GPT(tiny(loop_cond="pass_scale", cond_lr_scale=0.5, mup=False)).init_weights(0)
    assert all(isinstance(b.modulator, ScaleModulator) for b in model.blocks) and model.pass_embed is not None
    assert {g["lr_scale"] for g in model.param_groups() if any(".modulator." in n for n in g["names"])} == {0.5}
    trains_one_step(model)
    counted_flops_match(model)


def test_a_toy_residual_rule(monkeypatch):
    monkeypatch.setitem(loop.RESIDUAL_RULES, "half", loop.ResidualRule(lambda cfg: 0.5, lambda cfg: 0.25))
    model = GPT(tiny(residual_scaling="half", mup=False)).init_weights(0)
    assert model.res_scales.tolist() == [0.5, 0.5]
    hidden = [g for g in model.param_groups() if g["role"] == "hidden"]
    assert hidden and all(g["lr_scale"] == pytest.approx(0.25) and g["eps_scale"] == 0.25 for g in hidden)
    trains_one_step(model)
    counted_flops_match(model)


def test_a_toy_elastic_objective(monkeypatch):
    monkeypatch.setitem(loop.ELASTIC, "deeper", loop.Elastic(one_pass_deeper, lambda fwd, bwd, n: (fwd + 1, bwd + 1)))
    model = GPT(tiny(elastic="deeper")).init_weights(0)
    assert accounting.block_executions(model) == [(4, 4), (4, 4)]
    assert accounting.block_executions(model, training=False) == [(3, 3)] * 2
    trains_one_step(model)
    counted_flops_match(model, rel=1e-9)  # no per-sequence work: exactly what ran


def test_a_toy_router(monkeypatch):
    monkeypatch.setitem(moe.ROUTERS, "uniform", UniformGateRouter)
    model = GPT(tiny(n_loop=2, n_expert=4, top_k=2, moe_router="uniform", moe_dispatch="loop")).init_weights(0)
    _, _, _, gates = model.blocks[0].ffn.route(torch.randn(5, 32))
    assert torch.equal(gates, torch.full((5, 2), 0.5))
    trains_one_step(model)
    counted_flops_match(model)


def test_a_toy_exit_criterion(monkeypatch):
    """Registered in exits.CRITERIA, it decodes with exits, and decode_flops charges exactly what one decoding
    step through it runs (FlopCounterMode: the layers up to the exit, the readouts, the fills of skipped slots)."""
    monkeypatch.setitem(exits.CRITERIA, "confident", exits.Criterion(top_probability_score))
    model = GPT(tiny()).init_weights(0).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)  # confident readouts, so some tokens exit
    prompt = torch.randint(0, V, (1, 6), generator=torch.Generator().manual_seed(2))
    res = exits.generate_with_exit(model, prompt, 6, "confident", 0.5)
    assert 0 < sum(st["exited"] for st in res["stats"]) and res["tokens"].shape == (1, 12)
    labels, cands = res["labels"], res["candidates"]
    cache = KVCache(model.n_slots(), 1, 8)
    with torch.no_grad():
        model(prompt, cache=cache)
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            _, st = exits.decode_step(model, prompt[:, :1], cache, labels, cands, "confident", 0.5, "propagate")
    assert st["exited"]
    run, _ = exits.decode_flops(model, labels, [dict(st, context=7)])
    assert run == pytest.approx(counter.get_total_flops(), rel=1e-9)
