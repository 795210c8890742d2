"""Tests of analyze.py: every metric on inputs with a known answer, the Theorem-1 model, and each subcommand on a
tiny random checkpoint."""
import glob
import json
import math
import os
import sys
from unittest import mock

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import analyze  # noqa: E402
from figure_checks import figure_problems  # noqa: E402
from configurator import ConfigError  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

# -----------------------------------------------------------------------------
# metrics on known answers


def test_jsd_equal_is_zero_and_disjoint_is_one():
    logits = torch.randn(5, 11, dtype=torch.float64)
    assert analyze.normalized_jsd(logits, logits).abs().max() < 1e-12
    inf = float("-inf")
    p = torch.tensor([[0.0, 0.0, inf, inf]])
    q = torch.tensor([[inf, inf, 0.0, 0.0]])
    assert analyze.normalized_jsd(p, q).item() == pytest.approx(1.0, abs=1e-6)


def test_jsd_matches_float64_reference():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 13, generator=g, dtype=torch.float64), torch.randn(7, 13, generator=g, dtype=torch.float64)
    p, q = a.softmax(-1).numpy(), b.softmax(-1).numpy()
    m = (p + q) / 2
    ref = 0.5 * (p * np.log(p / m)).sum(-1) + 0.5 * (q * np.log(q / m)).sum(-1)
    np.testing.assert_allclose(analyze.normalized_jsd(a, b).numpy(), ref / math.log(2), rtol=1e-10)
    half = torch.tensor([[0.0, float("-inf")]]), torch.tensor([[0.0, 0.0]])  # p = (1, 0), q = (1/2, 1/2)
    ref = 0.5 * math.log(4 / 3) + 0.25 * math.log(2 / 3) + 0.25 * math.log(2)
    assert analyze.normalized_jsd(*half).item() == pytest.approx(ref / math.log(2), rel=1e-6)


def test_cka_identity_rotation_scaling():
    g = torch.Generator().manual_seed(1)
    for n, d in ((50, 8), (6, 20)):  # both the feature-space and the Gram form
        x = torch.randn(n, d, generator=g, dtype=torch.float64)
        assert analyze.linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
        rot, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
        y = torch.randn(n, d, generator=g, dtype=torch.float64)
        base = analyze.linear_cka(x, y)
        assert analyze.linear_cka(x @ rot * 3.7, y) == pytest.approx(base, abs=1e-12)
        assert analyze.linear_cka(x, y - 5.0) == pytest.approx(base, abs=1e-12)  # centring: offsets do not matter
        assert base < 0.999
    x = torch.randn(40, 4, generator=g, dtype=torch.float64)
    a = x[:, :2] @ torch.randn(2, 2, generator=g, dtype=torch.float64)  # depends only on features 0, 1
    b = x[:, 2:]
    assert analyze.linear_cka(a, b) < 0.2


def test_anisotropy():
    v = torch.randn(16)
    assert analyze.anisotropy(v.repeat(10, 1)) == pytest.approx(1.0, abs=1e-12)
    assert analyze.anisotropy(torch.eye(6)) == pytest.approx(0.0, abs=1e-12)
    assert analyze.anisotropy(torch.stack([v, -v])) == pytest.approx(-1.0, abs=1e-12)
    two = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # cosines 1/sqrt2, 0, 1/sqrt2 -> mean sqrt2/3
    assert analyze.anisotropy(two) == pytest.approx(math.sqrt(2) / 3, abs=1e-12)


def test_curvature():
    t = torch.arange(6, dtype=torch.float64)[:, None]
    line = 2.0 + t * torch.tensor([1.0, -2.0, 0.5])
    assert analyze.curvature(line) == pytest.approx(0.0, abs=1e-6)
    square = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])  # turns by 90 degrees
    assert analyze.curvature(square) == pytest.approx(math.pi / 2, abs=1e-9)
    back_and_forth = torch.tensor([[0.0], [1.0], [0.0], [1.0]])  # signed convention: pi, not 0
    assert analyze.curvature(back_and_forth) == pytest.approx(math.pi, abs=1e-6)


def test_prompt_entropy():
    g = torch.Generator().manual_seed(2)
    rank1 = torch.randn(10, 1, generator=g) * torch.randn(1, 32, generator=g)
    assert analyze.prompt_entropy(rank1) == pytest.approx(0.0, abs=1e-6)
    q, _ = torch.linalg.qr(torch.randn(32, 32, generator=g, dtype=torch.float64))
    assert analyze.prompt_entropy(q[:10]) == pytest.approx(1.0, abs=1e-9)  # isotropic: N orthonormal tokens
    assert analyze.prompt_entropy(q[:, :10] * 3) == pytest.approx(1.0, abs=1e-9)  # N > D: the D x D side
    two = torch.diag(torch.tensor([3.0, 1.0, 0.0, 0.0]))[:, :4]  # eigenvalues 9/10, 1/10 of 4 -> known entropy
    ref = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)) / math.log(4)
    assert analyze.prompt_entropy(two) == pytest.approx(ref, abs=1e-9)
    assert analyze.prompt_entropy(two, alpha=2) == pytest.approx(-math.log(0.82) / math.log(4), abs=1e-9)
    assert 0.3 < analyze.prompt_entropy(torch.randn(64, 16, generator=g)) < 1.0


def test_overlap_jaccard_unique():
    a = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
    b = torch.tensor([[1, 0], [3, 5], [0, 1], [2, 7]])  # identical (reordered), partial, disjoint, partial
    cats = analyze.overlap_categories(a, b)
    assert cats == pytest.approx({"identical": 0.25, "partial": 0.5, "disjoint": 0.25})
    assert analyze.expert_jaccard(a, b) == pytest.approx((1 + 1 / 3 + 0 + 1 / 3) / 4)
    assert analyze.unique_experts([a, b], 8) == pytest.approx([2.0, (2 + 3 + 4 + 3) / 4])
    with pytest.raises(ValueError, match="same shape"):
        analyze.overlap_categories(a, b[:, :1])
    x = torch.randn(5, 4)
    assert analyze.mean_cosine(x, 2 * x) == pytest.approx(1.0)
    assert analyze.mean_cosine(x, -x) == pytest.approx(-1.0)


def test_residual_norm_and_increment_cosine():
    h = torch.full((2, 3, 4), 2.0)
    assert analyze.residual_norm(h) == pytest.approx(2.0)
    g = torch.Generator().manual_seed(0)
    d = torch.randn(1, 3, 4, generator=g, dtype=torch.float64)
    e = torch.randn(1, 3, 4, generator=g, dtype=torch.float64)
    steps = [torch.zeros(1, 3, 4, dtype=torch.float64), d, 3 * d, 3 * d - e]  # increments d, 2d, -e
    c = analyze.increment_cosine(steps)
    ref = torch.nn.functional.cosine_similarity(d.flatten(), -e.flatten(), dim=0).item()
    np.testing.assert_allclose(c[:2, :2], 1.0, atol=1e-12)
    assert c[0, 2] == pytest.approx(ref, rel=1e-9) and c[2, 1] == pytest.approx(ref, rel=1e-9)


# -----------------------------------------------------------------------------
# the exact model of Wang et al.'s Theorem 1


def test_theorem1_norm_growth():
    r0 = analyze.theorem1_norms(16, 0.0, 64, 4, shared=True).mean().item()
    r1 = analyze.theorem1_norms(16, 1.0, 64, 4, shared=True).mean().item()
    assert r0 > 20 * r1  # no scaling: the shared residual stream explodes
    assert 1.0 < r1 < 1.5  # 1/N scaling: bounded, near sqrt(1 + 1/2) from the prediction
    assert r1 == pytest.approx(analyze.theorem1_prediction(16, 1.0), rel=0.15)
    # the non-shared stack is bounded already with 1/sqrt(N), the shared one is not
    ns = analyze.theorem1_norms(16, 0.5, 64, 4, shared=False).mean().item()
    sh = analyze.theorem1_norms(16, 0.5, 64, 4, shared=True).mean().item()
    assert ns == pytest.approx(analyze.theorem1_prediction(16, 0.5, shared=False), rel=0.15)
    assert sh > 1.5 * ns


# -----------------------------------------------------------------------------
# subcommands on a tiny random checkpoint


def tiny_checkpoint(path, **overrides):
    cfg = GPTConfig(**{**dict(n_layer=2, n_embd=32, head_dim=16, block_size=32, vocab_size=64), **overrides})
    model = GPT(cfg).init_weights(0)
    os.makedirs(path, exist_ok=True)
    torch.save({"model": model.state_dict(), "model_config": cfg.to_dict(), "train_config": {}, "step": 0},
               os.path.join(path, "ckpt.pt"))
    return str(path)


def run(name, tmp_path, *args):
    """analyze.py NAME at a tiny size; its figure must pass the slide checks (tests/figure_checks.py)."""
    out, drawn = tmp_path / "out", []
    with mock.patch.object(analyze.pyplot(), "close", drawn.append):  # keep the figure main() would close
        analyze.main([name, f"--out_dir={out}", "--n_tokens=256", "--batch_size=2", "--seq_len=32", *args])
    assert (out / f"{name}.png").stat().st_size > 1000
    assert figure_problems(drawn[-1]) == [], name
    for fig in drawn:
        analyze.pyplot().close(fig)
    with open(out / f"{name}.json") as f:
        return json.load(f)["result"]


@pytest.fixture(scope="module")
def plain_ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def looped_ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("looped"), n_loop=3)


@pytest.fixture(scope="module")
def looped_moe_ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("lmoe"), n_loop=3, n_expert=4, top_k=2)


def identity_block_checkpoint(path, layers=(1,), **overrides):
    """tiny_checkpoint with blocks planted as the identity (their attention and FFN write nothing to the stream):
    the state after such a block equals the state before it, a known answer for every analysis of the states."""
    ckpt = tiny_checkpoint(path, **overrides)
    state = torch.load(os.path.join(ckpt, "ckpt.pt"), weights_only=True)
    for layer in layers:
        state["model"][f"blocks.{layer}.attn.c_proj.weight"].zero_()
        state["model"][f"blocks.{layer}.ffn.c_proj.weight"].zero_()
    torch.save(state, os.path.join(ckpt, "ckpt.pt"))
    return ckpt


def test_jsd_subcommand(tmp_path, plain_ckpt):
    """A planted effect: with its last block the identity, layer 1 already gives the final distribution (JSD 0,
    every token converged); the intact model's layer 1 does not. Each name reads its own checkpoint."""
    planted = identity_block_checkpoint(tmp_path / "planted")
    r = run("jsd", tmp_path, f"--ckpt={plain_ckpt},{planted}", "--names=intact,planted", "--jsd_threshold=1e-4")
    intact, planted = r["intact"]["layers"], r["planted"]["layers"]
    assert planted[0]["mean"] == pytest.approx(0.0, abs=1e-9) and planted[0]["frac_converged"] == 1.0
    assert intact[0]["mean"] > 1e-4 and intact[0]["frac_converged"] < 0.5
    assert intact[-1]["mean"] == pytest.approx(0.0, abs=1e-9)  # the final layer against itself


def test_dtype_and_threads_keys(tmp_path, looped_ckpt):
    """analyze.py takes the device, dtype and threads keys every script takes: in bf16 (autocast) the JSD per layer
    stays close to fp32's, and --threads sets torch's CPU threads."""
    fp32 = run("jsd", tmp_path / "fp32", f"--ckpt={looped_ckpt}")
    bf16 = run("jsd", tmp_path / "bf16", f"--ckpt={looped_ckpt}", "--dtype=bfloat16", "--threads=1")
    assert torch.get_num_threads() == 1
    (a,), (b,) = fp32.values(), bf16.values()
    assert [x["mean"] for x in b["layers"]] == pytest.approx([x["mean"] for x in a["layers"]], abs=0.05)


def test_an_analysis_json_names_its_command_commit_and_checkpoints(tmp_path, looped_ckpt):
    """An analysis that may feed a verdict names what regenerates it (records/README.md): the command as run, the
    code's commit and the sha256 of each checkpoint read (early_exit.py's and eval.py's JSONs too, tested there)."""
    from lab.sweep import file_sha256
    run("jsd", tmp_path, f"--ckpt={looped_ckpt}")
    prov = json.loads((tmp_path / "out" / "jsd.json").read_text())["provenance"]
    ckpt = os.path.join(looped_ckpt, "ckpt.pt")
    assert prov["command"].startswith("python analyze.py jsd --out_dir=")
    assert prov["inputs"] == {ckpt: file_sha256(ckpt)}
    assert len(prov["code"].removesuffix("+dirty")) == 40


def test_jsd_looped_has_boundaries(tmp_path, looped_ckpt):
    r = run("jsd", tmp_path, f"--ckpt={looped_ckpt}")
    layers = next(iter(r.values()))["layers"]
    assert len(layers) == 6 and [lb["label"]["boundary"] for lb in layers] == [False, True] * 3


def test_representation_and_residual_ckpt(tmp_path, plain_ckpt):
    """A planted effect: with the second block the identity, the two states are one: CKA 1 between them and equal
    anisotropy, curvature and prompt entropy; with both blocks the identity, the pass ends where it began (one
    residual norm). The intact model's blocks change each."""
    planted = identity_block_checkpoint(tmp_path / "planted")
    r = run("representation", tmp_path, f"--ckpt={plain_ckpt},{planted}", "--names=intact,planted")
    for key in ("anisotropy", "curvature", "prompt_entropy"):
        assert r["planted"][key][0] == pytest.approx(r["planted"][key][1], rel=1e-6)
        assert r["intact"][key][0] != pytest.approx(r["intact"][key][1], rel=1e-3)
    assert r["planted"]["cka"][0][1] == pytest.approx(1.0, abs=1e-6) and r["intact"]["cka"][0][1] < 0.999
    none = identity_block_checkpoint(tmp_path / "none", layers=(0, 1))  # the pass returns h_0 itself
    r = run("residual_ckpt", tmp_path, f"--ckpt={plain_ckpt},{none}", "--names=intact,planted")
    assert r["planted"]["l2_norm"][0] == pytest.approx(r["planted"]["l2_norm"][1], rel=1e-6)
    assert r["intact"]["l2_norm"][1] > 1.01 * r["intact"]["l2_norm"][0]  # h_0 and the end of the single pass


def test_residual_ckpt_looped(tmp_path, looped_ckpt):
    """A planted effect on a loop: with its shared block the identity (both layers), every pass returns its input,
    so the residual norm is the same at all four loop steps and the three pass ends are one state (CKA 1); the
    intact loop's norm grows and its pass ends differ."""
    planted = identity_block_checkpoint(tmp_path / "planted", layers=(0, 1), n_loop=3)
    r = run("residual_ckpt", tmp_path, f"--ckpt={looped_ckpt},{planted}", "--names=intact,planted")
    assert np.allclose(r["planted"]["l2_norm"], r["planted"]["l2_norm"][0], rtol=1e-6)
    assert all(b > a for a, b in zip(r["intact"]["l2_norm"], r["intact"]["l2_norm"][1:]))
    cos = np.array(r["intact"]["increment_cosine"])
    assert np.allclose(cos, cos.T) and (np.abs(cos - np.eye(3)) < 0.999).all()
    r = run("representation", tmp_path, f"--ckpt={looped_ckpt},{planted}", "--names=intact,planted")
    assert len(r["intact"]["cka"]) == 3  # one state per loop pass, the end of each
    assert np.allclose(r["planted"]["cka"], 1.0, atol=1e-6) and np.array(r["intact"]["cka"]).min() < 0.999


def test_theorem1_subcommand(tmp_path):
    """The command reports theorem1_norms itself (same seed, same numbers) under the right labels, and the known
    answers of theorem1_prediction: non-shared stacks and the shared one at alpha = 1 on the prediction, the shared
    one at alpha < 1 at or above it (a lower bound), and no scaling growing far beyond 1/N."""
    r = run("theorem1", tmp_path, "--width=64", "--trials=8", "--max_loops=8")
    for key, rows in r.items():
        shared, alpha = key.startswith("shared"), float(key.split("alpha")[1])
        assert [row["n_loop"] for row in rows] == [1, 2, 4, 8]
        for row in rows:
            n = row["n_loop"]
            direct = analyze.theorem1_norms(n, alpha, 64, 8, shared).mean().item()
            assert row["mean"] == pytest.approx(direct, rel=1e-12)
            predicted = analyze.theorem1_prediction(n, alpha, shared)
            if shared and alpha < 1:
                assert row["mean"] > 0.85 * predicted, (key, n)
            else:
                assert row["mean"] == pytest.approx(predicted, rel=0.15), (key, n)
    assert r["shared_alpha0"][-1]["mean"] > 3 * r["shared_alpha1"][-1]["mean"]


def test_coordcheck_subcommand(tmp_path):
    """Known answers of the coord check (microsoft/mup; Yang et al. 2022, arXiv:2203.03466): at the base width
    (mup_base_width = 128) muP on and off are one model, and at R = 1 every residual scaling is the plain block, so
    their traces are equal to the last bit; and muP's purpose as a planted effect: after Adam steps at one LR the
    output logits grow with width under standard parametrisation and stay put under muP, while the embedding output
    is width-independent in both."""
    r = run("coordcheck", tmp_path, "--widths=(32,128)", "--steps=3", "--n_seeds=1", "--loops=(1,2)", "--n_layer=1",
            "--scalings=('none','linear')", "--block_size=16", "--seq_len=16", "--mup_base_width=128")
    runs, slope = r["runs"], r["log_log_slope_last_step"]
    assert runs["width, muP on"]["128"] == runs["width, muP off"]["128"]
    assert runs["width, muP on"]["32"] != runs["width, muP off"]["32"]
    assert runs["loops, none"]["1"] == runs["loops, linear"]["1"]
    assert runs["loops, none"]["2"] != runs["loops, linear"]["2"]
    assert slope["width, muP off"]["head"] > 0.8 and abs(slope["width, muP on"]["head"]) < 0.3
    assert abs(slope["width, muP off"]["embedding"]) < 0.2 and abs(slope["width, muP on"]["embedding"]) < 0.2


def test_residual_subcommand(tmp_path):
    r = run("residual", tmp_path, "--n_embd=32", "--head_dim=16", "--n_layer=1", "--loops=(1,2)", "--n_seeds=1",
            "--steps=2", "--seq_len=16", "--block_size=16", "--batch_size=1")
    final = r["final_norm_at_largest_R"]
    assert set(final["looped"]) == set(final["nonshared"]) == {"none", "sqrt", "linear"}
    one = [r["runs"][kind][s]["1"]["norms"] for kind in ("looped", "nonshared") for s in ("none", "linear")]
    assert all(np.allclose(one[0], o) for o in one)  # R = 1: one pass of the same weights, whatever the rule
    assert len(r["increment_cosine"]["looped"]) == 2
    for kind in ("looped", "nonshared"):  # the exponent of the norm in R, from R=1 to R=2: log2 of their ratio
        for s, exponent in r["growth_exponent"][kind].items():
            norms = r["runs"][kind][s]
            assert exponent == pytest.approx(np.log2(norms["2"]["norms"][-1] / norms["1"]["norms"][-1]))
            # one seed: its own exponent is the mean's, its mean cosine the off-diagonal of its 2 x 2 matrix
            assert r["per_seed"][kind][s]["growth_exponent"] == pytest.approx([exponent])
    matrix = np.array(r["increment_cosine"]["looped"])
    assert r["per_seed"]["looped"]["none"]["mean_cosine_at_largest_R"] == pytest.approx([matrix[0, 1]])


def test_residual_seeds_start_at_seed_so_a_fresh_set_adds_new_ones(tmp_path):
    """--seed=S --n_seeds=K runs seeds S ... S+K-1 (a campaign's fresh seeds): seed 1 alone gives what it gave as the
    second of seeds 0 and 1."""
    tiny = ("--n_embd=32", "--head_dim=16", "--n_layer=1", "--loops=(1,2)", "--steps=2", "--seq_len=16",
            "--block_size=16", "--batch_size=1")
    both = run("residual", tmp_path / "both", *tiny, "--n_seeds=2")["per_seed"]
    second = run("residual", tmp_path / "second", *tiny, "--n_seeds=1", "--seed=1")["per_seed"]
    for kind in ("looped", "nonshared"):
        for s in ("none", "linear"):
            for key in ("growth_exponent", "mean_cosine_at_largest_R"):
                assert second[kind][s][key] == pytest.approx(both[kind][s][key][1:], rel=1e-6)


def test_growth_exponent_is_wang_et_al_s_power_of_r():
    """Hand-computed: norms growing as R, sqrt(R) and not at all over R = 1 ... 32 give exponents 1, 1/2 and 0 (Wang
    et al. 2026, arXiv:2606.18524, §5.1: none, 1/sqrt(R), 1/R); only the smallest and largest R count."""
    for power in (1.0, 0.5, 0.0):
        per_r = {str(r): {"norms": [9.0, 0.3 * r ** power]} for r in (32, 1, 4)}
        assert analyze.growth_exponent(per_r) == pytest.approx(power)
    per_r = {"2": {"norms": [2.0]}, "8": {"norms": [1.0]}, "4": {"norms": [100.0]}}
    assert analyze.growth_exponent(per_r) == pytest.approx(-0.5)
    per_r = {"1": {"final": [1.0, 2.0]}, "4": {"final": [4.0, 4.0]}}  # seed by seed: 4 / 1 and 4 / 2 over 4
    assert analyze.growth_exponent(per_r, "final") == pytest.approx([1.0, 0.5])


def test_residual_protocol_optimizer_has_wang_settings():
    """Wang et al. 2026 (arXiv:2606.18524, Table 4): AdamW, betas (0.9, 0.95), eps 1e-8, decay on matrices only; each
    group keeps the model's own LR and eps multipliers (1/R residual scaling scales the looped blocks' LR)."""
    cfg = GPTConfig(n_layer=1, n_loop=4, n_embd=32, head_dim=16, vocab_size=64, block_size=16,
                    residual_scaling="linear")
    model = GPT(cfg).init_weights(0)
    opt = analyze.adamw(model, dict(lr=2e-3, weight_decay=0.1, device="cpu"))
    assert isinstance(opt, torch.optim.AdamW)
    groups = model.param_groups()
    assert len(opt.param_groups) == len(groups) and any(g["lr_scale"] != 1 for g in groups)
    for ours, theirs in zip(opt.param_groups, groups):
        assert ours["betas"] == (0.9, 0.95)
        assert ours["lr"] == pytest.approx(2e-3 * theirs["lr_scale"])
        assert ours["eps"] == pytest.approx(1e-8 * theirs["eps_scale"])
        assert ours["weight_decay"] == (0.1 if theirs["decay"] else 0.0)


def test_conditioning_subcommand(tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "c", n_loop=2, loop_cond="iteradaln")
    rows = next(iter(run("iteradaln", tmp_path, f"--ckpt={ckpt}").values()))
    attn = [row for row in rows if row["branch"] == "attn"]
    assert len(attn) == 4 and {row["loop"] for row in attn} == {0, 1}  # 2 layers x 2 iterations
    assert all(row["mean_alpha"] == 0.0 and row["mean_abs_gamma"] == 0.0 for row in attn)  # zero-init modulators
    assert all("mean_alpha" not in row for row in rows if row["branch"] == "ffn")  # alpha gates attention only


def test_routing_subcommands(tmp_path, looped_moe_ckpt):
    r = next(iter(run("routing", tmp_path, f"--ckpt={looped_moe_ckpt}").values()))
    assert set(r) == {"0", "1"} and set(r["0"]) == {"0-1", "0-2", "1-2"}  # every pair of the 3 passes
    assert all(sum(c.values()) == pytest.approx(1.0) for layer in r.values() for c in layer.values())
    d = next(iter(run("routing_dynamics", tmp_path, f"--ckpt={looped_moe_ckpt}").values()))
    for m in ("cosine", "jaccard"):
        assert np.allclose(np.diag(d["mean"][m]), 1.0) and np.allclose(d["mean"][m], np.transpose(d["mean"][m]))
    a = next(iter(run("active_params", tmp_path, f"--ckpt={looped_moe_ckpt}").values()))
    u = a["unique_experts"]
    assert u[0] == 2.0 and u == sorted(u) and u[-1] <= 6.0  # top-2, then only new experts add up to 2 per pass
    assert a["rho"][0] == pytest.approx(a["rho_star"]) and a["rho"][-1] <= a["rho"][0] and len(set(a["a_attn"])) == 1


def test_unique_experts_agrees_with_routing(looped_moe_ckpt):
    from runs import load_model
    model, _ = load_model(looped_moe_ckpt)
    idx = torch.randint(64, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), analyze.record_routing(model) as records:
        model(idx)
    recs = analyze.routing_records(model, [idx])
    for layer, loops in analyze.loop_layers(recs).items():
        ours = analyze.unique_experts([recs[(layer, k)]["experts"] for k in loops], 4)
        assert ours[-1] == pytest.approx(analyze.unique_experts_per_token(records, 4)[layer])


def test_nonshared_stack_and_loop_steps():
    cfg = GPTConfig(n_layer=2, n_embd=32, head_dim=16, block_size=16, vocab_size=64)
    model = analyze.nonshared_model(cfg, 4, "sqrt")
    assert len(model.blocks) == 8 and model.config.n_loop == 1
    assert torch.allclose(model.res_scales, torch.full((8,), 0.5))
    idx = torch.randint(64, (1, 16))
    assert len(analyze.loop_steps(model, idx, every=2)) == 5  # h_0 + one state per copy of the 2-layer block
    looped = analyze.GPT(analyze.looped_config(cfg, 4, "sqrt"))
    assert len(analyze.loop_steps(looped, idx)) == 5 and len(looped.blocks) == 2


def test_bad_input_messages(tmp_path, plain_ckpt):
    with pytest.raises(SystemExit, match="name an analysis"):
        analyze.main(["nope"])
    with pytest.raises(SystemExit, match="unknown key"):
        analyze.main(["jsd", "--ckpt_dir=x"])
    with pytest.raises(ConfigError, match="no checkpoint"):
        analyze.main(["jsd", f"--ckpt={tmp_path}/missing", f"--out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"has no MoE layer that runs on more than one pass"):
        analyze.main(["routing", f"--ckpt={plain_ckpt}", f"--out_dir={tmp_path}"])


def committed_analyses():
    """Every analysis JSON committed in records/ and course/ whose figure analyze.py draws."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "records", "*", "*.json"))
                       + glob.glob(os.path.join(ROOT, "course", "*", "*.json"))):
        with open(path) as f:
            saved = json.load(f)
        if isinstance(saved, dict) and saved.get("analysis") in analyze.DRAWINGS:
            found.append(path)
    return found


@pytest.mark.parametrize("path", committed_analyses(), ids=lambda p: os.path.relpath(p, ROOT))
def test_committed_analysis_figures_redraw_from_their_json_readably(path, tmp_path):
    """`python analyze.py redraw FILE.json` draws a committed analysis's figure from its JSON alone (no checkpoint),
    and the figure, laid out as it is saved, passes the slide checks. (Its PNG is not encoded here: that takes as long
    as the checks, and test_redraw_writes_the_png_beside_the_json does it once.)"""
    copy = tmp_path / os.path.basename(path)
    copy.write_text(open(path).read())
    saved = []
    with mock.patch.object(analyze.pyplot(), "close"), mock.patch.object(
            analyze.pyplot().Figure, "savefig", lambda fig, png, **kw: saved.append((fig, png))):
        (png,) = analyze.main(["redraw", str(copy)])
    ((fig, written),) = saved
    assert written == png == str(copy).removesuffix(".json") + ".png" and figure_problems(fig) == []
    analyze.pyplot().close(fig)


def test_redraw_writes_the_png_beside_the_json(tmp_path):
    copy = tmp_path / "residual.json"
    copy.write_text(open(os.path.join(ROOT, "records", "wang2026", "residual.json")).read())
    (png,) = analyze.main(["redraw", str(copy)])
    assert png == str(tmp_path / "residual.png") and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_redraw_refuses_what_is_not_an_analysis_json(tmp_path):
    (tmp_path / "x.json").write_text('{"results": {}}')
    with pytest.raises(ConfigError, match="not the JSON of an analysis"):
        analyze.main(["redraw", str(tmp_path / "x.json")])


def test_figures_count_layers_and_passes_from_1():
    """One numbering (COURSE.md, lecture 1): a pass axis starting at 0, or a layer axis still labelled "(index)", is
    a slide problem; the routing dynamics heatmaps number their passes 1..K."""
    fig, ax = analyze.pyplot().subplots()
    analyze.heatmap(ax, np.eye(3), "cosine", "pass (counted from 1)", first=0)
    assert any("not counted from 1" in p for p in figure_problems(fig))
    analyze.pyplot().close(fig)
    fig, ax = analyze.pyplot().subplots()
    ax.bar([1, 2], [50, 60])
    ax.set(xlabel="physical layer (index)", ylabel="tokens (%)", xticks=[1, 2])
    assert any("not counted from 1" in p for p in figure_problems(fig))
    analyze.pyplot().close(fig)
    saved = json.load(open(os.path.join(ROOT, "course", "l05", "routing_dynamics.json")))
    fig = analyze.draw_routing_dynamics(saved["result"], saved["config"])
    assert figure_problems(fig) == []
    passes = [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert passes and all(p == ["1", "2"] for p in passes), passes
    analyze.pyplot().close(fig)
