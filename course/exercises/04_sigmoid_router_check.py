"""Self-check of COURSE.md's Lecture 4 exercise: the sigmoid router in course/nano/moe.py.

The exercise: give moe.py's Config a key `router` ("softmax", the default, as now; or "sigmoid") and make "sigmoid"
route as DeepSeek-V3 and Chen et al. 2026 (arXiv:2606.04438) do: each expert's score s = sigmoid(logit), computed on
its own; a token picks its top_k scores; its gates are those scores divided by their sum; and the load-balancing
loss's probabilities p are the scores normalised per token. This script loads your file (by path, under its own
module name) and checks its behaviour against the project's model.GPT, which implements the same router
(moe.py:SigmoidRouter), holding the same weights:

  1. GPT(Config(router="sigmoid")) builds, with the same parameters as the softmax router (a router kind adds none);
  2. its logits equal the project's model.GPT with moe_router="sigmoid", within 1e-5;
  3. its training loss (cross entropy + the balance and z terms) equals the project's loss + its aux terms;
  4. the default, router="softmax", still gives the project's softmax-router logits and loss;
  5. decoding with the KV cache (a prompt, then one token at a time) gives the full forward's logits.

    python course/exercises/04_sigmoid_router_check.py [path/to/your/moe.py]   # default: course/nano/moe.py

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
    spec = importlib.util.spec_from_file_location("student_moe", path)
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


def project_model(model, cfg, router):
    """The project's model.GPT with the same weights (the parameter names are the same; its expert_bias, zero,
    steers only bias balancing's picks)."""
    from model import GPT, GPTConfig
    keys = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "router"}
    real = GPT(GPTConfig(**keys, moe_router=router))
    missing, unexpected = real.load_state_dict(model.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("expert_bias")]
    if missing or unexpected:
        raise ValueError(f"the weights do not map onto the project's model: missing {missing}, unexpected "
                         f"{unexpected}")
    return real.eval()


def compare(nano_model, real, idx, targets):
    """(max |logit difference|, |loss difference|) of the two models on one batch."""
    with torch.no_grad():
        mine, my_loss = nano_model(idx, targets)
        theirs, loss, aux = real(idx, targets)
    return (mine - theirs).abs().max().item(), (my_loss - (loss + sum(aux.values()))).abs().item()


def main(argv):
    torch.set_num_threads(1)
    path = Path(argv[0]) if argv else ROOT / "course" / "nano" / "moe.py"
    sys.path.insert(0, str(ROOT))  # the project's model.py, the independent reference
    nano = load(path)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(2))
    targets = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(3))
    results = []

    def check(name, fn):
        try:
            ok, detail = fn()
        except Exception as e:  # a crash is a failure of that check, not of the script
            ok, detail = False, f"{type(e).__name__}: {e}"
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"\n      {detail}" if detail else ""))

    def builds():
        if not hasattr(nano.Config(), "router"):
            return False, "Config has no key router"
        a = nano.GPT(nano.Config(block_size=32, router="sigmoid"))
        b = nano.GPT(nano.Config(block_size=32))
        shapes = [(n, tuple(p.shape)) for n, p in a.named_parameters()]
        same = shapes == [(n, tuple(p.shape)) for n, p in b.named_parameters()]
        return same, "" if same else "the sigmoid router's model has other parameters than the softmax one's"

    check('1. GPT(Config(router="sigmoid")) builds, with the softmax router\'s parameters', builds)
    if not results[-1]:
        print("      (checks 2-5 need it)")
        for name in ("2. logits", "3. loss", "4. softmax", "5. KV cache"):
            print(f"FAIL  {name}: not run")
        return 1

    cfg = nano.Config(block_size=32, router="sigmoid")
    model = perturbed(nano, cfg)
    diffs = compare(model, project_model(model, cfg, "sigmoid"), idx, targets)

    check('2. the logits are the project\'s model.GPT with moe_router="sigmoid", same weights',
          lambda: (diffs[0] <= TOL, f"max |logit difference| {diffs[0]:.2e} (tolerance {TOL:g})"))
    check("3. the training loss (cross entropy + balance + z) is the project's loss + its aux terms",
          lambda: (diffs[1] <= TOL, f"|loss difference| {diffs[1]:.2e} (tolerance {TOL:g})"))

    def softmax_unchanged():
        soft_cfg = nano.Config(block_size=32)
        soft = perturbed(nano, soft_cfg)
        logit_diff, loss_diff = compare(soft, project_model(soft, soft_cfg, "softmax"), idx, targets)
        ok = logit_diff <= TOL and loss_diff <= TOL
        return ok, f"max |logit difference| {logit_diff:.2e}, |loss difference| {loss_diff:.2e} (tolerance {TOL:g})"

    check('4. the default, router="softmax", still gives the project\'s softmax-router logits and loss',
          softmax_unchanged)

    def cached():
        with torch.no_grad():
            full = model(idx)[0]
            cache = [[] for _ in range(model.n_slots)]
            steps = [model(idx[:, :10], cache=cache)[0]]
            steps += [model(idx[:, t:t + 1], cache=cache)[0] for t in range(10, idx.size(1))]
        diff = (torch.cat(steps, dim=1) - full).abs().max().item()
        return diff <= TOL, f"max |logit difference| {diff:.2e} (tolerance {TOL:g})"

    check("5. decoding with the KV cache gives the full forward's logits", cached)

    print(f"{sum(results)} of {len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
