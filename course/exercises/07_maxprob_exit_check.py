"""Self-check of COURSE.md's Lecture 7 exercise: an exit criterion on the top token's probability.

The exercise: add a criterion "maxprob" to exits.py whose score is 1 - max_v p_v (low where the model is sure of its
top token), so that a token exits once that score falls below tau. This script compares its scores with ones
computed here from the probabilities:

  1. exits.CRITERIA has "maxprob", and a decoder may use it (exits.decode_criteria());
  2. p = (0.7, 0.2, 0.1) scores 0.3;
  3. on random logits of a batch the score is 1 - the softmax's largest entry, position by position;
  4. a sure prediction scores below an unsure one, and every score lies in [0, 1 - 1/V].

    python course/exercises/07_maxprob_exit_check.py [project folder]   # default: this repository

One thread, a few seconds.
"""
import sys

import torch

from selfcheck import Checks, use_project


def main(argv):
    torch.set_num_threads(1)
    use_project(argv)
    import exits
    check = Checks()

    def registered():
        ok = "maxprob" in exits.CRITERIA and "maxprob" in exits.decode_criteria()
        return ok, "" if ok else f"CRITERIA {tuple(exits.CRITERIA)}, decode_criteria() {exits.decode_criteria()}"

    if not check('1. "maxprob" is a criterion a decoder can use', registered):
        check.not_run(["2. (0.7, 0.2, 0.1)", "3. random logits", "4. order and range"], "check 1 failed")
        return check.status()
    score = exits.CRITERIA["maxprob"].score

    def known():
        got = score(torch.tensor([[0.7, 0.2, 0.1]]).log(), None, None, None).item()
        return abs(got - 0.3) < 1e-6, f"score {got:.6f}, expected 1 - 0.7 = 0.3"

    check("2. p = (0.7, 0.2, 0.1) scores 0.3", known)
    logits = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(0)) * 3

    def random():
        got = score(torch.log_softmax(logits, -1), None, None, None)
        want = 1 - torch.softmax(logits.double(), -1).max(-1).values
        diff = (got.double() - want).abs().max().item()
        return diff < 1e-6, f"max |score - (1 - max p)| {diff:.2e}"

    check("3. random logits: 1 - the largest probability, position by position", random)

    def order():
        sure = score(torch.log_softmax(torch.tensor([10.0, 0.0, 0.0]), -1), None, None, None).item()
        unsure = score(torch.log_softmax(torch.tensor([1.0, 0.9, 0.8]), -1), None, None, None).item()
        flat = score(torch.log_softmax(torch.zeros(11), -1), None, None, None).item()
        ok = 0 <= sure < unsure <= flat <= 1 - 1 / 11 + 1e-6
        return ok, f"sure {sure:.4f}, unsure {unsure:.4f}, uniform {flat:.4f} (1 - 1/V = {1 - 1 / 11:.4f})"

    check("4. a sure prediction scores below an unsure one, within [0, 1 - 1/V]", order)
    return check.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
