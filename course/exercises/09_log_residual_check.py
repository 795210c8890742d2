"""Self-check of COURSE.md's Lecture 9 exercise: a residual rule between none and 1/N.

The exercise: add a row "log" to loop.RESIDUAL_RULES whose multiplier on the shared blocks' branches is
1 / (1 + ln N) for N passes. This script computes the multiplier itself and compares:

  1. loop.RESIDUAL_RULES has "log";
  2. N = 4: 1 / (1 + ln 4) = 0.4191..., and N = 1 (no loop): 1;
  3. for N = 2..32 it lies strictly between none's 1 and linear's 1/N;
  4. a model built with residual_scaling="log" multiplies its shared blocks' branches by it (GPT.res_scales), and
     its forward runs.

    python course/exercises/09_log_residual_check.py [project folder]   # default: this repository

Tiny model, one thread, a few seconds.
"""
import math
import sys

import torch

from selfcheck import Checks, use_project

TINY = dict(n_embd=32, head_dim=16, block_size=16)


def main(argv):
    torch.set_num_threads(1)
    use_project(argv)
    import loop
    from model import GPT, GPTConfig
    check = Checks()
    if not check('1. loop.RESIDUAL_RULES has "log"', lambda: ("log" in loop.RESIDUAL_RULES,
                                                              f"rows: {tuple(loop.RESIDUAL_RULES)}")):
        check.not_run(["2. N = 4 and N = 1", "3. N = 2..32", "4. the model"], "check 1 failed")
        return check.status()

    def multiplier(n):
        return loop.residual_multiplier(GPTConfig(n_layer=2, n_loop=n, residual_scaling="log", **TINY))

    def known():
        got4, got1 = multiplier(4), multiplier(1)
        ok = abs(got4 - 1 / (1 + math.log(4))) < 1e-12 and abs(got1 - 1) < 1e-12
        return ok, f"N = 4: {got4:.6f} (expected {1 / (1 + math.log(4)):.6f}); N = 1: {got1:.6f} (expected 1)"

    check("2. N = 4 gives 1 / (1 + ln 4), N = 1 gives 1", known)

    def between():
        for n in range(2, 33):
            if not 1 / n < multiplier(n) < 1:
                return False, f"N = {n}: {multiplier(n):.4f}, not between 1/N = {1 / n:.4f} and 1"
        return True, ""

    check("3. N = 2..32: strictly between 1/N and 1", between)

    def in_the_model():
        model = GPT(GPTConfig(n_layer=2, n_loop=4, residual_scaling="log", **TINY)).init_weights(0)
        want = torch.full((2,), 1 / (1 + math.log(4)))
        model(torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(0)))
        ok = model.res_scales is not None and torch.allclose(model.res_scales.float(), want)
        return ok, f"res_scales {None if model.res_scales is None else model.res_scales.tolist()}"

    check("4. the model's shared blocks carry it (GPT.res_scales), and its forward runs", in_the_model)
    return check.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
