"""Self-check of COURSE.md's Lecture 6 exercise: the "stored" FLOP convention, wrong on purpose.

The exercise: add a convention "stored" to accounting.py:flops_per_token that counts 6 FLOPs per stored (unique)
non-embedding parameter, as if a shared block ran once, and let the command lines accept it. This script counts the
parameters itself (every parameter outside the token and position embeddings and the head) and compares:

  1. flops_per_token(model, "stored") runs and "stored" is one of accounting.CONVENTIONS;
  2. a plain 4-layer model: stored = 6 x its non-embedding parameters, counted here;
  3. a 2-layer block looped twice: stored = 6 x its non-embedding parameters, half the plain model's;
  4. Lee et al.'s convention still counts both the same (6 x active parameters: the same depth executed);
  5. `python scaling.py count --n_layer=2 --n_loop=2 --flops_convention=stored` accepts it.

    python course/exercises/06_stored_flops_check.py [project folder]   # default: this repository

Tiny models, one thread, a few seconds.
"""
import contextlib
import io
import sys

import torch

from selfcheck import Checks, use_project

TINY = dict(n_embd=32, head_dim=16, block_size=16)
EMBEDDINGS = ("wte.", "wpe.", "lm_head.")


def main(argv):
    torch.set_num_threads(1)
    use_project(argv)
    import accounting
    from model import GPT, GPTConfig
    plain, looped = (GPT(GPTConfig(n_layer=n, n_loop=r, **TINY)) for n, r in ((4, 1), (2, 2)))
    check = Checks()

    def stored_by_hand(model):
        return 6 * sum(p.numel() for name, p in model.named_parameters() if not name.startswith(EMBEDDINGS))

    def known():
        flops = accounting.flops_per_token(plain, "stored")
        ok = "stored" in accounting.CONVENTIONS and flops > 0
        return ok, "" if ok else f"CONVENTIONS {accounting.CONVENTIONS}, flops {flops}"

    if not check('1. flops_per_token(model, "stored") runs, and "stored" is a convention', known):
        check.not_run(["2. plain", "3. looped", "4. lee", "5. scaling.py count"], "check 1 failed")
        return check.status()

    def compare(model, what):
        got, want = accounting.flops_per_token(model, "stored"), stored_by_hand(model)
        return got == want, f"{what}: {got:,.0f} FLOPs/token, 6 x stored non-embedding parameters = {want:,}"

    check("2. a plain 4-layer model: 6 x its stored non-embedding parameters", lambda: compare(plain, "plain"))
    check("3. a 2-layer block looped twice: 6 x its stored ones (half the plain model's)",
          lambda: compare(looped, "looped"))

    def lee_unchanged():
        a, b = accounting.flops_per_token(plain, "lee"), accounting.flops_per_token(looped, "lee")
        return a == b, f"lee: plain {a:,.0f}, looped {b:,.0f} FLOPs/token (the same depth runs in both)"

    check("4. Lee et al.'s convention counts the plain and the looped model the same", lee_unchanged)

    def command_line():
        import scaling
        with contextlib.redirect_stdout(io.StringIO()):  # (the count it prints)
            out = scaling.main_count(["--n_layer=2", "--n_loop=2", "--flops_convention=stored"])
        return out["flops_convention"] == "stored", ""

    check("5. scaling.py count --flops_convention=stored is accepted", command_line)
    return check.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
