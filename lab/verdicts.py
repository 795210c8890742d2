"""
The records' statistical standard (records/README.md) and the readers of the studies it judges: paired t-tests
over training seeds, TOST equivalence within a margin, Holm over a finding's comparisons, a sequential design's
threshold; the per-seed differences each study's JSONs give (LoopFormer's elastic budgets, Chen et al.'s probes,
Lee et al.'s early exits, Jeddi et al.'s representation metrics); and the tables of per-seed numbers a record draws
as generated blocks (lab/records.py). lab/fits.py fits the scaling laws; this file judges what seeds say.

Its commands run through lab/fits.py (python -m lab.fits), the name every committed result JSON gives in its
provenance:

    python -m lab.fits ttest 0.006 0.043 0.042
    python -m lab.fits family 'a=0.1,0.2,0.3' 'b=-0.1,0.0,0.2' --out=F.json
    python -m lab.fits table rows R.jsonl --row=arch --value=val_loss --seeds=1337,7 --out=F.json
"""
import json
import math
import os
import re
import sys

import numpy as np
import scipy.stats

from configurator import ConfigError, run
from lab import figures
from lab.records import lookup
from lab.sweep import read_results
from runs import provenance


# ---- the records' statistical standard (records/README.md): tests over training seeds ----
# The observations are per-seed numbers (a difference of two arms at one seed, a shift of one seed's optimum); runs,
# tokens and bootstrap resamples within a seed are not replicates. The commands print these tests for numbers that
# a committed fit command printed: python -m lab.fits ttest 0.006 0.043 0.042 | tost --margin=3 ... | holm 0.02 0.03

def paired_t_test(a, b=None):
    """Two-sided paired t-test over seeds (Student 1908, Biometrika 6:1): d = a - b seed by seed (or a itself, the
    differences already taken), t = mean(d) / (sd(d) / sqrt(n)) on n - 1 degrees of freedom, tested against 0."""
    d = np.asarray(a, dtype=float) - (0.0 if b is None else np.asarray(b, dtype=float))
    n = len(d)
    if n < 2:
        raise ValueError("a t-test needs two seeds or more (one seed: inconclusive, records/README.md)")
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    if se == 0:  # every seed the same difference: t is infinite (p = 0), or 0/0 when that difference is 0 (p = 1)
        return dict(n=n, mean=mean, se=se, t=math.copysign(math.inf, mean) if mean else 0.0, df=n - 1,
                    p=0.0 if mean else 1.0)
    t = mean / se
    return dict(n=n, mean=mean, se=se, t=t, df=n - 1, p=float(2 * scipy.stats.t.sf(abs(t), n - 1)))


def tost(d, margin, alpha=0.05):
    """Equivalence of the mean per-seed difference d to 0 within +-margin: two one-sided t-tests (Schuirmann 1987,
    J. Pharmacokinet. Biopharm. 15:657), each at alpha. Their p is the larger of the two one-sided p-values, and
    it is below alpha exactly when the (1 - 2 alpha) t-interval (90% at alpha = 0.05) lies inside the margin.
    verdict: "equivalent" (inside), "different" (the interval wholly outside the margin: p_outside < alpha), else
    "inconclusive"."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n < 2:
        raise ValueError("an equivalence test needs two seeds or more")
    mean, se, df = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n - 1
    q = float(scipy.stats.t.ppf(1 - alpha, df))
    lo, hi = mean - q * se, mean + q * se
    p_below = float(scipy.stats.t.sf((mean + margin) / se, df))  # H0: the true mean is at or below -margin
    p_above = float(scipy.stats.t.cdf((mean - margin) / se, df))  # H0: the true mean is at or above +margin
    # the other direction, "not equivalent": the one-sided test that the mean lies beyond the margin on its side
    p_outside = float(scipy.stats.t.sf((abs(mean) - margin) / se, df))
    verdict = ("equivalent" if -margin < lo and hi < margin else
               "different" if lo > margin or hi < -margin else "inconclusive")
    return dict(n=n, mean=mean, se=se, df=df, margin=margin, interval=(lo, hi), level=1 - 2 * alpha,
                p=max(p_below, p_above), p_outside=p_outside, verdict=verdict)


def holm(pvalues):
    """Holm's step-down adjusted p-values (Holm 1979, Scand. J. Statist. 6:65), in the order given: the k-th
    smallest of m is multiplied by m - k + 1, and an adjusted p never falls below a smaller p's (the procedure stops
    at the first comparison that fails). A comparison passes at 5% when its adjusted p < 0.05."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    adjusted, running = np.empty(m), 0.0
    for k, i in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (m - k) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def sequential_alpha(looks, alpha=0.05):
    """The threshold of one comparison that was looked at `looks` times (seeds added after each look): Bonferroni
    over the looks, alpha / looks. It holds for looks at any number of seeds, planned or not; Pocock's and
    O'Brien-Fleming's group-sequential boundaries are tighter but assume looks planned in number and spacing
    before the first (records/README.md, rule 5). Inside a Holm family the comparison enters with p * looks."""
    if looks < 1:
        raise ValueError("a result is looked at least once")
    return alpha / looks


def elastic_gaps(loopformer_path, plain_path):
    """Jeddi et al. Table 1 at one seed, from the JSONs of `early_exit.py --mode=elastic`: LoopFormer's perplexity at
    each budget M against its plain twin (the plain loop trained at full depth) cut to M, and against the plain
    loop trained at M passes, in percent (LoopFormer / other - 1)."""
    with open(loopformer_path) as f:
        ours = next(iter(json.load(f)["results"].values()))["budgets"]
    with open(plain_path) as f:
        plain = json.load(f)["results"].values()
    twin = max(plain, key=lambda m: m["L"])["budgets"]
    trained = {str(m["L"]): m["budgets"][str(m["L"])] for m in plain}
    return {M: dict(vs_twin=100 * (ours[M] / twin[M] - 1), vs_trained_at_M=100 * (ours[M] / trained[M] - 1))
            for M in sorted(ours)}


ELASTIC_ARMS = ("LoopFormer", "plain loop trained at L, cut to M", "plain loop trained at M")


def elastic_curves(paths):
    """{arm: {M: [perplexity per seed]}} from the pairs (LOOPFORMER.json, PLAIN.json) elastic_gaps reads: the curve
    Jeddi et al.'s verdict rests on (their Fig. 4 / Table 1), LoopFormer against its twin and the loops trained at M."""
    curves = {arm: {} for arm in ELASTIC_ARMS}
    for lf_path, plain_path in zip(paths[::2], paths[1::2]):
        with open(lf_path) as f:
            ours = next(iter(json.load(f)["results"].values()))["budgets"]
        with open(plain_path) as f:
            plain = list(json.load(f)["results"].values())
        twin = max(plain, key=lambda m: m["L"])["budgets"]
        trained = {str(m["L"]): m["budgets"][str(m["L"])] for m in plain}
        for arm, budgets in zip(ELASTIC_ARMS, (ours, twin, trained)):
            for M, ppl in budgets.items():
                curves[arm].setdefault(int(M), []).append(ppl)
    return curves


def probe_differences(path, reference):
    """Each model's continuation loss minus the reference model's at one seed, from the JSON of `eval.py`
    (its first setting: the trained loop count): the induction-head probe, the mean of the variable-assignment
    probes, and held-out text (ln perplexity)."""
    with open(path) as f:
        results = json.load(f)["results"]
    def measures(model):
        tasks = next(iter(results[model].values()))["tasks"]
        varassign = [t["cont_loss"] for name, t in tasks.items() if name.startswith("varassign")]
        return dict(induction_head=tasks["induction_head"]["cont_loss"], varassign=float(np.mean(varassign)),
                    text=tasks["ppl_val"]["cont_loss"])
    ref = measures(reference)
    return {m: {k: v - ref[k] for k, v in measures(m).items()} for m in results if m != reference}


def exit_perplexities(path, saved=("0.05", "0.10", "0.20", "0.30")):
    """{model: {saving: perplexity}} at one seed from the JSON of `early_exit.py` (entropy exits): the absolute
    perplexity at each fraction of the depth saved, Lee et al.'s measure (arXiv:2605.09165, Table 7: "FLOPs saved"
    counts the unused depth), and 'full' at full depth."""
    with open(path) as f:
        results = json.load(f)["results"]
    return {m: {"full": r["full_ppl"], **{s: r["criteria"]["entropy"]["table_saved_depth"][s] for s in saved}}
            for m, r in results.items()}


def exit_comparisons(paths, pairs, measure="absolute", saved=None):
    """Lee et al.'s early-exit findings on their own measure, one JSON per seed: for each pair "A<B" (the paper
    says A reaches the lower perplexity) and each saving, the per-seed difference ln ppl_A - ln ppl_B (nats per
    token; negative: as the paper says), t-tested with Holm over the whole family (full depth is reported, not
    tested: the claim is about the savings). A saving a model cannot reach
    at some seed (None) leaves that comparison out. measure="relative": the second measure, the difference of the
    relative penalties 100 (ppl/ppl_full - 1), in percentage points (negative: A loses less, as the paper says). B
    written "NAME@nearest": at each seed the model named NAME@... whose full-depth perplexity is nearest A's (the
    equal-perplexity control). saved: the savings compared (None: all)."""
    seeds = [exit_perplexities(p) for p in paths]
    per_seed = {}

    def value(x, m, s):
        if measure == "relative":
            return 100 * (x[m][s] / x[m]["full"] - 1)
        return math.log(x[m][s])

    def partner(x, a, b):
        if not b.endswith("@nearest"):
            return b
        prefix = b.removesuffix("nearest")
        return min((m for m in x if m.startswith(prefix)), key=lambda m: abs(x[m]["full"] - x[a]["full"]))
    for pair in pairs:
        a, b = pair.split("<")
        for s in (s for s in seeds[0][a] if s != "full" and (saved is None or s in saved)):  # full: context
            d = [value(x, a, s) - value(x, partner(x, a, b), s) for x in seeds
                 if x[a][s] and x[partner(x, a, b)][s]]
            if len(d) == len(seeds):
                per_seed[f"{a}<{b}@{s}"] = d
    family = _family(per_seed)
    for name, r in family.items():
        r["verdict"] = ("reproduced" if r["holm_p"] < 0.05 and r["mean"] < 0 else
                        "opposite" if r["holm_p"] < 0.05 else "inconclusive")
    return dict(perplexity=dict(zip(paths, seeds)), comparisons=family)


def representation_evolution(path, model, reference):
    """Jeddi et al.'s representation finding at one seed (arXiv:2602.11451, §4.3, Fig. 3-4: the early-exit loops
    "remain flat ... and high CKA", LoopFormer "evolves"), from the JSON of `analyze.py representation`: how far each
    of the four metrics moves across the loop steps, the model's minus the reference's. CKA: 1 - CKA(first step, last
    step); anisotropy, curvature and prompt entropy: their range (max - min) over the steps. Positive: the model's
    representation moves more, as the paper says of LoopFormer. Models are found by the prefix of their name."""
    with open(path) as f:
        result = json.load(f)["result"]
    def pick(prefix):
        names = [n for n in result if n.startswith(prefix)]
        if len(names) != 1:
            raise ConfigError(f"{path}: {len(names)} models named {prefix}*, need one (have {sorted(result)}): "
                              "name them with --model and --reference")
        return result[names[0]]
    def moves(r):
        return dict(cka=1 - r["cka"][0][-1], **{k: max(r[k]) - min(r[k]) for k in ("anisotropy", "curvature",
                                                                                   "prompt_entropy")})
    a, b = moves(pick(model)), moves(pick(reference))
    return {k: a[k] - b[k] for k in a}


def _family(per_seed, margin=None, looks=None, margins=None):
    """The tests of one finding's comparisons, each a list of per-seed differences: the t-test (and TOST with a
    margin) of each, Holm over the family. looks: {name: K} for a comparison whose seeds were added after looking
    (records/README.md, rule 5): its p times K enters Holm. margins: {name: δ}, a comparison's own margin (rule 10's
    δ differs by comparison), before the family's."""
    looks, margins = looks or {}, margins or {}
    out = {}
    for name, d in per_seed.items():
        m = margins.get(name, margin)  # TOST after K looks: each side at 0.05 / K (rule 5)
        out[name] = dict(per_seed=d, **(tost(d, m, alpha=0.05 / looks.get(name, 1)) if m is not None else
                                        paired_t_test(d)))
    for name, k in looks.items():
        if k > 1:
            out[name].update(looks=k, threshold=sequential_alpha(k), p_times_looks=min(1.0, out[name]["p"] * k))
    for name, p in zip(out, holm([o.get("p_times_looks", o["p"]) for o in out.values()])):
        out[name]["holm_p"] = p
    return out


def table_key(row, spec, path):
    """A row's key for a table: FIELD's value as text, or FIELD~REGEX: the part of that text the regex finds (its
    first group if it has one): `arch~(.*)_` is loop_base for loop_base_fast, `arch~[a-z]+$` is fast."""
    name, tilde, pattern = spec.partition("~")
    if name not in row:
        raise ConfigError(f"{path}: a row without {name} ({row.get('point')})")
    m = re.search(pattern, str(row[name])) if tilde else None
    if tilde and not m:
        raise ConfigError(f"{path}: {name}={row[name]} does not match {pattern}")
    return m.group(1 if m.re.groups else 0) if tilde else str(row[name])


def table_cells(kind, sources, opts):
    """{row: {column: [one value per seed]}}: a record's table of per-seed numbers, from rows or study JSONs.
    rows: one .jsonl, a row per run; its --row field names the table's row (several, FIELD,FIELD: their values
    joined by "/", none/2/4), --value the number, --seeds their order; the column is the --value field, or with
    --column=FIELD that field's values (an LR's 0.001, a width), --columns=V1,... (and --keep) keep those, in that
    order; each field as FIELD or FIELD~REGEX (table_key). Every kept cell needs one row per seed.
    exits: one argument per seed, its early_exit.py JSONs joined by commas; a row per model, perplexity at full depth
    and at each share of the depth saved (exit_perplexities). elastic: one argument per seed, LF.json,PLAIN.json; a row
    per arm, perplexity at each budget M (elastic_curves)."""
    if kind == "rows":
        seeds, cells, path = [int(s) for s in opts["seeds"].split(",")], {}, sources[0]
        at = (lambda col: f" at {opts['column']}={col}") if "column" in opts else (lambda col: "")
        for r in read_results(path):
            if r.get("seed") in seeds:
                row = "/".join(table_key(r, k, path) for k in opts["row"].split(","))
                col = table_key(r, opts["column"], path) if "column" in opts else opts["value"]
                cell = cells.setdefault(row, {}).setdefault(col, {})
                if r["seed"] in cell:
                    raise ConfigError(f"{path}: two rows of {row}{at(col)} at seed {r['seed']}")
                cell[r["seed"]] = r[opts["value"]]
        cells = {row: cols for row, cols in cells.items() if "keep" not in opts or row in opts["keep"].split(",")}
        columns = opts["columns"].split(",") if "columns" in opts else list({c: 0 for v in cells.values() for c in v})
        cells = {row: {c: cols.get(c, {}) for c in columns} for row, cols in cells.items()}
        missing = [(row, c, s) for row, cols in cells.items() for c, v in cols.items() for s in seeds if s not in v]
        if missing:
            row, c, s = missing[0]
            raise ConfigError(f"{path}: no row of {row}{at(c)} at seed {s}")
        return {row: {c: [v[s] for s in seeds] for c, v in cols.items()} for row, cols in cells.items()}
    if kind == "exits":
        seeds = [{m: v for p in arg.split(",") for m, v in exit_perplexities(p).items()} for arg in sources]
        name = {"full": "full", **{s: f"{100 * float(s):.0f}%" for s in ("0.05", "0.10", "0.20", "0.30")}}
        return {m: {name[s]: [x[m][s] for x in seeds] for s in seeds[0][m]} for m in seeds[0]}
    curves = elastic_curves([p for arg in sources for p in arg.split(",")])
    return {arm: {str(M): v for M, v in by_M.items()} for arm, by_M in curves.items()}


def main_table(argv, opts):
    """python -m lab.fits table rows|exits|elastic SOURCE ... [--keep=ROW,...] [--reference=ROW] [--relative_to=COLUMN]
    --out=F.json: the cells of a record's table (table_cells), each with its mean and sd over seeds (sd null with one
    seed); rows pivots into a grid with --column=FIELD (--row=FIELD,FIELD for compound rows, --columns=V1,... to keep
    some columns): python -m lab.fits table rows R.jsonl --row=arch,n_loop --column=lr --columns=0.001,0.002
    --value=val_loss --seeds=1337,7 --out=F.json gives {"none/2": {"0.001": {...}, "0.002": {...}}, ...}; with a
    reference row, each other row's per-seed difference from it (d, paired by seed) and their mean and standard
    error; with --relative_to, each cell's change from its row's value in that column at the same seed, in percent
    (pct). --keep: these rows, in this order. The record draws the JSON as a generated block (records.py)."""
    kind, sources = argv[1] if len(argv) > 1 else "", [a for a in argv[2:] if not a.startswith("--")]
    need = dict(rows=("row", "value", "seeds"), exits=(), elastic=())
    if kind not in need or not sources or "out" not in opts or any(k not in opts for k in need[kind]):
        raise ConfigError("usage: python -m lab.fits table rows ROWS.jsonl --row=FIELD[,FIELD] --value=FIELD "
                          "--seeds=S1,... [--column=FIELD [--columns=V1,...]] | "
                          "exits EE.json[,EE2.json] ... | elastic LF.json,PLAIN.json ... [--keep=ROW,...] "
                          "[--reference=ROW] [--relative_to=COLUMN] --out=F.json")
    files = [p for arg in sources for p in arg.split(",")]
    if not all(os.path.isfile(p) for p in files):
        raise ConfigError(f"fits.py table: no file at {next(p for p in files if not os.path.isfile(p))}")
    cells = table_cells(kind, sources, opts)
    rows = opts["keep"].split(",") if "keep" in opts else list(cells)
    if any(row not in cells for row in rows + [opts.get("reference", rows[0])]):
        raise ConfigError(f"fits.py table: --keep or --reference names a row not in {', '.join(cells)}")
    cells = {row: cells[row] for row in rows}
    ref = cells.get(opts.get("reference"))
    out = {}
    for row, cols in cells.items():
        out[row] = {}
        for col, v in cols.items():
            c = out[row][col] = dict(per_seed=v, mean=float(np.mean(v)), sd=float(np.std(v, ddof=1)) if len(v) > 1
                                     else None)
            if "relative_to" in opts:  # the change from the row's value in that column, in percent
                c["pct"] = [100 * (a / b - 1) for a, b in zip(v, cols[opts["relative_to"]])]
            if ref is not None:
                d = None if cols is ref else [a - b for a, b in zip(v, ref[col])]
                c.update(d=d, d_mean=d and float(np.mean(d)),
                         d_se=d and float(np.std(d, ddof=1) / math.sqrt(len(d))) if len(v) > 1 else None)
    write_result(opts["out"], out, provenance(files, ["python", "-m", "lab.fits"] + list(argv)))
    print(json.dumps(out, indent=1))
    return out


def main_test(argv):
    """The standard's tests (records/README.md). python -m lab.fits ttest|tost --margin=M|holm VALUE ...: one
    comparison's per-seed differences (holm: one family's p-values); --looks=K: a sequential design's threshold.
    python -m lab.fits family NAME=D1,D2,... (NAME@LOOKS=...) ...: several comparisons of one finding, Holm over
    them (TOST with --margin). From the records' JSONs, one per seed: elastic LOOPFORMER.json PLAIN.json ...
    [--margin=M] (Jeddi et al.'s Table 1), probes EVAL.json ... --reference=MODEL (Chen et al.'s probes), exits
    EE.json ... --pairs=A<B,... [--measure=relative] [--saved=0.30] (Lee et al.'s early exits, exit_comparisons),
    representation R.json ... --model=A --reference=B (Jeddi et al.'s four metrics); table rows|exits|elastic ...: a
    record's table of per-seed numbers (main_table). --out=F.json: all but ttest|tost|holm write their result with
    its provenance."""
    if argv[:1] in (["--help"], ["-h"]):
        print(main_test.__doc__)
        return None
    if not argv or argv[0] not in TEST_OPTIONS:
        raise ConfigError("usage: python -m lab.fits ttest|tost|holm VALUE ... [--margin=M] [--looks=K] | "
                          "family NAME=D1,D2,... ... [--margin=M] [--looks=K] [--out=F.json [--figure=AXIS]] | "
                          "elastic LF.json PLAIN.json ... | probes EVAL.json ... --reference=MODEL | "
                          "exits EE.json ... --pairs=A<B,... | representation R.json ... --model=A --reference=B "
                          "(these four: [--out=F.json [--figure=AXIS]]) | "
                          "table rows|exits|elastic SOURCE ... --out=F.json"
                          + (f" ({argv[0]!r} is not one)" if argv else ""))
    opts = test_options(argv)
    if argv[0] == "table":
        return main_table(argv, opts)
    if argv[0] == "family":
        return main_family(argv, opts)
    if argv[0] in ("exits", "elastic", "probes", "representation"):
        paths = [a for a in argv[1:] if not a.startswith("--")]
        missing = [p for p in paths if not os.path.isfile(p)] or ([] if paths else ["(none given)"])
        if missing:
            raise ConfigError(f"fits.py {argv[0]}: no result JSON at {missing[0]}: pass the JSONs it reads (python "
                              "fits.py without arguments lists them)")
        if argv[0] == "elastic" and len(paths) % 2:
            raise ConfigError(f"fits.py elastic: {len(paths)} JSONs; it takes pairs, LOOPFORMER.json PLAIN.json, one "
                              "pair per seed")
        try:
            return main_test_files(argv, opts, paths)
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, StopIteration) as e:
            raise ConfigError(f"fits.py {argv[0]}: {' '.join(paths)} do not hold what it reads ({type(e).__name__}: "
                              f"{str(e).splitlines()[0][:100] if str(e) else ''}): pass the JSONs its usage names, "
                              "two seeds or more") from None
    try:
        values = [float(a) for a in argv[1:] if not a.startswith("--")]
    except ValueError as e:
        raise ConfigError(f"fits.py {argv[0]}: {e}: give the per-seed numbers (or p-values)") from None
    if argv[0] != "holm" and len(values) < 2:
        raise ConfigError(f"fits.py {argv[0]}: {len(values)} value(s); a test needs two seeds or more")
    if argv[0] == "holm" and not (values and all(0 <= p <= 1 for p in values)):
        raise ConfigError(f"fits.py holm: give p-values between 0 and 1, not {values}")
    if argv[0] == "ttest":
        out = paired_t_test(values)
    elif argv[0] == "tost":
        if "margin" not in opts:
            raise ConfigError("tost needs the margin fixed before the runs: --margin=M")
        out = tost(values, opts["margin"])
    else:
        out = dict(p=values, holm_adjusted=holm(values))
    if "looks" in opts:
        looks = opts["looks"]
        out.update(looks=looks, threshold=sequential_alpha(looks))
        if "p" in out and not isinstance(out["p"], list):
            out["p_times_looks"] = min(1.0, out["p"] * looks)
    print(json.dumps(out, default=float))
    return out


def seed_number(item, inputs):
    """One seed's number in a `fits.py family` comparison: a sum of terms joined by " + " and " - " (spaces around
    the sign), each a number or FILE:PATH, the number at the dotted PATH of a committed JSON (records.py's lookup:
    `records/x.json:free.phi`), so the record types no number it did not read: a difference of two arms, a value
    against the paper's, a change of one against the change of another. A PATH may name a list, one number per seed
    (an analysis that ran every seed): then the item is every seed's number at once (later items add their seeds:
    an added seed's analysis). inputs collects the files read, for the JSON's provenance."""
    parts = re.split(r" ([+-]) ", item.strip())
    total = 0.0
    for sign, term in zip(["+"] + parts[1::2], parts[::2]):
        path, colon, field = term.rpartition(":")
        if not colon:
            value = float(term)
        else:
            if not os.path.isfile(path):
                raise ConfigError(f"fits.py family: {term!r}: no file {path}")
            with open(path) as f:
                value = lookup(json.load(f), field)
            numbers = value if isinstance(value, list) else [value]
            if not numbers or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in numbers):
                raise ConfigError(f"fits.py family: {term!r} is not a number (or a list of them) in {path}")
            inputs.append(path)
        total = total + np.asarray(value, dtype=float) * (1 if sign == "+" else -1)
    return total.tolist() if np.ndim(total) else float(total)


def main_family(argv, opts):
    """python -m lab.fits family NAME=D1,D2,... ...: the comparisons of one finding, each given as its per-seed numbers
    (each a number a committed fit command printed, or read from a committed JSON: seed_number), tested as one family
    and written with the command that gave them and the JSONs it read. NAME@K=... : that comparison is a sequential
    design with K looks (its p times K enters Holm; --looks=K: all); NAME±D=... (or NAME@K±D=): its TOST within ±D,
    its own margin (--margin=D: every comparison's). --figure="AXIS (UNIT)": also F_seeds.png (lab/figures.py's
    plot_differences), each seed's difference and the interval the verdict's test uses."""
    if opts.get("figure") and not opts.get("out"):
        raise ConfigError("fits.py family --figure=LABEL draws beside its JSON: give --out=F.json too")
    per_seed, looks, margins, inputs = {}, {}, {}, []
    for a in argv[1:]:
        if a.startswith("--"):
            continue
        key, eq, values = a.partition("=")
        key, pm, own = key.partition("±")
        name, at, k = key.partition("@")
        try:
            numbers = [seed_number(v, inputs) for v in re.split(r",(?! )", values)]  # ", " belongs to a key
            # an item naming a list gives its seeds in order (an analysis that ran several), a number one seed
            per_seed[name] = [x for n in numbers for x in (n if isinstance(n, list) else [n])]
            looks[name] = int(k) if at else opts.get("looks", 1)
            if pm:
                margins[name] = float(own)
        except ValueError:
            per_seed[name] = []
        if not eq or not name or len(per_seed[name]) < 2 or looks.get(name, 0) < 1 or margins.get(name, 1) <= 0:
            raise ConfigError(f"fits.py family: {a!r} is not NAME=D1,D2,... or NAME@LOOKS±MARGIN=D1,D2,...: give "
                              "each comparison's per-seed numbers (each a number, FILE:PATH in a JSON, or a sum of "
                              "them; a PATH may name a list, one number per seed), two seeds or more")
    prov = provenance(sorted(set(inputs)), ["python", "-m", "lab.fits"] + list(argv))  # before anything is written
    out = _family(per_seed, opts.get("margin"), looks, margins)
    for name, r in out.items():
        r["sd"] = float(np.std(r["per_seed"], ddof=1))  # the seeds' spread, beside the mean's standard error
        if "margin" not in opts and name not in margins:  # a t-test's verdict (TOST says its own)
            r["verdict"] = "inconclusive" if r["holm_p"] >= 0.05 else "lower" if r["mean"] < 0 else "higher"
    if opts.get("out"):
        write_result(opts["out"], out, prov)
    draw_families("family", out, opts)  # its slide: OUT's name + _seeds.png, beside a JSON of what it draws
    print(json.dumps(out, indent=1, default=float))
    return out


# the options of each `python -m lab.fits` command, with the type of their value
TEST_OPTIONS = dict(ttest=dict(looks=int), tost=dict(margin=float, looks=int), holm=dict(looks=int),
                    family=dict(margin=float, looks=int, out=str, figure=str),
                    elastic=dict(margin=float, out=str, figure=str), probes=dict(reference=str, out=str, figure=str),
                    exits=dict(pairs=str, measure=str, saved=str, out=str, figure=str),
                    representation=dict(model=str, reference=str, out=str, figure=str),
                    table=dict(row=str, value=str, seeds=str, column=str, columns=str, keep=str, reference=str,
                               relative_to=str, out=str))


def test_options(argv):
    """The --key=value options of a `python -m lab.fits` command, typed; anything else is one line."""
    allowed, opts = TEST_OPTIONS[argv[0]], {}
    for a in argv[1:]:
        if not a.startswith("--"):
            continue
        key, eq, text = a[2:].partition("=")
        if key not in allowed or not eq:
            raise ConfigError(f"fits.py {argv[0]}: {a!r} is not an option of it; it takes "
                              f"{', '.join(f'--{k}=...' for k in allowed)}")
        try:
            opts[key] = allowed[key](text)
        except ValueError:
            kind = "an integer" if allowed[key] is int else "a number"
            raise ConfigError(f"fits.py {argv[0]}: --{key}={text!r} must be {kind}") from None
        if allowed[key] is not str and not (math.isfinite(opts[key]) and opts[key] > 0):
            raise ConfigError(f"fits.py {argv[0]}: --{key}={text} must be a finite number > 0")
        if key == "out" and not os.path.isdir(os.path.dirname(os.path.abspath(text))):
            raise ConfigError(f"fits.py {argv[0]}: --out={text}: {os.path.dirname(os.path.abspath(text))} is not a "
                              "directory")
    return opts


def write_result(path, out, prov):
    """A committed result names what regenerates it (records/README.md): prov, read before anything was written, for
    rewriting a committed JSON or figure would make the tree read as dirty."""
    with open(path, "w") as f:
        json.dump(dict(out, provenance=prov), f, indent=1, default=float)


def main_test_files(argv, opts, paths):
    """The commands of main_test that read result JSONs (one per seed). --figure="AXIS (UNIT)": also
    OUT_seeds.png, the family's per-seed differences as family --figure draws them (figure_families)."""
    if opts.get("figure") and not opts.get("out"):
        raise ConfigError(f"fits.py {argv[0]} --figure=LABEL draws beside its JSON: give --out=F.json too")
    prov = provenance(paths, ["python", "-m", "lab.fits"] + list(argv))  # before any file is written (write_result)
    if argv[0] == "exits":
        measure = opts.get("measure", "absolute")
        if measure not in ("absolute", "relative"):
            raise ConfigError(f"fits.py exits: --measure={measure!r}: absolute (ln perplexity, the paper's) | relative "
                              "(the penalty in percent of full-depth perplexity)")
        out = exit_comparisons(paths, opts.get("pairs", "Looped<Base,Looped<MoE").split(","), measure,
                               opts["saved"].split(",") if "saved" in opts else None)
        if opts.get("figure") and not out["comparisons"]:  # (before anything is written)
            raise ConfigError("fits.py exits: no comparison to draw: --pairs and --saved name none the JSONs hold "
                              "(savings as they write them, e.g. 0.30)")
        out["provenance"] = prov
        if opts.get("out"):
            write_result(opts["out"], out, prov)
        for name, r in out["comparisons"].items():
            unit = "points" if measure == "relative" else "nats"
            print(f"{name:28s} per seed {' '.join(f'{d:+.3f}' for d in r['per_seed'])}  mean {r['mean']:+.3f} {unit}, "
                  f"p {r['p']:.3f}, Holm {r['holm_p']:.3f}: {r['verdict']}")
        draw_families(argv[0], out, opts)
        return out
    if argv[0] == "elastic":
        seeds = [elastic_gaps(a, b) for a, b in zip(paths[::2], paths[1::2])]
        Ms = sorted(seeds[0])
        out = dict(vs_twin=_family({M: [s[M]["vs_twin"] for s in seeds] for M in Ms[:-1]}),
                   vs_trained_at_M=_family({M: [s[M]["vs_trained_at_M"] for s in seeds] for M in Ms[:-1]}),
                   full_depth_vs_twin=_family({Ms[-1]: [s[Ms[-1]]["vs_twin"] for s in seeds]}))
        if "margin" in opts:
            out["matches_trained_at_M"] = _family({M: [s[M]["vs_trained_at_M"] for s in seeds]
                                                   for M in Ms[:-1]}, opts["margin"])
        if opts.get("out"):  # the curves beside the verdict: OUT_curves.png and .json
            figures.plot_elastic_curves(elastic_curves(paths), opts["out"].removesuffix(".json") + "_curves")
    elif argv[0] == "representation":
        seeds = [representation_evolution(p, opts.get("model", "loopformer"), opts.get("reference", "ee_loop"))
                 for p in paths]
        out = _family({k: [s[k] for s in seeds] for k in seeds[0]})
    else:
        seeds = [probe_differences(p, opts.get("reference", "vanilla")) for p in paths]
        out = _family({f"{m}/{k}": [s[m][k] for s in seeds] for m in seeds[0] for k in seeds[0][m]})
    if opts.get("out"):
        write_result(opts["out"], out, prov)
    draw_families(argv[0], out, opts)
    print(json.dumps(out, indent=1, default=float))
    return out


# Jeddi et al.'s elastic verdict holds four Holm families (a comparison per budget M in each): a figure each
ELASTIC_FAMILIES = {"vs_twin": "LoopFormer − its plain twin cut to M",
                    "vs_trained_at_M": "LoopFormer − a loop trained at M",
                    "full_depth_vs_twin": "LoopFormer − its plain twin, full depth",
                    "matches_trained_at_M": "LoopFormer − a loop trained at M, TOST"}


def figure_families(kind, out, axis):
    """(file suffix, family, axis) of each figure a command's --figure=AXIS draws from its result `out`: the one
    family it holds (exits: under "comparisons"), or for elastic each of its families, a comparison per budget M."""
    if kind == "exits":
        return [("", out["comparisons"], axis)]
    if kind == "elastic":
        return [(f"_{name}", {f"M = {M}": e for M, e in out[name].items()}, f"{what}: {axis}")
                for name, what in ELASTIC_FAMILIES.items() if name in out]
    return [("", {k: v for k, v in out.items() if k != "provenance"}, axis)]


def draw_families(kind, out, opts):
    """--figure: OUT{suffix}_seeds.png (and .json) for each family of figure_families."""
    if not opts.get("figure"):
        return
    for suffix, family, axis in figure_families(kind, out, opts["figure"]):
        figures.plot_differences(family, opts["out"].removesuffix(".json") + suffix + "_seeds", axis)


if __name__ == "__main__":  # the same commands as `python -m lab.fits ttest|family|table ...`, the name records cite
    run(main_test, sys.argv[1:])
