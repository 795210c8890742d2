"""Self-check of COURSE.md's Lecture 1 exercise: learned position embeddings in course/nano/gpt.py.

The exercise: give gpt.py's Config a key `pos_emb` ("rope", the default, as now; or "learned") and make "learned"
tell the model where each token sits as GPT-2 does: a learned vector per position, `wpe` of shape
(block_size, n_embd), added to the token embedding of the token at that position, and no rotary positions in
attention. This script loads your file (by path, under its own module name) and checks its behaviour against values
computed without your code:

  1. GPT(Config(pos_emb="learned")) has `wpe` (an nn.Embedding or a Parameter) of shape (block_size, n_embd);
  2. its logits equal the project's model.GPT with pos_emb="learned" holding the same weights, within 1e-5;
  3. the first layer reads wte[idx] + wpe[t] at position t (recorded by a hook, computed here by hand);
  4. the default, pos_emb="rope", still gives the project's rotary model;
  5. decoding with the KV cache (a prompt, then one token at a time) gives the full forward's logits: a token
     decoded after t cached ones sits at position t.

    python course/exercises/01_learned_positions_check.py [path/to/your/gpt.py]   # default: course/nano/gpt.py

It prints each check's verdict and exits 0 only if all five pass. Tiny model, one thread, a few seconds.
"""
import dataclasses
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5


def load(path):
    spec = importlib.util.spec_from_file_location("student_gpt", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def perturbed(nano, cfg, seed=0):
    """The student's GPT with every weight random (no identity of the init can hide a bug), in eval mode."""
    torch.manual_seed(seed)
    model = nano.GPT(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.eval()


def position_table(model):
    e = getattr(model, "wpe", None)
    return e.weight if isinstance(e, torch.nn.Embedding) else e


def project_logits(model, cfg, idx):
    """The project's model.GPT with the same config keys and weights (the parameter names are the same)."""
    from model import GPT, GPTConfig
    real = GPT(GPTConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}))
    state = dict(model.state_dict())
    if isinstance(getattr(model, "wpe", None), torch.nn.Parameter):
        state["wpe.weight"] = state.pop("wpe")
    missing, unexpected = real.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"the weights do not map onto the project's model: missing {missing}, unexpected "
                         f"{unexpected}")
    with torch.no_grad():
        return real.eval()(idx)[0]


def main(argv):
    torch.set_num_threads(1)
    path = Path(argv[0]) if argv else ROOT / "course" / "nano" / "gpt.py"
    sys.path.insert(0, str(ROOT))  # the project's model.py, the independent reference
    nano = load(path)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(2))
    results = []

    def check(name, fn):
        try:
            ok, detail = fn()
        except Exception as e:  # a crash is a failure of that check, not of the script
            ok, detail = False, f"{type(e).__name__}: {e}"
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"\n      {detail}" if detail else ""))

    def has_table():
        if not hasattr(nano.Config(), "pos_emb"):
            return False, "Config has no key pos_emb"
        cfg = nano.Config(block_size=32, pos_emb="learned")
        table = position_table(nano.GPT(cfg))
        want = (cfg.block_size, cfg.n_embd)
        if table is None:
            return False, "GPT has no attribute wpe"
        ok = isinstance(table, torch.nn.Parameter) and tuple(table.shape) == want
        return ok, "" if ok else f"wpe has shape {tuple(table.shape)}; want a learned table of shape {want}"

    check('1. GPT(Config(pos_emb="learned")) has wpe, one learned vector per position: (block_size, n_embd)',
          has_table)
    if not results[-1]:
        print("      (checks 2-5 need it)")
        for name in ("2. logits", "3. first layer input", "4. rope", "5. KV cache"):
            print(f"FAIL  {name}: not run")
        return 1

    cfg = nano.Config(block_size=32, pos_emb="learned")
    model = perturbed(nano, cfg)

    def same_as_project():
        diff = (project_logits(model, cfg, idx) - model(idx)[0]).abs().max().item()
        return diff <= TOL, f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"

    check('2. the logits are the project\'s model.GPT with pos_emb="learned", same weights', same_as_project)

    def first_layer_input():
        seen = []
        hook = model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
        try:
            with torch.no_grad():
                model(idx)
        finally:
            hook.remove()
        by_hand = model.wte.weight.detach()[idx] + position_table(model).detach()[:idx.size(1)]
        ok = seen[0].shape == by_hand.shape and torch.allclose(seen[0], by_hand, atol=TOL, rtol=0)
        return ok, "" if ok else "the first layer reads something other than wte[idx] + wpe[0..T-1]"

    check("3. the first layer reads wte[idx] + wpe[t] at each position t (computed by hand)", first_layer_input)

    def rope_unchanged():
        rope_cfg = nano.Config(block_size=32)
        rope = perturbed(nano, rope_cfg)
        diff = (project_logits(rope, rope_cfg, idx) - rope(idx)[0]).abs().max().item()
        return diff <= TOL, f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"

    check('4. the default, pos_emb="rope", still gives the project\'s rotary model', rope_unchanged)

    def cached():
        with torch.no_grad():
            full = model(idx)[0]
            cache = [[] for _ in range(model.n_slots)]
            steps = [model(idx[:, :10], cache=cache)[0]]
            steps += [model(idx[:, t:t + 1], cache=cache)[0] for t in range(10, idx.size(1))]
        diff = (torch.cat(steps, dim=1) - full).abs().max().item()
        detail = f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"
        if diff > TOL:
            detail += ": does a decoded token get the position after the cached ones (not position 0)?"
        return diff <= TOL, detail

    check("5. decoding with the KV cache gives the full forward's logits", cached)

    print(f"{sum(results)} of {len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
