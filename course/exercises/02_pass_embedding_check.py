"""Self-check of COURSE.md's Lecture 2 exercise: a learned per-pass embedding in course/nano/loop.py.

The exercise: give loop.py's GPT a parameter `pass_embed` of shape (n_loop, n_embd), row p the vector e_p added to
the residual stream before the pass of index p (every position gets the same e_p). Passes are named here by their
index in the code, counted from 0: index 0 is the first pass. This script loads your file (by path, under
its own module name) and checks its behaviour against values computed without your code where it can:

  1. GPT(Config(n_loop=3)) has `pass_embed` (a Parameter or an nn.Embedding) of shape (n_loop, n_embd);
  2. with the embeddings zero it gives the logits of the project's model.GPT holding the same weights (the looped
     model without them, tests/test_course_nano.py's reference), within 1e-5;
  3. with known random embeddings, the first pass's first layer reads wte[idx] + e_0, computed here by hand;
  4. pass index p (p = 1, 2) reads the last layer's output at index p-1 plus e_p: its own vector, not another's;
  5. the loss's gradient reaches every pass's row (the embedding is learned);
  6. decoding with the KV cache (a prompt, then one token at a time) gives the full forward's logits.

    python course/exercises/02_pass_embedding_check.py [path/to/your/loop.py]   # default: course/nano/loop.py

It prints each check's verdict and exits 0 only if all six pass. Tiny model, one thread, a few seconds.
"""
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5


def load(path):
    spec = importlib.util.spec_from_file_location("student_loop", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pass_table(model):
    """The (n_loop, n_embd) tensor of the per-pass vectors, whichever way the file holds it."""
    e = getattr(model, "pass_embed", None)
    return e.weight if isinstance(e, torch.nn.Embedding) else e


def perturbed(nano, cfg, seed=0):
    """The student's GPT with every weight random (no identity of the init can hide a bug), in eval mode."""
    torch.manual_seed(seed)
    model = nano.GPT(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.eval()


def block_io(model, idx):
    """[(input of blocks[0], output of blocks[-1])] per pass, recorded by hooks while the model runs on idx."""
    ins, outs = [], []
    h1 = model.blocks[0].register_forward_pre_hook(lambda m, args: ins.append(args[0].detach().clone()))
    h2 = model.blocks[-1].register_forward_hook(lambda m, args, out: outs.append(out.detach().clone()))
    try:
        with torch.no_grad():
            model(idx)
    finally:
        h1.remove()
        h2.remove()
    return list(zip(ins, outs))


def close(a, b):
    return a.shape == b.shape and torch.allclose(a, b, atol=TOL, rtol=0)


def main(argv):
    torch.set_num_threads(1)
    path = Path(argv[0]) if argv else ROOT / "course" / "nano" / "loop.py"
    sys.path.insert(0, str(ROOT))  # the project's model.py, the independent reference
    from model import GPT, GPTConfig

    nano = load(path)
    cfg = nano.Config(n_loop=3, block_size=32)
    idx = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
    results = []

    def check(name, fn):
        try:
            ok, detail = fn()
        except Exception as e:  # a crash is a failure of that check, not of the script
            ok, detail = False, f"{type(e).__name__}: {e}"
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"\n      {detail}" if detail else ""))

    model = perturbed(nano, cfg)
    E = pass_table(model)

    def has_table():
        if E is None:
            return False, "GPT has no attribute pass_embed"
        want = (cfg.n_loop, cfg.n_embd)
        if not isinstance(E, torch.nn.Parameter) or tuple(E.shape) != want:
            return False, f"pass_embed is {type(E).__name__} of shape {tuple(getattr(E, 'shape', ()))}; want a " \
                          f"Parameter (or nn.Embedding) of shape {want}"
        return True, ""

    check("1. GPT has pass_embed, one learned vector per pass: shape (n_loop, n_embd)", has_table)
    if not results[-1]:
        print("      (checks 2-6 need pass_embed)")
        for name in ("2. zero embeddings", "3. pass 0 input", "4. pass p input", "5. gradient", "6. KV cache"):
            print(f"FAIL  {name}: not run")
        return 1

    def zero_is_the_plain_loop():
        with torch.no_grad():
            E.zero_()
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("pass_embed")}
        real = GPT(GPTConfig(vocab_size=cfg.vocab_size, block_size=cfg.block_size, n_layer=cfg.n_layer,
                             n_loop=cfg.n_loop, n_embd=cfg.n_embd, n_head=cfg.n_head, head_dim=cfg.head_dim,
                             d_ff=cfg.d_ff, norm_eps=cfg.norm_eps, rope_base=cfg.rope_base))
        missing, unexpected = real.load_state_dict(state, strict=False)
        if missing or unexpected:
            return False, f"weights other than pass_embed changed: missing {missing}, unexpected {unexpected}"
        with torch.no_grad():
            want, got = real.eval()(idx)[0], model(idx)[0]
        diff = (want - got).abs().max().item()
        return diff <= TOL, f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"

    check("2. with pass_embed = 0 the logits are the looped model's without it (model.GPT, same weights)",
          zero_is_the_plain_loop)

    with torch.no_grad():  # known, distinct vectors, large enough to see
        E.copy_(torch.randn(E.shape, generator=torch.Generator().manual_seed(3)))
    io = block_io(model, idx)

    def first_pass():
        if len(io) != cfg.n_loop:
            return False, f"blocks[0] ran {len(io)} times for n_loop={cfg.n_loop}"
        by_hand = model.wte.weight.detach()[idx] + E.detach()[0]
        if close(io[0][0], by_hand):
            return True, ""
        if close(io[0][0], model.wte.weight.detach()[idx]):
            return False, "pass index 0 (the first pass) reads the token embeddings without e_0"
        return False, "pass index 0 (the first pass) reads something other than wte[idx] + e_0"

    check("3. pass index 0 (the first pass) reads wte[idx] + e_0 (computed by hand)", first_pass)

    def later_passes():
        if len(io) != cfg.n_loop:
            return False, f"blocks[0] ran {len(io)} times for n_loop={cfg.n_loop}"
        for p in range(1, cfg.n_loop):
            h = io[p - 1][1]  # what the last layer wrote at pass p-1
            if close(io[p][0], h + E.detach()[p]):
                continue
            other = [q for q in range(cfg.n_loop) if close(io[p][0], h + E.detach()[q])]
            if other:
                return False, f"pass index {p} gets e_{other[0]}, not its own e_{p}"
            if close(io[p][0], h):
                return False, f"pass index {p} gets no vector"
            return False, f"pass index {p} reads something other than (index {p - 1}'s output) + e_{p}"
        return True, ""

    check(f"4. pass index p reads index p-1's output + e_p, for p = 1..{cfg.n_loop - 1}: each pass its own vector",
          later_passes)

    def gradient():
        model.zero_grad(set_to_none=True)
        model.train()
        model(idx[:, :-1], idx[:, 1:])[1].backward()
        model.eval()
        grad = pass_table(model).grad
        if grad is None:
            return False, "no gradient reaches pass_embed"
        norms = grad.norm(dim=-1)
        dead = [p for p in range(cfg.n_loop) if norms[p] == 0]
        return not dead, f"no gradient reaches the rows of pass(es) {dead}" if dead else ""

    check("5. the loss's gradient reaches every pass's row", gradient)

    def cached():
        with torch.no_grad():
            full = model(idx)[0]
            cache = [[] for _ in range(model.n_slots)]
            steps = [model(idx[:, :10], cache=cache)[0]]
            steps += [model(idx[:, t:t + 1], cache=cache)[0] for t in range(10, idx.size(1))]
        diff = (torch.cat(steps, dim=1) - full).abs().max().item()
        return diff <= TOL, f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"

    check("6. decoding with the KV cache gives the full forward's logits", cached)

    print(f"{sum(results)} of {len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
