"""Self-check of COURSE.md's Lecture 5c exercise: bias balancing with a step proportional to the load error.

The exercise: in moe.py:update_biases, move each expert's bias by gamma * (mean load - load) / mean load instead of
gamma * sign(mean load - load), then centre the biases as before. This script builds a one-layer MoE model, sets its
experts' loads and compares the biases update_biases leaves with the formula computed here:

  1. an expert at twice the mean load moves by -gamma and one without load by +gamma;
  2. an expert at 1.1 times the mean moves by only -0.1 gamma (the sign rule: -gamma);
  3. uneven loads give the formula's biases, centred (mean zero);
  4. the loads are zeroed after the update, and a skipped optimizer step (skipped=True) moves no bias.

    python course/exercises/05_proportional_bias_check.py [project folder]   # default: this repository

Tiny model, one thread, a few seconds.
"""
import sys

import torch

from selfcheck import Checks, use_project

GAMMA = 0.01


def main(argv):
    torch.set_num_threads(1)
    use_project(argv)
    import moe
    from model import GPT, GPTConfig
    model = GPT(GPTConfig(n_layer=1, n_expert=4, top_k=1, moe_bias_rate=GAMMA, n_embd=32, head_dim=16, block_size=16))
    layer = model.blocks[0].ffn
    check = Checks()

    def update(loads, skipped=None):
        layer.expert_bias.zero_()
        layer.expert_load.copy_(torch.tensor(loads))
        moe.update_biases(model, skipped=skipped)
        return layer.expert_bias.clone()

    def expected(loads):
        load = torch.tensor(loads, dtype=torch.float64)
        step = GAMMA * (load.mean() - load) / load.mean()
        return (step - step.mean()).float()

    def compare(loads, what):
        got, want = update(loads), expected(loads)
        ok = torch.allclose(got, want, atol=1e-7)
        return ok, "" if ok else f"loads {loads}: biases {got.tolist()}, {what} {want.tolist()}"

    check("1. loads (20, 0, 10, 10): the busy expert moves by -gamma, the idle one by +gamma",
          lambda: compare([20.0, 0.0, 10.0, 10.0], "expected"))
    check("2. loads (11, 9, 10, 10): an expert 10% over the mean moves by -0.1 gamma, not -gamma",
          lambda: compare([11.0, 9.0, 10.0, 10.0], "expected gamma * (mean - load) / mean"))
    check("3. loads (30, 5, 3, 2): the formula's biases, centred", lambda: compare([30.0, 5.0, 3.0, 2.0], "expected"))

    def bookkeeping():
        update([30.0, 5.0, 3.0, 2.0])
        if layer.expert_load.abs().sum() != 0:
            return False, f"the loads after the update are {layer.expert_load.tolist()}, not zero"
        moved = update([30.0, 5.0, 3.0, 2.0], skipped=torch.tensor(True))
        return bool((moved == 0).all()), "" if (moved == 0).all() else f"a skipped step moved the biases: {moved}"

    check("4. the loads are zeroed, and a skipped step moves no bias", bookkeeping)
    return check.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
