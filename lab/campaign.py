"""
The campaign that decides the records' inconclusive findings (issue 46; records/README.md, rules 10-12).

    python -m lab.campaign plan        # records/plan.md and records/plan.json from records/campaign/findings.json
    python -m lab.campaign tally       # the verdict words of the five records' summary tables, counted

The list (records/campaign/findings.json) names each inconclusive finding, the JSON whose per-seed numbers its
verdict reads, its Holm family and looks, the reference quantity whose seed spread sets its smallest effect of
interest (delta = sd_ref / 2, rule 10), and the sweep that trains one more seed of it. The plan turns that into
seeds and core-hours: per comparison, the sd of the per-seed numbers and its upper 80% bound, and the seeds at which
a test at the comparison's worst-case threshold (0.05 / (Holm's m x looks)) has 80% power, for the effect observed
(when at least delta) or for its absence (TOST inside +-delta when the true effect is 0). Seeds of one sweep serve
every finding that sweep feeds, so the plan ranks sweeps by the findings they can decide per core-hour.
"""
import json
import math
import os
import re
import sys

import numpy as np
import scipy.stats

from configurator import ConfigError, run
from lab.records import lookup
from lab.sweep import read_results
from lab.verdicts import seed_number

FINDINGS = "records/campaign/findings.json"
POWER = 0.8  # the power every design is planned for
SD_BOUND = 0.8  # the one-sided confidence of the upper bound on a per-seed sd
BUDGET_CORE_HOURS = 20.0  # the campaign's CPU budget (issue 46)
MAX_SEEDS = 200  # the search for a sample size stops here: "more than 200" is undecidable at any budget
# GPU time per run, until measured (rule 12): a model of d <= 128 on an H100 is bound by kernel launches, not FLOPs;
# about 15 ms per training step of a 16-layer model and 30 s of start-up (imports, data, compile-free eager), with
# 4 runs sharing the GPU at full speed. Replaced by the first GPU batch's measured minutes (.ci/gpu-campaign).
GPU_STEP_S, GPU_START_S, GPU_RUNS_AT_ONCE = 0.015, 30.0, 4


# ---- power of the standard's tests (records/README.md, rules 2, 3 and 10) ----

def sd_upper(sd, n, confidence=SD_BOUND):
    """The upper one-sided `confidence` bound on a normal population's sd from a sample sd of n values:
    sd sqrt((n - 1) / chi2_{1 - confidence}(n - 1)) (the chi-square interval for a variance)."""
    return sd * math.sqrt((n - 1) / scipy.stats.chi2.ppf(1 - confidence, n - 1))


def t_test_power(effect, sd, n, alpha, sides=2):
    """The power of the paired t-test at level alpha over n seeds when the true mean per-seed difference is `effect`
    and its sd is `sd`: P(T > q) + P(T < -q) with q = t_{1 - alpha/2} (sides=1: P(T > t_{1 - alpha})), T the
    noncentral t (Z + nc) / sqrt(V / df), nc = effect / (sd / sqrt n), V ~ chi2(df), df = n - 1: scipy's, or
    averaged over V where scipy's returns nan (it does for some moderate noncentralities)."""
    df, nc = n - 1, effect / (sd / math.sqrt(n))
    q = scipy.stats.t.ppf(1 - alpha / sides, df)
    fast = scipy.stats.nct.sf(q, df, nc) + (scipy.stats.nct.cdf(-q, df, nc) if sides == 2 else 0.0)
    if math.isfinite(fast):
        return float(fast)
    s = q * np.sqrt(chi2_quantiles(df) / df)  # where scipy gives nan: average P(reject | V) over V's quantiles
    tails = scipy.stats.norm.sf(s - nc) + (scipy.stats.norm.cdf(-s - nc) if sides == 2 else 0.0)
    return float(min(1.0, np.mean(tails)))


def tost_power(margin, sd, n, alpha):
    """The power of TOST (each side at alpha) over n seeds to find the mean inside +-margin when the true mean is 0:
    the 1 - 2 alpha interval mean +- q s / sqrt n must lie inside the margin, i.e. |mean| < margin - q s / sqrt n.
    Given s, that has probability 2 Phi((margin - q s / sqrt n) / (sd / sqrt n)) - 1 (when positive); s^2 is
    sd^2 V / (n - 1) with V ~ chi2(n - 1), averaged over V at CHI2_POINTS equally likely quantiles."""
    df = n - 1
    q = scipy.stats.t.ppf(1 - alpha, df)
    se = sd / math.sqrt(n)
    s = sd * np.sqrt(chi2_quantiles(df) / df)
    room = np.maximum(margin - q * s / math.sqrt(n), 0.0)
    return float(np.mean(2 * scipy.stats.norm.cdf(room / se) - 1))


CHI2_POINTS = 4000  # quantiles of V that average a probability over it: its error is well below 1e-3


def chi2_quantiles(df):
    return scipy.stats.chi2.ppf((np.arange(CHI2_POINTS) + 0.5) / CHI2_POINTS, df)


def seeds_needed(power_of, least=2):
    """The smallest n >= least with power_of(n) >= POWER, or None beyond MAX_SEEDS. The power of both tests grows
    with n, so a bisection finds it in a few evaluations."""
    lo, hi = max(2, least), MAX_SEEDS
    if power_of(hi) < POWER:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power_of(mid) >= POWER else (mid + 1, hi)
    return lo


# ---- the list and the plan ----

def load_findings(path=FINDINGS):
    if not os.path.isfile(path):
        raise ConfigError(f"no list of findings at {path}: the campaign's list is committed first (issue 46)")
    with open(path) as f:
        return json.load(f)["findings"]


def per_seed_values(spec, transform=None):
    """The per-seed numbers of FILE:PATH items joined by commas (fits.py family's grammar; a comma followed by a space
    belongs to a key, as in a group "(2, 1)"), or of one item that names a list; transform puts a reference in the
    unit of the comparison: ln (perplexity to nats), log2 (an LR to octaves), pct (percent of the seeds' mean),
    /K (a sum of K tasks to their mean)."""
    values = [seed_number(item, []) for item in re.split(r",(?! )", spec)]
    values = values[0] if len(values) == 1 and isinstance(values[0], list) else values
    if transform == "ln":
        return [math.log(v) for v in values]
    if transform == "log2":
        return [math.log2(v) for v in values]
    if transform == "pct":  # a perplexity as percent of the seeds' mean (the comparisons are percent gaps)
        return [100 * v / float(np.mean(values)) for v in values]
    return [v / float(transform[1:]) for v in values] if transform else values


def comparison_plan(per_seed, reference, holm_m, looks, claim, margin=None):
    """One comparison's numbers and sample sizes (rule 12): n, mean, sd, its upper bound, delta, the target (show the
    effect, or its absence), and the seeds needed in all when added to these (one more look) or as a fresh set. An
    equivalence margin fixed before the runs (rule 3) stands in for delta."""
    d = np.asarray(per_seed, dtype=float)
    n, mean, sd = len(d), float(d.mean()), float(d.std(ddof=1))
    sd_ref = float(np.std(reference, ddof=1))
    delta = sd_ref / 2 if margin is None else margin
    bound = sd_upper(sd, n)
    beyond = abs(mean) >= delta  # the effect observed is at least the smallest of interest

    def needed(sd_used, k):  # seeds in all at k looks
        alpha = 0.05 / (holm_m * k)
        if beyond and claim == "difference":  # the t-test of rule 2 against 0
            return seeds_needed(lambda m: t_test_power(abs(mean), sd_used, m, alpha))
        if beyond:  # an equivalence claim, its interval wholly outside +-delta: one-sided against the margin (rule 3)
            return seeds_needed(lambda m: t_test_power(abs(mean) - delta, sd_used, m, alpha, sides=1))
        return seeds_needed(lambda m: tost_power(delta, sd_used, m, alpha))
    added, fresh = needed(bound, looks + 1), needed(bound, 1)
    add_new = None if added is None else max(1, added - n)
    point_fresh = needed(sd, 1)
    return dict(n=n, mean=mean, sd=sd, sd_upper80=bound, sd_ref=sd_ref, delta=delta, margin_fixed_first=margin,
                target=("show the effect" if beyond else "show it absent") if claim == "difference" else
                ("show it differs" if beyond else "show the equivalence"), seeds_if_added=add_new, seeds_if_fresh=fresh,
                seeds_fresh_at_point_sd=point_fresh)


def seed_cost(design):
    """Core-seconds one seed of a design costs: the mean over the seeds that ran all of it (the most matching rows) of
    the summed process_s (or wall_s) of the rows (in design["rows"]) whose point matches design["points"]; and the
    GPU-seconds estimated for them.
    An analysis without rows (analyze.py residual) gives its measured core_seconds_per_seed and where it was measured;
    it trains nothing a GPU would speed up, so it plans no GPU time."""
    if not design.get("rows"):
        return float(design["core_seconds_per_seed"]), 0.0
    by_seed = {}
    for row in read_results(design["rows"]):
        if row.get("status") == "ok" and re.search(design["points"], row["point"]):
            s = by_seed.setdefault(row.get("seed"), dict(cpu=0.0, gpu=0.0, runs=0))
            s["runs"] += 1
            s["cpu"] += row.get("process_s") or row.get("wall_s") or 0.0
            s["gpu"] += (GPU_START_S + GPU_STEP_S * (row.get("steps") or 0) * max(1, row.get("n_loop") or 1)
                         * (row.get("n_layer") or 1) / 16) / GPU_RUNS_AT_ONCE
    if not by_seed:
        raise ConfigError(f"{design['rows']}: no finished row matches {design['points']!r}")
    whole = [s for s in by_seed.values() if s["runs"] == max(t["runs"] for t in by_seed.values())]
    return float(np.mean([s["cpu"] for s in whole])), float(np.mean([s["gpu"] for s in whole]))


def numbers(f, base, key):
    """A comparison's per-seed numbers: from its family JSON (a test's per_seed, or a list), or, where no family JSON
    was written, from the finding's per_seed items (FILE:PATH terms, read as fits.py family reads them)."""
    if base is None:
        return per_seed_values(f["per_seed"][key])
    value = lookup(base, key)
    return value["per_seed"] if isinstance(value, dict) else value


def finding_plan(f):
    """A listed finding's plan: each comparison's (comparison_plan), the design (added or fresh, whichever needs
    fewer new seeds; fresh on a tie, since it judges on rows no one has seen), its new seeds and cost."""
    base = None
    if f["family"]:
        with open(f["family"]) as fh:
            family = json.load(fh)
        base = lookup(family, f["at"]) if f.get("at") else family
    comps = {}
    for key, sign in f["comparisons"].items():
        transform = f.get("reference_transform", {}).get(key)
        comps[key] = comparison_plan(numbers(f, base, key), per_seed_values(f["reference"][key], transform),
                                     f["holm_m"], f["looks"][key] if isinstance(f["looks"], dict) else f["looks"],
                                     "equivalence" if sign == "zero" else f["claim"], f.get("margin", {}).get(key))
    add = [c["seeds_if_added"] for c in comps.values()]
    fresh = [c["seeds_if_fresh"] for c in comps.values()]
    point = [c["seeds_fresh_at_point_sd"] for c in comps.values()]
    n_add = None if None in add else max(add)
    n_fresh = None if None in fresh else max(fresh)
    if n_add is not None and (n_fresh is None or n_add < n_fresh):
        design, new = "add", n_add
    else:
        design, new = "fresh", n_fresh
    cpu_s, gpu_s = seed_cost(f["design"])
    return dict(id=f["id"], comparisons=comps, design=design, new_seeds=new, group=f["design"].get("group"),
                new_seeds_at_point_sd=None if None in point else max(point),
                core_hours_per_seed=cpu_s / 3600, gpu_minutes_per_seed=gpu_s / 60, spec=f["design"]["spec"],
                points=f["design"]["points"])


def sweep_groups(plans):
    """The plans grouped by what one new seed trains (the design's group, else its spec and points): one seed serves
    every finding in a group, and costs the most any of them needs (their points are one set). Each group: its
    findings and the count of seeds that decides the most of them per core-hour; groups ranked by that rate, and
    taken in that order while the budget lasts."""
    groups = {}
    for p in plans:
        groups.setdefault(p["group"] or (p["spec"], p["points"]), []).append(p)
    ranked = []
    for members in groups.values():
        spec, points = members[0]["spec"], members[0]["points"]
        per_seed = max(m["core_hours_per_seed"] for m in members)
        steps = sorted({m["new_seeds"] for m in members if m["new_seeds"] is not None})
        options = [(n, [m["id"] for m in members if m["new_seeds"] is not None and m["new_seeds"] <= n])
                   for n in steps]
        best = max(options, key=lambda o: (len(o[1]) / (o[0] * per_seed), -o[0]), default=(None, []))
        ranked.append(dict(spec=spec, points=points, findings=[m["id"] for m in members],
                           core_hours_per_seed=per_seed,
                           gpu_minutes_per_seed=max(m["gpu_minutes_per_seed"] for m in members),
                           seeds=best[0], decides=best[1],
                           core_hours=None if best[0] is None else best[0] * per_seed))
    ranked.sort(key=lambda g: -(len(g["decides"]) / g["core_hours"]) if g["core_hours"] else math.inf)
    spent = 0.0
    for g in ranked:
        g["within_budget"] = g["core_hours"] is not None and spent + g["core_hours"] <= BUDGET_CORE_HOURS
        spent += g["core_hours"] if g["within_budget"] else 0.0
        g["cumulative_core_hours"] = spent
    return ranked


def undecidable(plan):
    """Rule 11: even the sd's point estimate needs seeds beyond the budget (or beyond MAX_SEEDS)."""
    n = plan["new_seeds_at_point_sd"]
    return n is None or n * plan["core_hours_per_seed"] > BUDGET_CORE_HOURS


def fmt(x, digits=3):
    return "—" if x is None else f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def plan_markdown(plans, groups, command):
    lines = ["# The campaign's decision plan", "",
             f"Generated by `{command}` from [campaign/findings.json](campaign/findings.json) under "
             "records/README.md's rules 10-12, before any run it plans. Per comparison: the per-seed numbers' n, "
             "mean and sd, the sd's upper 80% bound, δ = ½ σ_ref, the target, and the seeds at 80% power with the "
             "upper bound: in all if added to the old seeds (one more look), or as a fresh set. Costs: the rows' "
             "`process_s`, one core per run on the machine that ran it; GPU minutes **estimated** (H100, "
             f"{GPU_STEP_S * 1000:.0f} ms per 16-layer step, {GPU_START_S:.0f} s start-up, {GPU_RUNS_AT_ONCE} runs at "
             "once) until .ci/gpu-campaign measures them. CPU rows decide; a GPU batch is a design of its own, judged "
             "on its own rows.", "",
             "## Per finding", "",
             "| finding | comparison | n | mean | sd | sd 80% bound | δ | target | seeds if added | fresh seeds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in plans:
        for key, c in p["comparisons"].items():
            lines.append(f"| {p['id']} | {key} | {c['n']} | {c['mean']:+.4g} | {c['sd']:.3g} | {c['sd_upper80']:.3g} "
                         f"| {c['delta']:.3g} | {c['target']} | {fmt(c['seeds_if_added'])} | "
                         f"{fmt(c['seeds_if_fresh'])} |")
    lines += ["", "## Designs", "",
              "| finding | design | new seeds | core-hours per seed | core-hours | GPU-minutes (est.) | at the sd's "
              "point estimate | verdict if not run |", "|---|---|---|---|---|---|---|---|"]
    for p in plans:
        cost = None if p["new_seeds"] is None else p["new_seeds"] * p["core_hours_per_seed"]
        gpu = None if p["new_seeds"] is None else p["new_seeds"] * p["gpu_minutes_per_seed"]
        lines.append(f"| {p['id']} | {p['design']} | {fmt(p['new_seeds'])} | {p['core_hours_per_seed']:.2f} | "
                     f"{fmt(cost)} | {fmt(gpu)} | {fmt(p['new_seeds_at_point_sd'])} seeds | "
                     f"{'undecidable at this scale' if undecidable(p) else 'inconclusive'} |")
    lines += ["", "## Order of the runs: findings decided per core-hour", "",
              "| sweep | points of one seed | findings it serves | seeds | decides | core-hours | cumulative | "
              "within the budget |", "|---|---|---|---|---|---|---|---|"]
    for g in groups:
        lines.append(f"| `{g['spec']}` | `{g['points']}` | {', '.join(g['findings'])} | {fmt(g['seeds'])} | "
                     f"{', '.join(g['decides']) or '—'} | {fmt(g['core_hours'])} | "
                     f"{g['cumulative_core_hours']:.1f} | {'yes' if g['within_budget'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main_plan(argv):
    """python -m lab.campaign plan [--out=DIR]: DIR/plan.md and DIR/plan.json (DIR: records) from the list."""
    out = next((a.split("=", 1)[1] for a in argv if a.startswith("--out=")), "records")
    if any(not a.startswith("--out=") for a in argv) or not os.path.isdir(out):
        raise ConfigError(f"usage: python -m lab.campaign plan [--out=DIR] (DIR an existing directory; got {argv})")
    plans = [finding_plan(f) for f in load_findings()]
    groups = sweep_groups(plans)
    command = "python -m lab.campaign plan"
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump(dict(plans=plans, groups=groups, command=command), f, indent=1)
    with open(os.path.join(out, "plan.md"), "w") as f:
        f.write(plan_markdown(plans, groups, command))
    print(f"{out}/plan.md: {len(plans)} findings, {len(groups)} sweeps; "
          f"{sum(undecidable(p) for p in plans)} undecidable at this scale")


VERDICT_WORDS = ("not reproduced", "reproduced", "absent at this scale", "undecidable at this scale", "inconclusive")
VERDICT = re.compile(r"\b(" + "|".join(VERDICT_WORDS) + r")\b")  # leftmost first: "not reproduced" is not "reproduced"


def tally(directory="records"):
    """The verdicts of the records' summary tables (the first table of each directory/<paper><year>.md): every bold
    phrase that holds a verdict word counts once, for the first word it holds ("**inconclusive at M=3**", "**every
    design inconclusive**", "**not reproduced**" as not reproduced); bold without a verdict word (a number) does not."""
    counts = dict.fromkeys(VERDICT_WORDS, 0)
    for name in sorted(os.listdir(directory)):
        if not re.fullmatch(r"[a-z]+\d{4}\.md", name):
            continue
        with open(os.path.join(directory, name)) as f:
            table = re.search(r"(\n\|.*)+", f.read()).group(0)
        for phrase in re.findall(r"\*\*([^*]+)\*\*", table):
            word = VERDICT.search(phrase)
            if word:
                counts[word.group(1)] += 1
    return counts


def verdict_word(test, sign):
    """The records' word for one comparison's test (fits.py family's JSON entry) given the paper's sign: for a
    difference ("higher"/"lower") its Holm verdict, reproduced with the paper's sign, not reproduced with the other;
    for a claim of no effect ("zero") its TOST verdict, reproduced when equivalent, not reproduced when different;
    for a paper's number ("value": our per-seed values against it, records/README.md rule 7) its t-test, not
    reproduced when the number is rejected on either side, inconclusive otherwise (a t-test cannot show equality);
    for rule 10's test of absence ("absent": a TOST within the comparison's δ) absent at this scale when Holm over
    the family passes it, else inconclusive."""
    if "verdict" not in test:  # a family written before the JSONs said it: rules 2 and 4 on its Holm p
        word = "inconclusive" if test["holm_p"] >= 0.05 else "lower" if test["mean"] < 0 else "higher"
        test = dict(test, verdict=word)
    if sign == "value":
        return "not reproduced" if test["verdict"] in ("higher", "lower") else "inconclusive"
    if sign == "absent":  # rule 10: a TOST within the comparison's δ, its p through Holm over the family
        return "absent at this scale" if test["verdict"] == "equivalent" and test["holm_p"] < 0.05 else "inconclusive"
    if sign == "zero":
        return {"equivalent": "reproduced", "different": "not reproduced"}.get(test["verdict"], "inconclusive")
    if test["verdict"] in ("higher", "lower"):
        return "reproduced" if test["verdict"] == sign else "not reproduced"
    return test["verdict"]


def summary_row(record, row):
    """The summary-table row (the record's first table) of finding number `row`."""
    with open(record) as f:
        table = re.search(r"(\n\|.*)+", f.read()).group(0)
    return next(line for line in table.splitlines() if line.startswith(f"| {row}. "))


def main_tally(argv):
    """python -m lab.campaign tally: the bold verdict phrases of the five records' summary tables, counted (tally)."""
    if argv:
        raise ConfigError(f"usage: python -m lab.campaign tally (got {argv})")
    counts = tally()
    print(json.dumps(counts))
    return counts


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    commands = dict(plan=main_plan, tally=main_tally)
    usage = "usage: python -m lab.campaign plan [--out=DIR] | tally"
    if not argv or argv[0] in ("--help", "-h"):
        print(__doc__.strip() + "\n\n" + usage)
        return None
    if argv[0] not in commands:
        raise ConfigError(f"{usage} ({argv[0]!r} is not a command)")
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    run(main)
