"""Self-check of COURSE.md's Lecture 8 exercise: a trajectory sampler that always halves.

The exercise: beside loop.py:uniform_trajectory, write a sampler whose steps are each half of what is left, in units
of 1/L: L/2, L/4, ..., 1, 1 (for L = 8: 4, 2, 1, 1), and register it as "halving" in loop.TRAJECTORY_SAMPLERS. This
script compares its trajectories with the halving rule computed here and trains one step with it:

  1. loop.TRAJECTORY_SAMPLERS has "halving";
  2. L = 8 gives [4, 2, 1, 1], and likewise L = 2, 4, 16 (L/2, L/4, ..., 1, 1);
  3. for every L from 2 to 16: each step half of what is left before it (rounded down), the last step one unit,
     the steps summing to L (a shortcut ends at t = 1);
  4. a LoopFormer model with trajectory_sampler="halving" runs a training step (loss and gradients finite).

    python course/exercises/08_halving_sampler_check.py [project folder]   # default: this repository

Tiny model, one thread, a few seconds.
"""
import sys

import torch

from selfcheck import Checks, use_project


def powers_of_two(L):
    """The closed form for L = 2^k: L/2, L/4, ..., 2, 1, then the last unit."""
    return [L >> k for k in range(1, L.bit_length())] + [1]


def broken_rule(steps, L):
    """What breaks the rule in a trajectory for L, or "": positive whole units summing to L, the last one unit, each
    other step half of what was left before it (rounded down)."""
    if sum(steps) != L or steps[-1] != 1 or min(steps) < 1:
        return f"{steps} does not end at t = 1 with a last step of one unit"
    left = L
    for step in steps[:-1]:
        if step != left // 2:
            return f"{steps}: a step of {step} where {left} were left (half: {left // 2})"
        left -= step
    return ""


def main(argv):
    torch.set_num_threads(1)
    use_project(argv)
    import loop
    from model import GPT, GPTConfig
    check = Checks()
    if not check('1. loop.TRAJECTORY_SAMPLERS has "halving"', lambda: ("halving" in loop.TRAJECTORY_SAMPLERS,
                                                                       f"rows: {tuple(loop.TRAJECTORY_SAMPLERS)}")):
        check.not_run(["2. L = 8, 4, 2", "3. L = 2..16", "4. a training step"], "check 1 failed")
        return check.status()
    sampler = loop.TRAJECTORY_SAMPLERS["halving"]
    rng = loop.trajectory_rng(0, 0)

    def known():
        got = {L: [int(s) for s in sampler(L, rng)] for L in (2, 4, 8, 16)}
        want = {L: powers_of_two(L) for L in got}
        return got == want, "" if got == want else f"got {got}, expected {want}"

    check("2. L = 8 gives [4, 2, 1, 1], and so on for L = 2, 4, 16", known)

    def every_length():
        for L in range(2, 17):
            broken = broken_rule([int(s) for s in sampler(L, rng)], L)
            if broken:
                return False, f"L = {L}: {broken}"
        return True, ""

    check("3. L = 2..16: each step half of what is left (rounded down), the last one unit, summing to L",
          every_length)

    def trains():
        cfg = GPTConfig(n_layer=1, n_loop=4, loop_cond="loopformer", elastic="shortcut",
                        trajectory_sampler="halving", n_embd=32, head_dim=16, block_size=16)
        model = GPT(cfg).init_weights(0)
        x = torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(0))
        _, loss, aux = model(x, x.roll(-1, 1), rng=loop.trajectory_rng(0, 0))
        (loss + sum(aux.values())).backward()
        finite = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        return bool(torch.isfinite(loss)) and finite, f"loss {loss.item():.4f}"

    check('4. a LoopFormer with trajectory_sampler="halving" runs a training step', trains)
    return check.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
