"""
The statistics of scaling sweeps: scaling-law fits and their bootstrap intervals, delta phi between designs, the
power of a planned grid, learning-rate transfer, comparisons of arms at matched compute (their figures:
lab/figures.py). accounting.py counts parameters and FLOPs and lab/sweep.py runs the sweeps; this file reads the rows
they write (a sweep's results.jsonl, a record's records/<paper>/<sweep>.jsonl) and fits them. Its commands run
through scaling.py:

    python scaling.py fit out/sweeps/isoflop_cpu/results.jsonl --law=isoflop
    python scaling.py figures records/
    python scaling.py power config/sweeps/isodepth_cpu.py --calibrate=records/schwethelm2026/isodepth_pilot_cpu.jsonl

The tests of the records' statistical standard (records/README.md) live in lab/verdicts.py and run from here:

    python -m lab.fits ttest 0.006 0.043 0.042
"""
import glob
import json
import math
import os
import re
import sys

import numpy as np
import scipy.optimize

from configurator import ConfigError, configure, run
from lab import figures
from lab.batch_minimize import minimize_batch, one_blas_thread, pool, progress
from lab.sweep import check_pattern, load_spec, plan, read_results
from lab.verdicts import main_test
from runs import provenance

# -----------------------------------------------------------------------------------------------------------------
# scaling-law fits (numpy/scipy only)
#
# Parametric laws are fitted as in Schwethelm et al. 2026 (arXiv:2604.21106, §4.2 and App. F), after Hoffmann et
# al. 2022 / Besiroglu et al. 2024: parameters theta = (a, alpha, b, beta, e, phi) with A = e^a, B = e^b, E = e^e,
#     L = E + A N_eff^-alpha + B D^-beta,   N_eff = N_once + r^phi N_rec
# minimising sum_i Huber_delta( LSE(a - alpha ln N_eff_i, b - beta ln D_i, e) - ln L_i ), delta = 1e-3, over the box
# below, best of many random starts drawn uniformly in the box. The Chinchilla law is the same with N_rec = 0.
# All starts run at once as one numpy batch (batch_minimize.py's projected BFGS, with this file's analytic gradients);
# the best few are then polished with scipy's L-BFGS-B, the paper's optimizer. The bootstrap's refits start near the
# full-data estimate and descend together (fit_joint, bootstrap_law).

PARAMS = ("a", "alpha", "b", "beta", "e", "phi")
BOX = np.array([[-5, 35], [0, 2.5], [-5, 35], [0, 2.5], [-3, 2], [-3, 3]], dtype=float)  # Schwethelm App. F
HUBER_DELTA = 1e-3


def law_data(N_once, N_rec, r, D, L):
    """The arrays a parametric fit needs, as float64."""
    N_once, N_rec, r, D, L = (np.asarray(v, dtype=np.float64) for v in (N_once, N_rec, r, D, L))
    return dict(N_once=N_once, N_rec=N_rec, ln_r=np.log(r), ln_D=np.log(D), ln_L=np.log(L), L=L)


def law_predict(theta, data):
    """Predicted loss (n,) for one parameter vector (6,)."""
    a, alpha, b, beta, e, phi = theta
    n_eff = data["N_once"] + np.exp(phi * data["ln_r"]) * data["N_rec"]
    return np.exp(a - alpha * np.log(n_eff)) + np.exp(b - beta * data["ln_D"]) + np.exp(e)


def law_objective(theta, data, delta=HUBER_DELTA, weights=None):
    """Huber objective (R,) and gradient (R, 6) for R parameter vectors theta (R, 6) at once; weights (R, n): how
    often each vector counts each row (a bootstrap resample), None = once."""
    a, alpha, b, beta, e, phi = (theta[:, i:i + 1] for i in range(6))  # each (R, 1)
    looped = data["N_rec"].any()
    if looped:
        r_phi = np.exp(phi * data["ln_r"])  # (R, n)
        n_eff = data["N_once"] + r_phi * data["N_rec"]
        ln_n = np.log(n_eff)
    else:
        ln_n = np.log(data["N_once"])
    t1, t2 = a - alpha * ln_n, b - beta * data["ln_D"]  # the log-sum-exp of t1, t2, e is ln(predicted loss)
    top = np.maximum(np.maximum(t1, t2), e)
    w1, w2, w3 = np.exp(t1 - top), np.exp(t2 - top), np.exp(e - top)
    total = w1 + w2 + w3
    res = top + np.log(total) - data["ln_L"]
    w1, w2, w3 = w1 / total, w2 / total, w3 / total  # d lse / d t
    abs_res = np.abs(res)
    f = np.where(abs_res <= delta, 0.5 * res * res, delta * (abs_res - 0.5 * delta))
    h = np.clip(res, -delta, delta)  # Huber'(res)
    if weights is not None:
        f, h = f * weights, h * weights
    f = f.sum(1)
    hw1, hw2 = h * w1, h * w2
    g = np.empty_like(theta)
    g[:, 0], g[:, 1] = hw1.sum(1), -(hw1 * ln_n).sum(1)
    g[:, 2], g[:, 3] = hw2.sum(1), -(hw2 * data["ln_D"]).sum(1)
    g[:, 4] = (h * w3).sum(1)
    g[:, 5] = -(hw1 * alpha * (r_phi * data["ln_r"] * data["N_rec"] / n_eff)).sum(1) if looped else 0.0
    return f, g


def bounds(fixed=None, box=BOX):
    """Lower and upper bounds (6,) of the fit; fixed: {"phi": 0.0, ...} holds parameters at a value."""
    lo, hi = box[:, 0].copy(), box[:, 1].copy()
    for name, value in (fixed or {}).items():
        lo[PARAMS.index(name)] = hi[PARAMS.index(name)] = value
    return lo, hi


def best_fits(data, starts, lo, hi, polish=2, weights=None):
    """The best local minimum of each of B fitting problems: starts (B, S, 6) are S starting points for each, weights
    (B, n) each problem's row weights (None: one problem, every row once), lo and hi the bounds (6,) of all or (B, 6)
    of each problem. All B*S starts descend as one numpy batch; the `polish` best of each problem are then polished
    with scipy's L-BFGS-B, the paper's optimizer.
    Returns theta (B, 6), the Huber objective (B,) and every descent's end (B, S, 6), best first."""
    one_blas_thread()
    B, S, P = starts.shape
    scale = 1.0 / HUBER_DELTA  # well-conditioned objective values (about sum |res|) for the tolerances

    def batch(X, which):  # which: the start of each row of X; start s belongs to problem s // S
        f, g = law_objective(X, data, weights=None if weights is None else weights[which // S])
        return f * scale, g * scale

    lo, hi = np.broadcast_to(lo, (B, P)), np.broadcast_to(hi, (B, P))
    x, f = minimize_batch(batch, starts.reshape(B * S, P), np.repeat(lo, S, 0), np.repeat(hi, S, 0))
    order = np.argsort(f.reshape(B, S), axis=1)
    ends = x.reshape(B, S, P)[np.arange(B)[:, None], order]
    theta, objective = np.empty((B, P)), np.full(B, np.inf)
    for b in range(B):
        for x_start in ends[b, :polish]:
            r = scipy.optimize.minimize(lambda t: tuple(v[0] for v in batch(t[None], np.array([b * S]))), x_start,
                                        jac=True, method="L-BFGS-B", bounds=list(zip(lo[b], hi[b])),
                                        options=dict(maxiter=10000, ftol=1e-13, gtol=1e-10))
            if r.fun < objective[b]:
                theta[b], objective[b] = r.x, r.fun
    return theta, objective / scale, ends


def random_starts(n, lo, hi, rng):
    """n starting points (n, 6) drawn uniformly in the box."""
    return lo + rng.random((n, len(lo))) * (hi - lo)


def fit_law(data, restarts=500, fixed=None, seed=0, polish=2, box=BOX):
    """Best-of-`restarts` Huber fit of the joint law. fixed: {"phi": 0.0, ...} holds parameters at a value.
    Returns dict(theta (6,), objective, r2, ...) with named parameters."""
    lo, hi = bounds(fixed, box)
    thetas, huber, _ = best_fits(data, random_starts(restarts, lo, hi, np.random.default_rng(seed))[None], lo, hi,
                                 polish)
    theta = thetas[0]
    pred = law_predict(theta, data)
    res = data["L"] - pred
    out = {name: float(v) for name, v in zip(PARAMS, theta)}
    out.update(A=math.exp(theta[0]), B=math.exp(theta[2]), E=math.exp(theta[4]), theta=theta.tolist(),
               huber=float(huber[0]), n=int(len(pred)),
               r2=float(1 - (res ** 2).sum() / ((data["L"] - data["L"].mean()) ** 2).sum()),
               rmse=float(np.sqrt((res ** 2).mean())), max_abs_residual=float(np.abs(res).max()),
               a_D=float(theta[3] / (theta[1] + theta[3])) if theta[1] + theta[3] > 0 else float("nan"))
    return out


def block_weights(cells, n_rows, n_boot, seed=0):
    """Row weights (n_boot, n_rows) of a block bootstrap (Schwethelm et al. App. F.2): each resample draws the cells
    (lists of row indices) with replacement; a row counts as often as its cell was drawn."""
    rng = np.random.default_rng(seed)
    weights = np.zeros((n_boot, n_rows))
    for i in range(n_boot):
        for j in rng.integers(0, len(cells), len(cells)):
            weights[i, cells[j]] += 1
    return weights


def paired_run_weights(cells_a, cells_b, n_boot, seed=0):
    """Row weights of two data sets resampled together, run by run within each cell: cells_a[k] and cells_b[k] are
    the same cell of each (lists of row indices, ordered alike, e.g. by width and seed), and a resample draws the
    same ranks from both, so the k-th run of one pairs with the k-th of the other. Returns (n_boot, n_a), (n_boot,
    n_b) for rows numbered 0 .. n_a - 1 and 0 .. n_b - 1."""
    rng = np.random.default_rng(seed)
    n_a = 1 + max((i for c in cells_a for i in c), default=-1)
    n_b = 1 + max((i for c in cells_b for i in c), default=-1)
    wa, wb = np.zeros((n_boot, n_a)), np.zeros((n_boot, n_b))
    for i in range(n_boot):
        for ca, cb in zip(cells_a, cells_b):
            u = rng.random(max(len(ca), len(cb)))  # the ranks drawn, as quantiles of the cell
            for cell, w in ((ca, wa), (cb, wb)):
                if cell:
                    np.add.at(w[i], np.asarray(cell)[(u[:len(cell)] * len(cell)).astype(int)], 1)
    return wa, wb


def bootstrap_law(data, weights, restarts, seed=0, workers=1, fixed=None, start=None):
    """Refit the law on each resample, given as row weights (n_boot, n) (block_weights, paired_run_weights), from
    `restarts` random starts plus `start` (the full-data estimate); returns the refits' parameters (n_boot, 6). A
    row weighted w counts as w drawn copies (the same Huber sum), so the refits of a chunk descend together as one
    batch, a chunk per job. fixed: held parameters ({name: value}), or a list of them, one per resample."""
    n_boot = len(weights)
    fixed = fixed if isinstance(fixed, list) else [fixed] * n_boot
    lo = np.array([bounds(f)[0] for f in fixed]).reshape(n_boot, len(PARAMS))
    hi = np.array([bounds(f)[1] for f in fixed]).reshape(n_boot, len(PARAMS))
    starts = np.array([random_starts(restarts, lo[i], hi[i], np.random.default_rng(seed + 1 + i))
                       for i in range(n_boot)])
    if start is not None:
        starts = np.concatenate([starts, np.broadcast_to(start, (n_boot, 1, len(PARAMS)))], 1)
    size = 5  # refits a batch: larger ones lost more to page faults (big temporaries) than they saved in overhead
    jobs = [(data, starts[i:i + size], lo[i:i + size], hi[i:i + size], weights[i:i + size])
            for i in range(0, n_boot, size)]
    if workers > 1:
        with pool(workers) as workers_pool:  # leaving the block (also by an exception or Ctrl-C) ends the workers
            thetas = list(progress(workers_pool.imap(_refit, jobs), n_boot, "bootstrap refits"))
    else:
        thetas = list(progress(map(_refit, jobs), n_boot, "bootstrap refits"))
    return np.concatenate(thetas)


def _refit(job):
    """A chunk's refits, every start polished: a resample often has two minima whose BFGS ends differ in the last
    bits, and polishing only the best two let a 1e-12 change of the inputs (another machine's BLAS) pick the other
    minimum, far from the first (tests/test_fits.py::test_a_bootstrap_refit_lands_where_it_did)."""
    data, starts, lo, hi, weights = job
    return best_fits(data, starts, lo, hi, polish=starts.shape[1], weights=weights)[0]


def interval(values, level=0.95):
    lo, hi = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
    return [float(lo), float(hi)]


# ---- results and groups ----

def field(row, key, default=None):
    """A row's value for key: the row itself, then its model config, then its train config."""
    if key in row:
        return row[key]
    config = row.get("config", {})
    for part in ("model", "train"):
        if key in config.get(part, {}):
            return config[part][key]
    return default


def group_by(rows, *keys):
    """{value(s): rows} in sorted order of the key values."""
    groups = {}
    for row in rows:
        value = tuple(field(row, k) for k in keys)
        groups.setdefault(value[0] if len(keys) == 1 else value, []).append(row)
    return dict(sorted(groups.items(), key=lambda kv: str(kv[0]) if not isinstance(kv[0], (int, float))
                       else f"{kv[0]:030.6f}"))


def column(rows, key):
    return np.array([float(field(r, key)) for r in rows])


def flops_curve(N, F):
    """Per-token training FLOPs as a function of N from the runs: interpolation in log-log inside the sampled
    range, the fitted power law's slope outside it."""
    lnN, lnF = np.log(N), np.log(F)
    order = np.argsort(lnN)
    lnN, lnF = lnN[order], lnF[order]
    slope = np.polyfit(lnN, lnF, 1)[0] if np.ptp(lnN) > 0 else 1.0

    def F_of(n):
        x = np.log(n)
        y = np.interp(x, lnN, lnF)
        y = np.where(x < lnN[0], lnF[0] + slope * (x - lnN[0]), y)
        return np.exp(np.where(x > lnN[-1], lnF[-1] + slope * (x - lnN[-1]), y))
    return F_of


def compute_optimal(loss_of, F_of, budgets, N_lo, N_hi, points=4000):
    """argmin over N of loss_of(N, D = C / F(N)) at each budget: N*, D*, L* (arrays)."""
    N = np.exp(np.linspace(np.log(N_lo), np.log(N_hi), points))
    F = F_of(N)
    out = np.array([(N[i], C / F[i], L[i]) for C in budgets
                    for L in [loss_of(N, C / F)] for i in [int(np.argmin(L))]])
    return out[:, 0], out[:, 1], out[:, 2]


def power_law(x, y):
    """Slope and intercept of ln y = intercept + slope ln x."""
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope), float(intercept)


# ---- isoFLOP parabolas (Lee et al. 2026, arXiv:2605.09165, §4; after Hoffmann et al. 2022, approach 2) ----

def isoflop_parabola(lnN, loss):
    """Quadratic in ln N; returns (coefficients, ln N at the minimum or None when the curve opens downward)."""
    coef = np.polyfit(lnN, loss, 2)
    return coef, (-coef[1] / (2 * coef[0]) if coef[0] > 0 else None)


def fit_isoflop(rows, n_key="params_active", n_boot=200, seed=0):
    """Per architecture and budget a quadratic in ln N, its minimum the compute-optimal point; then L = k N^-alpha
    through the optima (and N* ∝ C^a_N). 95% intervals from a residual bootstrap of the parabolas."""
    rng = np.random.default_rng(seed)
    result = {}
    for arch, arch_rows in group_by(rows, "arch").items():
        cells, optima = [], []
        for C, cell in group_by(arch_rows, "flops_budget").items():
            N, loss = column(cell, n_key), column(cell, "val_loss")
            lnN = np.log(N)
            info = dict(flops_budget=C, N=N.tolist(), loss=loss.tolist())
            if len(np.unique(lnN)) >= 3:
                coef, x = isoflop_parabola(lnN, loss)
                info["coef"] = coef.tolist()
                if x is not None:
                    info.update(N_opt=float(np.exp(x)), loss_opt=float(np.polyval(coef, x)),
                                inside=bool(lnN.min() <= x <= lnN.max()))
                    optima.append(info)
                    cells.append((lnN, loss, coef))
            result.setdefault(arch, {}).setdefault("budgets", []).append(info)
        if len(optima) < 2:
            result[arch]["note"] = "fewer than two budgets with a minimum: no power law"
            continue
        N_opt, L_opt, budgets = (np.array([o[k] for o in optima]) for k in ("N_opt", "loss_opt", "flops_budget"))
        slope, intercept = power_law(N_opt, L_opt)
        a_N = power_law(budgets, N_opt)[0]
        # fitted residuals understate the noise by sqrt((n - 3) / n) for a 3-parameter fit to n points: undo it
        residuals = np.concatenate([(loss - np.polyval(coef, lnN)) * math.sqrt(len(lnN) / max(1, len(lnN) - 3))
                                    for lnN, loss, coef in cells])
        boot = []
        for _ in range(n_boot):
            pts = []
            for lnN, loss, coef in cells:
                fake = np.polyval(coef, lnN) + rng.choice(residuals, len(lnN))
                c, x = isoflop_parabola(lnN, fake)
                pts.append((np.exp(x), np.polyval(c, x)) if x is not None else (np.nan, np.nan))
            pts = np.array(pts)
            if np.isfinite(pts).all():
                boot.append([-power_law(pts[:, 0], pts[:, 1])[0], power_law(budgets, pts[:, 0])[0]])
        boot = np.array(boot).reshape(-1, 2)
        result[arch].update(alpha=-slope, k=math.exp(intercept), a_N=a_N, n_key=n_key,
                            alpha_ci=interval(boot[:, 0]) if len(boot) else None,
                            a_N_ci=interval(boot[:, 1]) if len(boot) else None, bootstrap=len(boot))
    return result


# ---- Chinchilla law per architecture, joint law across recurrences (Schwethelm et al. 2026, arXiv:2604.21106) ----

def rows_law_data(rows, n_key=None):
    """law_data from result rows: N_once/N_rec/r from the accounting fields (n_key: one N, no recurrence split)."""
    if n_key:
        N = column(rows, n_key)
        return law_data(N, np.zeros_like(N), np.ones_like(N), column(rows, "tokens"), column(rows, "val_loss"))
    return law_data(column(rows, "params_once_nonembed"), column(rows, "params_rec_nonembed"),
                    column(rows, "n_loop"), column(rows, "tokens"), column(rows, "val_loss"))


def run_flops(rows):
    """Training FLOPs per token of each run."""
    return np.array([field(r, "flops_per_token") or field(r, "flops_budget") / field(r, "tokens") for r in rows])


def chinchilla_curves(result, rows):
    """{arch: [(C, N of its runs, their losses, an N grid, the law's loss on it), ...]}: what plot_chinchilla draws,
    the law's isoFLOP curve L(N, C/F(N)) through each budget's runs."""
    out = {}
    by_arch = group_by(rows, "arch")
    for arch, fit in result.items():
        arch_rows = by_arch[arch]
        theta = np.array(fit["theta"])
        N = column(arch_rows, fit["n_key"])
        F_of = flops_curve(N, run_flops(arch_rows))
        out[arch] = []
        for C, cell in group_by(arch_rows, "flops_budget").items():
            n = np.geomspace(N.min() / 1.5, N.max() * 1.5, 100)
            out[arch].append((C, column(cell, fit["n_key"]), column(cell, "val_loss"), n,
                              law_predict(theta, law_data(n, 0 * n, 1 + 0 * n, C / F_of(n), 1 + 0 * n))))
    return out


def fit_chinchilla(rows, n_key="params_unique_nonembed", restarts=500, seed=0):
    """L = E + A N^-alpha + B D^-beta per architecture; compute-optimal N*(C), D*(C) with the architecture's
    empirical FLOPs per token F(N), their exponents, and a_D = beta/(alpha+beta)."""
    result = {}
    for arch, arch_rows in group_by(rows, "arch").items():
        fit = fit_law(rows_law_data(arch_rows, n_key), restarts, {"phi": 0.0}, seed)
        N = column(arch_rows, n_key)
        F_of = flops_curve(N, run_flops(arch_rows))
        budgets = np.array(sorted({field(r, "flops_budget") for r in arch_rows}))
        theta = np.array(fit["theta"])
        loss_of = lambda n, d: law_predict(theta, law_data(n, 0 * n, 1 + 0 * n, d, 1 + 0 * n))  # noqa: E731
        C = np.geomspace(budgets.min(), budgets.max(), 25) if len(budgets) > 1 else budgets
        N_opt, D_opt, L_opt = compute_optimal(loss_of, F_of, C, N.min() / 30, N.max() * 30)
        fit.update(n_key=n_key, budgets=budgets.tolist(), compute_optimal=dict(
            flops=C.tolist(), N=N_opt.tolist(), D=D_opt.tolist(), loss=L_opt.tolist()))
        if len(C) > 1:
            fit.update(N_opt_exponent=power_law(C, N_opt)[0], D_opt_exponent=power_law(C, D_opt)[0])
        result[arch] = fit
    return result


def cells_of(rows, keys=("flops_budget", "n_loop", "arch")):
    """Row indices of each (budget, recurrence, architecture) cell: the bootstrap's blocks."""
    index = {}
    for i, row in enumerate(rows):
        index.setdefault(tuple(field(row, k) for k in keys), []).append(i)
    return [np.array(v) for v in index.values()]


def fit_joint(rows, restarts=500, n_boot=200, seed=0, workers=1, boot_restarts=16):
    """L = E + A (N_once + r^phi N_rec)^-alpha + B D^-beta with phi free, fixed to 0 and to 1; a block-bootstrap
    95% interval; refits on the low and high budget halves; equivalent sizes; per-r compute-optimal frontiers.
    A resample moves the optimum a little, so each bootstrap refit starts from the full-data estimate and
    `boot_restarts` random points, not `restarts` (tests/test_fits.py checks the refits against brute-force
    random starts; `--boot_restarts=500` is the brute force)."""
    data = rows_law_data(rows)
    out = {"free": fit_law(data, restarts, None, seed),
           "phi=0": fit_law(data, restarts, {"phi": 0.0}, seed),
           "phi=1": fit_law(data, restarts, {"phi": 1.0}, seed)}
    if n_boot:
        weights = block_weights(cells_of(rows), len(rows), n_boot, seed)
        thetas = bootstrap_law(data, weights, boot_restarts, seed, workers, start=np.array(out["free"]["theta"]))
        out["bootstrap"] = dict(n=n_boot, **{f"{p}_ci": interval(thetas[:, i]) for i, p in enumerate(PARAMS)})
        out["bootstrap"]["phi_values"] = thetas[:, 5].tolist()
    budgets = sorted({field(r, "flops_budget") for r in rows})
    if len(budgets) >= 4:
        half = (len(budgets) + 1) // 2
        for name, chosen in (("low_budgets", budgets[:half]), ("high_budgets", budgets[half:])):
            sub = [r for r in rows if field(r, "flops_budget") in chosen]
            out[name] = dict(fit_law(rows_law_data(sub), restarts, None, seed), flops_budgets=chosen)
    out["equivalent_size"] = equivalent_sizes(rows, out["free"]["phi"])
    out["frontier"] = joint_frontiers(rows, out)
    return out


def equivalent_sizes(rows, phi, reference_N=1e9):
    """Schwethelm et al. App. F.4: at the same width and effective depth, a looped model's unique parameters,
    effective parameters N_once + r^phi N_rec and training FLOPs relative to the non-looped one, scaled to a
    non-looped model of reference_N parameters."""
    base = {field(r, "n_embd"): r for r in rows if field(r, "n_loop") == 1}
    out = {}
    for r_loop, loop_rows in group_by([r for r in rows if field(r, "n_loop") > 1], "n_loop").items():
        pair = next(((row, base[field(row, "n_embd")]) for row in loop_rows if field(row, "n_embd") in base), None)
        if pair is None:
            continue
        looped, plain = pair
        N1 = field(plain, "params_unique_nonembed")
        once, rec = field(looped, "params_once_nonembed"), field(looped, "params_rec_nonembed")
        n_ratio, eff_ratio = (once + rec) / N1, (once + r_loop ** phi * rec) / N1
        f_ratio = run_flops([looped])[0] / run_flops([plain])[0]
        out[str(r_loop)] = dict(n_embd=field(looped, "n_embd"), N_ratio=n_ratio, N_eff_ratio=eff_ratio,
                                train_flops_ratio=f_ratio, example=f"a {n_ratio * reference_N / 1e6:.0f}M r={r_loop} "
                                f"model matches a {eff_ratio * reference_N / 1e6:.0f}M non-looped one at the training "
                                f"cost of a {f_ratio * reference_N / 1e6:.0f}M non-looped one")
    return out


def joint_frontiers(rows, fits):
    """Per recurrence count: compute-optimal loss L*(C) under the free-phi and phi=1 joint fits, with each
    architecture's empirical F(N) and recurrent fraction N_rec/N; plus the empirical best run per budget."""
    out = {}
    budgets = sorted({field(r, "flops_budget") for r in rows})
    C = np.geomspace(budgets[0], budgets[-1], 25) if len(budgets) > 1 else np.array(budgets)
    for r_loop, rr in group_by(rows, "n_loop").items():
        N = column(rr, "params_unique_nonembed")
        rec_frac = float(np.median(column(rr, "params_rec_nonembed") / N))
        F_of = flops_curve(N, run_flops(rr))
        entry = dict(flops=C.tolist(), rec_fraction=rec_frac, best_runs=[
            dict(flops_budget=b, loss=min(field(x, "val_loss") for x in cell))
            for b, cell in group_by(rr, "flops_budget").items()])
        for name in ("free", "phi=1"):
            theta = np.array(fits[name]["theta"])
            loss_of = lambda n, d: law_predict(theta, law_data(  # noqa: E731
                n * (1 - rec_frac), n * rec_frac, np.full_like(n, r_loop), d, np.ones_like(n)))
            entry[name] = compute_optimal(loss_of, F_of, C, N.min() / 30, N.max() * 30)[2].tolist()
        out[str(r_loop)] = entry
    return out


# ---- delta phi: what one recurrence is worth under one design against another, on the same grid ----
# Schwethelm et al. 2026 (arXiv:2604.21106, §5, Table 3) refit the joint law for each probe (truncated BPTT,
# hyper-connections) on its looped runs plus the baseline's r=1 runs and compare the phis. Here the comparison is one
# number with its own interval: delta phi = phi(design) - phi(reference), both fitted on the budgets the design ran,
# and a paired bootstrap. It resamples runs within each (budget, r) cell, the same ranks (width, seed) in both data
# sets, so the shared r=1 runs and what the two designs' runs at one width have in common cancel. Not the block
# bootstrap over cells of the joint fit: a probe at two budgets has six cells, 98% of the resamples that draw six
# of six miss one and a quarter lose a whole r, so the law is poorly identified in most of them (the interval came
# out 0.8-1.5 wide on a synthetic twin of the CPU grid, against a real spread of 0.02-0.03). `hold` keeps
# parameters of the law (alpha, beta, a, b, e) at the reference's values, resample by resample: then a design
# differs from its reference only in what a recurrence is worth. No paper measures delta phi; these choices are ours.

def design_loops(arch, prefix):
    """r of a design's arch name prefix + str(r) (trunc_r4 -> 4 for trunc_r), else None."""
    return int(arch[len(prefix):]) if arch.startswith(prefix) and arch[len(prefix):].isdigit() else None


def design_rows(rows, prefix, reference):
    """A design's runs: the archs prefix + str(r) for r > 1 with its own r=1 runs (prefix + "1") if it has them,
    else the reference's (reference + "1": a conditioning or residual rule at one pass is the plain model)."""
    base = prefix if any(design_loops(field(r, "arch"), prefix) == 1 for r in rows) else reference
    return [r for r in rows
            if (design_loops(field(r, "arch"), prefix) or 0) > 1 or design_loops(field(r, "arch"), base) == 1]


def fit_delta_phi(rows, reference="r", designs=(), hold=(), restarts=500, n_boot=200, seed=0, workers=1,
                  boot_restarts=16):
    """phi and delta phi of each design (an arch prefix: trunc_r for trunc_r2, trunc_r4, ...) against the
    reference prefix, on the budgets where the design has looped runs; paired run-bootstrap intervals."""
    unknown = [p for p in hold if p not in PARAMS[:5]]
    if unknown:
        raise ConfigError(f"--hold takes parameters of the law {PARAMS[:5]}, not {unknown}")
    reference_rows = design_rows(rows, reference, reference)
    out = {}
    for prefix in designs:
        mine = design_rows(rows, prefix, reference)
        looped = [r for r in mine if field(r, "n_loop") > 1]
        if not looped:
            raise ConfigError(f"no looped runs of design {prefix!r}: its archs are named {prefix}2, {prefix}4, ...")
        # the same budgets and training seeds on both sides: a seed's offset would otherwise read as a change of phi
        budgets, seeds = (sorted({field(r, k) for r in looped}) for k in ("flops_budget", "seed"))
        ref, mine = ([r for r in rs if field(r, "flops_budget") in budgets and field(r, "seed") in seeds]
                     for rs in (reference_rows, mine))
        ref_data, my_data = rows_law_data(ref), rows_law_data(mine)
        ref_fit = fit_law(ref_data, restarts, None, seed)
        my_fit = fit_law(my_data, restarts, {p: ref_fit[p] for p in hold}, seed)
        entry = dict(budgets=budgets, seeds=seeds, runs=len(mine), reference_runs=len(ref), held=list(hold),
                     phi=my_fit["phi"], phi_reference=ref_fit["phi"], delta_phi=my_fit["phi"] - ref_fit["phi"],
                     fit=my_fit, reference_fit=ref_fit)
        if n_boot:
            keys = sorted({(field(r, "flops_budget"), field(r, "n_loop")) for r in ref + mine})
            cells = [[sorted((i for i, r in enumerate(rs) if (field(r, "flops_budget"), field(r, "n_loop")) == k),
                             key=lambda i: (field(rs[i], "n_embd"), field(rs[i], "seed") or 0)) for k in keys]
                     for rs in (ref, mine)]
            ref_w, my_w = paired_run_weights(*cells, n_boot, seed)
            ref_boot = bootstrap_law(ref_data, ref_w, boot_restarts, seed, workers, start=np.array(ref_fit["theta"]))
            held = [{p: ref_boot[i, PARAMS.index(p)] for p in hold} for i in range(n_boot)]
            my_boot = bootstrap_law(my_data, my_w, boot_restarts, seed, workers, fixed=held,
                                    start=np.array(my_fit["theta"]))
            entry.update(phi_ci=interval(my_boot[:, 5]), phi_reference_ci=interval(ref_boot[:, 5]),
                         delta_phi_ci=interval(my_boot[:, 5] - ref_boot[:, 5]), bootstrap=n_boot,
                         delta_phi_values=(my_boot[:, 5] - ref_boot[:, 5]).tolist())
        out[prefix] = entry
    return out


# ---- power of a planned grid: how precisely would its joint fit measure phi? ----
# Before an iso-depth grid runs (Schwethelm et al. 2026, arXiv:2604.21106, §4.3), simulate it: the planned points'
# N_once, N_rec, r and D, losses from an assumed joint law plus Gaussian seed noise, each synthetic grid fitted and
# block-bootstrapped exactly as `fit --law=joint` fits the real one. The spread of the fitted phi over synthetic
# grids and the bootstrap intervals' width say whether the grid can tell phi from 0 and 1 (and one design's phi
# from another's) before any core-hour is spent on it.

def seed_noise(rows, settings=("arch", "variant", "flops_budget", "n_embd", "n_layer", "n_loop", "lr", "max_iters")):
    """The seed noise of one run (nats): the pooled standard deviation of val_loss over the runs that share every
    setting but the seed; None when no setting ran with more than one seed."""
    groups = [column(g, "val_loss") for g in group_by(rows, *settings).values() if len(g) > 1]
    dof = sum(len(g) - 1 for g in groups)
    return math.sqrt(sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / dof) if dof else None


def calibrate_law(rows, alpha, beta, phi, restarts=500, seed=0):
    """The joint law through a pilot's runs with the exponents held at assumed values: a pilot at one or two budgets
    cannot identify alpha and beta, but it fixes the law's scale (A, B, E) at this data and size."""
    return fit_law(rows_law_data(rows), restarts, dict(alpha=alpha, beta=beta, phi=phi), seed)


def grid_law_data(planned, seeds=1):
    """law_data of a planned sweep (plan's rows), each point `seeds` times (loss 1: a placeholder), and its
    bootstrap cells (budget, r, arch), as fit_joint draws them."""
    rows = [dict(point=q["point"].name, flops_budget=q["point"].flops_budget, n_loop=q["model"].n_loop,
                 arch=q["point"].arch, tokens=q["tokens"], val_loss=1.0,
                 **{k: q[k] for k in ("params_once_nonembed", "params_rec_nonembed")})
            for q in planned for _ in range(seeds)]
    return rows_law_data(rows), cells_of(rows)


def simulate_phi(data, cells, theta, noise, trials, restarts=100, n_boot=100, boot_restarts=16, seed=0, workers=1):
    """`trials` synthetic grids: the law theta at the grid's points plus N(0, noise^2) per run, each fitted with phi
    free (best of `restarts`) and, if n_boot, block-bootstrapped. Returns the true phi, each trial's fitted phi and
    95% interval, and their summary: the fitted phi's mean and spread, the intervals' median width, how often they
    cover the true phi and exclude 0 and 1, and the smallest difference of phi between two such grids that a
    two-sided 5% test would detect half the time (1.96 * sqrt(2) * the spread: two independent grids)."""
    truth = law_predict(np.asarray(theta, dtype=np.float64), data)
    rng = np.random.default_rng(seed)
    phis, cis = [], []
    for t in range(trials):
        L = truth + rng.normal(0.0, noise, truth.shape)
        sim = dict(data, L=L, ln_L=np.log(L))
        fit = fit_law(sim, restarts, None, seed + t)
        phis.append(fit["phi"])
        if n_boot:
            weights = block_weights(cells, len(L), n_boot, seed + t)
            thetas = bootstrap_law(sim, weights, boot_restarts, seed + t, workers, start=np.array(fit["theta"]))
            cis.append(interval(thetas[:, 5]))
    phis, phi_true = np.array(phis), float(theta[5])
    out = dict(phi_true=phi_true, noise=noise, runs=len(truth), trials=trials, phi=phis.tolist(),
               phi_mean=float(phis.mean()), phi_sd=float(phis.std(ddof=1)) if trials > 1 else float("nan"),
               rmse=float(np.sqrt(((phis - phi_true) ** 2).mean())))
    out["detectable_delta_phi"] = 1.96 * math.sqrt(2) * out["phi_sd"]
    if cis:
        lo, hi = np.array(cis).T
        out.update(intervals=cis, median_ci_width=float(np.median(hi - lo)),
                   coverage=float(np.mean((lo <= phi_true) & (phi_true <= hi))),
                   excludes_0=float(np.mean(lo > 0)), excludes_1=float(np.mean(hi < 1)))
    return out


def simulate_delta_phi(reference_rows, reference, planned, designs, hold, noise, trials, restarts=100, n_boot=100,
                       boot_restarts=16, seed=0, workers=1):
    """The probes before they run: the reference's real runs (archs reference + r) as they are, each design's
    planned runs (prefix + r, its r=1 too if it plans them) with losses from the reference's own fitted law (so
    delta phi = 0) plus N(0, noise^2), fitted as `fit --law=delta_phi` fits the real ones. Returns per design the
    spread of delta phi over `trials` synthetic designs and the median width of their 95% intervals."""
    truth = fit_law(rows_law_data(reference_rows), restarts, None, seed)
    rng = np.random.default_rng(seed)
    out = {}
    for prefix in designs:
        mine = [q for q in planned if design_loops(q["point"].arch, prefix) is not None]
        rows = [dict(point=q["point"].name, arch=q["point"].arch, n_loop=q["model"].n_loop, n_embd=q["model"].n_embd,
                     seed=q["train"]["seed"], flops_budget=q["point"].flops_budget, tokens=q["tokens"],
                     **{k: q[k] for k in ("params_once_nonembed", "params_rec_nonembed")}) for q in mine]
        if not rows:
            raise ConfigError(f"the spec plans no point of design {prefix!r}")
        expected = law_predict(np.array(truth["theta"]), rows_law_data([dict(r, val_loss=1.0) for r in rows]))
        deltas, widths = [], []
        for t in range(trials):
            sim = [dict(r, val_loss=float(v)) for r, v in zip(rows, expected + rng.normal(0.0, noise, len(rows)))]
            fit = fit_delta_phi(reference_rows + sim, reference, (prefix,), hold, restarts, n_boot, seed + t, workers,
                                boot_restarts)[prefix]
            deltas.append(fit["delta_phi"])
            widths += [fit["delta_phi_ci"][1] - fit["delta_phi_ci"][0]] if n_boot else []
        out[prefix] = dict(runs=len(rows), delta_phi=deltas, delta_phi_mean=float(np.mean(deltas)),
                           delta_phi_sd=float(np.std(deltas, ddof=1)) if trials > 1 else float("nan"),
                           median_ci_width=float(np.median(widths)) if widths else None)
    return dict(reference_phi=truth["phi"], reference_runs=len(reference_rows), noise=noise, trials=trials,
                hold=list(hold), designs=out)


# ---- learning-rate transfer (Lee et al. 2026 muP test; Wang et al. 2026, arXiv:2606.18524) ----

def _bracket(lr, loss):
    """Sorted arrays, the index of the best point, and the quadratic in ln lr through it and its neighbours (None
    when the best point sits at the edge of the grid)."""
    order = np.argsort(lr)
    lr, loss = lr[order], loss[order]
    i = int(np.argmin(loss))
    coef = np.polyfit(np.log(lr[i - 1:i + 2]), loss[i - 1:i + 2], 2) if 0 < i < len(lr) - 1 else None
    return lr, loss, i, coef


def lr_optimum(lr, loss):
    """(optimal LR, loss there, at the grid's edge?) of a loss-vs-LR curve: the vertex of the quadratic in ln lr
    through the best point and its neighbours; the best grid point itself when it sits at the edge of the grid."""
    lr, loss, i, coef = _bracket(lr, loss)
    if coef is None:
        return float(lr[i]), float(loss[i]), True
    x = -coef[1] / (2 * coef[0])
    return float(np.exp(x)), float(np.polyval(coef, x)), False


def loss_at(lr, loss, at):
    """The curve's loss at LR `at`: the same quadratic as lr_optimum inside the best point's bracket, linear in
    ln lr elsewhere (the nearest end point outside the grid). So the regret of a group's own optimum is 0."""
    lr, loss, i, coef = _bracket(lr, loss)
    if coef is not None and lr[i - 1] <= at <= lr[i + 1]:
        return float(np.polyval(coef, np.log(at)))
    return float(np.interp(np.log(at), np.log(lr), loss))


def seed_means(lr, loss, seeds):
    """The distinct LRs, the mean loss over training seeds at each, its standard deviation over seeds (nan with
    one seed), and each seed's own (lr, loss) curve."""
    grid = np.unique(lr)
    mean = np.array([loss[lr == x].mean() for x in grid])
    sd = np.array([loss[lr == x].std(ddof=1) if (lr == x).sum() > 1 else np.nan for x in grid])
    curves = {int(s): (lr[seeds == s], loss[seeds == s]) for s in np.unique(seeds)}
    return grid, mean, sd, curves


def fit_lr(rows, group=("n_embd",), panel="arch", reference=None, max_loss=float("inf")):
    """Per panel (e.g. residual scaling rule) and group (width, loop count, depth): the optimum LR of the loss
    averaged over training seeds, each seed's own optimum, and the shift log2(optimum / the reference group's) with
    its spread over seeds; the regret (loss above the group's optimum) of the reference group's optimal LR
    transferred to every group."""
    result = {}
    for p, prow in group_by(rows, panel).items():
        groups = {}
        for g, grow in group_by(prow, *group).items():
            grow = [r for r in grow if math.isfinite(field(r, "val_loss")) and field(r, "val_loss") <= max_loss]
            if len(grow) < 2:
                continue
            lr, mean_loss, sd, curves = seed_means(column(grow, "lr"), column(grow, "val_loss"),
                                               np.array([field(r, "seed", 0) for r in grow]))
            best_lr, best_loss, edge = lr_optimum(lr, mean_loss)
            per_seed = {s: lr_optimum(*c)[0] for s, c in curves.items() if len(c[0]) >= 2}
            groups[str(g)] = dict(group=g, lr=lr.tolist(), loss=mean_loss.tolist(), lr_opt=best_lr,
                                  loss_opt=best_loss, at_edge=edge, grid_best_lr=float(lr[np.argmin(mean_loss)]),
                                  seeds=sorted(curves), lr_opt_per_seed={str(k): v for k, v in per_seed.items()},
                                  seed_sd=sd.tolist(), seed_sd_mean=float(np.nanmean(sd)) if np.isfinite(sd).any()
                                  else None)
        if not groups:
            continue
        ref = str(reference) if reference is not None and str(reference) in groups else next(iter(groups))
        ref_lr = groups[ref]["lr_opt"]
        for g in groups.values():
            lr, loss = np.array(g["lr"]), np.array(g["loss"])
            g["regret"] = loss_at(lr, loss, ref_lr) - g["loss_opt"]
            g["regret_rel"] = g["regret"] / g["loss_opt"]
            g["shift_log2"] = math.log2(g["lr_opt"] / ref_lr)
            # the same shift seed by seed (each seed's optimum against the reference's optimum of that seed)
            ref_seeds = groups[ref]["lr_opt_per_seed"]
            g["shift_log2_per_seed"] = {s: math.log2(v / ref_seeds[s]) for s, v in g["lr_opt_per_seed"].items()
                                        if s in ref_seeds}
            # without interpolation: the run at the reference's best grid LR against this group's best run
            same = np.isclose(lr, groups[ref]["grid_best_lr"])
            g["regret_grid"] = float(loss[same].min() - loss.min()) if same.any() else None
        result[str(p)] = dict(reference=ref, transferred_lr=ref_lr, groups=groups, group_keys=list(group),
                              panel_key=panel, max_regret=max(g["regret"] for g in groups.values()),
                              max_regret_rel=max(g["regret_rel"] for g in groups.values()),
                              max_abs_shift_log2=max(abs(g["shift_log2"]) for g in groups.values()))
    return result


# ---- comparisons at matched compute (ablation ladders, A vs B): the loss of each arm over training seeds ----

def compare_arms(rows, arm="arch", metric="val_loss", reference=None, order=()):
    """Per arm (e.g. a rung of Chen et al.'s ladder): the metric of each training seed, its mean and standard
    deviation; against the reference arm, the difference of the means and the same difference seed by seed (the
    arms share seeds, so the paired differences separate the arm's effect from the seed's)."""
    arms = {}
    groups = group_by(rows, arm)
    rank = {str(a): i for i, a in enumerate(order)}  # the arms in this order (e.g. a ladder's), else sorted
    for a, arow in sorted(groups.items(), key=lambda kv: rank.get(str(kv[0]), len(rank))):
        values = {str(field(r, "seed", 0)): float(field(r, metric)) for r in arow}
        v = np.array(list(values.values()))
        arms[str(a)] = dict(values=values, mean=float(v.mean()),
                                                     sd=float(v.std(ddof=1)) if len(v) > 1 else None)
    ref = str(reference) if reference is not None and str(reference) in arms else next(iter(arms))
    for a in arms.values():
        a["diff"] = a["mean"] - arms[ref]["mean"]
        a["diff_per_seed"] = {s: v - arms[ref]["values"][s] for s, v in a["values"].items()
                              if s in arms[ref]["values"]}
    return dict(reference=ref, metric=metric, arms=arms)


# -----------------------------------------------------------------------------------------------------------------
# command line: fit

FIT_KEYS = dict(
    law="isoflop",  # isoflop (Lee et al.) | chinchilla | joint (Schwethelm et al.) | delta_phi | lr | compare (arms)
    n_key="",  # the N of isoflop/chinchilla: "" = params_active (isoflop) / params_unique_nonembed (chinchilla)
    restarts=500,  # random starts per parametric fit (best one kept)
    bootstrap=200,  # bootstrap resamples (joint: blocks of (budget, r) cells; isoflop: residuals)
    boot_restarts=16,  # joint: random starts per bootstrap refit, besides the full-data estimate
    workers=2,  # processes for the bootstrap refits
    seed=0,  # seeds the starts and the resamples
    archs=(),  # keep only these architectures ("arch" field); () = all
    baseline_arch="",  # also keep the n_loop=1 runs of this architecture (probe refits reuse the r=1 runs)
    budgets=(),  # keep only these budgets; () = all
    loops=(),  # keep only these n_loop values; () = all
    seeds=(),  # keep only these training seeds (a finding's spread over seeds: fit each seed alone); () = all
    max_loss=float("inf"),  # drop runs whose val_loss exceeds this (diverged; Wang et al. use 4)
    max_lr=float("inf"),  # lr: keep only runs at LRs up to this, so that arms judged together share one grid
    lrs=(),  # keep only runs at these LRs (an earlier, coarser grid of a record); () = all
    exclude="",  # drop the runs whose point name matches this regex (a record's fit without some cells); "" = none
    group=("n_embd",),  # lr: the fields that define one LR curve (width, n_loop, n_layer ...)
    panel="arch",  # lr: the field that splits curves into panels (e.g. residual_scaling); compare: the arms' field
    reference="",  # lr: the group whose optimal LR is transferred; compare: the arm compared against; "" = the first;
    # delta_phi: the arch prefix of the reference design ("" = r: archs r1, r2, r4)
    designs=(),  # delta_phi: the designs' arch prefixes, e.g. ("trunc_r","hc_r") for trunc_r2, trunc_r4, hc_r2 ...
    hold=(),  # delta_phi: parameters of the law held at the reference's fit, e.g. ("alpha","beta"); () = refit all
    metric="val_loss",  # compare: the row field compared
    out="",  # output path prefix for <out>.png/.json; "" = fit_<law> next to the results file
)


def select_rows(rows, cfg, allow_empty=False):
    """Apply the subset keys (the probes and half-window refits of Schwethelm et al. are such subsets)."""
    keep = []
    for r in rows:
        loss = field(r, "val_loss")
        if loss is None or not math.isfinite(loss) or loss > cfg["max_loss"]:
            continue
        if cfg["budgets"] and not any(math.isclose(field(r, "flops_budget"), b, rel_tol=1e-3) for b in cfg["budgets"]):
            continue
        if cfg["loops"] and field(r, "n_loop") not in cfg["loops"]:
            continue
        if cfg["seeds"] and field(r, "seed") not in cfg["seeds"]:
            continue
        if field(r, "lr") is not None and field(r, "lr") > cfg["max_lr"] * (1 + 1e-9):
            continue
        if cfg["lrs"] and (field(r, "lr") is None
                           or not any(math.isclose(field(r, "lr"), lr, rel_tol=1e-3) for lr in cfg["lrs"])):
            continue
        if cfg["exclude"] and re.search(cfg["exclude"], r.get("point", "")):
            continue
        if cfg["archs"] and field(r, "arch") not in cfg["archs"]:
            if not (field(r, "arch") == cfg["baseline_arch"] and field(r, "n_loop") == 1):
                continue
        keep.append(r)
    if not keep and not allow_empty:
        raise ConfigError("no runs left after the subset keys (archs, budgets, loops, seeds, max_loss, max_lr, lrs, "
                          "exclude); loosen them")
    return keep


LAWS = ("isoflop", "chinchilla", "joint", "delta_phi", "lr", "compare")


def check_counts(cfg, *minimums):
    """One line for a count below its least value: check_counts(cfg, ("trials", 1), ...)."""
    for key, least in minimums:
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")


def check_out(out):
    """An --out path prefix whose directory does not exist is one line before the work, not a traceback after it."""
    if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise ConfigError(f"config error: --out={out}: {os.path.dirname(os.path.abspath(out))} is not a directory: "
                          "create it or choose another --out")


def fit_results(path, argv, skip_empty=False):
    """Fit one results file with `fit`'s --key=value arguments: (result, the files written); (None, []) when the
    subset keys leave no run and skip_empty (a record file that holds only other figures' arms)."""
    cfg, _ = configure(FIT_KEYS, None, list(argv), doc_source=__file__,
                       usage="python scaling.py fit results.jsonl [--key=value ...]", choices=dict(law=LAWS))
    check_counts(cfg, ("restarts", 1), ("bootstrap", 0), ("boot_restarts", 1), ("workers", 1), ("seed", 0))
    for key in ("max_loss", "max_lr"):
        if not cfg[key] > 0:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be > 0")
    check_out(cfg["out"])
    check_pattern("exclude", cfg["exclude"])
    rows = select_rows(read_results(path), cfg, allow_empty=skip_empty)
    if not rows:
        return None, []
    out = cfg["out"] or os.path.join(os.path.dirname(os.path.abspath(path)), f"fit_{cfg['law']}")
    # what regenerates the figure's numbers (records/README.md), taken before any file is rewritten: a committed
    # JSON or PNG rewritten would make the tree read as dirty
    prov = provenance([path], ["python", "scaling.py", "fit", path] + list(argv)
                      + ([f"--out={out}"] if not cfg["out"] else []))
    law = cfg["law"]
    if law == "isoflop":
        result = fit_isoflop(rows, cfg["n_key"] or "params_active", cfg["bootstrap"], cfg["seed"])
        files = figures.plot_isoflop(result, out)
    elif law == "chinchilla":
        result = fit_chinchilla(rows, cfg["n_key"] or "params_unique_nonembed", cfg["restarts"], cfg["seed"])
        files = figures.plot_chinchilla(result, chinchilla_curves(result, rows), out)
    elif law == "joint":
        result = fit_joint(rows, cfg["restarts"], cfg["bootstrap"], cfg["seed"], cfg["workers"], cfg["boot_restarts"])
        files = figures.plot_joint(result, out)
    elif law == "delta_phi":
        designs, reference = cfg["designs"], cfg["reference"] or "r"
        if skip_empty:  # a record whose probes have not all run yet: draw those that have
            designs = [d for d in designs if any(field(r, "n_loop") > 1 for r in design_rows(rows, d, reference))]
            if not designs:
                return None, []
        result = fit_delta_phi(rows, reference, designs, cfg["hold"], cfg["restarts"],
                               cfg["bootstrap"], cfg["seed"], cfg["workers"], cfg["boot_restarts"])
        files = figures.plot_delta_phi(result, out)
    elif law == "lr":
        result = fit_lr(rows, cfg["group"], cfg["panel"], cfg["reference"] or None, cfg["max_loss"])
        files = figures.plot_lr(result, out)
    elif law == "compare":
        result = compare_arms(rows, cfg["panel"], cfg["metric"], cfg["reference"] or None, cfg["archs"])
        files = figures.plot_compare(result, out)
    else:
        raise ConfigError(f"unknown --law={law!r}: use isoflop | chinchilla | joint | delta_phi | lr | compare")
    json_path = out + ".json"
    with open(json_path) as f:
        numbers = json.load(f)
    numbers["provenance"] = prov
    with open(json_path, "w") as f:
        json.dump(numbers, f, indent=1, default=float)
    return result, files


def main_fit(argv):
    paths = [a for a in argv if not a.startswith("--") and a.endswith(".jsonl")]
    if len(paths) != 1 or len(paths) != len([a for a in argv if not a.startswith("--")]):
        raise ConfigError("usage: python scaling.py fit results.jsonl "
                          "--law=isoflop|chinchilla|joint|delta_phi|lr|compare [--key=value]: name one results file "
                          "(.jsonl) and options")
    result, files = fit_results(paths[0], [a for a in argv if a not in paths])
    print(json.dumps(_summary(result), indent=1, default=float))
    print(f"wrote {', '.join(files)}", file=sys.stderr)
    return result


POWER_KEYS = dict(
    calibrate="",  # a pilot's results.jsonl: the law's scale (A, B, E) is fitted to it, the seed noise measured on it
    alpha=0.199, beta=0.369, phi=0.459,  # the assumed exponents (default: Schwethelm et al. Table 2's free fit)
    noise=0.0,  # seed noise of one run (nats); 0 = the pilot's, from its points that ran with several seeds
    seeds=1,  # training seeds per grid point (phi only; with --designs the spec's points set the seeds)
    trials=20,  # synthetic grids
    restarts=100,  # random starts per fit (the calibration and each synthetic grid)
    bootstrap=100,  # bootstrap resamples per synthetic grid (0: only the spread over grids)
    boot_restarts=16,  # random starts per bootstrap refit
    workers=1,  # processes for the bootstrap refits
    seed=0,
    only="",  # simulate only the points whose name matches this regular expression (as sweep's --only)
    designs=(),  # delta phi instead of phi: these designs' planned runs against --calibrate's real runs of the
    # --reference (its own fitted law, delta phi = 0; the noise measured on its seeds), fitted as --law=delta_phi
    reference="r",  # delta phi: the arch prefix of the reference's runs in --calibrate
    hold=(),  # delta phi: parameters held at the reference's fit, as fit's --hold
    out="",  # write the result here (.json); "" = print only
)


def main_power(argv):
    """python scaling.py power config/sweeps/<grid>.py --calibrate=<pilot results.jsonl> [--key=value]: how
    precisely the grid's joint fit would measure phi (simulate_phi), before it runs."""
    specs = [a for a in argv if not a.startswith("--")]
    if len(specs) != 1:
        raise ConfigError("usage: python scaling.py power config/sweeps/<grid>.py --calibrate=<pilot results.jsonl> "
                          f"[--noise=0.02 --seeds=2 --trials=20]: name one grid, not {len(specs)}")
    cfg, _ = configure(POWER_KEYS, None, [a for a in argv if a not in specs], doc_source=__file__,
                       usage="python scaling.py power config/sweeps/<grid>.py --calibrate=<pilot results.jsonl> "
                             "[--key=value ...]")
    check_counts(cfg, ("seeds", 1), ("trials", 1), ("restarts", 1), ("bootstrap", 0), ("boot_restarts", 1),
                 ("workers", 1), ("seed", 0))
    if not cfg["noise"] >= 0:
        raise ConfigError(f"config error: --noise={cfg['noise']} must be >= 0 (0: the pilot's)")
    check_pattern("only", cfg["only"])
    check_out(cfg["out"])
    if not cfg["calibrate"]:
        raise ConfigError("--calibrate=<pilot results.jsonl> is needed: the law's scale at this data comes from a "
                          "pilot")
    pilot = select_rows(read_results(cfg["calibrate"]), FIT_KEYS)  # fit's defaults: every finished run
    cfg["provenance"] = provenance([cfg["calibrate"]], ["python", "scaling.py", "power"] + list(argv))
    if cfg["designs"]:
        return power_delta_phi(pilot, specs[0], cfg)
    noise = cfg["noise"] or seed_noise(pilot)
    if not noise:
        raise ConfigError("the pilot has no point run with two seeds to measure the noise on; give --noise=<nats>")
    planned = plan(load_spec(specs[0]), cfg["only"])  # a grid that cannot run stops before the calibration
    if not planned:
        raise ConfigError(f"no point of {specs[0]} matches --only={cfg['only']!r}")
    law = calibrate_law(pilot, cfg["alpha"], cfg["beta"], cfg["phi"], cfg["restarts"], cfg["seed"])
    data, cells = grid_law_data(planned, cfg["seeds"])
    out = simulate_phi(data, cells, law["theta"], noise, cfg["trials"], cfg["restarts"], cfg["bootstrap"],
                       cfg["boot_restarts"], cfg["seed"], cfg["workers"])
    out.update(law={k: law[k] for k in ("A", "alpha", "B", "beta", "E", "phi", "rmse")}, pilot_runs=len(pilot),
               seeds=cfg["seeds"], grid=specs[0], only=cfg["only"], provenance=cfg["provenance"])
    return _report(out, cfg["out"])


def power_delta_phi(rows, spec_path, cfg):
    """`power --designs=...`: simulate_delta_phi on the probes a spec plans, against the reference's runs in rows at
    the probes' budgets."""
    if cfg["seeds"] != 1:  # the probes' seeds are the spec's own points (names ending _s7, ...), not copies
        raise ConfigError("--seeds sets the seeds of a grid's phi power; with --designs the spec's points are the "
                          "seeds: select them with --only (e.g. --only='_d\\d+(_s7)?$' for seeds 1337 and 7)")
    planned = plan(load_spec(spec_path), cfg["only"])
    budgets = {q["point"].flops_budget for q in planned}
    reference = [r for r in design_rows(rows, cfg["reference"], cfg["reference"])
                 if field(r, "flops_budget") in budgets]
    if not reference:
        raise ConfigError(f"--calibrate has no runs of the reference {cfg['reference']!r} at the budgets "
                          f"{sorted(budgets)}")
    noise = cfg["noise"] or seed_noise(reference)
    if not noise:
        raise ConfigError("the reference has no point run with two seeds to measure the noise on; give --noise=<nats>")
    out = simulate_delta_phi(reference, cfg["reference"], planned, cfg["designs"], cfg["hold"], noise, cfg["trials"],
                             cfg["restarts"], cfg["bootstrap"], cfg["boot_restarts"], cfg["seed"], cfg["workers"])
    out.update(grid=spec_path, only=cfg["only"], provenance=cfg["provenance"])
    return _report(out, cfg["out"])


def main_figures(argv):
    """Redraw every figure of the course records from their committed rows, without training: each
    records/<paper>/<sweep>.jsonl is fitted as its spec config/sweeps/<sweep>.py's `figures` say
    ({figure name: fit arguments}), writing records/<paper>/<sweep>_<figure name>.png and .json."""
    options = [a for a in argv if a.startswith("-")]
    if options:
        raise ConfigError(f"usage: python scaling.py figures [records/ ...]: it takes directories, not {options[0]!r} "
                          "(each figure's fit arguments are its spec's)")
    roots = [a for a in argv if not a.startswith("--")] or ["records"]
    root_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    todo = []  # (results file, its spec's figures): every root and spec checked before the first fit
    for root in roots:
        paths = sorted(glob.glob(os.path.join(root, "**", "*.jsonl"), recursive=True))
        if not os.path.isdir(root) or not paths:
            raise ConfigError(f"no results (*.jsonl) under {root}; the records live in records/<paper>/")
        for path in paths:
            name = os.path.splitext(os.path.basename(path))[0]
            spec_path = os.path.join(root_dir, "config", "sweeps", name + ".py")
            todo.append((path, name, spec_path, load_spec(spec_path).get("figures", {})))
    written = []
    for path, name, spec_path, named in todo:
        if not named:
            print(f"{path}: its spec {spec_path} names no figures", file=sys.stderr)
        for figure, fit_args in named.items():
            out = os.path.join(os.path.dirname(path), f"{name}_{figure}")
            written += fit_results(path, list(fit_args) + [f"--out={out}"], skip_empty=True)[1]
    print("wrote " + ", ".join(written))
    return written


def _report(out, path):
    """Print the result without long arrays; write it whole to path (if given)."""
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    print(json.dumps(_summary(out), indent=1, default=float))
    return out


def _summary(obj):
    """The printed JSON: the result without long per-point arrays."""
    if isinstance(obj, dict):
        return {k: _summary(v) for k, v in obj.items() if k not in ("phi_values", "delta_phi_values", "theta")}
    if isinstance(obj, list) and len(obj) > 12 and all(isinstance(v, (int, float)) for v in obj):
        return f"[{len(obj)} numbers]"
    return [_summary(v) for v in obj] if isinstance(obj, list) else obj


if __name__ == "__main__":  # the tests of the records' standard (verdicts.py); every other command: scaling.py
    run(main_test, sys.argv[1:])
