"""Tests of scaling.py: accounting against the papers' tables and FlopCounterMode, the count CLI, and the paper-scale
sweep plan's tokens (sweeps themselves: tests/test_sweep.py; the fits of their results: tests/test_fits.py)."""
import json
import math
import os
import sys

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import accounting  # noqa: E402
import scaling  # noqa: E402
import train  # noqa: E402
from lab import sweep  # noqa: E402
from configurator import cli_arg, configure  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

# -----------------------------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """These models are tiny: with the machine's cores busy, two intra-op threads made a forward+backward 100x
    slower (spin-waiting). Restored afterwards for the other test files."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def preset(name, **overrides):
    """GPTConfig from config/<name>.py plus overrides, read the way every script reads it."""
    argv = [os.path.join(ROOT, "config", name + ".py")] + [cli_arg(k, v) for k, v in overrides.items()]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return configure(train.defaults(), GPTConfig, argv, doc_source=__file__)[1]
    finally:
        os.chdir(cwd)


# -----------------------------------------------------------------------------------------------------------------
# Lee et al. 2026 (arXiv:2605.09165), model-configuration table: d, d_ff, heads, active M, stored Looped-MoE M,
# stored MoE M. Active = 16(4d^2 + 3 d d_ff) + 2Vd for all four architectures.
LEE_TABLE = [(128, 384, 2, 16, 18, 23), (256, 704, 4, 39, 45, 65), (384, 1024, 6, 67, 81, 124),
             (512, 1408, 8, 103, 129, 207), (640, 1728, 10, 144, 184, 303), (768, 2048, 12, 190, 247, 417),
             (896, 2432, 14, 246, 325, 560), (1024, 2752, 16, 305, 407, 711)]


@pytest.mark.parametrize("d,d_ff,heads,active,stored_lmoe,stored_moe", LEE_TABLE)
def test_lee_table_base(d, d_ff, heads, active, stored_lmoe, stored_moe):
    cfg = preset("sparse_base", n_embd=d)
    assert (cfg.d_ff, cfg.n_head) == (d_ff, heads)
    c = accounting.count_params(accounting.model_on_meta(cfg))
    V = 50257
    hand = 16 * (4 * d * d + 3 * d * d_ff) + 2 * V * d
    assert c["params_active"] == c["params_unique"] == hand
    assert round(c["params_active"] / 1e6) == active
    assert c["params_rec_nonembed"] == 0 and c["params_once_nonembed"] == c["params_unique_nonembed"]
    assert accounting.flops_per_token(accounting.model_on_meta(cfg), "lee") == 6 * hand


@pytest.mark.parametrize("d,d_ff,heads,active,stored_lmoe,stored_moe", LEE_TABLE)
def test_lee_table_looped(d, d_ff, heads, active, stored_lmoe, stored_moe):
    c = accounting.count_params(accounting.model_on_meta(preset("sparse_looped", n_embd=d)))
    V = 50257
    assert c["params_active"] == 16 * (4 * d * d + 3 * d * d_ff) + 2 * V * d
    assert c["params_unique"] == 8 * (4 * d * d + 3 * d * d_ff) + 2 * V * d
    assert c["params_rec_nonembed"] == c["params_unique_nonembed"]  # the whole stack is looped


def router_params(model):
    """Stored router weights, which Lee et al.'s table neglects."""
    return sum(m.router.weight.numel() for m in model.modules() if hasattr(m, "router"))


@pytest.mark.parametrize("d,d_ff,heads,active,stored_lmoe,stored_moe", LEE_TABLE)
def test_lee_table_moe(d, d_ff, heads, active, stored_lmoe, stored_moe):
    model = accounting.model_on_meta(preset("sparse_moe", n_embd=d))
    c, router, V = accounting.count_params(model), router_params(model), 50257
    # top-2 of 8 experts with hidden d_ff/2: active FFN = dense FFN (Lee et al. §2.2)
    assert c["params_active"] - router == 16 * (4 * d * d + 3 * d * d_ff) + 2 * V * d
    assert c["params_unique"] - router == 16 * (4 * d * d + 8 * 3 * d * d_ff // 2) + 2 * V * d
    assert round((c["params_active"] - router) / 1e6) == active
    assert round((c["params_unique"] - router) / 1e6) == stored_moe
    assert router == 16 * 8 * d and router < 1e-3 * c["params_unique"]


@pytest.mark.parametrize("d,d_ff,heads,active,stored_lmoe,stored_moe", LEE_TABLE)
def test_lee_table_looped_moe(d, d_ff, heads, active, stored_lmoe, stored_moe):
    model = accounting.model_on_meta(preset("sparse_looped_moe", n_embd=d))
    c, router, V = accounting.count_params(model), router_params(model), 50257
    assert c["params_active"] - 2 * router == 16 * (4 * d * d + 3 * d * d_ff) + 2 * V * d  # both passes
    assert c["params_unique"] - router == 8 * (4 * d * d + 8 * 3 * d * d_ff // 2) + 2 * V * d
    assert round((c["params_active"] - 2 * router) / 1e6) == active
    assert round((c["params_unique"] - router) / 1e6) == stored_lmoe


# -----------------------------------------------------------------------------------------------------------------
# Schwethelm et al. 2026 (arXiv:2604.21106), Table 6: unique non-embedding N (M) per (s, r), d = 64 s, and the
# r=1 training tokens (B) per budget.
SCHWETHELM_N = {6: (35.4, 21.5, 14.5, 10.9), 8: (62.9, 38.3, 25.7, 19.4), 10: (98.3, 59.8, 40.2, 30.3),
                12: (141.6, 86.1, 57.8, 43.7), 14: (192.7, 117.2, 78.7, 59.4), 16: (251.7, 153.1, 102.8, 77.6),
                18: (318.6, 193.8, 130.1, 98.2), 20: (393.3, 239.2, 160.6, 121.3), 24: (566.3, 344.5, 231.2, 174.6),
                28: (770.8, 468.9, 314.7, 237.7), 34: (1136.5, 691.4, 464.1, 350.4)}
BUDGETS = (4.64e17, 1e18, 2.15e18, 4.64e18, 1e19, 2.15e19)
SCHWETHELM_TOKENS = {6: (0.98, 2.10), 8: (0.64, 1.36, 2.95), 10: (0.45, 0.97, 2.08, 4.49),
                     12: (0.34, 0.72, 1.55, 3.34, 7.13), 14: (None, 0.56, 1.20, 2.59),
                     16: (None, None, 0.96, 2.07, 4.43), 18: (None, None, None, 1.70, 3.62, 7.78),
                     20: (None, None, None, 1.42, 3.05), 24: (None, None, None, None, 2.20, 4.71),
                     28: (None,) * 5 + (3.58,), 34: (None,) * 5 + (2.52,)}


def isodepth_plain(s):
    """The r=1 model of the iso-depth grid as a plain 20-layer GPT (needs no loop.py)."""
    return preset("isodepth", n_embd=64 * s, n_loop=1, n_layer=20, n_prelude=0, n_coda=0, loop_norm=False,
                  injection="none")


@pytest.mark.parametrize("s", sorted(SCHWETHELM_N))
def test_schwethelm_table6_r1_params(s):
    c = accounting.count_params(accounting.model_on_meta(isodepth_plain(s)))
    d = 64 * s
    # 240 d^2 (Schwethelm eq. 2 at r=1) plus the RMSNorm gains, which the paper's counts include: without them
    # s=18, 20, 24, 28, 34 round to 0.1M below Table 6
    assert c["params_unique_nonembed"] == 240 * d * d + 41 * d
    assert round(c["params_unique_nonembed"] / 1e6, 1) == SCHWETHELM_N[s][0]


def test_schwethelm_r1_flops_by_hand():
    for s in sorted(SCHWETHELM_TOKENS):
        d, V, T = 64 * s, 32064, 2048
        # hand: 6*(N + head) + 12*d*T*20 (Schwethelm et al. §3.2 + nanochat estimate_flops)
        N = 240 * d * d + 41 * d
        assert accounting.flops_per_token(accounting.model_on_meta(isodepth_plain(s)), "schwethelm") == \
            6 * (N + d * V) + 12 * d * T * 20


# Table 6's caption gives its token columns as r=1's, but they are not all r=1's: each cell is the count of one of
# the iso-depth variants r in {1, 2, 4} under this accounting, 23 of the 29 to the printed precision (+-0.005B),
# among them all four cells of the 2.15e19 column (r=4: s=34 2.519B, s=18 7.782B; r=1 would be 2.588B, 7.965B).
# The other six (TABLE6_INEXACT) sit within 0.40% of their nearest variant, cause unknown. No per-token FLOP formula
# reproduces the table at r=1 alone: the same s=12 model is printed at 3.34B at 4.64e18 and at 7.13B at 1e19, i.e.
# C/D = 1.389e9 (+-0.15%) and 1.4025e9 (+-0.07%) FLOPs per token. See scaling.py (flops_per_token).
TABLE6_VARIANT = {6: (1, 1), 8: (1, 2, 1), 10: (1, 1, 2, 2), 12: (1, 2, 2, 2, 4), 14: (None, 2, 2, 2),
                  16: (None, None, 2, 2, 4), 18: (None,) * 3 + (2, 4, 4), 20: (None,) * 3 + (2, 2),
                  24: (None,) * 4 + (4, 4), 28: (None,) * 5 + (4,), 34: (None,) * 5 + (4,)}
TABLE6_INEXACT = {(6, 1e18), (10, 2.15e18), (10, 4.64e18), (16, 4.64e18), (16, 1e19), (24, 1e19)}


def table6_train_flops(s, r):
    """Training FLOPs per token of the iso-depth model (s, r) by hand: Schwethelm et al. eq. 1, 6 (N_once + r N_rec)
    with the counts of eq. 4 (as test_schwethelm_table6_params), plus the head 6 d V and attention 12 d T x 20."""
    d = 64 * s
    n_b = 12 * d * d + 2 * d
    once, rec = 4 * n_b + 2 * d, (16 // r) * n_b + 2 * d * d + d
    if r == 1:
        once, rec = once + rec - 2 * d * d, 0
    return 6 * (once + r * rec) + 6 * d * 32064 + 12 * d * 2048 * 20


@pytest.mark.parametrize("s", sorted(SCHWETHELM_TOKENS))
def test_schwethelm_table6_tokens(s):
    """Tokens of a budget are C / F_train for every r of the grid (a known answer by hand, r fixed, not picked per
    cell). Against Table 6 at the r its caption names (r = 1) our count is within 3% of every cell, and to the
    printed precision (+-0.005B) exactly in the cells the comment above gives to r = 1 (six of 29): a change of the
    accounting shows here."""
    for r in (1, 2, 4):
        model = accounting.model_on_meta(preset("isodepth", n_embd=64 * s, n_loop=r, n_layer=16 // r))
        for C in BUDGETS:
            ours = C / accounting.flops_per_token(model, "schwethelm")
            assert ours == pytest.approx(C / table6_train_flops(s, r), rel=1e-12), (s, C, r)
    for C, paper, variant in zip(BUDGETS, SCHWETHELM_TOKENS[s], TABLE6_VARIANT[s]):
        if paper is not None:
            ours = C / table6_train_flops(s, 1) / 1e9
            assert abs(ours / paper - 1) < 0.03, (s, C, ours, paper)
            assert (abs(ours - paper) <= 0.005) == (variant == 1 and (s, C) not in TABLE6_INEXACT), (s, C, ours, paper)


def test_isodepth_preset_counts_in_its_papers_convention(monkeypatch):
    """config/isodepth.py sets flops_convention='schwethelm': `scaling.py count` without the flag gives Table 6's
    s=34 cell at 2.15e19 (2.52B tokens, r=4 as the preset); --flops_convention=lee still overrides the preset."""
    monkeypatch.chdir(ROOT)
    argv = ["count", "config/isodepth.py", "--n_embd=2176", "--flops_budget=2.15e19"]
    out = scaling.main(argv)
    assert out["flops_convention"] == "schwethelm" and abs(out["tokens"] / 1e9 - 2.52) <= 0.005
    lee = scaling.main(argv + ["--flops_convention=lee"])
    assert lee["flops_convention"] == "lee" and lee["tokens"] == pytest.approx(2.15e19 / (6 * lee["params_active"]))


@pytest.mark.parametrize("r", (1, 2, 4, 8))
@pytest.mark.parametrize("s", sorted(SCHWETHELM_N))
def test_schwethelm_table6_params(s, r):
    model = accounting.model_on_meta(preset("isodepth", n_embd=64 * s, n_loop=r, n_layer=16 // r))
    c = accounting.count_params(model)
    d = 64 * s
    assert round(c["params_unique_nonembed"] / 1e6, 1) == SCHWETHELM_N[s][(1, 2, 4, 8).index(r)]
    # Schwethelm eq. 4: N_once = 4 n_b, N_rec = (16/r) n_b + n_i with n_b = 12 d^2 (+ 2d RMSNorm gains), n_i = 2 d^2;
    # plus the model-level norms: after the embedding and the final one (once), at the end of every pass (rec)
    n_b = 12 * d * d + 2 * d
    once, rec = 4 * n_b + 2 * d, (16 // r) * n_b + 2 * d * d + d
    if r == 1:
        once, rec = once + rec - 2 * d * d, 0  # no injection; everything runs once
    assert (c["params_once_nonembed"], c["params_rec_nonembed"]) == (once, rec)
    # eq. 1 with the head and attention: F_train = 6 (N_once + r N_rec) + 6 d V + 12 d T * 20
    hand = 6 * (once + r * rec) + 6 * d * 32064 + 12 * d * 2048 * 20
    assert abs(accounting.flops_per_token(model, "schwethelm") / hand - 1) < 1e-3


def small_config(**kw):
    base = dict(n_layer=2, n_embd=64, head_dim=16, vocab_size=97, block_size=32)
    base.update(kw)
    return GPTConfig(**base)


def test_counts_follow_the_schedule_they_are_given():
    """An elastic-depth evaluation at M passes (eval.py --loops=M) counts M runs of every per-pass module."""
    model = GPT(small_config(n_loop=4, n_prelude=1, injection="linear", loop_norm=True, hc_lanes=0))
    for schedule, passes in ((None, 4), (2, 2), ([0.5, 0.25, 0.25], 3)):
        runs = {u.name: u.fwd for u in accounting.compute_units(model, False, schedule)}
        assert runs["blocks.1"] == runs["inject"] == runs["norm_loop"] == passes and runs["blocks.0"] == 1


def test_shared_weights_stored_once_computed_every_pass():
    cfg = small_config()
    plain, looped = GPT(cfg), GPT(small_config(n_loop=3))
    cp, cl = accounting.count_params(plain), accounting.count_params(looped)
    assert cl["params_unique"] == cp["params_unique"]
    assert cl["params_active_nonembed"] == 3 * cp["params_active_nonembed"]
    assert cl["params_rec_nonembed"] == cp["params_unique_nonembed"] and cl["params_once_nonembed"] == 0


def test_tied_embeddings_stored_once_counted_twice_for_compute():
    untied, tied = GPT(small_config()), GPT(small_config(tie_embeddings=True))
    cu, ct = accounting.count_params(untied), accounting.count_params(tied)
    assert cu["params_unique"] - ct["params_unique"] == 97 * 64
    assert cu["params_active"] == ct["params_active"]


def test_per_pass_conditioning_stays_out_of_n_once_and_n_rec():
    """LoopFormer's embedders and modulators run once per pass and sequence, not per token: counted apart, like an
    embedding, so the plain loop and its conditioned twin have the same N_once and N_rec."""
    plan = dict(n_loop=4, n_prelude=1, injection="linear", hc_lanes=0)
    plain, lf = GPT(small_config(**plan)), GPT(small_config(**plan, loop_cond="loopformer"))
    cp, cl = accounting.count_params(plain), accounting.count_params(lf)
    cond = sum(p.numel() for n, p in lf.named_parameters()
               if n.startswith(("loop_embed.", "step_embed.")) or ".modulator." in n)
    assert cond > 0 and cl["params_pass_nonembed"] == cond and cp["params_pass_nonembed"] == 0
    assert cl["params_once_nonembed"] == cp["params_once_nonembed"]
    assert cl["params_rec_nonembed"] == cp["params_rec_nonembed"]


def test_injection_and_truncation_split():
    cfg = small_config()
    m = GPT(small_config(n_loop=4, injection="linear", bptt_loops=2))  # W[e | h] before every pass, e = embedding
    c = accounting.count_params(m)
    block = sum(p.numel() for p in m.blocks.parameters())
    assert c["params_rec_nonembed"] == block + 2 * 64 * 64
    T = cfg.block_size
    # Schwethelm et al. App. G eq. 8: (2 (r - r_bwd) + 6 r_bwd) (recurrent params) + head + attention
    hand = (2 * 2 + 6 * 2) * (block + 2 * 64 * 64) + 6 * 97 * 64 + (4 * 2 + 12 * 2) * 2 * 64 * T
    assert accounting.flops_per_token(m, "schwethelm") == hand


def test_lee_and_schwethelm_differ_by_embedding_and_attention():
    cfg = small_config()
    m = GPT(cfg)
    T, d, L, V = cfg.block_size, cfg.n_embd, cfg.n_layer, cfg.vocab_size
    assert accounting.flops_per_token(m, "lee") - accounting.flops_per_token(m, "schwethelm") == 6 * V * d - 12 * L * d * T
    assert accounting.forward_flops_per_token(m) * 3 == accounting.flops_per_token(m, "schwethelm")
    with pytest.raises(ValueError, match="lee"):
        accounting.flops_per_token(m, "kaplan")


@pytest.mark.parametrize("kw", [dict(), dict(n_loop=2, n_prelude=1, n_coda=1, attn="mla", q_lora_rank=16,
                                              kv_lora_rank=12, rope_head_dim=8, v_head_dim=8)])
def test_kv_cache_count_matches_a_filled_cache(kw):
    """The count against the bytes a real KVCache holds after a forward pass (fp32: 4 bytes per number)."""
    from model import KVCache
    model = GPT(small_config(**kw))
    cache = KVCache(model.n_slots(), 2, 5)
    with torch.no_grad():
        model(torch.randint(0, 97, (2, 5)), cache=cache)
    held = sum(t.numel() * t.element_size() for slot in cache.slots for t in slot) / (2 * 5 * 4)
    per_layer, total = accounting.kv_cache_per_token(model)
    assert total == held and per_layer * model.n_slots() == held
    assert per_layer == (12 + 8 if kw else 2 * 4 * 16)  # MLA: kv_lora_rank + rope_head_dim; MHA: K and V of 4 heads


# -----------------------------------------------------------------------------------------------------------------
# FlopCounterMode: matmul FLOPs of one real training step (forward + backward) against the accounting.
# Both count: every matmul (projections, MLP/experts, router, injection, head) and the attention QK^T / AV over the
# full T x T square (the math SDPA backend; causal masking is not subtracted by either side).
# Only the accounting counts: 6 FLOPs per RMSNorm gain (elementwise, ~1/(6d) of a block); hyper-connections'
# 6 r (K^2 + 2K) d, of which FlopCounterMode sees the einsums but not the beta scaling.
# Only FlopCounterMode counts: per-sequence conditioning (loop embedders, TMLT/LoopFormer modulators: ~1/T of their
# parameters per token, 1% at T=32, nothing at the papers' T); padding of the "batched" MoE dispatch (so MoE runs
# use moe_dispatch="loop"; torch._grouped_mm of the "grouped" dispatch it does not count at all).
# Neither counts: softmax, RoPE, norms, activations, cross-entropy, the embedding gather and its backward.
# Not covered: elastic="shortcut"/"early_exit" objectives also rerun the head (and prelude/coda), which
# block_executions does not declare yet (2% here, ~6% for LoopFormer's real shape).


def measured_flops_per_token(model, B=2):
    T = model.config.block_size
    idx = torch.randint(0, model.config.vocab_size, (B, T))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss, aux = model(idx, idx)
        (loss + sum(aux.values()) if aux else loss).backward()
    return counter.get_total_flops() / (B * T)


def kinds():
    yield "dense swiglu", GPT(small_config())
    yield "dense relu2 qk-norm gains", GPT(small_config(mlp="relu2", qk_norm=True, norm_gain=True))
    yield "dense gelu tied learned-pos", GPT(small_config(mlp="gelu", tie_embeddings=True, pos_emb="learned"))
    yield "injected loop 3", GPT(small_config(n_loop=3, injection="linear"))
    looped = dict(n_prelude=1, n_coda=1, n_loop=3, loop_norm=True, norm_gain=True)
    yield "full loop 2x3", GPT(small_config(n_loop=3))
    yield "prelude/coda, linear injection", GPT(small_config(injection="linear", **looped))
    yield "additive injection", GPT(small_config(injection="additive", **looped))
    yield "truncated BPTT 2 of 4", GPT(small_config(injection="linear", bptt_loops=2,
                                                            **dict(looped, n_loop=4)))
    yield "hyper-connections K=2", GPT(small_config(hc_lanes=2, **looped))
    yield "factorized residual scaling", GPT(small_config(n_loop=3, residual_scaling="factorized"))
    yield "sandwich norm", GPT(small_config(n_loop=2, sandwich_norm=True))
    for cond in ("index", "loopformer", "iteradaln"):
        yield f"loop_cond={cond}", GPT(small_config(n_loop=3, loop_cond=cond))
    moe = dict(n_expert=4, top_k=2, moe_dispatch="loop")
    yield "MoE", GPT(small_config(**moe))
    yield "MoE with a shared expert", GPT(small_config(n_shared_expert=1, **moe))
    yield "Looped-MoE", GPT(small_config(n_loop=2, **moe))
    # Chen et al.'s LoopMoE: MLA attention (no head_dim of the plain kind), sigmoid router, shared expert
    yield "LoopMoE with MLA", GPT(small_config(
        attn="mla", q_lora_rank=16, kv_lora_rank=12, rope_head_dim=8, n_shared_expert=1,
        moe_router="sigmoid", moe_first_dense=1, sandwich_norm=True, loop_cond="iteradaln", **looped,
        **dict(moe, n_expert=6)))


@pytest.mark.parametrize("name,model", list(kinds()), ids=lambda x: x if isinstance(x, str) else "")
def test_flops_match_flop_counter(name, model):
    torch.manual_seed(0)
    model.init_weights(0)
    measured = measured_flops_per_token(model)
    ours = accounting.flops_per_token(model, "schwethelm")
    assert abs(ours / measured - 1) < 0.02, (name, ours, measured)


# -----------------------------------------------------------------------------------------------------------------
# command line


def test_count_cli(capsys):
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        out = scaling.main(["count", "config/sparse_base.py", "--n_embd=256", "--flops_budget=1e18"])
    finally:
        os.chdir(cwd)
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(out))
    for key in ("params_unique", "params_active", "params_unique_nonembed", "params_active_nonembed",
                "params_once_nonembed", "params_rec_nonembed", "flops_per_token", "tokens"):
        assert key in printed
    assert math.isclose(printed["tokens"], 1e18 / (6 * printed["params_active"]))


def test_count_cli_reads_training_configs_and_rejects_bad_keys(capsys):
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        # a preset with train.py keys (optimizer, lr ...) counts as it is
        out = scaling.main(["count", "config/recur_r4.py", "--flops_budget=1e18"])
        assert out["flops_convention"] == "schwethelm" and abs(out["tokens"] / 955e6 - 1) < 0.005
        # LoopMoE's Vanilla MoE caches one 512 + 64 MLA latent per token and layer, 12 layers
        out = scaling.main(["count", "config/loopmoe_vanilla.py"])
        assert (out["kv_cache_per_token_layer"], out["kv_cache_per_token"]) == (576, 12 * 576)
        with pytest.raises(SystemExit, match="n_embd"):
            scaling.main(["count", "--n_emdb=64"])
        with pytest.raises(SystemExit, match="usage"):
            scaling.main(["counts"])
    finally:
        os.chdir(cwd)


def saved_activation_bytes(model, idx, dtype):
    """Bytes of the tensors autograd saves in one training forward (each storage once, the weights left out), plus
    the logits the caller holds through the backward: the control for scaling.activation_bytes_per_token."""
    weights = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        logits, _, _ = model(idx, idx)
    return sum(n for ptr, n in saved.items() if ptr not in weights) + logits.nbytes


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kw", [dict(n_layer=2), dict(n_layer=2, mlp="gelu"),
                                dict(n_layer=1, n_loop=3, n_prelude=1, n_coda=1),
                                dict(n_layer=2, n_expert=4, top_k=2, moe_dispatch="grouped")])
def test_activation_prediction_matches_what_autograd_saves(kw, dtype):
    """memory_per_gpu's activations (plus, in bf16, autocast's weight copies, which autograd also saves) against
    the bytes autograd saves on this CPU: within 8% (MoE, looped and SwiGLU/GELU blocks, fp32 and bf16). With
    kernels.py's fast paths, whose saved tensors (the chunked cross-entropy's gradient) the estimate counts."""
    model = GPT(GPTConfig(vocab_size=512, n_embd=128, head_dim=32, block_size=128, **kw), cpu_kernels=True)
    model.init_weights(0)
    idx = torch.randint(0, 512, (2, 128), generator=torch.Generator().manual_seed(0))
    measured = saved_activation_bytes(model, idx, dtype)
    mem = scaling.memory_per_gpu(model, dict(batch_size=2, dtype=dtype), gpus=1)["ddp"]
    assert (mem["weight_copies"] > 0) == (dtype == "bfloat16")
    assert mem["activations"] + mem["weight_copies"] == pytest.approx(measured, rel=0.08)


def test_memory_cli_says_how_many_gpus_the_3b_loopmoe_needs(capsys, monkeypatch):
    """The 3B LoopMoE preset: DDP, whose every GPU holds 3.06e9 parameters, their gradients twice (buckets) and
    AdamW's two moments (16 x 3.06e9 bytes), does not fit an 80 GiB GPU with stored activations; FSDP does on
    enough GPUs; sharding over more GPUs lowers every sharded part by their number."""
    monkeypatch.chdir(ROOT)
    out = scaling.main(["count", "config/loopmoe.py", "--memory", "--gpus=8"])
    mem, needed = out["memory_per_gpu"], out["fsdp_gpus_needed"]
    n = out["params_unique"]
    assert (mem["ddp"]["params"], mem["ddp"]["grads"]) == (4 * n, 8 * n)
    assert mem["ddp"]["optimizer"] == pytest.approx(8 * n, rel=1e-6)  # and a 4-byte step counter per tensor
    for key in ("params", "grads", "optimizer"):  # rank 0's shards: 375 experts in rows of 47, not 46.875
        assert mem["fsdp"][key] == pytest.approx((4 if key != "optimizer" else 8) * n / 8, rel=5e-3)
    assert needed["ddp_stored"] is None and needed["fsdp_stored"] > 1
    printed = capsys.readouterr().err
    assert f"FSDP, activations stored: needs {needed['fsdp_stored']} GPUs of 80 GiB (90% of it" in printed


def test_injection_ablation_tokens():
    """Schwethelm et al. Table 5 (s=10, r=4, C=1e18): linear injection 955M tokens, the parameter-free variants and
    hyper-connections 973M."""
    for overrides, paper in ((dict(injection="linear"), 955e6), (dict(injection="additive"), 973e6),
                             (dict(injection="none"), 973e6), (dict(injection="none", hc_lanes=2), 973e6)):
        model = accounting.model_on_meta(preset("isodepth", n_embd=640, n_loop=4, n_layer=4, **overrides))
        assert abs(1e18 / accounting.flops_per_token(model, "schwethelm") / paper - 1) < 0.005, overrides


# -----------------------------------------------------------------------------------------------------------------
# the paper-scale sweep plan (sweep.py) against the paper's tokens


def test_planner_reproduces_table6_tokens(monkeypatch):
    """The paper-scale iso-depth plan with the paper's vocabulary (not the GPT-2 one training would use): r=1 tokens
    within 1.5% of Table 6 at budgets <= 2.15e18, and the HyperP LR of each point."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sweep, "TOKENIZER_VOCAB", {})
    spec = sweep.load_spec("config/sweeps/isodepth_paper.py")
    spec["points"] = lambda: [p for p in spec["grid"]((1,), (4.64e17, 1e18, 2.15e18))]
    planned = sweep.plan(spec)
    assert len(planned) == 4 + 5 + 5
    for q in planned:
        s, C = q["point"].fields["s"], q["point"].flops_budget
        paper = SCHWETHELM_TOKENS[s][BUDGETS.index(C)] * 1e9
        assert abs(q["tokens"] / paper - 1) < 0.015, (s, C)
        assert q["train"]["lr"] == pytest.approx(0.014 * (q["tokens"] / 1e9) ** -0.32)


def test_count_measures_the_flops_with_torchs_counter(capsys):
    """`python scaling.py count CONFIG --measure_flops=True` (lecture 5's command) runs one training step under
    FlopCounterMode and prints it beside the "schwethelm" count: for the LoopMoE preset (MLA, IterAdaLN, a sandwich
    loop, fine-grained and shared experts) they agree within 1%."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        out = scaling.main(["count", "config/loopmoe_cpu.py", "--measure_flops=True", "--block_size=32"])
    finally:
        os.chdir(cwd)
    assert json.loads(capsys.readouterr().out)["measured_flops_per_token"] == out["measured_flops_per_token"]
    assert abs(out["schwethelm_over_measured"] - 1) < 0.01, out
    assert out["flops_per_token_schwethelm"] == pytest.approx(out["measured_flops_per_token"] *
                                                              out["schwethelm_over_measured"])
