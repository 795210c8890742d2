"""course/nano/: the minimal models ARE the real ones. For each step (gpt.py, loop.py, prelude.py, moe.py, exit.py,
iteradaln.py) the project's model.GPT of that family is built at a tiny size, initialised, its weights perturbed (so that an identity at init,
such as linear injection's [I | 0], cannot hide a bug), loaded into the minimal file with its from_project, and both
must give the same logits (and loss, MoE balance terms included) within 1e-5, with kernels.py's CPU fast paths off
and on, and with the minimal file's KV cache (prompt, then one token at a time). Also: each minimal file imports
nothing from the project, each step's diff over the one before stays small, and course/nano/README.md shows exactly
the diffs course/nano/diffs.py prints. Tiny models, one thread, a few seconds in all."""
import ast
import difflib
import importlib.util
import os
import re
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from model import GPT, GPTConfig  # noqa: E402

NANO = os.path.join(REPO, "course", "nano")
V, T = 61, 12


def nano(step):
    """Load course/nano/<step>.py under its own module name (loop.py and moe.py share the project modules' names)."""
    spec = importlib.util.spec_from_file_location(f"course_nano_{step}", os.path.join(NANO, f"{step}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# each step's project config: (step, the family's keys over GPTConfig's defaults), at a tiny size
FAMILIES = [
    ("gpt", dict()),
    ("loop", dict(n_loop=3)),
    ("prelude", dict(n_prelude=1, n_coda=2, n_loop=3, injection="linear")),
    ("moe", dict(n_expert=4, top_k=2, n_loop=2)),  # Lee et al.'s Looped-MoE
    ("moe", dict(n_expert=4, top_k=2, n_loop=1)),  # their MoE
    ("exit", dict(n_loop=3)),  # loop.py with the exit study: the same model
    ("iteradaln", dict(n_loop=3, loop_cond="iteradaln")),  # Chen et al.'s per-pass conditioning
]
IDS = [f"{step}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for step, kw in FAMILIES]
TINY = dict(n_embd=32, head_dim=16, n_layer=2, block_size=16, vocab_size=V)


def project_model(family, seed=0, cpu_kernels=False):
    torch.manual_seed(seed)
    real = GPT(GPTConfig(**{**TINY, **family}), cpu_kernels=cpu_kernels).init_weights(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in real.parameters():  # random values everywhere: no identity of the init can hide a bug
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return real.eval()


def tokens(B=2, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fast", [False, True], ids=["plain_ops", "cpu_fast_paths"])
@pytest.mark.parametrize("step, family", FAMILIES, ids=IDS)
def test_the_minimal_model_gives_the_real_models_logits(step, family, fast):
    """Logits and loss (with the MoE balance terms the real model returns in aux) of the real model and the minimal
    one holding its weights."""
    real = project_model(family, cpu_kernels=fast)
    mini = nano(step).from_project(real.state_dict(), real.config.to_dict()).eval()
    idx = tokens()
    targets = tokens(seed=1)
    with torch.no_grad():
        logits, loss, aux = real(idx, targets)
        mine, my_loss = mini(idx, targets)
    diff = (logits - mine).abs().max().item()
    print(f"{step} {family} fast={fast}: max |logits difference| {diff:.2e}")
    assert diff < 1e-5
    assert abs(loss.item() + sum(v.item() for v in aux.values()) - my_loss.item()) < 1e-5


@pytest.mark.parametrize("step, family", FAMILIES, ids=IDS)
def test_cached_decoding_gives_the_full_forwards_logits(step, family):
    """The minimal KV cache (one slot per executed layer): the prompt, then one token at a time, gives the real
    model's full-forward logits at every position."""
    real = project_model(family)
    mini = nano(step).from_project(real.state_dict(), real.config.to_dict()).eval()
    idx = tokens()
    with torch.no_grad():
        full = real(idx)[0]
        cache = [[] for _ in range(mini.n_slots)]
        parts = [mini(idx[:, :5], cache=cache)[0]] + [mini(idx[:, t:t + 1], cache=cache)[0] for t in range(5, T)]
    assert (torch.cat(parts, dim=1) - full).abs().max().item() < 1e-5


@pytest.mark.parametrize("step, family", FAMILIES, ids=IDS)
def test_from_project_refuses_what_the_file_does_not_implement(step, family):
    real = project_model(family)
    config = {**real.config.to_dict(), "qk_norm": True}
    with pytest.raises(ValueError, match="qk_norm"):
        nano(step).from_project(real.state_dict(), config)


def test_a_checkpoint_as_train_py_writes_it_loads(tmp_path):
    """ckpt.pt holds "model" (the state_dict) and "model_config" (GPTConfig.to_dict()); a padded vocabulary and a
    tied head load too (the head then is a copy of the embedding)."""
    real = GPT(GPTConfig(**TINY, vocab_pad_multiple=8, tie_embeddings=True)).init_weights(0).eval()
    torch.save(dict(model=real.state_dict(), model_config=real.config.to_dict()), tmp_path / "ckpt.pt")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    mini = nano("gpt").from_project(ckpt["model"], ckpt["model_config"])
    assert mini.cfg.vocab_size == 64
    with torch.no_grad():
        assert (real(tokens())[0] - mini(tokens())[0]).abs().max().item() < 1e-5


STEPS = ["gpt", "loop", "prelude", "moe", "exit", "iteradaln"]


@pytest.mark.parametrize("quantile", [None, 0.25, 0.5, 0.75, "inf"])
def test_the_minimal_exit_study_stops_where_the_projects_does(quantile):
    """exit.py's teacher-forced study against the project's (early_exit.exit_records: the readouts at the loop
    boundaries, exits.exit_choice: the first with entropy below tau): each token stops after the same pass, and the
    mean loss of the predictions where they stop is the same, at tau = 0 (never early), inf (always after pass 1)
    and quantiles of the boundaries' entropies (at the median some tokens stop after each pass)."""
    import early_exit
    import exits
    real = project_model(dict(n_loop=3))
    mini = nano("exit").from_project(real.state_dict(), real.config.to_dict()).eval()
    idx, targets = tokens(), tokens(seed=1)
    with torch.no_grad():
        records = early_exit.exit_records(real, idx, targets, exits.exit_candidates(real, exits.depth_labels(real)),
                                          ("entropy",))
    score = records["scores"]["entropy"]  # (K boundaries before the last, tokens)
    tau = {None: 0.0, "inf": float("inf")}.get(quantile) if quantile in (None, "inf") else \
        torch.quantile(score, quantile).item()
    with torch.no_grad():
        loss, stopped = mini.exit_study(idx, targets, tau)
    k = exits.exit_choice(score, tau)  # candidate index; K = the full depth
    assert torch.equal(stopped.flatten(), k.long() + 1)
    assert abs(records["nll"].gather(0, k[None].long()).mean().item() - loss.item()) < 1e-5
    if quantile == 0.5:
        assert len(set(stopped.flatten().tolist())) == 3, stopped  # every pass ends some token's walk


@pytest.mark.parametrize("step", STEPS)
def test_a_minimal_file_imports_nothing_from_the_project(step):
    """Only torch and the standard library: a student reads one file, nothing else."""
    tree = ast.parse(open(os.path.join(NANO, f"{step}.py")).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{step}.py: a relative import"
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top == "torch" or top in sys.stdlib_module_names, f"{step}.py imports {name}"


@pytest.mark.parametrize("step", STEPS)
def test_a_minimal_file_runs_alone_and_its_loss_falls(step, monkeypatch, capsys):
    """`python course/nano/<step>.py` in miniature: a few training steps on a short text, the validation loss
    printed before and after, lower after."""
    monkeypatch.setattr(sys, "argv", ["x"])
    module = nano(step)
    text = os.path.join(REPO, "COURSE.md")
    module.main(text, steps=15, batch_size=4, lr=1e-2)
    losses = [float(x) for x in re.findall(r"step +\d+ \| val loss ([\d.]+)", capsys.readouterr().out)]
    assert len(losses) == 2 and losses[1] < losses[0] - 0.5


# A step must stay readable as one diff. Changed lines (removed + added, the file headers not counted) of each step
# over the one it builds on, the rewritten module docstring (about 20 lines) included; at most 40 for looping (31
# today), 90 for prelude/coda/injection (72), 110 for routed experts (97), 60 for the early-exit study, 90 for
# IterAdaLN.
DIFF_BOUNDS = {"loop": 40, "prelude": 90, "moe": 110, "exit": 60, "iteradaln": 90}


def test_each_step_is_a_small_diff_over_the_one_before():
    diffs = nano("diffs")
    assert set(diffs.STEPS) == set(DIFF_BOUNDS)
    for step, parent in diffs.STEPS.items():
        old = open(os.path.join(NANO, f"{parent}.py")).read().splitlines()
        new = open(os.path.join(NANO, f"{step}.py")).read().splitlines()
        changed = sum(1 for line in difflib.unified_diff(old, new, lineterm="")
                      if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        assert changed == diffs.changed_lines(step)
        assert 0 < changed <= DIFF_BOUNDS[step], f"{step}.py changes {changed} lines of {parent}.py"


def test_the_readme_shows_the_diffs_the_files_make():
    """course/nano/README.md's diff blocks are what diffs.py prints (`python course/nano/diffs.py --write` redoes
    them after an edit of a step)."""
    diffs = nano("diffs")
    blocks = diffs.readme_blocks(open(os.path.join(NANO, "README.md")).read())
    assert set(blocks) == set(diffs.STEPS)
    for step, shown in blocks.items():
        assert shown == diffs.diff(step), f"README.md's diff of {step}.py is stale: python course/nano/diffs.py --write"
