"""Tests of loop.py: every depth plan against a hand-unrolled reference, conditioning at init, truncated BPTT,
hyper-connections, residual multipliers measured with hooks, trajectories and elastic depth, the KV cache, compile
once for every loop count, the elastic objectives, MuonH, the LR rules. Tiny models, CPU, a few seconds each."""
import itertools
import math
import os
import sys

import numpy as np
import pytest
import scipy.stats
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import loop  # noqa: E402
from loop import TRAJECTORY_SAMPLERS, HyperConnections  # noqa: E402
import optim  # noqa: E402
import accounting  # noqa: E402
import scaling  # noqa: E402
from optim import MuonH, MuonHAdamW  # noqa: E402
from model import GPT, Block, GPTConfig, KVCache  # noqa: E402

V, T = 61, 12


def tiny(**kw):
    base = dict(n_embd=32, head_dim=16, n_layer=2, block_size=16, vocab_size=V)
    base.update(kw)
    return GPTConfig(**base)


def make(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(tiny(**kw)).init_weights(seed)


def tokens(B=2, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def perturb(module, scale=0.05, seed=1):
    """Random values for every parameter of `module` (so that identities at init cannot hide a bug)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def hand_forward(m, idx, detach_before=0, res_scale=1.0):
    """The looped model written out by hand from Schwethelm et al.'s equations (no conditioning): embedding ->
    [norm] -> prelude -> passes (injection or hyper-connection lanes, shared layers, end-of-pass norm) -> coda ->
    final norm -> head. The state is detached after every pass < detach_before (truncated BPTT by hand)."""
    cfg = m.config
    rope = m.rope(0, idx.size(1))
    x = m.wte(idx)
    if cfg.loop_norm:
        x = m.norm_embed(x)
    P, K = cfg.n_prelude, cfg.n_layer
    for i in range(P):
        x = m.blocks[i](x, rope)[0]
    e = x
    h = torch.zeros_like(e) if cfg.injection == "additive" else e
    lanes = [e] * cfg.hc_lanes
    for i in range(cfg.n_loop):
        if cfg.hc_lanes:  # u_i = alpha_i . l_i
            u = sum(m.hc.alpha[i, k] * lanes[k] for k in range(cfg.hc_lanes))
        elif cfg.injection == "linear" and cfg.n_loop > 1:  # u = W [e || h]
            u = torch.cat([e, h], dim=-1) @ m.inject.proj.weight.T
        elif cfg.injection == "additive":
            u = h + e
        else:
            u = h
        u_in = u
        for j in range(K):
            u = m.blocks[P + j](u, rope, res_scale=res_scale)[0]
        s = m.norm_loop(u) if cfg.loop_norm else u
        if cfg.hc_lanes:  # l_{i+1} = M_i l_i + beta_i (s_i - u_i) (our reading); the coda reads the pooled lanes
            lanes = [sum(m.hc.mix[i, j, k] * lanes[k] for k in range(cfg.hc_lanes)) + m.hc.beta[i, j] * (s - u_in)
                     for j in range(cfg.hc_lanes)]
            h = sum(lanes) / (cfg.hc_lanes if cfg.hc_pool == "mean" else 1)
        else:
            h = s
        if i < detach_before:
            h, lanes = h.detach(), [lane.detach() for lane in lanes]
    x = h
    for i in range(P + K, P + K + cfg.n_coda):
        x = m.blocks[i](x, rope)[0]
    return m.lm_head(m.norm_f(x))


PLANS = {
    "full_loop": dict(n_loop=3),
    "prelude_coda_linear": dict(n_loop=3, n_prelude=1, n_coda=1, injection="linear", loop_norm=True, norm_gain=True),
    "additive": dict(n_loop=2, n_prelude=1, n_coda=1, injection="additive", loop_norm=True),
    "hyper_connections": dict(n_loop=3, n_prelude=1, n_coda=1, hc_lanes=2, loop_norm=True),
    "hyper_connections_sum": dict(n_loop=3, n_prelude=1, n_coda=1, hc_lanes=3, hc_pool="sum"),
}


# -----------------------------------------------------------------------------------------------------------------
# depth plans


@pytest.mark.parametrize("plan", list(PLANS))
def test_plan_equals_hand_unrolled_stack(plan):
    m = make(**PLANS[plan])
    perturb(m.between, scale=0.3 if m.config.hc_lanes else 0.05)  # a non-identity injection or lane mixing
    idx = tokens()
    logits, _, _ = m(idx)
    torch.testing.assert_close(logits, hand_forward(m, idx), rtol=1e-5, atol=1e-5)


def test_labels_of_the_walk():
    m = make(n_loop=3, n_prelude=1, n_coda=2)
    labels = [label for label, _ in m.states(tokens())]
    assert [l.index for l in labels] == list(range(1 + 3 * 2 + 2)) == list(range(m.n_slots()))
    assert [l.layer for l in labels] == [0, 1, 2, 1, 2, 1, 2, 3, 4]
    assert [l.loop for l in labels] == [0, 0, 0, 1, 1, 2, 2, 0, 0]
    assert [l.boundary for l in labels] == [False, False, True, False, True, False, True, False, False]
    assert [l.part for l in labels] == ["prelude"] + ["loop"] * 6 + ["coda"] * 2


def test_linear_injection_at_init_passes_the_prelude_output_through():
    m = make(n_loop=3, n_prelude=1, injection="linear", loop_norm=True)
    seen = []
    m.blocks[1].register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach().clone()))
    states = m.states(tokens())
    prelude_out = states[0][1]
    assert torch.equal(seen[0], prelude_out)  # first pass: u = [I | 0] [e || e] = e
    perturb(m.inject)  # a trained W mixes in the state
    seen.clear()
    m.states(tokens())
    assert not torch.allclose(seen[0], prelude_out, atol=1e-3)


def test_readout_of_an_early_state_runs_the_coda():
    m = make(**PLANS["prelude_coda_linear"])
    perturb(m.inject)  # at init W = [I | 0] makes every pass see e, so every exit would read the same state
    idx = tokens()
    full, _, _ = m(idx)
    states = m.states(idx)
    label, h = [s for s in states if s[0].boundary][-1]  # the state the coda reads
    torch.testing.assert_close(m.readout(h, label), full, rtol=0, atol=1e-6)
    label1, h1 = [s for s in states if s[0].boundary][0]  # an exit after the first pass differs
    assert (m.readout(h1, label1) - full).abs().max() > 1e-5


def test_a_plain_model_makes_one_pass_and_refuses_more():
    m = GPT(tiny()).init_weights(0)
    idx = tokens()
    ref = m(idx)[0]
    for schedule in (1, [1.0]):
        assert torch.equal(m(idx, schedule=schedule)[0], ref)
    assert m.n_slots(1) == 2 and accounting.block_executions(m, False, 1) == [(1, 1)] * 2
    assert accounting.module_executions(m) == {}
    with pytest.raises(ValueError, match="one pass"):
        m(idx, schedule=2)


def test_the_walk_hands_out_what_each_layer_was_conditioned_with_only_when_asked():
    m = make(n_loop=3, n_prelude=1, n_coda=1, loop_cond="iteradaln", cond_init="normal").eval()
    x = m.embed(tokens())
    with torch.no_grad():
        assert all(cond is None or cond.out is None for _, _, cond in m.walk(x, m.rope(0, T)))  # none asked: kept none
        steps = list(m.walk(x, m.rope(0, T), keep_cond=True))
        assert [cond is None for _, _, cond in steps] == [label.part != "loop" for label, _, _ in steps]
        (_, h0, _), (label, _, cond) = steps[:2]  # the prelude's output is the first pass's input (no injection)
        assert label.part == "loop" and label.loop == 0
        c = m.loop_embedding(0, 0.0, 1 / 3)  # IterAdaLN: the embedding of iteration 1
        for got, want in zip(cond.out["attn"], m.blocks[1].modulator.attn(h0, c)):
            torch.testing.assert_close(got, want)


def test_res_scale_sets_the_shared_blocks_multiplier_at_construction():
    m = GPT(tiny(n_loop=1, n_prelude=1), res_scale=0.25)
    assert m.res_scales.tolist() == [1.0, 0.25, 0.25]


def test_ffn_receives_the_loop_index_for_moe_records():
    m = make(n_loop=3, n_prelude=1)

    class Recorder(nn.Module):
        returns_aux = True  # an FFN like moe.MoE: takes the loop index, returns (y, aux)

        def __init__(self):
            super().__init__()
            self.seen = []

        def forward(self, x, loop):
            self.seen.append(loop)
            return torch.zeros_like(x), {}

    rec = Recorder()
    m.blocks[1] = Block(m.config, rec)
    m(tokens())
    assert rec.seen == [0, 1, 2]


# -----------------------------------------------------------------------------------------------------------------
# conditioning at init


def block_io(m, i, idx):
    """(input, output) of every call of block i during one forward."""
    calls = []
    pre = m.blocks[i].register_forward_pre_hook(lambda mod, args: calls.append([args[0].detach()]))
    post = m.blocks[i].register_forward_hook(lambda mod, args, out: calls[-1].append(out[0].detach()))
    m(idx)
    pre.remove()
    post.remove()
    return calls


@pytest.mark.parametrize("kind", ["index", "loopformer"])
def test_adaln_zero_blocks_start_as_identity(kind):
    m = make(n_loop=3, loop_cond=kind, norm_gain=True)
    for i in range(2):
        for x_in, x_out in block_io(m, i, tokens()):
            assert torch.equal(x_in, x_out)
    assert m.blocks[0].norm_attn.weight is None  # affine-free block norms
    m_code = make(n_loop=3, loop_cond=kind, cond_init="normal")  # the released code's init is not the identity
    x_in, x_out = block_io(m_code, 0, tokens())[0]
    assert not torch.allclose(x_in, x_out)


def test_iteradaln_starts_with_attention_off_and_plain_norms():
    m = make(n_loop=2, n_prelude=1, n_coda=1, loop_cond="iteradaln", sandwich_norm=True)
    perturb(m.loop_embed)  # v_k may be anything: the zero output projections still hide it
    block = m.blocks[1]
    for x, out in block_io(m, 1, tokens()):
        ref = x + block.post_ffn(block.ffn(F.rms_norm(x, (x.size(-1),), eps=m.config.norm_eps)))
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)  # attention on would differ by ~1e-2
    m_code = make(n_loop=2, n_prelude=1, n_coda=1, loop_cond="iteradaln", sandwich_norm=True, cond_init="normal")
    x, out = block_io(m_code, 1, tokens())[0]
    block = m_code.blocks[1]
    ref = x + block.post_ffn(block.ffn(F.rms_norm(x, (x.size(-1),), eps=m.config.norm_eps)))
    assert not torch.allclose(out, ref, atol=1e-4)


def test_sinusoidal_features():
    f = loop.sinusoidal(0.25, dim=8).double()
    w = torch.tensor([10000.0 ** (-k / 4) for k in range(4)], dtype=torch.float64)
    torch.testing.assert_close(f[0], torch.cat([torch.cos(0.25 * w), torch.sin(0.25 * w)]), rtol=1e-6, atol=1e-7)


# -----------------------------------------------------------------------------------------------------------------
# truncated BPTT and hyper-connections


@pytest.mark.parametrize("plan", ["prelude_coda_linear", "hyper_connections"])
def test_truncated_bptt_equals_detaching_by_hand(plan):
    kw = dict(PLANS[plan], n_loop=4, bptt_loops=2)
    m = make(**kw)
    perturb(m.between, scale=0.1)
    idx = tokens()
    _, loss, _ = m(idx, idx)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad()
    ref = hand_forward(m, idx, detach_before=2)
    F.cross_entropy(ref.view(-1, ref.size(-1)), idx.view(-1)).backward()
    for n, p in m.named_parameters():
        if p.grad is None or not p.grad.any():
            assert n not in grads or not grads[n].any(), n
            continue
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)
    m.zero_grad()  # full BPTT differs
    F.cross_entropy(hand_forward(m, idx).view(-1, V), idx.view(-1)).backward()
    assert not torch.allclose(m.blocks[1].attn.c_q.weight.grad, grads["blocks.1.attn.c_q.weight"])
    assert accounting.block_executions(m)[1] == (4, 2) and accounting.block_executions(m)[0] == (1, 1)


def test_hyper_connection_update_matches_the_equations():
    hc = HyperConnections(tiny(n_loop=3, hc_lanes=2))
    assert hc.alpha.tolist() == [[1, 0], [0, 1], [1, 0]]  # cyclic init
    assert torch.equal(hc.mix[2], torch.eye(2)) and hc.beta.eq(1).all()
    with torch.no_grad():
        hc.alpha.copy_(torch.tensor([[0.5, 2.0], [1.0, -1.0], [0.0, 3.0]]))
        hc.mix.copy_(torch.tensor([[[1.0, 2.0], [3.0, 4.0]]] * 3))
        hc.beta.copy_(torch.tensor([[0.5, -2.0]] * 3))
    l0, l1 = torch.tensor([[[1.0, 2.0]]]), torch.tensor([[[10.0, 20.0]]])  # (B=1, T=1, C=2)
    lanes = torch.stack([l0, l1])
    s = torch.tensor([[[100.0, 200.0]]])
    # u_1 = alpha_1 . l = 1*l0 - 1*l1
    assert hc.read(lanes, l0, 1).tolist() == [[[-9.0, -18.0]]]  # (e is not read)
    # l'_0 = 1*l0 + 2*l1 + 0.5 s = (71, 142); l'_1 = 3*l0 + 4*l1 - 2 s = (-157, -314)
    u = torch.zeros_like(s)  # so that s is the pass's increment s - u
    assert hc.write(lanes, s, u, 1).tolist() == [[[[71.0, 142.0]]], [[[-157.0, -314.0]]]]


@pytest.mark.parametrize("loop_norm", [True, False])
def test_hyper_connections_at_cyclic_init_reduce_to_the_passthrough_loop(loop_norm):
    """Schwethelm et al. 2026, arXiv:2604.21106, App. G.1: at the cyclic init the model is the plain loop. With the
    same weights, every lane equals the passthrough state at every loop boundary, and with hc_pool='mean' the
    logits match; the paper's sum feeds the pre-norm coda twice that state, so its logits differ."""
    kw = dict(n_loop=3, n_prelude=1, n_coda=1, loop_norm=loop_norm)
    idx = tokens()
    for pool in ("mean", "sum"):
        m = make(**kw, hc_lanes=2, hc_pool=pool).eval()
        plain = GPT(tiny(**kw)).eval()
        unexpected = plain.load_state_dict(m.state_dict(), strict=False).unexpected_keys
        assert sorted(unexpected) == ["hc.alpha", "hc.beta", "hc.mix"]
        lanes_seen, write = [], m.hc.write
        m.hc.write = lambda lanes, s, u, i: lanes_seen.append(write(lanes, s, u, i)) or lanes_seen[-1]
        with torch.no_grad():
            ref = [h for label, h in plain.states(idx) if label.boundary]
            pooled = [h for label, h in m.states(idx) if label.boundary]
            del m.hc.write  # stop recording
            logits, ref_logits = m(idx)[0], plain(idx)[0]
        assert len(lanes_seen) == len(ref) == 3
        for lanes, h in zip(lanes_seen, ref):
            for lane in lanes:
                torch.testing.assert_close(lane, h, rtol=0, atol=1e-5)
        for h_pool, h in zip(pooled, ref):
            torch.testing.assert_close(h_pool, h * (1 if pool == "mean" else 2), rtol=0, atol=1e-5)
        if pool == "mean":
            torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-5)
        else:
            assert (logits - ref_logits).abs().max() > 1e-3


# -----------------------------------------------------------------------------------------------------------------
# residual multipliers (Wang et al. 2026), measured in the forward pass


def measured_multipliers(m, idx):
    """For every block call: s solving x_out - x_in = s * (attn_out + ffn_out), from forward hooks."""
    out = []
    for block in m.blocks:
        rec = {}
        hooks = [block.register_forward_pre_hook(lambda mod, a, rec=rec: rec.__setitem__("x", a[0].detach())),
                 block.attn.register_forward_hook(lambda mod, a, o, rec=rec: rec.__setitem__("a", o.detach())),
                 block.ffn.register_forward_hook(lambda mod, a, o, rec=rec: rec.__setitem__("f", o.detach())),
                 block.register_forward_hook(
                     lambda mod, a, o, rec=rec: out.append(solve(o[0].detach() - rec["x"], rec["a"] + rec["f"])))]
        block._hooks_for_test = hooks
    m(idx)
    for block in m.blocks:
        for hk in block._hooks_for_test:
            hk.remove()
    return out


def solve(delta, branch):
    s = (delta * branch).sum() / (branch * branch).sum()
    assert (delta - s * branch).abs().max() < 1e-5 * (1 + delta.abs().max())  # it is a multiple
    return s.item()


@pytest.mark.parametrize("n_layer,n_loop", [(2, 2), (3, 4), (24, 2)])
def test_residual_multiplier_applied_in_the_forward_pass(n_layer, n_loop):
    expected = {"none": 1.0, "sqrt": 1 / math.sqrt(n_loop), "linear": 1 / n_loop,
                "factorized": 0.7 / n_loop / math.sqrt(n_layer / 12)}
    idx = tokens(B=1)
    for rule, value in expected.items():
        m = make(n_layer=n_layer, n_loop=n_loop, n_prelude=1, residual_scaling=rule, residual_lambda=0.7)
        s = measured_multipliers(m, idx)
        assert len(s) == 1 + n_layer * n_loop
        assert abs(s[0] - 1.0) < 1e-4  # the prelude is not scaled
        assert all(abs(v - value) < 1e-4 * value for v in s[1:]), (rule, s[1:4], value)


def test_group_scales_compose_muP_and_the_depth_rule():
    m = make(n_embd=64, mup_base_width=128, n_layer=3, n_loop=2, residual_scaling="factorized", norm_gain=True)
    groups = {g["role"]: g for g in m.param_groups()}
    # w = 64/128: muP hidden/head LR x 2; depth rule (3/12)^-1/2 = 2 on hidden and block norms, LR and eps
    assert (groups["hidden"]["lr_scale"], groups["hidden"]["eps_scale"]) == (4.0, 2.0)
    assert (groups["head"]["lr_scale"], groups["head"]["eps_scale"]) == (2.0, 1.0)
    assert (groups["embed"]["lr_scale"], groups["embed"]["eps_scale"]) == (1.0, 1.0)
    assert (groups["block_norm"]["lr_scale"], groups["block_norm"]["eps_scale"]) == (2.0, 2.0)
    assert groups["norm"]["names"] == ["norm_f.weight"] and groups["norm"]["lr_scale"] == 1.0
    assert not groups["block_norm"]["decay"] and groups["hidden"]["decay"]


@pytest.mark.parametrize("kind", ["index", "loopformer", "iteradaln"])
def test_cond_lr_scale_moves_the_conditioning_by_its_share_of_the_step(kind):
    """Adam's first step moves every coordinate with a gradient by lr * its group's lr_scale (m/sqrt(v) = sign(g)).
    Measured on a real step of the same model at cond_lr_scale 0.1 and 1: the modulators and loop/step embedders move
    0.1 times as far, every other parameter as far; at the default the groups are the roles alone, as before."""
    opt_cfg = dict(weight_decay=0.0, wd_independent=False, adam_eps=1e-30, lr=1e-3, optimizer="adamw", beta1=0.9,
                   beta2=0.95)
    assert [g["role"] for g in make(n_loop=2, loop_cond=kind).param_groups()] == ["embed", "hidden", "norm", "head"]
    idx = tokens()

    def first_step(scale):
        m = make(n_loop=2, loop_cond=kind, cond_init="normal", cond_lr_scale=scale)
        before = {n: p.detach().clone() for n, p in m.named_parameters()}
        opt = optim.make_optimizer(m, opt_cfg, "cpu")
        m(idx, idx)[1].backward()
        opt.step()
        return {n: (p.detach() - before[n]).abs().max().item() for n, p in m.named_parameters()}

    scaled, plain = first_step(0.1), first_step(1.0)
    ratio = {n: scaled[n] / plain[n] for n in plain}
    cond = {n for n in ratio if ".modulator." in n or n.startswith(("loop_embed.", "step_embed."))}
    assert cond and len(cond) < len(ratio)
    assert all(ratio[n] == pytest.approx(0.1, rel=1e-3) for n in cond), {n: ratio[n] for n in cond}
    assert all(ratio[n] == pytest.approx(1.0, rel=1e-3) for n in ratio if n not in cond)


def test_cond_lr_scale_must_be_positive():
    with pytest.raises(ValueError, match="must be > 0"):
        GPTConfig(n_loop=2, loop_cond="index", cond_lr_scale=0.0)


# -----------------------------------------------------------------------------------------------------------------
# trajectories and elastic depth (Jeddi et al. 2026)


@pytest.mark.parametrize("kind", ["greedy", "uniform"])
def test_trajectory_sampler_multiples_of_1_over_L_and_every_length(kind):
    L = 6
    rng = np.random.default_rng(0)
    lengths = set()
    for _ in range(600):
        units = TRAJECTORY_SAMPLERS[kind](L, rng)
        assert sum(units) == L and min(units) >= 1 and all(isinstance(u, int) for u in units)
        lengths.add(len(units))
    assert lengths == set(range(1, L))
    a = [TRAJECTORY_SAMPLERS[kind](L, np.random.default_rng([3, 7])) for _ in range(2)]
    assert a[0] == a[1]


def compositions(L):
    """Every shortcut trajectory of a model with L passes: the compositions of L into S = 1..L-1 parts."""
    return [tuple(np.diff((0,) + cuts + (L,)).tolist())
            for S in range(1, L) for cuts in itertools.combinations(range(1, L), S - 1)]


def paper_probability(units, L):
    """Jeddi et al. 2026, arXiv:2602.11451, §3.3: S ~ U{1..L-1}, then uniform over the C(L-1, S-1) schedules."""
    return 1 / (L - 1) / math.comb(L - 1, len(units) - 1)


def greedy_probability(units, L):
    """The released code's sampler: step i is uniform over 1..(remaining - steps after it); the last takes the rest."""
    p, remaining = 1 / (L - 1), L
    for i, u in enumerate(units[:-1]):
        p /= remaining - (len(units) - 1 - i)
        remaining -= u
    return p


def trajectory_counts(L, kind, n, seed=0):
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(compositions(L), 0)
    for _ in range(n):
        counts[tuple(TRAJECTORY_SAMPLERS[kind](L, rng))] += 1  # a KeyError would be an impossible trajectory
    return counts


@pytest.mark.parametrize("L,n", [(5, 4000), (8, 20000)])
def test_default_trajectory_sampler_is_the_papers_uniform_one(L, n):
    counts = trajectory_counts(L, GPTConfig().trajectory_sampler, n)
    observed = np.array(list(counts.values()))
    expected = n * np.array([paper_probability(c, L) for c in counts])
    assert len(counts) == 2 ** (L - 1) - 1 and abs(expected.sum() - n) < 1e-6
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-3


def test_greedy_trajectory_sampler_is_the_released_codes_and_not_uniform():
    L, n = 8, 20000
    counts = trajectory_counts(L, "greedy", n)
    observed = np.array(list(counts.values()))
    greedy = n * np.array([greedy_probability(c, L) for c in counts])
    uniform = n * np.array([paper_probability(c, L) for c in counts])
    assert abs(greedy.sum() - n) < 1e-6
    assert scipy.stats.chisquare(observed, greedy).pvalue > 1e-3
    assert scipy.stats.chisquare(observed, uniform).pvalue < 1e-12
    n3 = sum(v for c, v in counts.items() if len(c) == 3)  # given S=3: P(6,1,1) = 1/6, P(1,1,6) = 1/36 (uniform 1/21)
    assert abs(counts[(6, 1, 1)] / n3 - 1 / 6) < 0.03 and abs(counts[(1, 1, 6)] / n3 - 1 / 36) < 0.012


def test_elastic_evaluation_at_full_budget_equals_the_plain_forward():
    m = make(n_loop=4, loop_cond="loopformer", cond_init="normal").eval()
    idx = tokens()
    plain, _, _ = m(idx)
    for schedule in (4, [0.25] * 4):
        assert torch.equal(m(idx, schedule=schedule)[0], plain)
    short = [0.5, 0.25, 0.25]
    assert m.n_slots(short) == 6 and not torch.allclose(m(idx, schedule=short)[0], plain, atol=1e-4)
    assert m.n_slots() == 8
    with pytest.raises(ValueError, match="summing to 1"):
        m(idx, schedule=[0.5, 0.4])


def test_loopformer_objective_terms():
    m = make(n_loop=4, loop_cond="loopformer", cond_init="normal", elastic="shortcut").train()
    idx = tokens()
    logits, loss, aux = m(idx, idx, rng=loop.trajectory_rng(1, 5))
    units = TRAJECTORY_SAMPLERS["uniform"](4, np.random.default_rng([1, 5, 0x100F]))
    assert units != [1, 1, 1, 1] and sum(units) == 4  # a real shortcut, so that the two branches differ
    x, rope = m.embed(idx), m.rope(0, T)
    h_long = loop.last(m.walk(x, rope))[1]
    h_short = loop.last(m.walk(x, rope, schedule=[u / 4 for u in units]))[1]
    ce = F.cross_entropy(m.readout(h_short).view(-1, V), idx.view(-1))
    torch.testing.assert_close(loss, F.cross_entropy(m.readout(h_long).view(-1, V), idx.view(-1)))
    torch.testing.assert_close(aux["shortcut_ce"], 0.1 * ce)
    # the consistency term pulls the shortcut toward a stop-gradient target: its gradient is the one with the full
    # trajectory detached by hand, and differs from the one through both branches
    cons_ref = 0.1 * F.mse_loss(m.norm_f(h_short), m.norm_f(h_long).detach())
    torch.testing.assert_close(aux["consistency"], cons_ref)
    params = [p for p in m.parameters() if p.requires_grad]
    grads = torch.autograd.grad(aux["consistency"], params, allow_unused=True, retain_graph=True)
    grads_ref = torch.autograd.grad(cons_ref, params, allow_unused=True, retain_graph=True)
    grads_both = torch.autograd.grad(0.1 * F.mse_loss(m.norm_f(h_short), m.norm_f(h_long)), params,
                                     allow_unused=True)
    zero = torch.zeros(())
    for g, g_ref, g_both in zip(grads, grads_ref, grads_both):
        torch.testing.assert_close(zero if g is None else g, zero if g_ref is None else g_ref, rtol=1e-5, atol=1e-8)
    assert max((g - b).abs().max().item() for g, b in zip(grads, grads_both) if g is not None) > 1e-6
    assert m.eval()(idx, idx)[2] == {}  # evaluation: no extra terms


def test_early_exit_and_random_depth_objectives():
    m = make(n_loop=4, loop_cond="index", cond_init="normal", elastic="early_exit", consistency_on="logits").train()
    idx = tokens()
    _, loss, aux = m(idx, idx, rng=loop.trajectory_rng(0, 2))
    S = int(np.random.default_rng([0, 2, 0x100F]).integers(1, 4))
    states = [h for label, h in m.states(idx) if label.boundary]
    logits_s, logits = m.readout(states[S - 1]), m.readout(states[-1])
    torch.testing.assert_close(aux["shortcut_ce"], 0.1 * F.cross_entropy(logits_s.view(-1, V), idx.view(-1)))
    torch.testing.assert_close(aux["consistency"], 0.1 * F.mse_loss(logits_s, logits))

    m = make(n_loop=4, elastic="random_depth").train()
    _, loss, aux = m(idx, idx, rng=loop.trajectory_rng(0, 9))
    S = int(np.random.default_rng([0, 9, 0x100F]).integers(1, 5))
    torch.testing.assert_close(loss, m.eval()(idx, idx, schedule=S)[1])


def test_train_step_hands_each_micro_batch_its_generator():
    """optim.train_step gives micro-batch i the generator rng(i) (train.py: trajectory_rng(seed, its global index)),
    so the elastic objective draws per micro-batch what a resumed run draws again."""
    m = make(n_loop=4, elastic="random_depth").train()
    idx = tokens()
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    loss, _, _ = optim.train_step(m, opt, lambda i: (idx, idx), accum=2, rng=lambda i: loop.trajectory_rng(3, 10 + i))
    depths = [int(loop.trajectory_rng(3, 10 + i).integers(1, 5)) for i in range(2)]
    assert depths[0] != depths[1]
    with torch.no_grad():
        expected = sum(m.eval()(idx, idx, schedule=S)[1] for S in depths) / 2
    torch.testing.assert_close(loss, expected)


# -----------------------------------------------------------------------------------------------------------------
# KV cache and compile


CACHE_PLANS = dict(PLANS,
                   sandwich_iteradaln=dict(n_loop=2, n_prelude=1, n_coda=1, loop_cond="iteradaln", sandwich_norm=True,
                                           cond_init="normal"),
                   loopformer=dict(n_loop=3, loop_cond="loopformer", cond_init="normal"),
                   factorized=dict(n_loop=3, residual_scaling="factorized"))


@pytest.mark.parametrize("plan", list(CACHE_PLANS))
def test_cached_decode_equals_full_forward(plan):
    m = make(**CACHE_PLANS[plan]).eval()
    idx = tokens()
    for schedule in ([None, 2] if plan == "loopformer" else [None]):
        full, _, _ = m(idx, schedule=schedule)
        cache = KVCache(m.n_slots(schedule), idx.size(0), T)
        pieces = [m(idx[:, :5], cache=cache, schedule=schedule)[0]]
        for t in range(5, T):
            pieces.append(m(idx[:, t:t + 1], cache=cache, schedule=schedule)[0])
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-4, atol=1e-5)


def test_compiling_the_block_once_serves_every_loop_count():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    m = make(n_loop=4, n_prelude=1, loop_cond="loopformer", residual_scaling="linear", cond_init="normal").eval()
    m.compile(backend="eager")
    idx = tokens()
    with torch.no_grad():
        first = m(idx)[0]
        graphs = counters["stats"]["unique_graphs"]
        for n in (2, 3, 6, 1):
            m(idx, schedule=n)
    assert counters["stats"]["unique_graphs"] == graphs <= 2  # one for the prelude block, one for a shared block
    assert not counters["graph_break"]
    with torch.no_grad():
        torch.testing.assert_close(m(idx)[0], first)
    torch._dynamo.reset()


# -----------------------------------------------------------------------------------------------------------------
# MuonH (Schwethelm et al. 2026)


def test_muonh_step_is_a_renormalised_muon_step():
    from torch.optim._muon import _zeropower_via_newtonschulz
    torch.manual_seed(0)
    w0, g = torch.randn(8, 6), torch.randn(8, 6)
    p = nn.Parameter(w0.clone())
    z = nn.Parameter(torch.zeros(5, 4))  # a zero matrix takes the plain Muon step
    opt = MuonH([p, z], lr=0.1, momentum=0.95)
    p.grad, z.grad = g.clone(), torch.ones(5, 4)
    opt.step()
    update = g.lerp((1 - 0.95) * g, 0.95)  # Nesterov momentum from a zero buffer
    U = _zeropower_via_newtonschulz(update, (3.4445, -4.775, 2.0315), 5, 1e-7).float()  # bf16 inside torch
    new = w0 - 0.1 * w0.norm() / U.norm() * U
    new = new * w0.norm() / new.norm()
    torch.testing.assert_close(p.data, new, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(p.data.norm(), w0.norm())
    plain = nn.Parameter(torch.zeros(5, 4))  # torch's Muon on the same zero matrix and gradient
    muon = torch.optim.Muon([plain], lr=0.1, weight_decay=0.0, momentum=0.95, nesterov=True)
    plain.grad = torch.ones(5, 4)
    muon.step()
    assert plain.abs().min() > 0  # the plain step moves every entry of the zero matrix
    torch.testing.assert_close(z.data, plain.data)


def test_muonh_steps_each_expert_of_a_stack_as_its_own_matrix():
    torch.manual_seed(0)
    w0, g = torch.randn(3, 8, 6), torch.randn(3, 8, 6)
    w0[1] = 0.0  # a zero expert takes the plain Muon step; the others keep their own norms
    stack = nn.Parameter(w0.clone())
    mats = [nn.Parameter(w0[i].clone()) for i in range(3)]
    opt_stack, opt_mats = MuonH([stack], lr=0.1), MuonH(mats, lr=0.1)
    for _ in range(2):  # the second step uses the momentum buffer
        stack.grad = g.clone()
        for i, p in enumerate(mats):
            p.grad = g[i].clone()
        opt_stack.step()
        opt_mats.step()
    for i in range(3):
        assert torch.equal(stack.data[i], mats[i].data)
    assert stack.data[1].abs().min() > 0
    torch.testing.assert_close(stack.data[0].norm(), w0[0].norm())
    torch.testing.assert_close(stack.data[2].norm(), w0[2].norm())
    with pytest.raises(ValueError, match="matrices"):
        MuonH([nn.Parameter(torch.zeros(4))], lr=0.1)


def test_muonh_adamw_puts_expert_stacks_on_the_sphere():
    m = make(n_loop=2, n_expert=4, top_k=2, mup=False)
    opt = MuonHAdamW(groups_with_eps(m), lr=0.014, betas=(0.9, 0.95))
    muon_names = {n for g in opt.muon.param_groups for n in g["names"]}
    experts = {n for n, p in m.named_parameters() if p.dim() == 3}
    assert experts and experts <= muon_names
    assert not experts & {n for g in opt.adam.param_groups for n in g["names"]}


def groups_with_eps(m):
    groups = m.param_groups()
    for g in groups:
        g["eps"] = 1e-8 * g["eps_scale"]
    return groups


def test_muonh_adamw_splits_groups_and_round_trips_its_state():
    m = make(n_loop=2, n_prelude=1, injection="linear", hc_lanes=0, norm_gain=True, mup=False)
    opt = MuonHAdamW(groups_with_eps(m), lr=0.014, betas=(0.9, 0.95))
    muon_names = {n for g in opt.muon.param_groups for n in g["names"]}
    assert "inject.proj.weight" in muon_names and "wte.weight" not in muon_names
    lr = {g["role"]: g["lr"] for g in opt.adam.param_groups}
    assert lr == pytest.approx({"embed": 0.3, "head": 0.004, "norm": 0.005})
    idx = tokens()
    m(idx, idx)[1].backward()
    opt.step()
    state = opt.state_dict()
    opt2 = MuonHAdamW(groups_with_eps(m), lr=0.014, betas=(0.9, 0.95))
    opt2.load_state_dict(state)
    assert len(opt2.param_groups) == len(opt.param_groups)


def test_make_optimizer_muonh():
    m = make(n_loop=2, mup=False)
    cfg = dict(optimizer="muonh", lr=0.014, weight_decay=0.0, wd_independent=True, adam_eps=1e-8, beta1=0.9,
               beta2=0.95)
    opt = optim.make_optimizer(m, cfg, "cpu")
    assert isinstance(opt, MuonHAdamW)
    optim.set_lr(opt, 0.007)
    assert {g["lr"] for g in opt.muon.param_groups} == {0.007}


def test_execution_counts_for_accounting():
    m = make(**dict(PLANS["prelude_coda_linear"], n_loop=4, bptt_loops=2))
    assert accounting.block_executions(m) == [(1, 1), (4, 2), (4, 2), (1, 1)]
    assert accounting.module_executions(m) == {"inject": (4, 2), "norm_loop": (4, 2)}
    lf = make(n_loop=4, loop_cond="loopformer", elastic="shortcut")
    assert accounting.block_executions(lf) == [(6.0, 6.0)] * 2  # + E[S] = L/2 passes of the shortcut trajectory
    assert accounting.block_executions(lf, training=False) == [(4, 4)] * 2
    assert accounting.module_executions(lf)["blocks.0.modulator"] == (0, 0)  # once per pass and sequence, not per token


# -----------------------------------------------------------------------------------------------------------------
# the papers' inits, as their presets set them


def preset(name, **overrides):
    """GPTConfig of config/<name>.py plus overrides, read as train.py reads it."""
    from configurator import configure
    from configurator import cli_arg
    import train
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = [os.path.join(root, "config", name + ".py")] + [cli_arg(k, v) for k, v in overrides.items()]
    return configure(train.defaults(), GPTConfig, argv)[1]


@pytest.mark.parametrize("name,overrides", [("isodepth", dict(n_embd=256)), ("recur_r4", dict(n_embd=256)),
                                            ("recur_cpu", {})])
def test_schwethelm_head_init_gives_initial_loss_ln_v(name, overrides):
    """Schwethelm et al. 2026 (arXiv:2604.21106, App. C.1): "the LM head is N(0, 10^-3)", read as std 1e-3 (nanochat's
    std=0.001): the head starts at std 1e-3 and the initial loss at ln V (the variance reading, std 0.032, would add
    ~0.13 nats at d=256; the uniform init of the other matrices, std 1/sqrt(d), ~0.5)."""
    cfg = preset(name, **overrides)
    model = GPT(cfg).init_weights(0)
    assert model.lm_head.weight.std().item() == pytest.approx(1e-3, rel=0.02)
    idx = torch.randint(0, cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, loss, _ = model(idx, idx)
    assert abs(loss.item() - math.log(cfg.padded_vocab)) < 0.02


@pytest.mark.parametrize("name,overrides,n_layer", [("loopformer", dict(n_embd=128, d_ff=512), 3),
                                                    ("loopformer", dict(n_embd=128, d_ff=512, n_layer=24, n_loop=1,
                                                                        loop_cond="none", elastic="none"), 24),
                                                    ("loopformer_cpu", {}, 2)])
def test_loopformer_presets_scale_output_projections(name, overrides, n_layer):
    """LoopFormer's released code (Jeddi et al. 2026, arXiv:2602.11451): every matrix N(0, 0.02), the attention and
    MLP c_proj N(0, 0.02^2/(2 n_layer)) with n_layer its config's unique blocks (3 for the 3 (x) 8 model, 24 for
    Base 24 (x) 1)."""
    model = GPT(preset(name, **overrides)).init_weights(0)
    block = model.blocks[0]
    for p in (block.attn.c_proj.weight, block.ffn.c_proj.weight):
        assert p.std().item() == pytest.approx(0.02 / math.sqrt(2 * n_layer), rel=0.02)
    assert block.attn.c_q.weight.std().item() == pytest.approx(0.02, rel=0.02)


# -----------------------------------------------------------------------------------------------------------------
# building and bad input


def test_clear_config_errors():
    with pytest.raises(ValueError, match="injection must be one of"):
        GPT(tiny(n_loop=2, injection="concat"))
    with pytest.raises(ValueError, match="injection='none'"):
        GPT(tiny(n_loop=2, injection="linear", hc_lanes=2))
    with pytest.raises(ValueError, match="hc_pool must be one of mean | sum"):
        GPT(tiny(n_loop=2, hc_lanes=2, hc_pool="max"))
    with pytest.raises(ValueError, match="loop_cond='loopformer'"):
        GPT(tiny(n_loop=2, elastic="shortcut"))
    with pytest.raises(ValueError, match="bptt_loops"):
        GPT(tiny(n_loop=2, bptt_loops=3))
