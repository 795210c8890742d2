"""
Many small minimisations at once, for the scaling-law fits (fits.py): a projected BFGS that descends every start of
every fitting problem as one numpy batch, BLAS held to one thread (the fits make many tiny LAPACK calls), and a
process pool whose workers die with their parent, with a progress line. Nothing here knows the laws: fits.py gives
the objective and its gradient.
"""
import multiprocessing
import os
import signal
import sys
import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

_BLAS_LIMIT = []  # threadpoolctl's limit, kept for the life of the process


def one_blas_thread():
    """Give BLAS (OpenBLAS or MKL, numpy's and scipy's) one thread: the fits make many tiny LAPACK calls (L-BFGS-B,
    polyfit), and waking BLAS threads for each made them many times slower on a busy machine (threadpoolctl)."""
    if not _BLAS_LIMIT:
        _BLAS_LIMIT.append(threadpool_limits(limits=1, user_api="blas"))


def minimize_batch(fun, x0, lo, hi, max_iter=300, ftol=1e-12, gtol=1e-9):
    """Projected BFGS from many starts at once. fun(X (m, P), which (m,)) -> (f (m,), g (m, P)), where which says
    the start (row of x0) each row of X belongs to; lo == hi freezes a coordinate. lo, hi: bounds (P,) shared by every
    start, or (R, P) one row per start. Returns (x, f) per start."""
    R, P = x0.shape
    lo, hi = np.broadcast_to(lo, x0.shape), np.broadcast_to(hi, x0.shape)
    x = np.clip(x0, lo, hi)
    f, g = fun(x, np.arange(R))
    H = np.tile(np.eye(P), (R, 1, 1))
    fresh = np.ones(R, dtype=bool)  # H is still the identity
    running = np.arange(R)
    for _ in range(max_iter):
        if running.size == 0:
            break
        xr, fr, gr, Hr = x[running], f[running], g[running], H[running]
        lo_r, hi_r = lo[running], hi[running]
        held = (lo_r == hi_r) | ((xr <= lo_r) & (gr > 0)) | ((xr >= hi_r) & (gr < 0))  # bound-active coordinates
        gf = np.where(held, 0.0, gr)
        d = -np.einsum("rij,rj->ri", Hr, gf)
        d[held] = 0.0
        uphill = (d * gf).sum(1) >= 0
        d[uphill], Hr[uphill], fresh[running[uphill]] = -gf[uphill], np.eye(P), True
        # a steepest-descent step moves no coordinate by more than 1 at first
        first = fresh[running]
        d[first] /= np.maximum(1.0, np.abs(d[first]).max(1, keepdims=True))
        # Armijo backtracking along the projected path: the full step first, then for the starts it fails all of
        # 1/2 ... 1/64 in one batched call, then 2^-7 ... 2^-20 (few calls: the Python overhead per call dominates)
        x_new, f_new, g_new = xr.copy(), fr.copy(), gr.copy()
        todo = np.arange(len(running))
        for steps in (np.ones(1), 0.5 ** np.arange(1, 7), 0.5 ** np.arange(7, 21)):
            trial = np.clip(xr[todo, None] + steps[None, :, None] * d[todo, None], lo_r[todo, None], hi_r[todo, None])
            ft, gt = fun(trial.reshape(-1, P), np.repeat(running[todo], len(steps)))
            ft, gt = ft.reshape(len(todo), -1), gt.reshape(len(todo), len(steps), P)
            ok = ft <= fr[todo, None] + 1e-4 * ((trial - xr[todo, None]) * gr[todo, None]).sum(2)
            hit = ok.any(1)
            k = ok.argmax(1)[hit]  # the largest acceptable step
            done = todo[hit]
            x_new[done], f_new[done], g_new[done] = trial[hit, k], ft[hit, k], gt[hit, k]
            todo = todo[~hit]
            if todo.size == 0:
                break
        s, y = x_new - xr, g_new - gr
        sy = (s * y).sum(1)
        upd = sy > 1e-16
        if upd.any():  # inverse-Hessian BFGS update, the first one from H = (s.y / y.y) I (Nocedal & Wright 6.20)
            scale = (first & upd)[upd]
            Hr[np.flatnonzero(upd)[scale]] = (sy[upd][scale] / (y[upd][scale] ** 2).sum(1))[:, None, None] * np.eye(P)
            fresh[running[upd]] = False
            rho = 1.0 / sy[upd]
            V = np.eye(P) - rho[:, None, None] * np.einsum("ri,rj->rij", s[upd], y[upd])
            Hr[upd] = (np.einsum("rij,rjk,rlk->ril", V, Hr[upd], V)
                       + rho[:, None, None] * np.einsum("ri,rj->rij", s[upd], s[upd]))
        x[running], f[running], g[running], H[running] = x_new, f_new, g_new, Hr
        proj_grad = np.abs(np.clip(x_new - g_new, lo_r, hi_r) - x_new).max(1)
        stalled = (fr - f_new) <= ftol * np.maximum(np.maximum(np.abs(fr), np.abs(f_new)), 1.0)
        running = running[~((proj_grad < gtol) | stalled)]  # a failed line search leaves f unchanged: stalled
    return x, f


def pool(workers):
    """A process pool whose workers end with this process. fork (Linux) and spawn both make them its children."""
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    return context.Pool(workers, die_with_parent, (os.getpid(),))


def die_with_parent(parent):
    """Pool worker initializer: exit as soon as the parent is gone, however it ended (a `timeout` in a script
    SIGKILLs it, and the orphaned workers used to compute on for 20 minutes). Ctrl-C is the parent's to handle:
    it ends the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=watch_parent, args=(parent,), daemon=True).start()


def watch_parent(parent):
    while os.getppid() == parent:  # an orphan is adopted by another process
        time.sleep(0.2)
    os._exit(1)


def progress(chunks, total, label):
    """Pass chunks of results through, with a tqdm progress line (count, rate, ETA) on stderr."""
    with tqdm(total=total, desc=label, file=sys.stderr, mininterval=1.0) as bar:
        for chunk in chunks:
            bar.update(len(chunk))
            yield chunk
