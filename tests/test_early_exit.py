"""Tests of exits.py and early_exit.py: criteria, candidates, the tau sweep and its accounting, decoding with early
exit against a slow cache-free reference, schedule enumeration, and the command line on a tiny checkpoint."""
import functools
import glob
import json
import math
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import prepare  # noqa: E402
import early_exit as ee  # noqa: E402
import accounting  # noqa: E402
import exits  # noqa: E402

from figure_checks import assert_drawn, figure_problems  # noqa: E402
from configurator import ConfigError  # noqa: E402
from model import GPT, GPTConfig, KVCache, Label  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))
V = 64


def tiny_gpt(seed=0, head_scale=10.0, **kw):
    """A random 4-layer GPT; the head is scaled up so entropies spread out and thresholds separate tokens."""
    cfg = GPTConfig(block_size=64, vocab_size=V, n_layer=4, n_embd=32, head_dim=8, **kw)
    model = GPT(cfg).init_weights(seed).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    return model


def batch(seed=0, B=2, T=32):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def tiny_looped(seed=0, head_scale=10.0, **kw):
    """A random looped model (n_layer=2 x n_loop=3 unless overridden); conditioned loops get a
    normal-initialised modulator, scaled up so the conditioning matters."""
    kw = {**dict(n_layer=2, n_loop=3), **kw}
    cfg = GPTConfig(block_size=64, vocab_size=V, n_embd=32, head_dim=8, **kw)
    model = GPT(cfg).init_weights(seed).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
        for block in model.blocks:
            if getattr(block, "modulator", None) is not None:
                for p in block.modulator.parameters():
                    p.mul_(30.0)
    return model


# -----------------------------------------------------------------------------------------------------------------
# criteria


def test_entropy_of_hand_made_distributions():
    p = torch.tensor([0.5, 0.25, 0.25])
    assert exits.entropy(p.log()).item() == pytest.approx(1.5 * math.log(2), abs=1e-6)
    assert exits.entropy(torch.zeros(2, 3, 50)).allclose(torch.full((2, 3), math.log(50)))
    assert exits.entropy(torch.tensor([60.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-20)
    # float64 reference on random logits
    z = torch.randn(5, 7, dtype=torch.float64)
    q = z.softmax(-1)
    assert exits.entropy(z).double().allclose(-(q * q.log()).sum(-1), atol=1e-5)


def test_scores_of_hand_made_states():
    logp = torch.tensor([[0.7, 0.2, 0.1]]).log()
    prev = torch.tensor([[0.2, 0.7, 0.1]]).log()
    kl = 0.7 * math.log(0.7 / 0.2) + 0.2 * math.log(0.2 / 0.7)
    assert exits.CRITERIA["kl"].score(logp, prev, None, None).item() == pytest.approx(kl, abs=1e-6)
    assert exits.CRITERIA["kl"].score(logp, logp, None, None).item() == 0.0
    assert exits.CRITERIA["agree"].score(logp, prev, None, None).item() == math.inf  # top-1 changed
    assert exits.CRITERIA["agree"].score(logp, logp, None, None).item() == pytest.approx(0.3, abs=1e-6)
    h, h0 = torch.tensor([[3.0, 4.0]]), torch.tensor([[3.0, 1.0]])
    assert exits.CRITERIA["change"].score(None, None, h, h0).item() == pytest.approx(3.0 / 5.0)
    with pytest.raises(ValueError, match="oracle"):
        exits.check_criterion("oracle", decoding=True)


# -----------------------------------------------------------------------------------------------------------------
# candidates and accounting


def looped_labels(n_layer, n_loop, n_prelude=0, n_coda=0):
    labels, i = [], 0
    for j in range(n_prelude):
        labels.append(Label(i, j, 0, False, "prelude"))
        i += 1
    for r in range(n_loop):
        for j in range(n_layer):
            labels.append(Label(i, n_prelude + j, r, j == n_layer - 1, "loop"))
            i += 1
    for j in range(n_coda):
        labels.append(Label(i, n_prelude + n_layer + j, 0, False, "coda"))
        i += 1
    return labels


def stub(n_loop, n_prelude=0, n_coda=0):
    return SimpleNamespace(config=SimpleNamespace(n_loop=n_loop, n_prelude=n_prelude, n_coda=n_coda))


def test_candidates_are_loop_boundaries_or_every_layer():
    # Lee et al.: R-1 boundaries: 1 for 8x2, 3 for 4x4, 7 for 2x8; 15 layers for a 16-layer plain model
    assert exits.exit_candidates(stub(2), looped_labels(8, 2)) == [7]
    assert exits.exit_candidates(stub(4), looped_labels(4, 4)) == [3, 7, 11]
    assert len(exits.exit_candidates(stub(8), looped_labels(2, 8))) == 7
    assert exits.exit_candidates(stub(1), looped_labels(16, 1)) == list(range(15))
    assert exits.exit_candidates(stub(2), looped_labels(8, 2), every_layer=True) == list(range(15))
    # prelude/coda: only loop steps are candidates, the last loop boundary is not
    labels = looped_labels(2, 3, n_prelude=2, n_coda=2)
    assert exits.exit_candidates(stub(3, 2, 2), labels) == [3, 5]
    assert exits.exit_candidates(stub(3, 2, 2), labels, every_layer=True) == [2, 3, 4, 5, 6]


def test_flops_accounting_by_hand():
    model = tiny_gpt()
    labels = exits.depth_labels(model)
    cands = exits.exit_candidates(model, labels)
    assert cands == [0, 1, 2]
    C, ctx = 32, 10.0
    block = 2 * (4 * C * C + 3 * C * model.config.d_ff) + 4 * C * ctx  # q,k,v,o + swiglu; QK^T and AV
    head = 2 * C * V
    steps, h, fill, other = exits.step_flops(model, labels, ctx)
    assert steps == [block] * 4 and h == head and fill == 2 * C * 2 * C and other == 0
    depth, flops, full = exits.exit_costs(model, labels, cands, "change", ctx)
    assert full == 4 * block + head and depth == [1, 2, 3, 4]
    assert flops == [block + head, 2 * block + head, 3 * block + head, full]
    depth, flops, full = exits.exit_costs(model, labels, cands, "entropy", ctx)  # a readout at every candidate
    assert flops == [block + head, 2 * block + 2 * head, 3 * block + 3 * head, full + 3 * head]
    _, flops, _ = exits.exit_costs(model, labels, cands, "kl", ctx)  # plus the entry readout
    assert flops[0] == block + 2 * head


def test_step_costs_add_up_to_scalings_forward_flops():
    import scaling
    for model in (tiny_gpt(), tiny_looped(), tiny_looped(n_prelude=1, n_coda=1, hc_lanes=2),
                  tiny_looped(loop_cond="loopformer", elastic="shortcut"), tiny_looped(n_expert=4),
                  tiny_looped(attn="mla", q_lora_rank=8, kv_lora_rank=8, rope_head_dim=4, n_expert=4,
                              n_shared_expert=1, moe_d_ff=16, moe_router="sigmoid", loop_cond="iteradaln")):
        labels = exits.depth_labels(model)
        steps, head, _, other = exits.step_flops(model, labels, 7.0)
        assert sum(steps) + head + other == pytest.approx(accounting.forward_flops_per_token(model, seq_len=7.0))


# -----------------------------------------------------------------------------------------------------------------
# the tau sweep


@pytest.fixture(scope="module")
def study():
    model = tiny_gpt()
    batches = [batch(0), batch(1)]
    return model, batches, ee.evaluate_exits(model, batches, exits.CRITERIA, n_tau=24, progress=False)


def test_tau_zero_exits_nothing_and_reproduces_full_depth(study):
    model, batches, r = study
    logits = torch.cat([model(x)[0] for x, _ in batches])
    y = torch.cat([y for _, y in batches])
    nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").double()
    assert r["full_ppl"] == math.exp(nll.mean().item())
    for c in ("entropy", "kl", "change", "agree", "oracle"):
        p0 = r["criteria"][c]["points"][0]
        assert p0["tau"] == 0.0 and p0["saved_depth"] == 0.0 and p0["exits"][-1] == 1.0
        assert p0["ppl"] == r["full_ppl"]
    # checking costs readouts: entropy at tau = 0 spends more than a plain forward, change does not
    assert r["criteria"]["entropy"]["points"][0]["saved_flops"] < 0
    assert r["criteria"]["change"]["points"][0]["saved_flops"] == pytest.approx(0.0, abs=1e-12)


def test_tau_inf_exits_at_the_first_candidate(study):
    _, _, r = study
    for c in ("entropy", "kl", "change", "optimal"):
        last = r["criteria"][c]["points"][-1]
        assert last["tau"] == math.inf and last["exits"][0] == 1.0
        assert last["saved_depth"] == pytest.approx(0.75)  # 1 of 4 layers run
    # agreement needs agreeing top-1s: it stops at the first candidate that agrees, not always the first
    last = r["criteria"]["agree"]["points"][-1]
    assert last["exits"][0] < 1.0


def test_compute_saved_is_monotone_in_tau(study):
    _, _, r = study
    for c, e in r["criteria"].items():
        pts = e["points"]
        assert [p["tau"] for p in pts] == sorted(p["tau"] for p in pts)
        for key in ("saved_depth", "saved_flops"):
            vals = [p[key] for p in pts]
            assert all(b >= a - 1e-12 for a, b in zip(vals, vals[1:])), (c, key, vals)
        assert len({round(p["saved_depth"], 6) for p in pts}) >= 3, c  # the grid really spreads the exits


def test_frontier_and_interpolation():
    pts = [dict(s=0.0, ppl=10.0), dict(s=0.1, ppl=20.0), dict(s=0.05, ppl=30.0), dict(s=0.3, ppl=40.0)]
    front = ee.frontier(pts, "s")
    assert [p["s"] for p in front] == [0.0, 0.1, 0.3]  # (0.05, 30) is dominated by (0.1, 20)
    assert ee.ppl_at(front, "s", 0.05) == pytest.approx(math.sqrt(10.0 * 20.0))  # linear in log ppl
    assert ee.ppl_at(front, "s", 0.2) == pytest.approx(math.exp((math.log(20) + math.log(40)) / 2))
    assert ee.ppl_at(front, "s", 0.31) is None


def test_table_and_oracle_bounds(study):
    _, _, r = study
    e = r["criteria"]["entropy"]
    assert set(e["table_saved_depth"]) == {"0.05", "0.10", "0.20", "0.30"}
    front = e["frontier_saved_depth"]
    table = [e["table_saved_depth"][k] for k in ("0.05", "0.10", "0.20", "0.30")]
    assert None not in table  # tau = inf saves all but the first candidate: every target is in reach
    assert table == sorted(table)  # on a Pareto frontier more saving never costs less perplexity
    for target, ppl in zip((0.05, 0.10, 0.20, 0.30), table):  # between the frontier points around the target
        below = max((p for p in front if p["saved_depth"] <= target), key=lambda p: p["saved_depth"])
        above = min((p for p in front if p["saved_depth"] >= target), key=lambda p: p["saved_depth"])
        assert below["ppl"] <= ppl <= above["ppl"]
    # optimal at lambda = 0 takes each token's best exit: never worse than full depth
    assert r["criteria"]["optimal"]["points"][0]["ppl"] <= r["full_ppl"]


# -----------------------------------------------------------------------------------------------------------------
# decoding with early exit


def plain_cached_decode(model, prompt, n):
    """Greedy decoding with the cache and no exits: (tokens, logits of each new token, cache)."""
    cache = KVCache(model.n_slots(), prompt.size(0), prompt.size(1) + n)
    logits = model(prompt, cache=cache)[0][:, -1]
    toks, all_logits = [prompt], []
    for i in range(n):
        all_logits.append(logits[:, :V])
        nxt = logits[:, :V].argmax(-1, keepdim=True)
        toks.append(nxt)
        if i < n - 1:
            logits = model(nxt, cache=cache)[0][:, -1]
    return torch.cat(toks, 1), torch.stack(all_logits, 1), cache


def run_step(model, label, x, rope):
    """One step of the walk on x without a cache: a block with its pass's conditioning (valid for loops without
    injection, loop norms, hyper-connections or coda)."""
    c = None
    if label.part == "loop":
        steps = model.resolve_schedule()
        c = model.loop_embedding(label.loop, sum(steps[:label.loop]), steps[label.loop])
    return model.run_block(label.layer, x, rope, None, label.index, label.loop, c, {})[0]


@torch.no_grad()
def reference_decode(model, prompt, n, criterion, tau, fill, every_layer=False):
    """Slow reference without a cache: for every new token, re-run the whole sequence layer by layer, deciding
    every generated position's exit again. A position that exited contributes, to each later layer, the keys and
    values of its exited state (propagate: the layer is run on the exited state) or of its real state
    (recompute). Returns (tokens, logits, exit index per decoded token)."""
    labels = exits.depth_labels(model)
    cands = exits.exit_candidates(model, labels, every_layer)
    tokens, P, out_logits, exit_steps = prompt, prompt.size(1), [], []
    for i in range(n):
        T = tokens.size(1)
        h = model.embed(tokens)
        rope = model.rope(0, T)
        frozen = torch.zeros(T, dtype=torch.bool)
        h_exit, exit_logits = h.clone(), torch.zeros(prompt.size(0), T, model.config.padded_vocab)
        exit_at = torch.full((T,), labels[-1].index)
        prev_h, prev_logp = h, exits.log_probs(model.readout(h))
        for p, label in enumerate(labels):
            x = torch.where(frozen[None, :, None], h_exit, h) if fill == "propagate" else h
            h = run_step(model, label, x, rope)
            if p in cands:
                logits = model.readout(h, label)
                logp = exits.log_probs(logits)
                score = exits.CRITERIA[criterion].score(logp, prev_logp, h, prev_h)  # (B, T)
                ok = (score < tau).all(0) & ~frozen & (torch.arange(T) >= P)
                h_exit[:, ok], exit_logits[:, ok], exit_at[ok] = h[:, ok], logits[:, ok], label.index
                frozen |= ok
                prev_h, prev_logp = h, logp
        last = exit_logits[:, -1] if frozen[-1] else model.readout(h)[:, -1]
        out_logits.append(last[:, :V])
        if i > 0:
            exit_steps.append(int(exit_at[-1]))
        tokens = torch.cat([tokens, last[:, :V].argmax(-1, keepdim=True)], 1)
    return tokens, torch.stack(out_logits, 1), exit_steps


@functools.lru_cache(maxsize=None)
def pick_tau(seed, prompt_seed, B, n, criterion, some_stay=True, looped=None, every_layer=False):
    """A threshold at which some but not all decoded tokens exit, far from every score the decoding computes (so
    rounding differences between cached and cache-free runs cannot flip a decision). A batch exits on the largest
    score of its rows, so the thresholds are placed between those. some_stay=False accepts a threshold at which
    every token exits (somewhere)."""
    model = tiny_looped(seed, **dict(looped)) if looped else tiny_gpt(seed=seed)
    prompt = batch(prompt_seed, B=B, T=5)[0]
    full = exits.generate_with_exit(model, prompt, n, criterion, 0.0, every_layer=every_layer)
    s = np.sort(np.array([max(c) for st in full["stats"] for c in st["scores"] if np.isfinite(max(c))]))
    lo, hi = int(0.2 * len(s)), int(0.8 * len(s))
    gaps = sorted(range(lo, hi), key=lambda i: -(s[i + 1] - s[i]))
    for i in gaps[:10]:
        tau = float((s[i] + s[i + 1]) / 2)
        res = exits.generate_with_exit(model, prompt, n, criterion, tau, "propagate", every_layer)
        seen = np.array([max(c) for st in res["stats"] for c in st["scores"] if np.isfinite(max(c))])
        n_exit = sum(st["exited"] for st in res["stats"])
        if 0 < n_exit and (n_exit < len(res["stats"]) or not some_stay) and np.abs(seen - tau).min() > 1e-4:
            return tau
    raise AssertionError(f"no threshold separates the {criterion} scores of this model")


def test_tau_zero_decoding_is_plain_decoding():
    model = tiny_gpt(seed=1)
    prompt = batch(2, B=2, T=6)[0]
    tokens, logits, cache = plain_cached_decode(model, prompt, 8)
    assert torch.equal(tokens, model.generate(prompt, 8, temperature=0))
    for c in ("entropy", "kl", "change", "agree"):
        res = exits.generate_with_exit(model, prompt, 8, c, 0.0)
        assert torch.equal(res["tokens"], tokens) and torch.equal(res["logits"], logits), c
        assert not any(st["exited"] for st in res["stats"])
    res = exits.generate_with_exit(model, prompt, 8, None)
    assert torch.equal(res["logits"], logits)


@pytest.mark.parametrize("criterion", ["entropy", "kl", "change", "agree"])
@pytest.mark.parametrize("fill", ["propagate", "recompute"])
def test_cached_exit_decoding_matches_cache_free_reference(criterion, fill):
    model = tiny_gpt(seed=3)
    prompt, n = batch(4, B=1, T=5)[0], 14
    tau = pick_tau(3, 4, 1, n, criterion)
    res = exits.generate_with_exit(model, prompt, n, criterion, tau, fill)
    tokens, logits, exit_steps = reference_decode(model, prompt, n, criterion, tau, fill)
    assert [st["exit"] for st in res["stats"]] == exit_steps
    assert 0 < sum(st["exited"] for st in res["stats"]) < n - 1
    assert torch.equal(res["tokens"], tokens)
    assert torch.allclose(res["logits"], logits, atol=1e-4, rtol=1e-4)
    cands = {model_label.index for model_label in
             [res["labels"][p] for p in res["candidates"]]} | {res["labels"][-1].index}
    assert all(st["exit"] in cands for st in res["stats"])  # exits only at allowed points
    if fill == "recompute":  # every layer ran: the caches equal plain decoding's, bit for bit, and a full forward's
        _, _, plain = plain_cached_decode(model, prompt, n)
        ref_tokens = res["tokens"][:, :-1]
        one_shot = KVCache(model.n_slots(), 1, ref_tokens.size(1))
        model(ref_tokens, cache=one_shot)
        teacher = KVCache(model.n_slots(), 1, prompt.size(1) + n)
        model(prompt, cache=teacher)
        for t in range(prompt.size(1), ref_tokens.size(1)):
            model(ref_tokens[:, t:t + 1], cache=teacher)
        for a, b, c in zip(res["cache"].slots, teacher.slots, one_shot.slots):
            L = ref_tokens.size(1)
            assert torch.equal(a[0][:, :, :L], b[0][:, :, :L]) and torch.equal(a[1][:, :, :L], b[1][:, :, :L])
            assert torch.allclose(a[0][:, :, :L], c[0], atol=1e-5) and torch.allclose(a[1][:, :, :L], c[1], atol=1e-5)
        del plain
    else:  # propagate really skipped layers and filled their slots
        assert any(st["fills"] > 0 and st["steps"] < len(res["labels"]) for st in res["stats"])


def test_batch_exits_only_where_every_row_may():
    model = tiny_gpt(seed=3)
    prompt = batch(5, B=3, T=5)[0]
    tau = pick_tau(3, 5, 3, 10, "entropy", some_stay=False)
    res = exits.generate_with_exit(model, prompt, 10, "entropy", tau, "propagate")
    tokens, logits, exit_steps = reference_decode(model, prompt, 10, "entropy", tau, "propagate")
    assert torch.equal(res["tokens"], tokens) and [st["exit"] for st in res["stats"]] == exit_steps
    for st in res["stats"]:  # an exit means every row's score at that candidate was below tau, and at no
        assert all(v < tau for v in st["scores"][-1]) == st["exited"]  # earlier candidate
        assert all(max(c) >= tau for c in st["scores"][:-1])
    # rows disagreed somewhere: some row was below tau at a candidate where the batch went on
    assert any(min(c) < tau <= max(c) for st in res["stats"] for c in st["scores"])


def test_decoding_flops_and_bad_input():
    model = tiny_gpt(seed=3)
    prompt = batch(4, B=1, T=5)[0]
    res = exits.generate_with_exit(model, prompt, 10, "entropy", math.inf, "propagate")
    assert all(st["exit"] == 0 and st["steps"] == 1 and st["fills"] == 3 for st in res["stats"])
    run, full = exits.decode_flops(model, res["labels"], res["stats"])
    steps, head, fill, _ = exits.step_flops(model, res["labels"], res["stats"][0]["context"])
    assert run < full and run == pytest.approx(np.mean([
        sum(exits.step_flops(model, res["labels"], st["context"])[0][:1]) + head + 3 * fill for st in res["stats"]]))
    assert "exited early" in exits.summarize_generation(model, res)
    with pytest.raises(ValueError, match="fill"):
        exits.generate_with_exit(model, prompt, 4, "entropy", 1.0, "copy")
    with pytest.raises(ValueError, match="block_size"):
        exits.generate_with_exit(model, prompt, 200, "entropy", 1.0)


def test_mla_decoding_flops_match_flop_counter():
    """An MLA decoding step attends in the latent space (kv_lora_rank + rope_head_dim per head and context token,
    not the head size): decode_flops against FlopCounterMode on one real cached step (CPU SDPA runs the math kernel
    for MLA's unequal key and value sizes, so the counter sees QK^T and AV), and a fill against one real fill."""
    from torch.utils.flop_counter import FlopCounterMode
    model = tiny_gpt(seed=3, attn="mla", kv_lora_rank=24, rope_head_dim=4)
    prompt, B = batch(4, B=2, T=7)[0], 2
    labels = exits.depth_labels(model)
    cache = KVCache(model.n_slots(), B, 9)
    with torch.no_grad():
        model(prompt, cache=cache)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(prompt[:, :1], cache=cache)  # one new token after 7 cached ones: context 8
    st = dict(context=8, steps=len(labels), readouts=1, early_readouts=0, fills=0)
    _, full = exits.decode_flops(model, labels, [st])
    assert full == pytest.approx(counter.get_total_flops() / B, rel=1e-9)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.fill_cache(labels[1:], model.embed(prompt[:, :1]), model.rope(7, 1), cache)
    assert exits.kv_fill_flops(model) * (len(labels) - 1) == counter.get_total_flops() / B


# -----------------------------------------------------------------------------------------------------------------
# looped models (as soon as loop.py builds them)


def test_looped_model_exits_only_at_loop_boundaries():
    model = tiny_looped()
    labels = exits.depth_labels(model)
    cands = exits.exit_candidates(model, labels)
    assert [labels[p].boundary for p in cands] == [True, True] and cands == [1, 3]
    assert exits.exit_candidates(model, labels, every_layer=True) == [0, 1, 2, 3, 4]
    r = ee.evaluate_exits(model, [batch(0)], ("entropy", "change"), n_tau=16, progress=False)
    for c in ("entropy", "change"):
        pts = r["criteria"][c]["points"]
        assert all(len(p["exits"]) == 3 for p in pts)  # two boundaries and the full depth
        for p in pts:  # depth saved is a mix of 4/6 (first boundary) and 2/6 (second) only
            assert p["saved_depth"] == pytest.approx(p["exits"][0] * 4 / 6 + p["exits"][1] * 2 / 6)
        assert pts[-1]["exits"][0] == 1.0 and pts[0]["exits"][-1] == 1.0
    # the full-depth perplexity is the plain forward's
    x, y = batch(0)
    assert r["full_ppl"] == pytest.approx(math.exp(model(x, y)[1].item()), rel=1e-6)


LOOPED = {"loop": (("n_loop", 3),), "loopformer": (("loop_cond", "loopformer"), ("cond_init", "normal")),
          "mla": (("n_loop", 3), ("attn", "mla"), ("kv_lora_rank", 8), ("rope_head_dim", 4))}  # slots hold latents


@pytest.mark.parametrize("kind", list(LOOPED))
@pytest.mark.parametrize("fill", ["propagate", "recompute"])
def test_looped_exit_decoding_matches_cache_free_reference(kind, fill):
    every = kind == "loop" and fill == "propagate"  # the every-layer ablation once
    model = tiny_looped(3, **dict(LOOPED[kind]))
    prompt, n = batch(4, B=1, T=5)[0], 10
    tau = pick_tau(3, 4, 1, n, "entropy", looped=LOOPED[kind], every_layer=every)
    res = exits.generate_with_exit(model, prompt, n, "entropy", tau, fill, every)
    tokens, logits, exit_steps = reference_decode(model, prompt, n, "entropy", tau, fill, every)
    assert [st["exit"] for st in res["stats"]] == exit_steps
    assert torch.equal(res["tokens"], tokens)
    assert torch.allclose(res["logits"], logits, atol=1e-4, rtol=1e-4)
    allowed = {res["labels"][p].index for p in res["candidates"]} | {res["labels"][-1].index}
    assert all(st["exit"] in allowed for st in res["stats"])
    if not every:
        assert all(res["labels"][st["exit"]].boundary for st in res["stats"])


def test_coda_model_decoding():
    """prelude + loop + coda: an exit runs the coda with the cache; tau = 0 is plain decoding; recompute leaves the
    caches of plain decoding; propagate at tau = inf stops every token at the first boundary."""
    model = tiny_looped(5, n_prelude=1, n_coda=1, n_loop=3)
    prompt, n = batch(6, B=1, T=5)[0], 10
    tokens, logits, cache = plain_cached_decode(model, prompt, n)
    res = exits.generate_with_exit(model, prompt, n, "entropy", 0.0)
    assert torch.equal(res["tokens"], tokens) and torch.equal(res["logits"], logits)
    res = exits.generate_with_exit(model, prompt, n, "entropy", math.inf, "recompute")
    assert all(st["exited"] and st["exit"] == 2 for st in res["stats"])  # prelude 0, layers 1-2: boundary at 2
    teacher = KVCache(model.n_slots(), 1, prompt.size(1) + n)
    model(prompt, cache=teacher)
    for t in range(prompt.size(1), prompt.size(1) + n - 1):
        model(res["tokens"][:, t:t + 1], cache=teacher)
    for a, b in zip(res["cache"].slots, teacher.slots):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # the last token's logits: the coda run on its first boundary state, attending to the earlier tokens' coda
    # keys/values (here the full forward's), not to the token alone
    T = prompt.size(1) + n - 2
    ctx = KVCache(model.n_slots(), 1, T + 1)
    model(res["tokens"][:, :T], cache=ctx)
    x = model.embed(res["tokens"][:, T:T + 1], T)
    walk = list(model.walk(x, model.rope(T, 1), ctx))
    label, h, _ = walk[2]
    assert label.boundary and label.loop == 0
    assert torch.allclose(res["logits"][:, -1], model.readout(h, label, cache=ctx)[:, -1, :V], atol=1e-5)
    assert not torch.allclose(res["logits"][:, -1], model.readout(h, label)[:, -1, :V], atol=1e-3)
    res = exits.generate_with_exit(model, prompt, n, "entropy", math.inf, "propagate")
    labels = res["labels"]
    assert [lab.part for lab in labels] == ["prelude"] + ["loop"] * 6 + ["coda"]
    assert all(st["steps"] == 3 and st["fills"] == 4 and st["early_readouts"] == 1 for st in res["stats"])
    # the exit's logits are the coda's readout of the first boundary state, with the cache
    run, full = exits.decode_flops(model, labels, res["stats"])
    assert run < full


def test_looped_moe_decoding_at_tau_zero_is_plain():
    model = tiny_looped(7, n_expert=4, top_k=2)
    prompt = batch(8, B=2, T=5)[0]
    tokens, logits, _ = plain_cached_decode(model, prompt, 5)
    res = exits.generate_with_exit(model, prompt, 5, "kl", 0.0)
    assert torch.equal(res["tokens"], tokens) and torch.equal(res["logits"], logits)
    steps, head, fill, other = exits.step_flops(model, res["labels"], 4.0)
    dense = exits.step_flops(tiny_looped(7), res["labels"], 4.0)[0]
    assert steps[0] < 2 * dense[0]  # only the active experts count


# -----------------------------------------------------------------------------------------------------------------
# elastic depth


def test_schedule_enumeration_counts_compositions():
    for L in range(1, 13):
        total = 0
        for M in range(1, L + 1):
            comps = ee.compositions(L, M)
            assert len(comps) == math.comb(L - 1, M - 1) == len(set(comps))
            assert all(len(c) == M and sum(c) == L and min(c) >= 1 for c in comps)
            total += len(comps)
        assert total == 2 ** (L - 1)
    assert len(ee.compositions(8, 4)) == 35 and len(ee.compositions(12, 6)) == 462  # Jeddi et al., Fig. 5
    assert ee.compositions(4, 2) == [(1, 3), (2, 2), (3, 1)]
    assert ee.parse_schedule("4,2,1,1", 8) == (4, 2, 1, 1)
    with pytest.raises(ConfigError, match="summing to n_loop=8"):
        ee.parse_schedule("4,2,1", 8)
    with pytest.raises(ValueError, match="1 <= M <= L"):
        ee.compositions(4, 5)


def test_elastic_study_of_a_loopformer():
    model = tiny_looped(2, loop_cond="loopformer", cond_init="normal", n_loop=4)
    batches = [batch(0, B=2, T=16)]
    r = ee.elastic_study(model, batches, budget=2, schedule=(2, 1, 1), progress=False)
    x, y = batches[0]
    assert not hasattr(model, "schedule")  # nothing to restore: a schedule is an argument, never model state
    assert r["budgets"][4] == pytest.approx(math.exp(model(x, y)[1].item()), rel=1e-6)
    assert sorted(r["budgets"]) == [1, 2, 3, 4]
    rows = r["all_schedules"]
    assert sorted(row["steps"] for row in rows) == [(1, 3), (2, 2), (3, 1)]
    assert [row["ppl"] for row in rows] == sorted(row["ppl"] for row in rows)
    assert r["spread"] == rows[-1]["ppl"] - rows[0]["ppl"] > 0  # the schedule matters to a conditioned loop
    uniform = next(row for row in rows if row["steps"] == (2, 2))
    assert uniform["ppl"] == pytest.approx(r["budgets"][2], rel=1e-12)
    assert r["schedule"]["ppl"] == pytest.approx(math.exp(model(x, y, schedule=[0.5, 0.25, 0.25])[1].item()), rel=1e-6)
    # a one-pass model is the fixed-depth baseline at M = 1 (Table 1's rows trained at a budget): its own loss
    gpt = tiny_gpt()
    own = math.exp(gpt(x, y)[1].item())
    assert ee.elastic_study(gpt, batches, progress=False)["budgets"] == {1: pytest.approx(own, rel=1e-6)}
    with pytest.raises(ValueError, match="1 <= M <= L"):
        ee.elastic_study(gpt, batches, budget=2, progress=False)


# -----------------------------------------------------------------------------------------------------------------
# command line


def test_command_line_writes_json_png_and_table(tmp_path, capsys):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 4000), ("val", 3000)):
        rng.integers(0, V, n).astype(np.uint16).tofile(data_dir / f"{split}.bin")
    (data_dir / "meta.json").write_text(json.dumps(dict(tokenizer="byte", vocab_size=V, eot=V - 1, dtype="uint16",
                                                         train_tokens=4000, val_tokens=3000,
                                                         sha256=prepare.token_checksums(str(data_dir)))))
    runs = []
    for i in range(3):
        model = tiny_gpt(seed=i) if i < 2 else tiny_looped(i, loop_cond="loopformer", cond_init="normal")
        run = tmp_path / f"run{i}"
        run.mkdir()
        torch.save(dict(model=model.state_dict(), model_config=model.config.to_dict(),
                        train_config=dict(data_dir=str(data_dir))), run / "ckpt.pt")
        runs.append(str(run))
    out = str(tmp_path / "cmp")
    ee.main([f"--ckpt={','.join(runs)}", "--names=A,B,C", "--criteria=entropy,change", "--eval_tokens=1024",
             "--block_size=32", "--n_tau=12", f"--out_dir={out}"])
    printed = capsys.readouterr().out
    assert "A [entropy]" in printed and "B [change]" in printed and "30%" in printed
    res = json.load(open(f"{out}/early_exit_exit.json"))["results"]
    assert set(res) == {"A", "B", "C"} and res["A"]["tokens"] == 1024
    prov = json.load(open(f"{out}/early_exit_exit.json"))["meta"]["provenance"]  # what regenerates the study
    from lab.sweep import file_sha256
    assert prov["command"].startswith("python early_exit.py --ckpt=") and len(prov["code"].removesuffix("+dirty")) == 40
    assert prov["inputs"] == {os.path.join(r, "ckpt.pt"): file_sha256(os.path.join(r, "ckpt.pt")) for r in runs}
    assert os.path.getsize(f"{out}/early_exit_exit.png") > 1000
    with pytest.raises(SystemExit, match="criterion"):
        ee.main([f"--ckpt={runs[0]}", "--criteria=entropie"])
    # the benchmark runs end to end (its timings mean nothing here)
    ee.main([f"--ckpt={runs[0]}", "--mode=bench", "--taus=2.0", "--prompt_len=4", "--new_tokens=6",
             "--repeats=1", "--block_size=32", "--eval_tokens=256", f"--out_dir={out}"])
    rows = json.load(open(f"{out}/early_exit_bench.json"))["results"]["run0"]
    assert rows[0]["criterion"] is None and rows[1]["tau"] == 2.0
    assert rows[1]["predicted"] == pytest.approx(1 / (1 - rows[1]["saved_flops"]))  # full FLOPs / executed FLOPs
    ee.main([f"--ckpt={runs[2]}", "--mode=elastic", "--budget=2", "--schedule=2,1", "--eval_tokens=256",
             "--block_size=32", f"--out_dir={out}"])
    res = json.load(open(f"{out}/early_exit_elastic.json"))["results"]["run2"]
    assert len(res["all_schedules"]) == 2 and set(res["budgets"]) == {"1", "2", "3"}
    assert os.path.getsize(f"{out}/early_exit_elastic.png") > 1000


def test_an_elastic_budget_beyond_the_model_is_one_line(tmp_path):
    model = tiny_gpt()  # a plain model: n_loop=1
    torch.save(dict(model=model.state_dict(), model_config=model.config.to_dict(), train_config={}),
               tmp_path / "ckpt.pt")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for split, n in (("train", 4000), ("val", 3000)):
        np.random.default_rng(0).integers(0, V, n).astype(np.uint16).tofile(data_dir / f"{split}.bin")
    (data_dir / "meta.json").write_text(json.dumps(dict(tokenizer="byte", vocab_size=V, eot=V - 1, dtype="uint16",
                                                         train_tokens=4000, val_tokens=3000,
                                                         sha256=prepare.token_checksums(str(data_dir)))))
    with pytest.raises(ConfigError, match="--budget=2: .* has n_loop=1; a budget M must satisfy 1 <= M <= 1"):
        ee.main([f"--ckpt={tmp_path}", "--mode=elastic", "--budget=2", f"--data_dir={data_dir}",
                 f"--out_dir={tmp_path}", "--eval_tokens=256", "--block_size=32"])


def committed_studies():
    """(kind, path) of every committed early_exit.py JSON: the records' and the course's exit and elastic studies."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "records", "*", "*.json"))
                       + glob.glob(os.path.join(ROOT, "course", "*", "*.json"))):
        results = json.load(open(path)).get("results")
        if isinstance(results, dict) and results and all(isinstance(r, dict) for r in results.values()):
            if all("criteria" in r for r in results.values()):
                found.append(("exits", path))
            elif all("budgets" in r for r in results.values()):
                found.append(("elastic", path))
    return found


@pytest.mark.parametrize("kind,path", committed_studies(), ids=lambda v: os.path.basename(str(v)))
def test_committed_exit_and_elastic_figures_show_their_numbers_readably(kind, path):
    """Each committed study's figure, redrawn from its JSON: every frontier point (and the full-depth star), every
    budget's and every schedule's perplexity is drawn, and the figure passes the slide checks (units, readable
    names, no bar axis cut short, no overlapping tick labels)."""
    import matplotlib.pyplot as plt
    results = json.load(open(path))["results"]
    fig = (ee.draw_exits if kind == "exits" else ee.draw_elastic)(results)
    assert figure_problems(fig) == []
    if kind == "exits":
        points = [(100 * p[key], p["ppl"]) for r in results.values() for e in r["criteria"].values()
                  for key in ("saved_depth", "saved_flops") for p in e[f"frontier_{key}"] if p[key] >= 0]
        points += [(0, r["full_ppl"]) for r in results.values()]
    else:
        points = [(int(m), ppl) for r in results.values() for m, ppl in r["budgets"].items()]
        points += [(k, row["ppl"]) for r in results.values() if "all_schedules" in r
                   for k, row in enumerate(sorted(r["all_schedules"], key=lambda row: row["ppl"]), 1)]
        for ax in fig.axes[1:]:  # the schedules' panels: a rank is a whole number (no tick at 1.25)
            assert all(float(t).is_integer() for t in ax.get_xticks()), ax.get_xticks()
    assert_drawn(fig, points)
    plt.close(fig)


def test_redraw_writes_a_studys_figure_from_its_json_and_refuses_other_json(tmp_path):
    """`python early_exit.py --redraw=FILE.json` draws a committed study's figure again without its checkpoints."""
    study = tmp_path / "early_exit_exit.json"
    study.write_text(open(os.path.join(ROOT, "course", "l07", "early_exit_exit.json")).read())
    (png,) = ee.main([f"--redraw={study}"])
    assert png == str(tmp_path / "early_exit_exit.png") and os.path.getsize(png) > 1000
    (tmp_path / "other.json").write_text('{"analysis": "jsd"}')
    with pytest.raises(ConfigError, match="not an exit or elastic study"):
        ee.main([f"--redraw={tmp_path / 'other.json'}"])
