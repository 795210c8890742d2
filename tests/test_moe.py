"""Tests for moe.py and the MLA attention option of model.py (CPU, fast).

The float64 per-token reference MoE lives here and only here; every dispatch path must match it (values and
gradients), including empty experts, tied router scores and capacity drops."""
import dataclasses
import math
import os
import sys
import tempfile

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import moe  # noqa: E402
import accounting  # noqa: E402
import analyze  # noqa: E402  (capacity balancing)
import scaling  # noqa: E402
from model import GPT  # noqa: E402
from model import GPTConfig, MLP, MLA, KVCache  # noqa: E402

PATHS = ["grouped", "batched", "loop"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tests run tiny ops, where torch's intra-op threads only add synchronisation: on a busy 2-core machine
    2 threads made a 10-step training loop 50x slower than 1 thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_config(**kw):
    base = dict(n_embd=32, head_dim=16, n_layer=2, block_size=64, n_expert=4, top_k=2, moe_d_ff=24)
    base.update(kw)
    return GPTConfig(**base)


def make_moe(seed=0, **kw):
    torch.manual_seed(seed)
    m = moe.MoE(small_config(**kw), layer_index=0)
    with torch.no_grad():  # weights large enough that the experts differ visibly
        for p in m.parameters():
            p.normal_(0.0, 0.3)
    return m


# ---------------------------------------------------------------------------------------------------------------
# the reference: a loop over tokens in float64

def act(u, kind):
    if kind == "swiglu":
        a, g = u.chunk(2)
        return F.silu(g) * a
    return F.gelu(u) if kind == "gelu" else F.relu(u) ** 2


def reference(m, x_BTC, weights):
    """Per-token MoE in float64 with the module's settings. weights: dict of float64 leaf tensors (router, w_up,
    w_down, shared_up, shared_down). Returns y (B, T, C) and the unweighted aux terms."""
    B, T, C = x_BTC.shape
    x = x_BTC.reshape(B * T, C)
    N, E, K = x.size(0), m.n_expert, m.top_k
    cap = min(N, math.ceil(m.capacity_factor * N * K / E)) if m.capacity_factor > 0 else None
    bias = m.expert_bias.double()
    taken = [0] * E
    ys, all_logits, all_probs, picks = [], [], [], []
    for t in range(N):
        logits = weights["router"] @ x[t]
        if m.router_kind == "sigmoid":
            scores = torch.sigmoid(logits)
            probs = scores / scores.sum()
        else:
            scores = probs = torch.softmax(logits, 0)
        key = (scores + bias).tolist()
        chosen = sorted(range(E), key=lambda i: (-key[i], i))[:K]  # ties: lower index first
        if m.router_kind == "sigmoid":
            gates = scores[chosen] / scores[chosen].sum()
        else:
            gates = torch.softmax(logits[chosen], 0)
        gates = gates * m.route_scale
        y = torch.zeros(C, dtype=torch.float64)
        for slot, i in enumerate(chosen):
            if cap is not None and taken[i] >= cap:
                continue  # over capacity: dropped
            taken[i] += 1
            y = y + gates[slot] * (weights["w_down"][i] @ act(weights["w_up"][i] @ x[t], m.kind))
        if weights.get("shared_up") is not None:
            y = y + weights["shared_down"] @ act(weights["shared_up"] @ x[t], m.kind)
        ys.append(y)
        all_logits.append(logits)
        all_probs.append(probs)
        picks.append(chosen)
    logits, probs = torch.stack(all_logits), torch.stack(all_probs)
    f = torch.zeros(E, dtype=torch.float64)
    for chosen in picks:
        for i in chosen:
            f[i] += 1.0 / (N * K)
    lb = E * (f * probs.mean(0)).sum()
    z = torch.logsumexp(logits, 1).pow(2).mean()
    seq = 0.0
    for b in range(B):
        fb = torch.zeros(E, dtype=torch.float64)
        for chosen in picks[b * T:(b + 1) * T]:
            for i in chosen:
                fb[i] += 1.0 / (T * K)
        seq = seq + E * (fb * probs[b * T:(b + 1) * T].mean(0)).sum() / B
    return torch.stack(ys).view(B, T, C), dict(moe_lb=lb, moe_z=z, moe_seq=seq)


def ref_weights(m):
    w = dict(router=m.router.weight, w_up=m.w_up, w_down=m.w_down, shared_up=m.shared_up, shared_down=m.shared_down)
    return {k: (v.detach().double().requires_grad_() if v is not None else None) for k, v in w.items()}


def check_against_reference(m, path, dtype, x, tol):
    """Forward + backward of one path vs the float64 reference: outputs, aux losses, all gradients."""
    m = m.to(dtype)
    m.dispatch = path
    m.lb_coef, m.z_coef, m.seq_coef = 1.0, 1.0, 1.0  # unweighted, so the aux terms compare directly
    w = ref_weights(m)
    x_ref = x.detach().double().requires_grad_()
    y_ref, aux_ref = reference(m, x_ref, w)
    probe = torch.randn_like(y_ref)  # a real loss (grouped_mm's backward rejects expanded zero-stride grads)
    ((y_ref * probe).sum() + sum(aux_ref.values())).backward()

    x_m = x.detach().to(dtype).clone().requires_grad_()
    m.zero_grad()
    y, aux = m(x_m)
    ((y * probe.to(dtype)).sum() + sum(aux.values())).backward()
    torch.testing.assert_close(y.double(), y_ref, atol=tol, rtol=tol)
    for k in aux_ref:
        torch.testing.assert_close(aux[k].double(), aux_ref[k].detach(), atol=tol, rtol=tol)
    torch.testing.assert_close(x_m.grad.double(), x_ref.grad, atol=tol, rtol=tol)
    for name, p in [("router", m.router.weight), ("w_up", m.w_up), ("w_down", m.w_down),
                    ("shared_up", m.shared_up), ("shared_down", m.shared_down)]:
        if p is not None:
            torch.testing.assert_close(p.grad.double(), w[name].grad, atol=tol, rtol=tol, msg=f"grad of {name}")


CASES = {
    "softmax": dict(),
    "sigmoid_shared_bias": dict(moe_router="sigmoid", n_shared_expert=1, moe_route_scale=2.5),
    "capacity_drops": dict(moe_capacity_factor=0.5),
    "gelu_k1": dict(mlp="gelu", top_k=1, n_expert=3),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("path", PATHS)
def test_paths_match_float64_reference(case, path):
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(1))
    runs = [(torch.float32, 2e-5)] + ([(torch.float64, 1e-9)] if path != "grouped" else [])  # no fp64 grouped_mm
    for dtype, tol in runs:
        m = make_moe(**CASES[case])
        if case == "sigmoid_shared_bias":
            m.expert_bias.copy_(torch.tensor([0.3, -0.1, 0.0, -0.2]))
        check_against_reference(m, path, dtype, x, tol)


def test_capacity_case_really_drops():
    m = make_moe(moe_capacity_factor=0.5)
    N, E = 12, m.n_expert
    assert m.capacity(N) == 3  # ceil(0.5 * 12 * 2 / 4)
    _, _, experts, _ = m.route(torch.randn(N, 32, generator=torch.Generator().manual_seed(1)))
    assert torch.bincount(experts.flatten(), minlength=E).max() > 3  # some slots are over capacity


def test_permute_rows_gradient_is_the_inverse_permutation():
    """moe.PermuteRows (the grouped path and CUDA's combine) gives what index_select gives, values and gradients
    bit for bit: each row of a permutation receives exactly one gradient row, so the gather adds nothing."""
    x = torch.randn(12, 5, dtype=torch.float64, requires_grad=True)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    g = torch.randn(12, 5, dtype=torch.float64)
    (ref,) = torch.autograd.grad(x.index_select(0, order), x, g)
    out = moe.PermuteRows.apply(x, order, moe.inverse_permutation(order))
    assert torch.equal(out, x.index_select(0, order))
    (got,) = torch.autograd.grad(out, x, g)
    assert torch.equal(got, ref)
    assert torch.equal(moe.inverse_permutation(order)[order], torch.arange(12))


@pytest.mark.parametrize("path", PATHS)
def test_empty_experts_and_tied_scores(path):
    """Expert 3 is never picked (its bias is hugely negative); experts 1 and 2 have identical router rows, so
    their scores tie exactly and the lower index must win."""
    m = make_moe()
    with torch.no_grad():
        m.router.weight[2] = m.router.weight[1]
    m.expert_bias.copy_(torch.tensor([0.0, 0.0, 0.0, -1e4]))
    x = torch.randn(3, 8, 32, generator=torch.Generator().manual_seed(2))
    _, _, experts, _ = m.route(x.view(-1, 32))
    assert (experts != 3).all()
    assert ((experts == 1).sum(1) >= (experts == 2).sum(1)).all()  # 2 only ever appears together with 1
    assert ((experts == 1).any(1) & ~(experts == 2).any(1)).any()  # some token's tie was broken toward 1
    check_against_reference(m, path, torch.float32, x, 2e-5)
    if path != "grouped":
        check_against_reference(m, path, torch.float64, x, 1e-9)


@pytest.mark.parametrize("path", PATHS)
def test_one_expert_top1_equals_dense_mlp(path):
    cfg = small_config(n_expert=1, top_k=1, moe_d_ff=0, d_ff=48, moe_dispatch=path)
    torch.manual_seed(0)
    mlp, layer = MLP(cfg), moe.MoE(cfg)
    with torch.no_grad():
        layer.w_up[0] = torch.cat([mlp.c_fc.weight, mlp.c_gate.weight])  # [value; gate]
        layer.w_down[0] = mlp.c_proj.weight
    x = torch.randn(2, 5, 32, requires_grad=True)
    y, _ = layer(x)
    torch.testing.assert_close(y, mlp(x), atol=1e-6, rtol=1e-5)
    g_moe = torch.autograd.grad(y.square().sum(), x)[0]
    g_mlp = torch.autograd.grad(mlp(x).square().sum(), x)[0]
    torch.testing.assert_close(g_moe, g_mlp, atol=1e-5, rtol=1e-5)


def test_expert_size_default_matches_active_dense_ffn():
    cfg = GPTConfig(n_embd=128, n_expert=8, top_k=2)
    assert cfg.d_ff == 384 and moe.expert_hidden(cfg) == 192
    counts = accounting.moe_counts(moe.MoE(cfg))
    assert counts["active"] - counts["router"] == 3 * 128 * 384  # k experts = one dense FFN
    assert counts["stored"] == 8 * 128 + 8 * 3 * 128 * 192
    with pytest.raises(ValueError, match="moe_d_ff"):  # d_ff = 384 does not split into top_k = 5 experts
        GPTConfig(n_embd=128, n_expert=8, top_k=5)


# ---------------------------------------------------------------------------------------------------------------
# balancing losses and the bias

def test_balance_losses_on_hand_made_logits():
    m = make_moe(n_expert=4, top_k=1)
    m.lb_coef, m.z_coef = 1.0, 1.0
    # perfect balance: uniform probabilities, one token per expert -> 1; z-loss = (ln 4)^2
    logits = torch.zeros(4, 4)
    aux = m.balance_losses(logits, torch.softmax(logits, -1), torch.arange(4)[:, None], torch.ones(4), B=1)
    assert aux["moe_lb"].item() == pytest.approx(1.0)
    assert aux["moe_z"].item() == pytest.approx(math.log(4) ** 2)
    # total collapse onto expert 0 with k = 1 -> E
    logits = torch.tensor([[60.0, 0, 0, 0]]).repeat(4, 1)
    aux = m.balance_losses(logits, torch.softmax(logits, -1), torch.zeros(4, 1, dtype=torch.long),
                           torch.tensor([4.0, 0, 0, 0]), B=1)
    assert aux["moe_lb"].item() == pytest.approx(4.0)
    assert aux["moe_z"].item() == pytest.approx(60.0 ** 2)


def test_aux_terms_are_weighted_and_optional():
    m = make_moe(moe_lb_coef=0.5, moe_z_coef=0.0, moe_seq_coef=0.0)
    x = torch.randn(2, 4, 32)
    _, aux = m(x)
    assert set(aux) == {"moe_lb"}
    m.lb_coef = 1.0
    _, aux1 = m(x)
    assert aux["moe_lb"].item() == pytest.approx(0.5 * aux1["moe_lb"].item())


def test_bias_moves_toward_underloaded_experts_and_stays_centred():
    m = make_moe(moe_bias_rate=0.01)
    with torch.no_grad():
        m.router.weight[0] += 1.0  # inputs are positive: expert 0 wins everything
    model = torch.nn.ModuleList([m])
    x = torch.randn(4, 16, 32, generator=torch.Generator().manual_seed(3)).abs()
    m.train()
    m(x)
    load = m.expert_load.clone()
    assert load.sum() == 4 * 16 * 2 and load[0] == load.max()
    moe.update_biases(model)
    expected = 0.01 * torch.sign(load.mean() - load)
    torch.testing.assert_close(m.expert_bias, expected - expected.mean())
    assert m.expert_bias[0] < 0 and m.expert_bias[load.argmin()] > 0
    assert abs(m.expert_bias.mean().item()) < 1e-7
    assert (m.expert_load == 0).all()


def test_counters_untouched_in_eval_and_without_grad():
    m = make_moe(moe_bias_rate=0.01)
    x = torch.randn(2, 4, 32)
    m.eval()
    m(x)
    assert (m.expert_load == 0).all()
    m.train()
    with torch.no_grad():
        m(x)
    assert (m.expert_load == 0).all()
    bias = m.expert_bias.clone()
    moe.update_biases(torch.nn.ModuleList([m]))
    assert torch.equal(m.expert_bias, bias)  # nothing counted, nothing moves


@pytest.mark.parametrize("looped, compiled", [(False, False), (True, False), (True, True)])
def test_activation_checkpointing_changes_nothing_but_memory(looped, compiled):
    """Checkpointed blocks recompute their forward in the backward: losses, gradients, the routing counters and
    the router biases after a few steps equal those of the plain model (the recomputation must not count a token a
    second time). Looped: a shared MoE block called once per pass, between a prelude and a coda. Compiled: both
    models' blocks compiled (aot_eager: traced like inductor, run eagerly), the checkpoint around them."""
    import optim
    kw = dict(n_loop=2, n_prelude=0 if compiled else 1, n_coda=1, n_layer=1) if looped else {}
    cfg = small_config(block_size=16, vocab_size=64, moe_bias_rate=0.01, **kw)
    batches = [torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    runs = []
    for checkpointing in (False, True):
        model = GPT(cfg, activation_checkpointing=checkpointing).init_weights(0)
        if compiled:
            model.compile(backend="eager")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = [optim.train_step(model, opt, lambda i, x=x: (x, x.roll(-1, 1)))[0] for x in batches[:-1]]
        _, loss, aux = model(batches[-1], batches[-1].roll(-1, 1))
        (loss + sum(aux.values())).backward()
        runs.append(dict(losses=torch.stack(losses), grads={n: p.grad for n, p in model.named_parameters()},
                         loads=[m.expert_load.clone() for m in moe.moe_layers(model)],
                         bias=[m.expert_bias.clone() for m in moe.moe_layers(model)]))
    plain, ckpt = runs
    # each token's k=2 slots once per layer call: 2 layers, or (prelude +) 2 passes of the shared layer + coda
    assert sum(load.sum() for load in plain["loads"]) == 2 * 16 * 2 * (3 + (not compiled) if looped else 2)
    assert any(bias.abs().sum() > 0 for bias in plain["bias"])  # the biases moved
    torch.testing.assert_close(ckpt["losses"], plain["losses"], rtol=0, atol=0)
    for key in ("loads", "bias"):
        for a, b in zip(ckpt[key], plain[key]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name, g in plain["grads"].items():
        torch.testing.assert_close(ckpt["grads"][name], g, rtol=1e-6, atol=1e-7, msg=name)


def _gloo_worker(rank, init_file, out_dir):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    model = torch.nn.ModuleList([make_moe(seed=0, moe_bias_rate=0.01), make_moe(seed=1, moe_bias_rate=0.01)])
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(100 + rank))
    for layer in model:
        x = x + layer(x)[0].detach()
    loads = torch.stack([layer.expert_load.clone() for layer in model])
    moe.update_biases(model, world_size=2)
    torch.save(dict(loads=loads, bias=torch.stack([layer.expert_bias for layer in model])),
               os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def test_bias_update_is_equal_on_two_gloo_ranks():
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_gloo_worker, args=(os.path.join(tmp, "init"), tmp), nprocs=2, join=True)
        r0, r1 = (torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in (0, 1))
    assert not torch.equal(r0["loads"], r1["loads"])  # the ranks saw different data
    assert torch.equal(r0["bias"], r1["bias"])
    total = r0["loads"] + r1["loads"]  # the update must use the loads of both ranks
    expected = 0.01 * torch.sign(total.mean(1, keepdim=True) - total)
    torch.testing.assert_close(r0["bias"], expected - expected.mean(1, keepdim=True))


# ---------------------------------------------------------------------------------------------------------------
# routing records

def test_records_of_a_hand_built_router():
    """Router rows are scaled unit vectors, so token input a*e_i + b*e_j (a > b > 0) picks experts (i, j) with
    gates softmax([s*a, s*b]); two 'loops' with different inputs are recorded with their labels."""
    m = make_moe(n_expert=4, top_k=2)
    m.layer = 5
    with torch.no_grad():
        m.router.weight.zero_()
        m.router.weight[:, :4] = 2.0 * torch.eye(4)

    def token(i, j):
        v = torch.zeros(32)
        v[i], v[j] = 3.0, 1.0
        return v

    plans = {0: [(0, 1), (2, 3), (3, 0)], 1: [(1, 2), (2, 3), (0, 2)]}
    assert m._records is None
    with analyze.record_routing(torch.nn.ModuleList([m])) as records:
        for loop, pairs in plans.items():
            m(torch.stack([token(i, j) for i, j in pairs]).view(1, 3, 32), loop)
    assert m._records is None  # recording is off again
    m(torch.randn(1, 3, 32))
    assert len(records) == 2
    gate = torch.softmax(torch.tensor([6.0, 2.0]), 0)
    for rec, (loop, pairs) in zip(records, plans.items()):
        assert rec["layer"] == 5 and rec["loop"] == loop and rec["shape"] == (1, 3)
        assert rec["experts"].tolist() == [list(p) for p in pairs]
        torch.testing.assert_close(rec["gates"], gate.repeat(3, 1))
        torch.testing.assert_close(rec["router_input"], torch.stack([token(i, j) for i, j in pairs]))
    assert analyze.unique_experts_per_token(records, 4) == {5: pytest.approx((3 + 2 + 3) / 3)}


def test_unique_experts_estimates():
    assert analyze.independent_unique_experts(8, 2, 1) == pytest.approx(2.0)
    assert analyze.independent_unique_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75 ** 2))
    # two forward passes of one layer with two loops each
    rec = lambda loop, e: dict(layer=0, loop=loop, experts=torch.tensor(e))  # noqa: E731
    records = [rec(0, [[0, 1]]), rec(1, [[0, 1]]), rec(0, [[0, 1]]), rec(1, [[2, 3]])]
    assert analyze.unique_experts_per_token(records, 4) == {0: pytest.approx(3.0)}


def test_records_from_a_gpt_forward():
    cfg = small_config(n_layer=3, moe_first_dense=1)
    model = GPT(cfg).init_weights(0)
    assert model.blocks[0].ffn.__class__ is MLP and isinstance(model.blocks[2].ffn, moe.MoE)
    with analyze.record_routing(model) as records:
        model(torch.randint(0, 257, (2, 7)))
    assert [(r["layer"], r["loop"]) for r in records] == [(1, 0), (2, 0)]
    assert records[0]["experts"].shape == (14, 2) and records[0]["router_input"].shape == (14, 32)
    with pytest.raises(ValueError, match="no MoE layers"):
        with analyze.record_routing(GPT(small_config(n_expert=0))):
            pass
    model.compile(backend="eager")  # a compiled block would record tensors of its trace: refused, in one line
    with pytest.raises(ValueError, match="record routing on an eager model"):
        with analyze.record_routing(model):
            pass


# ---------------------------------------------------------------------------------------------------------------
# model integration: init, training signal

def test_expert_init_follows_mup_and_fan_in():
    cfg = small_config(n_embd=256, moe_d_ff=64, init="uniform")
    model = GPT(cfg).init_weights(0)
    layer = model.blocks[0].ffn
    assert model.param_role("blocks.0.ffn.w_up", layer.w_up) == "hidden"
    assert "blocks.0.ffn.expert_bias" not in dict(model.named_parameters())
    # uniform init: U(-a, a) with a = sqrt(3 / fan_in): fan_in is C for w_up and H for w_down
    assert layer.w_up.abs().max() <= math.sqrt(3 / 256) and layer.w_up.abs().max() > 0.9 * math.sqrt(3 / 256)
    assert layer.w_down.abs().max() > math.sqrt(3 / 256) * 1.5  # fan-in 64: a = sqrt(3/64)
    model = GPT(small_config(n_embd=256, moe_d_ff=64)).init_weights(0)  # normal: sigma^2 / w, w = 2
    assert model.blocks[0].ffn.w_up.std().item() == pytest.approx(0.02 / math.sqrt(2), rel=0.05)


def test_moe_gpt_learns_a_batch():
    cfg = small_config(n_layer=1, block_size=16, moe_dispatch="batched", moe_bias_rate=0.001)
    torch.manual_seed(0)
    model = GPT(cfg).init_weights(0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    idx = torch.randint(0, 257, (2, 17))
    losses = []
    for _ in range(10):
        _, loss, aux = model(idx[:, :-1], idx[:, 1:])
        (loss + sum(aux.values())).backward()
        opt.step()
        opt.zero_grad()
        moe.update_biases(model)
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0
    assert model.blocks[0].ffn.expert_bias.abs().sum() > 0


def test_auto_dispatch_choice():
    assert moe.resolve_dispatch("auto", torch.device("cuda"), torch.bfloat16) == "grouped"
    assert moe.resolve_dispatch("auto", torch.device("cuda"), torch.float32) == "batched"
    assert moe.resolve_dispatch("auto", torch.device("cpu"), torch.bfloat16) == "loop"
    assert moe.resolve_dispatch("auto", torch.device("cpu"), torch.float32) == "loop"
    with pytest.raises(ValueError, match="batched"):
        moe.resolve_dispatch("grouped", torch.device("cpu"), torch.float64)


def test_bucketed_rows_of_the_loop_path(monkeypatch):
    """On CPU in bf16 the loop path appends zero rows up to bucket(n) (oneDNN compiles a kernel per new row count);
    the appended rows change nothing, in values or gradients."""
    assert [moe.bucket(n) for n in (1, 2, 3, 5, 33, 64, 65, 128, 129, 700)] == [1, 2, 4, 8, 64, 64, 128, 128, 192, 704]
    g = torch.Generator().manual_seed(0)
    N, C, E, K, H = 150, 16, 4, 2, 8
    x = torch.randn(N, C, generator=g, dtype=torch.bfloat16, requires_grad=True)
    w_up = torch.randn(E, 2 * H, C, generator=g, dtype=torch.bfloat16, requires_grad=True)
    w_down = torch.randn(E, C, H, generator=g, dtype=torch.bfloat16, requires_grad=True)
    experts = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(N)])
    gates = torch.rand(N, K, generator=g)
    probe = torch.randn(N, C, generator=g)
    results = []
    for pad in (True, False):
        monkeypatch.setattr(moe, "few_shapes", lambda t, pad=pad: pad)
        y = moe.dispatch_loop(x, experts, gates, w_up, w_down, "swiglu", 0)
        results.append([y, *torch.autograd.grad((y.float() * probe).sum(), (x, w_up, w_down))])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=0.0, rtol=1e-2)


def test_bf16_autocast_paths_agree():
    m = make_moe()
    x = torch.randn(2, 16, 32)
    outs = {}
    for path in PATHS:
        m.dispatch = path
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, _ = m(x)
        assert y.dtype == torch.bfloat16
        outs[path] = y.float()
    ref = make_moe()(x)[0]
    for path, y in outs.items():
        torch.testing.assert_close(y, ref, atol=0.1, rtol=0.05, msg=path)


# ---------------------------------------------------------------------------------------------------------------
# MLA

def mla_config(**kw):
    base = dict(attn="mla", n_embd=48, head_dim=16, n_head=3, q_lora_rank=20, kv_lora_rank=12, rope_head_dim=8,
                v_head_dim=10, block_size=32)
    base.update(kw)
    return GPTConfig(**base)


@pytest.mark.parametrize("q_rank", [0, 20])
def test_mla_matches_its_formulas(q_rank):
    """Hand-written MLA (DeepSeek-V2 eqs. 37-47) in float64 against the module."""
    cfg = mla_config(q_lora_rank=q_rank)
    torch.manual_seed(0)
    att = MLA(cfg).double()
    B, T, C, H, Dn, Dr, Dv = 2, 7, 48, 3, 16, 8, 10
    x = torch.randn(B, T, C, dtype=torch.float64, requires_grad=True)
    model = GPT(cfg)
    cos, sin = model.rope_cos[:T].double(), model.rope_sin[:T].double()

    def rot(t):  # RoPE on the last dim (rotate halves), t: (..., T, Dr)
        a, b = t[..., :Dr // 2], t[..., Dr // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

    rms = lambda t: t / t.pow(2).mean(-1, keepdim=True).add(cfg.norm_eps).sqrt()  # noqa: E731
    if q_rank:
        q = rms(x @ att.q_down.weight.T) @ att.q_up.weight.T
    else:
        q = x @ att.c_q.weight.T
    q = q.view(B, T, H, Dn + Dr).transpose(1, 2)
    ckv = x @ att.kv_down.weight.T
    latent, kr = ckv[..., :12], ckv[..., 12:]
    kv = (rms(latent) @ att.kv_up.weight.T).view(B, T, H, Dn + Dv).transpose(1, 2)
    k = torch.cat([kv[..., :Dn], rot(kr)[:, None].expand(B, H, T, Dr)], -1)
    q = torch.cat([q[..., :Dn], rot(q[..., Dn:])], -1)
    v = kv[..., Dn:]
    scores = q @ k.transpose(-1, -2) / math.sqrt(Dn + Dr)
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * Dv) @ att.c_proj.weight.T
    y_mla = att(x, (cos, sin))
    torch.testing.assert_close(y_mla, y)
    probe = torch.randn_like(y)
    torch.testing.assert_close(torch.autograd.grad((y_mla * probe).sum(), x)[0],
                               torch.autograd.grad((y * probe).sum(), x)[0])


MLA_CACHE_MODELS = {
    "dense": dict(n_layer=2, q_lora_rank=0),
    "moe": dict(n_layer=2, n_expert=4, moe_d_ff=16),
    "learned_pos": dict(n_layer=2, pos_emb="learned"),
    "looped": dict(n_layer=2, n_loop=2, n_prelude=1, n_coda=1, loop_cond="iteradaln", cond_init="normal"),
}


@pytest.mark.parametrize("kind", list(MLA_CACHE_MODELS))
def test_mla_caches_the_latent_and_decodes_as_the_full_forward(kind):
    """The cache holds kv_lora_rank + rope_head_dim numbers per token per executed layer, not per-head keys and
    values; decoding from it (absorbed, DeepSeek-V2 §2.1.2) equals the full forward: a prefill, a chunk of new
    tokens after cached ones, then one token at a time."""
    model = GPT(mla_config(**MLA_CACHE_MODELS[kind])).init_weights(0).eval()
    idx = torch.randint(0, 257, (2, 16))
    full, _, _ = model(idx)
    cache = KVCache(model.n_slots(), 2, 16)
    outs = [model(idx[:, :9], cache=cache)[0], model(idx[:, 9:12], cache=cache)[0]]
    for t in range(12, 16):
        outs.append(model(idx[:, t:t + 1], cache=cache)[0])
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)
    assert len(cache.slots) == model.n_slots() == (6 if kind == "looped" else 2)
    for slot in cache.slots:  # one (B, 1, max_len, kv_lora_rank + rope_head_dim) latent per slot: 20 fp32 per token
        assert [tuple(t.shape) for t in slot] == [(2, 1, 16, 12 + 8)]
    cache_bytes = sum(t.numel() * t.element_size() for slot in cache.slots for t in slot)
    assert cache_bytes / (2 * 16 * model.n_slots()) == (12 + 8) * 4  # per row, token and slot (MHA: 3*(24+10)*4)


def test_config_rejects_bad_moe_and_mla_keys():
    with pytest.raises(ValueError, match="top_k"):
        GPTConfig(n_expert=4, top_k=5)
    with pytest.raises(ValueError, match="moe_dispatch"):
        GPTConfig(n_expert=4, moe_dispatch="fast")
    with pytest.raises(ValueError, match="attn"):
        GPTConfig(attn="gqa")
    with pytest.raises(ValueError, match="qk_norm"):
        GPTConfig(attn="mla", qk_norm=True)


# ---------------------------------------------------------------------------------------------------------------
# accounting and capacity balancing

def count(model):
    return sum(p.numel() for p in model.parameters())


# The counts from the config, as the papers give them: the controls for scaling.py's count of the modules.

def attention_params(config):
    """Parameters of one attention sublayer: 4*C*H*D, or MLA's projections (DeepSeek-V2, arXiv:2405.04434, §2.1)."""
    C, H, D = config.n_embd, config.n_head, config.head_dim
    if config.attn != "mla":
        return 4 * C * H * D
    Dr, Dv, rq, rkv = config.rope_head_dim, config.v_head_dim or D, config.q_lora_rank, config.kv_lora_rank
    q = C * rq + rq * H * (D + Dr) if rq else C * H * (D + Dr)
    kv = C * (rkv + Dr) + rkv * H * (D + Dv)
    gains = (rq + rkv) if config.norm_gain else 0
    return q + kv + H * Dv * C + gains


def ffn_params(config, hidden):
    """Parameters of one FFN (an expert, or the dense MLP) of the given hidden size."""
    return (3 if config.mlp == "swiglu" else 2) * config.n_embd * hidden


def expert_params(config):
    return ffn_params(config, moe.expert_hidden(config))


def conditioning_params(config):
    """Per-loop conditioning of the loop body (loop.py, loop_cond): embedders = stored params of the loop embedders
    (sinusoidal(256) -> Linear -> SiLU -> Linear, once per model; LoopFormer embeds t and dt), modulator = stored
    params of one shared layer's modulator: IterAdaLN (Chen et al. 2026, arXiv:2606.04438, §3.3, Eqs. 3-7) the token
    stream Linear(C, C) and output Linear(C, 3C) of the attention branch, Linear(C, C) and Linear(C, 2C) of the MoE
    branch; index / loopformer an adaLN Linear(C, 4C) (Jeddi et al. 2026, arXiv:2602.11451, §3.2)."""
    C, kind = config.n_embd, config.loop_cond
    embedders = (2 if kind == "loopformer" else 1) * (256 * C + C + C * C + C)
    if kind == "iteradaln":
        return dict(embedders=embedders, modulator=(C * C + C * 3 * C + 3 * C) + (C * C + C * 2 * C + 2 * C))
    return dict(embedders=embedders, modulator=4 * C * C + 4 * C)


@pytest.mark.parametrize("kw", [dict(), dict(attn="mla", q_lora_rank=16, kv_lora_rank=24, rope_head_dim=8,
                                              v_head_dim=8, norm_gain=True),
                                dict(attn="mla", q_lora_rank=0, n_shared_expert=2, moe_first_dense=1, mlp="relu2")])
def test_analytic_counts_match_the_modules(kw):
    cfg = small_config(n_layer=3, **kw)
    model = GPT(cfg)
    report = analyze.capacity_report(cfg)
    assert report["N"] == count(model)
    assert attention_params(cfg) == count(model.blocks[-1].attn)
    layer = model.blocks[-1].ffn
    assert accounting.moe_counts(layer)["stored"] == count(layer)
    assert accounting.moe_counts(layer)["per_expert"] == expert_params(cfg)
    # A_attn counts every layer's attention, A_ffn the dense MLPs and the active experts of the MoE layers
    n_dense = cfg.moe_first_dense
    assert report["A_attn"] == cfg.n_layer * attention_params(cfg)
    assert report["A_ffn"] == (n_dense * ffn_params(cfg, cfg.d_ff)
                               + (cfg.n_layer - n_dense) * (cfg.top_k + cfg.n_shared_expert) * expert_params(cfg))
    # per-token executed params: everything but the inactive experts
    inactive = sum(accounting.moe_counts(b.ffn)["stored"] - accounting.moe_counts(b.ffn)["active"]
                   for b in model.blocks if isinstance(b.ffn, moe.MoE))
    assert report["F"] == count(model) - inactive


@pytest.mark.parametrize("kw", [dict(injection="linear"), dict(hc_lanes=2), dict(loop_norm=True, norm_gain=True)])
def test_capacity_report_counts_every_module(kw):
    """N is everything the model stores, whatever the loop adds between passes (input injection, hyper-connection
    lanes, per-pass norms); tying the embedding changes the storage, not the params a token computes with."""
    cfg = small_config(n_layer=2, n_loop=2, vocab_size=257, **kw)
    assert analyze.capacity_report(cfg)["N"] == count(GPT(cfg))
    tied = dataclasses.replace(cfg, tie_embeddings=True)
    assert analyze.capacity_report(tied)["F"] == analyze.capacity_report(cfg)["F"]

# Lee et al. 2026, arXiv:2605.09165, configuration table: d, d_ff, active M, stored Looped-MoE M, stored MoE M
PAPER_TABLE = [(128, 384, 16, 18, 23), (256, 704, 39, 45, 65), (384, 1024, 67, 81, 124), (512, 1408, 103, 129, 207),
               (640, 1728, 144, 184, 303), (768, 2048, 190, 247, 417), (896, 2432, 246, 325, 560),
               (1024, 2752, 305, 407, 711)]


def paper_counts(d):
    """d_ff, active (16 effective layers), stored Looped-MoE (8 layers) and stored MoE (16 layers) params of the
    paper's MoE models at width d, from accounting.moe_counts, without the router (the paper neglects it)."""
    out = []
    for n_layer in (16, 8):
        cfg = GPTConfig(n_embd=d, n_layer=n_layer, vocab_size=50257, n_expert=8, top_k=2, block_size=1024)
        with torch.device("meta"):
            model = GPT(cfg)
        counts = [accounting.moe_counts(m) for m in moe.moe_layers(model)]
        stored = count(model) - sum(c["router"] for c in counts)
        active = stored - sum(c["stored"] - c["active"] for c in counts)
        out.append((cfg.d_ff, active, stored))
    (d_ff, active16, stored16), (_, _, stored8) = out
    return d_ff, active16, stored8, stored16


@pytest.mark.parametrize("row", PAPER_TABLE)
def test_paper_configuration_table(row):
    d, d_ff, active, stored_lmoe, stored_moe = row
    got_d_ff, active16, stored8, stored16 = paper_counts(d)
    assert got_d_ff == d_ff
    assert (round(active16 / 1e6), round(stored8 / 1e6), round(stored16 / 1e6)) == (active, stored_lmoe, stored_moe)


def ladder_configs():
    """A small version of LoopMoE's matched ladder: Vanilla MoE (6 layers) and the sandwich loop 1 + 2x2 + 1."""
    common = dict(n_embd=64, head_dim=16, attn="mla", q_lora_rank=16, kv_lora_rank=16, rope_head_dim=8,
                  n_expert=16, top_k=4, n_shared_expert=1, moe_d_ff=48, moe_first_dense=1, d_ff=240,
                  vocab_size=257)
    vanilla = GPTConfig(n_layer=6, **common)
    loop_base = analyze.match_params(GPTConfig(n_prelude=1, n_layer=2, n_loop=2, n_coda=1, **common),
                                     analyze.capacity_report(vanilla)["N"])
    return vanilla, loop_base


def test_rebalance_restores_rho_at_fixed_flops_and_params():
    vanilla, loop_base = ladder_configs()
    target = analyze.capacity_report(vanilla)
    base = analyze.capacity_report(loop_base, unique_experts=7.0)
    assert base["F"] == pytest.approx(target["F"], rel=0.02)  # same executed layers and widths (router aside)
    assert abs(base["N"] - target["N"]) < loop_base.n_layer * expert_params(loop_base)  # matched to one expert
    assert base["rho"] < 0.8 * target["rho"]  # re-selected experts inflate A_ffn
    new = analyze.rebalance(loop_base, target["rho"], unique_experts=7.0, target_params=target["N"], multiple=4)
    after = analyze.capacity_report(new, unique_experts=7.0)
    assert new.kv_lora_rank > loop_base.kv_lora_rank and new.q_lora_rank > loop_base.q_lora_rank
    assert new.moe_d_ff < loop_base.moe_d_ff and new.n_expert > loop_base.n_expert and new.top_k == loop_base.top_k
    assert after["rho"] == pytest.approx(target["rho"], rel=0.1)
    assert after["F"] == pytest.approx(target["F"], rel=0.02)
    assert abs(after["N"] - target["N"]) <= 3 * (expert_params(new) + new.n_embd)
    with pytest.raises(ValueError, match="mla"):
        analyze.rebalance(GPTConfig(n_expert=4), 1.0, 2.0)


@pytest.mark.parametrize("loop_cond,sandwich_norm", [("index", True), ("loopformer", False), ("iteradaln", True),
                                                     ("iteradaln", False)])
def test_conditioning_counts_match_the_modules(loop_cond, sandwich_norm):
    """capacity_report counts the per-loop conditioning: N is the built model's params, F what scaling.py's module
    walk says a token executes (IterAdaLN's modulators at every pass; the adaLN modulators of TMLT and LoopFormer
    once per sequence, 0 per token). The loose reading leaves exactly the modulators' per-token work out of F."""
    cfg = small_config(n_layer=2, n_loop=3, n_prelude=1, n_coda=1, moe_first_dense=1, loop_cond=loop_cond,
                       norm_gain=True, sandwich_norm=sandwich_norm)
    with torch.device("meta"):
        model = GPT(cfg)
    cond = conditioning_params(cfg)
    shared = [b for i, b in enumerate(model.blocks) if model.part(i) == "loop"]
    assert cond["modulator"] == count(shared[0].modulator)
    assert cond["embedders"] == sum(count(m) for m in (model.loop_embed, model.step_embed) if m is not None)
    strict, loose = analyze.capacity_report(cfg), analyze.capacity_report(cfg, count_conditioning=False)
    assert strict["N"] == loose["N"] == count(model)
    assert strict["F"] == accounting.count_params(model)["params_active"]
    per_token = cfg.n_loop * sum(count(b.modulator) for b in shared) if loop_cond == "iteradaln" else 0
    assert strict["F"] - loose["F"] == per_token


def test_match_flops_pays_for_iteradaln_and_rebalance_then_lowers_the_ranks():
    """Strict FLOPs: the IterAdaLN rung pays for its modulators with narrower experts at the Vanilla MoE's F and N
    (match_flops), which lifts rho above the Vanilla MoE's; rebalance then lowers the MLA ranks and widens the
    experts at fixed F and N until rho is back at the target."""
    vanilla, loop_base = ladder_configs()
    target = analyze.capacity_report(vanilla)
    iteradaln = analyze.match_flops(dataclasses.replace(loop_base, loop_cond="iteradaln"), target["F"], target["N"],
                                    multiple=4)
    report = analyze.capacity_report(iteradaln, unique_experts=7.0)
    assert iteradaln.moe_d_ff < loop_base.moe_d_ff and iteradaln.n_expert > loop_base.n_expert
    assert report["F"] == pytest.approx(target["F"], rel=0.02) and report["N"] == pytest.approx(target["N"], rel=0.01)
    assert report["rho"] > 1.2 * target["rho"]
    new = analyze.rebalance(iteradaln, target["rho"], unique_experts=7.0, target_params=target["N"], multiple=4)
    after = analyze.capacity_report(new, unique_experts=7.0)
    assert new.kv_lora_rank < iteradaln.kv_lora_rank and new.q_lora_rank < iteradaln.q_lora_rank
    assert new.moe_d_ff > iteradaln.moe_d_ff and new.top_k == iteradaln.top_k
    assert after["rho"] == pytest.approx(target["rho"], rel=0.1)
    assert after["F"] == pytest.approx(target["F"], rel=0.02) and after["N"] == pytest.approx(target["N"], rel=0.01)
    with pytest.raises(ValueError, match="match_flops"):
        analyze.match_flops(iteradaln, target["F"] / 2, target["N"])


# ---------------------------------------------------------------------------------------------------------------
# presets

CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "config")
LADDER = ["loopmoe_vanilla", "loopmoe_loop_base", "loopmoe_iteradaln", "loopmoe"]


def load_preset(name):
    """(GPTConfig from the preset's model keys, the whole namespace of the file)."""
    path = os.path.join(CONFIG_DIR, name + ".py")
    namespace = {"__file__": path}  # as configurator.py gives it (a rung execs the rung below)
    exec(open(path).read(), namespace)
    fields = GPTConfig.__dataclass_fields__
    return GPTConfig(**{k: v for k, v in namespace.items() if k in fields}), namespace


def stored(cfg):
    with torch.device("meta"):
        return count(GPT(cfg))


def forward_flops(cfg, shape=(2, 16)):
    """FLOPs of one forward of the built model on random tokens, as torch's FlopCounterMode counts them: matrix
    products only (projections, experts, routers, modulators, loop embedders, head; not the attention scores, which
    CPU SDPA computes in a kernel it does not count), no norms, activations, biases, routing sorts and gathers or
    embedding lookups. A token's routed-expert FLOPs depend only on top_k, so a few tokens give the exact count."""
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randint(0, cfg.vocab_size, shape))
    return counter.get_total_flops()


def narrow(cfg, s=8):
    """A paper preset at 1/s of its width (an MoE forward cannot run on the meta device) with the same per-token
    FLOP proportions: n_embd, head dims, MLA ranks, expert and dense widths, vocabulary and expert count divided by
    s, so that every matmul, the routers (n_embd x n_expert) included, costs 1/s^2 of its paper FLOPs. Depth, loops,
    heads, top_k, shared experts and conditioning stay. Its params are not proportional: those are counted at full
    size on the meta device."""
    keys = ("n_embd", "head_dim", "rope_head_dim", "v_head_dim", "q_lora_rank", "kv_lora_rank", "moe_d_ff", "d_ff")
    assert all(getattr(cfg, k) % s == 0 for k in keys)
    return dataclasses.replace(cfg, **{k: getattr(cfg, k) // s for k in keys}, vocab_size=round(cfg.vocab_size / s),
                               n_expert=round(cfg.n_expert / s))


@pytest.mark.parametrize("suffix", ["", "_cpu"])
def test_loopmoe_ladder_presets_are_matched(suffix):
    """Chen et al. 2026 (arXiv:2606.04438, §3.4) compare at equal total params and per-token FLOPs, LoopMoE also at
    the Vanilla MoE's rho. Strict reading: a token's FLOPs are everything it executes, IterAdaLN's modulators
    included. Measured on the built models: params = numel (paper size, meta device), FLOPs = FlopCounterMode of a
    real forward (the paper presets narrowed to 1/8 width); then the accounting alone at full size."""
    rungs = [load_preset(n + suffix) for n in LADDER]
    (vanilla, _), (loop_base, _), (iteradaln, _), (loopmoe, ns) = rungs
    for cfg, _ in rungs[1:]:
        assert cfg.n_prelude + cfg.n_loop * cfg.n_layer + cfg.n_coda == vanilla.n_layer
    flops = [forward_flops(narrow(cfg) if suffix == "" else cfg) for cfg, _ in rungs]
    params = [stored(cfg) for cfg, _ in rungs]
    assert [f / flops[0] for f in flops] == pytest.approx([1.0] * 4, abs=0.02)
    assert [n / params[0] for n in params] == pytest.approx([1.0] * 4, abs=0.01)
    # the accounting: capacity_report agrees with the built models and count_params, and matches the rungs
    target = analyze.capacity_report(vanilla)
    for (cfg, _), n in zip(rungs, params):
        with torch.device("meta"):
            counts = accounting.count_params(GPT(cfg))
        report = analyze.capacity_report(cfg)
        assert (report["N"], report["F"]) == (n, counts["params_active"])
        assert report["F"] == pytest.approx(target["F"], rel=0.02)
    u = ns["_unique_experts"]
    assert analyze.capacity_report(loopmoe, u)["rho"] == pytest.approx(target["rho"], rel=0.03)
    assert analyze.capacity_report(iteradaln, u)["rho"] != pytest.approx(target["rho"], rel=0.1)  # balancing has work
    # the presets are what match_flops and rebalance make (rounded as the presets were)
    multiple = 8 if suffix == "" else 2
    for cfg in (loop_base, iteradaln):
        assert analyze.match_flops(cfg, target["F"], target["N"], multiple=multiple) == cfg
    again = analyze.rebalance(iteradaln, target["rho"], u, target_params=target["N"], target_flops=target["F"],
                          multiple=multiple)
    keys = ("n_expert", "moe_d_ff", "q_lora_rank", "kv_lora_rank")
    assert [getattr(again, k) for k in keys] == [getattr(loopmoe, k) for k in keys]


def modulator_flops(cfg, shape=(2, 16)):
    """(all forward FLOPs, those of the per-loop modulators) of one forward, by FlopCounterMode's per-module counts:
    the modulators' linear layers (the block calls a modulator's methods, not the module, so only they are listed;
    a layer run once per pass accumulates every call)."""
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randint(0, cfg.vocab_size, shape))
    per_module = counter.get_flop_counts()
    inside = sum(sum(ops.values()) for name, ops in per_module.items() if ".modulator." in name)
    return counter.get_total_flops(), inside


def test_loose_reading_rungs_of_the_fidelity_sweep_are_matched():
    """The loose reading of Chen et al.'s FLOP match (arXiv:2606.04438, §3.4): a token's F is the backbone's, the
    IterAdaLN modulators not counted. The fidelity sweep's loose IterAdaLN and LoopMoE rungs, measured on the built
    models: stored params within 1% of the Vanilla MoE's, forward FLOPs less the modulators' within 2% of its
    FLOPs (while the modulators add over 30%); LoopMoE at rho*; and both are what match_flops / rebalance give."""
    import runpy
    spec = runpy.run_path(os.path.join(CONFIG_DIR, "sweeps", "fidelity_cpu.py"))
    (vanilla, _), (base, _), (_, ns) = [load_preset(n) for n in ("loopmoe_vanilla_cpu", "loopmoe_loop_base_cpu",
                                                                 "loopmoe_cpu")]
    rungs = {arch: dataclasses.replace(base, **over) for arch, over in spec["LOOSE"].items()}
    flops = forward_flops(vanilla)
    for cfg in rungs.values():
        assert stored(cfg) / stored(vanilla) == pytest.approx(1.0, abs=0.01)
        total, modulators = modulator_flops(cfg)
        assert (total - modulators) / flops == pytest.approx(1.0, abs=0.02)
        assert modulators > 0.3 * flops
    target, u = analyze.capacity_report(vanilla), ns["_unique_experts"]
    it, lm = rungs["iteradaln_loose"], rungs["loopmoe_loose"]
    fitted = analyze.match_flops(dataclasses.replace(base, loop_cond="iteradaln"), target["F"], target["N"],
                                 count_conditioning=False, multiple=2)
    assert fitted == it
    assert analyze.rebalance(it, target["rho"], u, target_params=target["N"], target_flops=target["F"],
                             count_conditioning=False, multiple=2) == lm
    assert analyze.capacity_report(lm, u, count_conditioning=False)["rho"] == pytest.approx(target["rho"], rel=0.03)


@pytest.mark.parametrize("name", ["sparse_moe_cpu", "sparse_looped_moe_cpu"])
def test_sparse_cpu_presets_match_active_params(name):
    cfg, _ = load_preset(name)
    dense, _ = load_preset("sparse_moe_cpu")
    assert cfg.n_layer * cfg.n_loop == 4 and cfg.n_expert == 8 and cfg.top_k == 2
    assert analyze.capacity_report(cfg)["F"] == analyze.capacity_report(dense)["F"]


def test_records_carry_the_loop_index_of_a_looped_model():
    cfg = small_config(n_layer=2, n_loop=2, n_prelude=1, moe_first_dense=1)
    model = GPT(cfg).init_weights(0)
    with analyze.record_routing(model) as records:
        model(torch.randint(0, 257, (1, 5)))
    assert [(r["layer"], r["loop"]) for r in records] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    unique = analyze.unique_experts_per_token(records, cfg.n_expert)
    assert set(unique) == {1, 2} and all(2.0 <= u <= 4.0 for u in unique.values())
