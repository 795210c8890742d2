"""Tests of lab/campaign.py: the power of the standard's tests against hand-computed and simulated references, the
plan's sample sizes and designs, and the committed plan being what its command writes from the committed list."""
import json
import math
import os
import shutil

import numpy as np
import pytest

from lab import campaign
from lab.verdicts import tost

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
            assert c["sd_upper80"] >= c["sd"]
            assert c["delta"] == (c["sd_ref"] / 2 if c["margin_fixed_first"] is None else c["margin_fixed_first"])


GPU_SPEC = '''
import sys
name = "gpu_batch_test"
out_dir = {out_dir!r}
archs = {{"base": []}}
SEEDS = (1, 2)
seeds = list(SEEDS)
common = dict({data}, n_layer=1, n_embd=32, head_dim=16, block_size=32, batch_size=4, max_iters=10, warmup_iters=2,
              eval_interval=10, eval_tokens=512, sample_tokens=0)
flops_per_second = 1e15


def analyses(seed, run_dir, out):
    code = ("import os, sys, shutil; os.makedirs(sys.argv[2], exist_ok=True); "
            "shutil.copy(os.path.join(sys.argv[1], 'result.json'), sys.argv[2]); sys.exit(int(sys.argv[3]))")
    return [[sys.executable, "-c", code, run_dir(f"base_s{{seed}}"), f"{{out}}/s{{seed}}", {fail!r}.get(str(seed), "0")]]
'''


def test_a_gpu_batch_trains_and_analyses_seed_after_seed_until_its_deadline(tmp_path, data_dir):
    """.ci/gpu-campaign, run on the CPU at tiny size: each seed's runs, then its analyses; a seed that does not fit
    the time left waits for the next batch; the rows, the analyses (one tar.gz: few files come back from a lent
    machine) and batch.json land in OUT; a failing analysis fails the batch."""
    import subprocess
    import tarfile
    data = dict(a[2:].split("=", 1) for a in data_dir)
    spec = tmp_path / "spec.py"
    spec.write_text(GPU_SPEC.format(out_dir=str(tmp_path / "sweep"), data=data, fail={}))
    # a seed takes far less than 35 s here, and train.py's start-up alone more than 5 s: seed 1 fits, seed 2 not
    env = dict(os.environ, DEVICES="", BUDGET_S="40", SEED_S="35", OMP_NUM_THREADS="1", PARALLEL="1,2")
    run = subprocess.run(["bash", ".ci/gpu-campaign", str(tmp_path / "out"), str(spec)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    batch = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert batch["seeds"] == [1] and batch["per_seed"][0]["runs_at_once"] == 1 and batch["per_seed"][0]["seconds"] > 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["seed"] for r in rows) == batch["seeds"] and all(r["device"] == "cpu" for r in rows)
    with tarfile.open(tmp_path / "out" / "analyses.tar.gz") as tar:
        assert {f"analyses/s{s}/result.json" for s in batch["seeds"]} <= set(tar.getnames())
    assert "seed 2 and later wait for the next batch" in (tmp_path / "out" / "batch.log").read_text()

    # the same seed again, its analysis failing: its run finished (the row, lost with results.jsonl, comes back
    # from the run's directory without training again), so the batch goes on to the analysis stage
    shutil.copytree(tmp_path / "sweep", tmp_path / "sweep2", ignore=shutil.ignore_patterns("results.jsonl"))
    spec.write_text(GPU_SPEC.format(out_dir=str(tmp_path / "sweep2"), data=data, fail={"1": "3"}))
    run = subprocess.run(["bash", ".ci/gpu-campaign", str(tmp_path / "out2"), str(spec)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 3  # the analysis stage failed: the batch says so
    assert "train.py" not in run.stdout and "[base_s1] ok" in run.stdout, run.stdout[-2000:]


def test_the_t_tests_power_where_scipy_gives_nan_is_the_same_average(monkeypatch):
    """Where scipy's noncentral t returns nan, the power is averaged over chi-square quantiles of the variance; the
    same average where scipy answers gives scipy's number (here with scipy's answer hidden)."""
    import scipy.stats
    want = [campaign.t_test_power(e, 1.0, n, a, sides) for e, n, a, sides in
            ((0.5, 34, 0.05, 2), (1.0, 6, 0.01, 2), (0.8, 9, 0.05, 1))]
    monkeypatch.setattr(scipy.stats.nct, "sf", lambda *a: float("nan"))
    got = [campaign.t_test_power(e, 1.0, n, a, sides) for e, n, a, sides in
           ((0.5, 34, 0.05, 2), (1.0, 6, 0.01, 2), (0.8, 9, 0.05, 1))]
    assert got == pytest.approx(want, abs=2e-3)


def test_each_moved_findings_record_says_the_verdict_its_json_or_the_plan_computes():
    """The campaign's new verdicts are tied to what computes them: a finding moved by new rows says, in its record's
    summary row right after its own words, the word its test's JSON gives (records/campaign/verdicts.json); one the
    plan finds undecidable says "undecidable at this scale" (rule 11). A planted opposite test is caught."""
    findings = {f["id"]: f for f in campaign.load_findings(os.path.join(ROOT, campaign.FINDINGS))}
    with open(os.path.join(ROOT, "records", "campaign", "verdicts.json")) as f:
        moved = {k: v for k, v in json.load(f).items() if k != "about"}
    assert moved
    for fid, where in moved.items():
        f = findings[fid]
        with open(os.path.join(ROOT, where["json"])) as fh:
            test = json.load(fh)[where["comparison"]]
        sign = next(iter(f["comparisons"].values()))
        row = campaign.summary_row(os.path.join(ROOT, f["record"]), f["row"])
        word = campaign.verdict_word(test, sign)
        assert word != "inconclusive" and f"{where['before']} **{word}**" in row, (fid, word)
        planted = dict(test, verdict="equivalent" if test["verdict"] == "different" else "different")
        assert f"{where['before']} **{campaign.verdict_word(planted, sign)}**" not in row, fid
    with open(os.path.join(ROOT, "records", "plan.json")) as fh:
        plans = json.load(fh)["plans"]
    for p in plans:
        if campaign.undecidable(p):
            row = campaign.summary_row(os.path.join(ROOT, findings[p["id"]]["record"]), findings[p["id"]]["row"])
            assert "**undecidable at this scale**" in row, p["id"]


def test_verdict_words_follow_the_standard():
    """Rule 2: a difference's Holm verdict with the paper's sign is reproduced, with the other not reproduced; rule 3:
    a claim of no effect is reproduced when equivalent, not reproduced when different; otherwise inconclusive."""
    assert campaign.verdict_word(dict(verdict="higher"), "higher") == "reproduced"
    assert campaign.verdict_word(dict(verdict="lower"), "higher") == "not reproduced"
    assert campaign.verdict_word(dict(verdict="inconclusive"), "lower") == "inconclusive"
    assert campaign.verdict_word(dict(verdict="equivalent"), "zero") == "reproduced"
    assert campaign.verdict_word(dict(verdict="different"), "zero") == "not reproduced"
    assert campaign.verdict_word(dict(verdict="inconclusive"), "zero") == "inconclusive"
    # rule 7: against a paper's number, a t-test that rejects it on either side is not reproduced
    assert campaign.verdict_word(dict(verdict="lower"), "value") == "not reproduced"
    assert campaign.verdict_word(dict(verdict="higher"), "value") == "not reproduced"
    assert campaign.verdict_word(dict(verdict="inconclusive"), "value") == "inconclusive"
    # rule 10: a TOST within δ says absent only through Holm over its family
    assert campaign.verdict_word(dict(verdict="equivalent", holm_p=0.01), "absent") == "absent at this scale"
    assert campaign.verdict_word(dict(verdict="equivalent", holm_p=0.06), "absent") == "inconclusive"
    # a family written before its JSON said the verdict: rules 2 and 4 on its Holm p and the mean's sign
    assert campaign.verdict_word(dict(holm_p=0.01, mean=-0.3), "lower") == "reproduced"
    assert campaign.verdict_word(dict(holm_p=0.2, mean=-0.3), "lower") == "inconclusive"
