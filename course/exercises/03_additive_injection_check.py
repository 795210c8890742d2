"""Self-check of COURSE.md's Lecture 3 exercise: additive injection in course/nano/prelude.py.

The exercise: give prelude.py's Config a key `injection` ("linear", the default, as now; or "additive") and make
"additive" inject the prelude's output e into every pass by addition, u = h + e, with h = 0 before the first pass
(Schwethelm et al. 2026, arXiv:2604.21106, App. C.1): no parameters. This script loads your file (by path, under its
own module name) and checks its behaviour against values computed without your code:

  1. GPT(Config(injection="additive")) builds, with no injection parameters (additive has none);
  2. its logits equal the project's model.GPT with injection="additive" holding the same weights, within 1e-5;
  3. the first pass's first layer reads e, the prelude's output (recorded by hooks);
  4. pass index p (p = 1, 2; index 0 is the first pass, as in the code) reads index p-1's output plus e;
  5. the default, injection="linear", still gives the project's linear-injection model's logits;
  6. decoding with the KV cache (a prompt, then one token at a time) gives the full forward's logits.

    python course/exercises/03_additive_injection_check.py [path/to/your/prelude.py]   # default: course/nano/prelude.py

It prints each check's verdict and exits 0 only if all six pass. Tiny model, one thread, a few seconds.
"""
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5


def load(path):
    spec = importlib.util.spec_from_file_location("student_prelude", path)
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


def project_state(model, cfg):
    """The student's weights under the project's names: one list `blocks` holds the prelude, shared and coda layers
    in that order; the linear injection is inject.proj (written here, not with the file's own from_project)."""
    out = {}
    for name, value in model.state_dict().items():
        part, _, rest = name.partition(".")
        offset = {"prelude": 0, "blocks": cfg.n_prelude, "coda": cfg.n_prelude + cfg.n_layer}.get(part)
        if offset is not None:
            i, _, rest = rest.partition(".")
            name = f"blocks.{offset + int(i)}.{rest}"
        elif name == "inject.weight":
            name = "inject.proj.weight"
        out[name] = value
    return out


def project_logits(model, cfg, injection, idx):
    from model import GPT, GPTConfig
    real = GPT(GPTConfig(vocab_size=cfg.vocab_size, block_size=cfg.block_size, n_layer=cfg.n_layer,
                         n_loop=cfg.n_loop, n_prelude=cfg.n_prelude, n_coda=cfg.n_coda, n_embd=cfg.n_embd,
                         n_head=cfg.n_head, head_dim=cfg.head_dim, d_ff=cfg.d_ff, norm_eps=cfg.norm_eps,
                         rope_base=cfg.rope_base, injection=injection))
    missing, unexpected = real.load_state_dict(project_state(model, cfg), strict=False)
    if missing or unexpected:
        raise ValueError(f"the weights do not map onto the project's model: missing {missing}, unexpected "
                         f"{unexpected}")
    with torch.no_grad():
        return real.eval()(idx)[0]


def pass_inputs(model, idx):
    """(the prelude's output e, [(input of blocks[0], output of blocks[-1])] per pass), recorded by hooks."""
    ins, outs, prelude = [], [], []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: ins.append(args[0].detach().clone())),
             model.blocks[-1].register_forward_hook(lambda m, args, out: outs.append(out.detach().clone())),
             model.prelude[-1].register_forward_hook(lambda m, args, out: prelude.append(out.detach().clone()))]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    return prelude[0], list(zip(ins, outs))


def close(a, b):
    return a.shape == b.shape and torch.allclose(a, b, atol=TOL, rtol=0)


def main(argv):
    torch.set_num_threads(1)
    path = Path(argv[0]) if argv else ROOT / "course" / "nano" / "prelude.py"
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

    def builds():
        if not hasattr(nano.Config(), "injection"):
            return False, "Config has no key injection"
        model = nano.GPT(nano.Config(n_loop=3, block_size=32, injection="additive"))
        names = [n for n, _ in model.named_parameters() if n.startswith("inject")]
        return not names, f"additive injection has no parameters; this model has {names}" if names else ""

    check('1. GPT(Config(injection="additive")) builds, with no injection parameters', builds)
    if not results[-1]:
        print("      (checks 2-6 need it)")
        for name in ("2. the project's additive model", "3. pass 0 input", "4. pass p input", "5. linear",
                     "6. KV cache"):
            print(f"FAIL  {name}: not run")
        return 1

    cfg = nano.Config(n_loop=3, block_size=32, injection="additive")
    model = perturbed(nano, cfg)

    def same_as_project():
        diff = (project_logits(model, cfg, "additive", idx) - model(idx)[0]).abs().max().item()
        return diff <= TOL, f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"

    check('2. the logits are the project\'s model.GPT with injection="additive", same weights', same_as_project)

    e, io = pass_inputs(model, idx)

    def first_pass():
        if len(io) != cfg.n_loop:
            return False, f"blocks[0] ran {len(io)} times for n_loop={cfg.n_loop}"
        if close(io[0][0], e):
            return True, ""
        if close(io[0][0], 2 * e):
            return False, "pass index 0 (the first pass) reads e + e: h before the first pass must be 0, not e"
        return False, "pass index 0 (the first pass) reads something other than e, the prelude's output"

    check("3. pass index 0 (the first pass) reads e, the prelude's output", first_pass)

    def later_passes():
        if len(io) != cfg.n_loop:
            return False, f"blocks[0] ran {len(io)} times for n_loop={cfg.n_loop}"
        for p in range(1, cfg.n_loop):
            h = io[p - 1][1]  # what the shared block's last layer wrote at pass p-1
            if close(io[p][0], h + e):
                continue
            if close(io[p][0], h):
                return False, f"pass index {p} gets no e"
            return False, f"pass index {p} reads something other than (index {p - 1}'s output) + e"
        return True, ""

    check(f"4. pass index p reads index p-1's output + e, for p = 1..{cfg.n_loop - 1}", later_passes)

    def linear_unchanged():
        lin_cfg = nano.Config(n_loop=3, block_size=32)
        lin = perturbed(nano, lin_cfg)
        diff = (project_logits(lin, lin_cfg, "linear", idx) - lin(idx)[0]).abs().max().item()
        return diff <= TOL, f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"

    check('5. the default, injection="linear", still gives the project\'s linear-injection logits', linear_unchanged)

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
