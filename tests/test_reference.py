"""The model families, decoding, exits, eval scores, routing, a train.py run and `scaling.py count` give what they gave
at the commit the references were saved from (tests/reference.py says how), bit for bit on a machine like the one that
saved them (same torch, same CPU kernels); elsewhere within rounding, since other CPU kernels round differently."""
import json
import math
import os

import pytest
import torch

import reference

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "reference")
META = json.load(open(os.path.join(FOLDER, "meta.json")))
SAME_MACHINE = all(META[k] == v for k, v in reference.fingerprint().items())


# On another machine a tensor may move by this much of its size, or by 1e-4 in its projections (a KL of two nearly
# equal distributions is rounding itself): other kernels round otherwise, and a few training steps and a decode
# amplify it (up to 8e-5 of the size measured, the EPYC with native bf16 against the Xeon that saved them); a
# changed computation moves an output by far more.
ROUNDING = 1e-3


def close(a, b, rel=1e-4):
    """Numbers, lists and dicts equal up to `rel` of each number (a looser check for other machines' kernels)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=rel, abs_tol=rel) or (math.isnan(a) and math.isnan(b))
    return a == b


def differences(saved, now):
    """The outputs that moved, each with how far (the digests' projections, relative to the output's size)."""
    moved = []
    for key in sorted(saved.keys() | now.keys()):
        a, b = saved.get(key), now.get(key)
        if a is None or b is None:
            moved.append(f"{key}: {'new' if a is None else 'gone'}")
        elif isinstance(a, dict) and "sha" in a:
            if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
                moved.append(f"{key}: shape/dtype {a['shape']} {a['dtype']} -> {b['shape']} {b['dtype']}")
                continue
            size = max(a["absmax"], 1e-30) * max(1, math.prod(a["shape"])) ** 0.5
            far = max((abs(x - y) / size for x, y in zip(a["proj"], b["proj"])), default=0.0)
            if a["sha"] != b["sha"] if SAME_MACHINE else far > ROUNDING and not close(a["proj"], b["proj"]):
                moved.append(f"{key}: moved by {far:.2e} of its size")
        elif not (a == b if SAME_MACHINE else close(a, b)):
            moved.append(f"{key}: {str(a)[:200]} -> {str(b)[:200]}")
    return moved


def outputs(name):
    if name == "eval":
        return reference.eval_outputs()
    if name == "train":
        return reference.train_log_outputs()
    if name == "count":
        return reference.count_outputs()
    if name == "checkpoints":  # written by the commit before: old checkpoints still load and compute the same
        return reference.checkpoint_outputs(os.path.join(os.path.dirname(FOLDER), "checkpoints"))
    return reference.family_outputs(name)


@pytest.mark.parametrize("name", list(reference.FAMILIES) + ["eval", "train", "count", "checkpoints"])
def test_outputs_equal_the_saved_reference(name):
    torch.set_num_threads(1)
    saved = json.load(open(os.path.join(FOLDER, f"{name}.json")))
    now = {k: reference.digest(v) if isinstance(v, torch.Tensor) else json.loads(json.dumps(v))
           for k, v in outputs(name).items()}
    moved = differences(saved, now)
    how = "bit for bit" if SAME_MACHINE else "within rounding (another machine than the reference's)"
    assert not moved, (f"{name}: {len(moved)} outputs differ {how} from commit {META['commit'][:10]}:\n  "
                       + "\n  ".join(moved[:20]))


def test_across_machines_rounding_passes_and_a_changed_output_does_not(monkeypatch):
    """Another machine's check: noise at 1e-6 of a tensor's size passes, a planted change of a hundredth of it, a new
    shape or a changed number does not; on the saving machine any changed bit fails."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g)
    saved = dict(t=reference.digest(x), n=1.0)
    monkeypatch.setitem(globals(), "SAME_MACHINE", False)  # as on a machine other than the saving one
    assert differences(saved, dict(t=reference.digest(x * (1 + 1e-6)), n=1.0)) == []
    assert differences(saved, dict(t=reference.digest(x + 0.01 * x.abs().max() * torch.randn(64, 32, generator=g)),
                                   n=1.0)) != []
    assert differences(saved, dict(t=reference.digest(x[:, :16]), n=1.0)) != []
    assert differences(saved, dict(t=reference.digest(x), n=1.1)) != []
    monkeypatch.setitem(globals(), "SAME_MACHINE", True)
    assert differences(saved, dict(t=reference.digest(x * (1 + 1e-6)), n=1.0)) != []
