"""architecture.py draws the depth plan of a real model: the plan JSON it writes is the model's walk (one step per
(pass, layer), its physical layer and KV slot), the shared layers and an exit's skipped slots; the figure holds one
box per step, hatched exactly where the exit's fill writes."""
import json

import pytest
from matplotlib.patches import Rectangle

from tools import architecture
from configurator import ConfigError
from model import GPT, GPTConfig

SANDWICH = ["--n_layer=2", "--n_loop=3", "--n_prelude=1", "--n_coda=1", "--injection=linear", "--loop_cond=index"]


def test_the_plan_is_the_walk_of_the_model_with_its_slots_and_an_exit(tmp_path):
    plan = architecture.main(SANDWICH + ["--exit_at=1", f"--out={tmp_path / 'arch'}"])
    steps = [(s["index"], s["layer"], s["loop"], s["boundary"], s["part"]) for s in plan["steps"]]
    assert steps == [(0, 0, 0, False, "prelude"), (1, 1, 0, False, "loop"), (2, 2, 0, True, "loop"),
                     (3, 1, 1, False, "loop"), (4, 2, 1, True, "loop"), (5, 1, 2, False, "loop"),
                     (6, 2, 2, True, "loop"), (7, 3, 0, False, "coda")]
    assert plan["shared"] == {1: [1, 3, 5], 2: [2, 4, 6]}
    assert plan["exit"] == dict(at=2, skipped_slots=[3, 4, 5, 6], fill="propagate")
    assert (plan["injection"], plan["conditioning"]) == ("linear", "index")
    saved = json.load(open(tmp_path / "arch.json"))
    assert saved["plan"]["steps"] == plan["steps"] and (tmp_path / "arch.png").stat().st_size > 0


def test_the_figure_has_a_box_per_step_hatched_where_the_exit_fills():
    model = GPT(GPTConfig(n_layer=2, n_loop=3, n_embd=32, head_dim=16))
    plan = architecture.plan_of(model, exit_boundary=2)
    assert plan["exit"] == dict(at=3, skipped_slots=[4, 5], fill="propagate")
    fig = architecture.draw(plan)
    boxes = {p.get_gid(): p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_gid()}
    assert sorted(boxes) == [f"step{i}" for i in range(6)]
    assert {g for g, p in boxes.items() if p.get_hatch()} == {"step4", "step5"}
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert all(f"slot {i}" in texts for i in range(6)) and "pass 3" in texts


def test_a_plain_model_is_one_pass_and_has_no_loop_boundary_to_exit_at(tmp_path):
    plan = architecture.plan_of(GPT(GPTConfig(n_layer=3, n_embd=32, head_dim=16)))
    assert [s["part"] for s in plan["steps"]] == ["loop"] * 3 and plan["exit"] is None
    assert "one pass" in [t.get_text() for t in architecture.draw(plan).axes[0].texts]
    with pytest.raises(ConfigError, match="--exit_at=1: this model has 0 loop boundaries"):
        architecture.main(["--n_layer=3", "--exit_at=1", f"--out={tmp_path / 'a'}"])
