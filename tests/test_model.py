"""The plain transformer: masking, RoPE, KV cache, muP init and LR groups, config validation."""
import math

import pytest
import torch

from model import GPT, GPTConfig, KVCache, apply_rope, rope_tables


def tiny(**kw):
    args = dict(vocab_size=97, n_layer=2, n_embd=64, head_dim=16, block_size=32)
    args.update(kw)
    return GPT(GPTConfig(**args)).init_weights(seed=0)


def test_defaults_follow_lee_et_al():
    cfg = GPTConfig(n_embd=768)
    assert cfg.n_head == 12 and cfg.head_dim == 64
    # d_ff = 64*ceil(8d/3/64): the configuration table of Lee et al. 2026 (d=768 -> 2048, d=704 -> 1920)
    assert cfg.d_ff == 2048 and GPTConfig(n_embd=704).d_ff == 1920 and GPTConfig(n_embd=128).d_ff == 384
    m = GPT(GPTConfig(n_embd=64, head_dim=16, vocab_size=50))
    assert m.lm_head.weight is not m.wte.weight  # untied
    assert all(p.dim() >= 2 for p in m.parameters())  # no biases, no norm gains


def test_bad_config_is_explained():
    with pytest.raises(ValueError, match="head_dim"):
        GPTConfig(n_embd=100, head_dim=64)
    with pytest.raises(ValueError, match="swiglu"):
        GPTConfig(mlp="tanh")


@pytest.mark.parametrize("kw", [{}, dict(pos_emb="learned", tie_embeddings=True, mlp="gelu"),
                                dict(qk_norm=True, mlp="relu2", norm_gain=True, logit_softcap=15.0)])
def test_causal_future_tokens_do_not_change_past_logits(kw):
    m = tiny(**kw)
    idx = torch.randint(0, 97, (2, 20))
    logits, _, _ = m(idx)
    idx2 = idx.clone()
    idx2[:, 12:] = torch.randint(0, 97, (2, 8))
    logits2, _, _ = m(idx2)
    torch.testing.assert_close(logits[:, :12], logits2[:, :12])
    assert not torch.allclose(logits[:, 12:], logits2[:, 12:])


def test_rope_preserves_norm_and_depends_on_relative_position_only():
    D = 16
    cos, sin = rope_tables(D, 64, 10000.0)
    q, k = torch.randn(1, 1, 1, D), torch.randn(1, 1, 1, D)

    def score(i, j):
        return (apply_rope(q, cos[i:i + 1], sin[i:i + 1]) * apply_rope(k, cos[j:j + 1], sin[j:j + 1])).sum()

    torch.testing.assert_close(score(3, 1), score(40, 38))
    torch.testing.assert_close(score(7, 7), (q * k).sum())  # equal positions: the plain dot product
    x = torch.randn(1, 2, 64, D)
    torch.testing.assert_close(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("kw", [{}, dict(pos_emb="learned", qk_norm=True)])
def test_kv_cache_decoding_equals_full_forward(kw):
    m = tiny(**kw).eval()
    idx = torch.randint(0, 97, (2, 24))
    full, _, _ = m(idx)
    cache = KVCache(m.n_slots(), 2, 24)
    pieces = [m(idx[:, :9], cache=cache)[0]]  # a prefill ...
    pieces.append(m(idx[:, 9:13], cache=cache)[0])  # ... a chunk of several tokens ...
    for t in range(13, 24):  # ... and one token at a time
        pieces.append(m(idx[:, t:t + 1], cache=cache)[0])
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-5, rtol=1e-5)


def test_generate_greedy_matches_argmax_of_full_forward():
    m = tiny().eval()
    out = m.generate(torch.randint(0, 97, (1, 5)), 10, temperature=0)
    logits, _, _ = m(out[:, :-1])
    assert torch.equal(logits[0, 4:].argmax(-1), out[0, 5:])
    with pytest.raises(ValueError, match="block_size"):
        m.generate(out, 40)


def test_walk_labels_every_layer_and_forward_uses_it():
    m = tiny(n_layer=3)
    idx = torch.randint(0, 97, (1, 8))
    states = m.states(idx)
    assert [s[0].layer for s in states] == [0, 1, 2]
    assert [s[0].boundary for s in states] == [False, False, True]
    logits, _, _ = m(idx)
    torch.testing.assert_close(m.readout(states[-1][1]), logits)


def test_mup_init_variances_and_lr_groups():
    """Lee et al. 2026 (arXiv:2605.09165): hidden matrices and the head get init variance sigma^2/w and Adam LR
    eta/w with w = d/128; the embedding keeps sigma^2 and eta."""
    sigma = 0.02
    for d, mup in [(512, True), (512, False), (128, True)]:
        m = GPT(GPTConfig(vocab_size=4096, n_layer=2, n_embd=d, mup=mup, init_std=sigma)).init_weights(seed=1)
        w = d / 128 if mup else 1.0
        assert m.wte.weight.std().item() == pytest.approx(sigma, rel=0.03)
        assert m.lm_head.weight.std().item() == pytest.approx(sigma / math.sqrt(w), rel=0.03)
        attn = m.blocks[0].attn.c_q.weight
        assert attn.std().item() == pytest.approx(sigma / math.sqrt(w), rel=0.03)
        scales = {g["role"]: g["lr_scale"] for g in m.param_groups()}
        assert scales == {"embed": 1.0, "hidden": pytest.approx(1 / w), "head": pytest.approx(1 / w)}
        n_grouped = sum(len(g["params"]) for g in m.param_groups())
        assert n_grouped == len(list(m.parameters()))



@pytest.mark.parametrize("mup", [True, False])
def test_head_and_projection_init_keys_keep_mup(mup):
    """head_init_std and proj_init='gpt2' set the base-width std; muP still divides the variance by w = d/128."""
    cfg = GPTConfig(vocab_size=4096, n_layer=2, n_embd=512, head_dim=64, d_ff=1024, mup=mup, init_std=0.02,
                    head_init_std=0.01, proj_init="gpt2", n_expert=4, moe_d_ff=256, n_shared_expert=1,
                    moe_first_dense=1)  # layer 0 dense, layer 1 MoE
    m = GPT(cfg).init_weights(seed=1)
    w = 4.0 if mup else 1.0
    assert m.lm_head.weight.std().item() == pytest.approx(0.01 / math.sqrt(w), rel=0.02)
    proj = 0.02 / math.sqrt(2 * 2 * w)  # GPT-2's residual-projection rule, n_layer = 2
    for p in (m.blocks[0].attn.c_proj.weight, m.blocks[0].ffn.c_proj.weight, m.blocks[1].ffn.w_down,
              m.blocks[1].ffn.shared_down):
        assert p.std().item() == pytest.approx(proj, rel=0.02)
    assert m.blocks[0].attn.c_q.weight.std().item() == pytest.approx(0.02 / math.sqrt(w), rel=0.02)
    uniform = GPT(GPTConfig(vocab_size=4096, n_embd=512, init="uniform", head_init_std=0.01, mup=mup)).init_weights(1)
    assert uniform.lm_head.weight.std().item() == pytest.approx(0.01 / math.sqrt(w), rel=0.02)  # normal head
    assert uniform.blocks[0].attn.c_q.weight.abs().max().item() <= math.sqrt(3 / 512)  # U(-a, a) elsewhere


def test_init_keys_refuse_what_they_cannot_honour():
    with pytest.raises(ValueError, match="head_init_std needs an untied head"):
        GPTConfig(tie_embeddings=True, head_init_std=1e-3)
    with pytest.raises(ValueError, match="proj_init='gpt2' scales the normal init"):
        GPTConfig(init="uniform", proj_init="gpt2")
    with pytest.raises(ValueError, match="proj_init must be default|gpt2"):
        GPTConfig(proj_init="gpt-2")

def test_loss_is_cross_entropy_and_initial_loss_near_uniform():
    m = tiny()
    idx = torch.randint(0, 97, (4, 16))
    logits, loss, aux = m(idx, idx)
    assert aux == {}
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, 97), idx.reshape(-1))
    torch.testing.assert_close(loss, ref)
    assert abs(loss.item() - math.log(97)) < 0.1
