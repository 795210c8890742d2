"""Tests of lab/campaign.py: the power of the standard's tests against hand-computed and simulated references, the
plan's sample sizes and designs, and the committed plan being what its command writes from the committed list."""
import json
import math
import os

import numpy as np
import pytest

from lab import campaign
from verdicts import tost

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_sd_bound_is_the_chi_square_interval():
    # chi2 with 2 degrees of freedom has CDF 1 - exp(-x/2): its 20% point is -2 ln 0.8, by hand
    assert campaign.sd_upper(1.0, 3) == pytest.approx(math.sqrt(2 / (-2 * math.log(0.8))), rel=1e-9)
    assert campaign.sd_upper(2.0, 3) == pytest.approx(2 * 2.1169365, rel=1e-6)
    assert campaign.sd_upper(1.0, 1000) < 1.03  # many seeds: the bound closes on the estimate


def simulated_power(effect, sd, n, alpha, kind, draws=20000, seed=0):
    """The fraction of simulated n-seed experiments whose test decides: the t-test rejects 0 (two-sided), or TOST
    puts the mean inside +-sd (margin = sd here) -- computed from the draws, independently of the formulas."""
    import scipy.stats
    d = np.random.default_rng(seed).normal(effect, sd, size=(draws, n))
    mean, se = d.mean(1), d.std(1, ddof=1) / math.sqrt(n)
    if kind == "t":
        return float(np.mean(np.abs(mean / se) > scipy.stats.t.ppf(1 - alpha / 2, n - 1)))
    q = scipy.stats.t.ppf(1 - alpha, n - 1)
    return float(np.mean((mean - q * se > -sd) & (mean + q * se < sd)))


def test_t_test_power_matches_the_textbook_and_a_simulation():
    # G*Power's classic example: a paired t-test, d_z = 0.5, alpha 0.05 two-sided, needs 34 pairs (power 0.8078)
    assert campaign.t_test_power(0.5, 1.0, 34, 0.05) == pytest.approx(0.8078, abs=5e-4)
    assert campaign.seeds_needed(lambda n: campaign.t_test_power(0.5, 1.0, n, 0.05)) == 34
    for effect, n, alpha in ((1.0, 5, 0.05), (2.0, 4, 0.0125)):
        assert campaign.t_test_power(effect, 1.0, n, alpha) == pytest.approx(
            simulated_power(effect, 1.0, n, alpha, "t"), abs=0.012)


def test_tost_power_matches_a_simulation_and_the_standards_tost():
    for n, alpha in ((10, 0.05), (20, 0.0125)):
        assert campaign.tost_power(1.0, 1.0, n, alpha) == pytest.approx(
            simulated_power(0.0, 1.0, n, alpha, "tost"), abs=0.012)
    assert campaign.tost_power(1.0, 1.0, 3, 0.05) == pytest.approx(simulated_power(0.0, 1.0, 3, 0.05, "tost"),
                                                                   abs=0.012)  # few seeds: a lucky small s
    # the simulation's rule is the standard's: TOST inside the margin exactly when verdicts.tost says equivalent
    d = np.random.default_rng(1).normal(0, 1, 12)
    q = __import__("scipy.stats").stats.t.ppf(0.95, 11)
    inside = abs(d.mean()) + q * d.std(ddof=1) / math.sqrt(12) < 1.0
    assert (tost(d, 1.0)["verdict"] == "equivalent") == inside


def test_a_comparison_plans_for_its_effect_or_its_absence():
    strong = campaign.comparison_plan([0.10, 0.12, 0.08], reference=[1.0, 1.2, 0.8], holm_m=1, looks=1,
                                      claim="difference")
    assert strong["delta"] == pytest.approx(0.1) and strong["target"] == "show the effect"
    assert strong["seeds_if_fresh"] >= strong["seeds_fresh_at_point_sd"]  # the upper bound asks for more
    null = campaign.comparison_plan([0.01, -0.01, 0.0], reference=[1.0, 1.4, 0.6], holm_m=2, looks=3,
                                    claim="difference")
    assert null["target"] == "show it absent" and null["seeds_if_added"] >= 1
    alpha = 0.05 / (2 * 1)  # a fresh set: one look; Holm's worst case over m = 2
    n = null["seeds_if_fresh"]
    assert campaign.tost_power(null["delta"], null["sd_upper80"], n, alpha) >= 0.8
    assert campaign.tost_power(null["delta"], null["sd_upper80"], n - 1, alpha) < 0.8


def test_the_committed_plan_is_what_its_command_writes_from_the_committed_list(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    campaign.main_plan([f"--out={tmp_path}"])
    with open(os.path.join(ROOT, "records", "plan.md")) as f:
        assert (tmp_path / "plan.md").read_text() == f.read()
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert len(plan["plans"]) == len(campaign.load_findings()) == 36
    for p in plan["plans"]:  # every design's seeds have 80% power at the upper sd bound, and one fewer has not
        for c in p["comparisons"].values():
            assert c["sd_upper80"] >= c["sd"] and c["delta"] == c["sd_ref"] / 2
