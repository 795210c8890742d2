"""
Early exit, the mechanism: where a token may stop, what each stop costs, which rule stops it, and the one walk
through the depth that does it, shared by the teacher-forced study (early_exit.py), eval.py's scoring and decoding
(sample.py, generate_with_exit).

Training-free early exit (Lee et al. 2026, arXiv:2605.09165, §4.3): at each candidate exit the hidden state goes
through the readout (final norm + head; the coda first for models with one) and the token stops at the first
candidate whose criterion score is below tau. Candidates: loop boundaries for looped models (the last boundary is
the full depth), every layer for plain ones (`every_layer` gives every loop layer to looped models too, an
ablation). Criteria (score < tau exits; tau = 0 never exits, tau = inf exits at the first candidate):
  entropy  H(p) = -sum_v p_v ln p_v of the candidate's distribution (the paper's)
  kl       KL(p_c || p_prev), p_prev = the previous candidate's distribution (for the first candidate: the readout
           of the state entering the loop, i.e. the embedding or the prelude output)
  change   ||h_c - h_prev|| / ||h_c||, the relative change of the hidden state (needs no head until the exit)
  agree    1 - max_v p_c if argmax p_c = argmax p_prev else inf: top-1 agreement with the previous exit, gated by
           confidence; tau >= 1 is pure agreement
  oracle   as agree, but against the final distribution's argmax (needs the full pass: an upper bound)
  optimal  tau = lambda: each token picks the exit minimising nll + lambda * depth fraction (uses the labels: the
           best any exit rule can do, the lower convex hull of perplexity vs depth saved)
Each criterion is one record in CRITERIA (a rule's score, or a bound's exits; whether it compares with the
previous candidate; whether it reads the head at every candidate); the teacher-forced study, decoding and eval.py
all walk the depth through one generator of scored candidates (scored_candidates).
Teacher-forced evaluation runs every token through the full depth, so later tokens see full-depth keys/values of
earlier ones (as in the paper, which counts FLOPs only); decoding (generate_with_exit) does it for real.

Compute saved, two ways (both per token, averaged over tokens):
  depth   1 - (effective layers run) / (effective depth): the paper's measure (a coda always runs)
  flops   1 - F_exit / F_full with forward FLOPs from accounting.py (2 per active parameter + attention
          over the mean causal context), where F_exit adds every readout the criterion evaluated (the head, and
          the coda for models with one) and F_full is one plain forward (one readout)

Decoding with early exit: each new token stops at the first candidate that satisfies the criterion (for a batch:
the first candidate where every row does). The KV slots of the layers it skipped are filled by
  propagate  (default) the exited state through each skipped layer's attention norm and K/V projections (CALM,
             Schuster et al. 2022): costs 2 of the ~12 d^2 multiply-adds of a layer, approximate
  recompute  run the skipped layers anyway: exact caches and no saving; the reference for quality
propagate is the default because it is the only policy that saves compute; recompute shows what exiting alone
does to quality.
"""
import math
import time
from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import accounting
from loop import is_looped, last
from model import Label

FILLS = ("propagate", "recompute")
ENTRY = Label(-1, -1, -1, False, "prelude")  # label of the embedding (the state before the first layer)

# ---------------------------------------------------------------------------------------------------------------
# where a token may exit, and what each exit costs


@torch.no_grad()
def depth_labels(model, schedule=None):
    """The Labels of the model's depth walk at a schedule (None: the trained depth), in order (one walk over a
    single token)."""
    dev = next(model.parameters()).device
    x = model.embed(torch.zeros(1, 1, dtype=torch.long, device=dev))
    return [label for label, _, _ in model.walk(x, model.rope(0, 1), schedule=schedule)]


def exit_candidates(model, labels, every_layer=False):
    """Positions in `labels` where a token may exit: loop boundaries of a looped model, every layer of a plain one
    (or of a looped one with every_layer), never the last loop step (that is the full depth)."""
    loop = [i for i, lab in enumerate(labels) if lab.part == "loop"]
    every = every_layer or not is_looped(model.config)
    return [i for i in loop[:-1] if every or labels[i].boundary]


def step_flops(model, labels, context, decoding=False, schedule=None):
    """Forward FLOPs per token: (list per effective step, one head, one K/V fill, everything else), for the walk
    at `schedule` whose `labels` these are.
    From accounting.py's units: a step costs 2 * active params of its block + 4*h*q*context (QK^T and AV; decoding:
    the h*q of a cached step, MLA's latent-space width); the head 2 * its params; `other` is what else a forward
    runs per token (modules outside the blocks, hyper-connection mixing), charged in full to every exit
    (conservative). A fill costs the cache-entry projections of one layer."""
    units = accounting.compute_units(model, training=False, schedule=schedule)
    by_name = {u.name: u for u in units}
    first = {}  # a module shared across steps is unit blocks.<first position>
    for i, b in enumerate(model.blocks):
        first.setdefault(id(b), i)
    steps = []
    for lab in labels:
        u = by_name[f"blocks.{first[id(model.blocks[lab.layer])]}"]
        steps.append(2.0 * u.active + 4.0 * (u.decode_attn_width if decoding else u.attn_width) * context)
    head = 2.0 * by_name["lm_head"].active
    # the steps come from the walk's labels; their sum + head + other = accounting.forward_flops_per_token (tested)
    other = sum(2.0 * u.fwd * u.active for u in units if u.kind == "other")
    other += accounting.between_pass_flops(model, train=False, schedule=schedule)
    return steps, head, kv_fill_flops(model), other


def kv_fill_flops(model):
    """Matmul FLOPs of one token's cache entry in one layer (what a propagate fill runs: keys and values, or MLA's
    latent), as counted by torch's FlopCounterMode."""
    attn = model.blocks[-1].attn
    p = next(model.parameters())
    x = torch.zeros(1, 1, model.config.n_embd, device=p.device, dtype=p.dtype)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        attn.cache_entry(x, model.rope(0, 1))
    return float(counter.get_total_flops())


def coda_positions(labels):
    return [i for i, lab in enumerate(labels) if lab.part == "coda"]


def readouts_before_exit(criterion, k, n_cand):
    """How many readouts a criterion evaluates for a token exiting at candidate k (k = n_cand: no exit), the
    output's own readout included. A rule that reads heads reads every candidate it passes (one comparing with
    the previous candidate also the entry state); one that does not reads only where it stops; bounds are charged
    nothing extra."""
    rule = CRITERIA[criterion]
    if rule.bound or not rule.head:
        return 1
    return rule.previous + min(k + 1, n_cand) + (k == n_cand)


def token_flops(costs, labels, run, early_reads=0, final=True, fills=0):
    """The one exit cost: forward FLOPs of one token that ran the first `run` steps of the plan `labels`, read out
    `early_reads` states before the end (each runs the head and, a state before the coda, the coda) and, if
    `final`, the end of the plan, and had `fills` skipped steps' cache entries filled (propagate). costs:
    step_flops' (steps, head, fill, other) at the token's context. The study, decoding and eval.py charge with it."""
    steps, head, fill, other = costs
    coda = sum(steps[i] for i in coda_positions(labels))
    return sum(steps[:run]) + early_reads * (head + coda) + final * head + fills * fill + other


def exit_flops(costs, labels, cands, criterion, k, fill=None):
    """token_flops of a token whose exit choice is k (0..K, K = len(cands): the full depth) under a rule that reads
    out as readouts_before_exit says. fill: None (the study: Lee et al. count the layers a token runs), propagate
    (the skipped steps' cache entries are filled) or recompute (the rest of the plan runs all the same)."""
    K = len(cands)
    reads = readouts_before_exit(criterion, k, K) if criterion else 1
    if k == K:  # the full depth: the candidates it checked were early readouts, the output is the plain one
        return token_flops(costs, labels, len(labels), reads - 1)
    run = len(labels) if fill == "recompute" else cands[k] + 1
    fills = sum(lab.part != "coda" for lab in labels[run:]) if fill == "propagate" else 0
    return token_flops(costs, labels, run, reads, final=False, fills=fills)


def exit_costs(model, labels, cands, criterion, context):
    """Per exit choice k = 0..K (K = full depth): (effective layers run, forward FLOPs), and the full-depth FLOPs
    of one plain forward pass (the teacher-forced study)."""
    costs = step_flops(model, labels, context)
    n_coda = len(coda_positions(labels))
    depth = [cands[k] + 1 + n_coda for k in range(len(cands))] + [len(labels)]
    flops = [exit_flops(costs, labels, cands, criterion, k) for k in range(len(cands) + 1)]
    return depth, flops, token_flops(costs, labels, len(labels))


# ---------------------------------------------------------------------------------------------------------------
# exit criteria: one record each in CRITERIA; a new criterion is its score (or bound) and one entry there


def log_probs(logits):
    return F.log_softmax(logits.float(), dim=-1)


def entropy(logits):
    """Shannon entropy in nats of softmax(logits) over the last dimension."""
    return entropy_score(log_probs(logits), None, None, None)


# A rule's score per token from this candidate's readout log-probabilities logp (..., V) and hidden state h (..., C)
# and the previous candidate's (prev_logp, prev_h); logp/prev_logp are None for a rule that reads no head. The
# token exits where score < tau.

def entropy_score(logp, prev_logp, h, prev_h):
    """H(p) = -sum_v p_v ln p_v of the candidate's distribution (Lee et al. 2026, arXiv:2605.09165, §4.3)."""
    return (-(logp.exp() * logp).sum(-1)).clamp_min(0.0)


def kl_score(logp, prev_logp, h, prev_h):
    """KL(p || p_prev) >= 0; the clamp keeps tau = 0 from exiting on rounding error."""
    return (logp.exp() * (logp - prev_logp)).sum(-1).clamp_min(0.0)


def change_score(logp, prev_logp, h, prev_h):
    """||h - h_prev|| / ||h||, the relative change of the hidden state."""
    h, prev_h = h.float(), prev_h.float()
    return (h - prev_h).norm(dim=-1) / h.norm(dim=-1).clamp_min(1e-12)


def agree_score(logp, prev_logp, h, prev_h):
    """1 - max_v p_v if the top-1 token is the previous candidate's, else inf."""
    top_logp, top = logp.max(-1)
    same = top == prev_logp.argmax(-1)
    return torch.where(same, 1.0 - top_logp.exp(), torch.full_like(top_logp, math.inf))


# a rule's exits at thresholds tau: per token the first candidate whose score is below tau

def exit_choice(score, tau):
    """Per token, the first candidate with score < tau; K (= score.size(0)) where none is."""
    K, N = score.shape
    ok = torch.cat([score < tau, torch.ones(1, N, dtype=torch.bool)])
    return ok.to(torch.uint8).argmax(0)  # argmax returns the first maximal index


def threshold_exits(score, n_tau):
    """A rule's exits: for each threshold of the grid, per token the first candidate with score < tau."""
    return ((tau, exit_choice(score, tau)) for tau in tau_grid(score, n_tau))


def tau_grid(score, n_tau):
    """Thresholds that spread the exits: 0, just above quantiles of the finite scores, and inf."""
    s = score[torch.isfinite(score)].flatten()
    if s.numel() > 1_000_000:
        s = s[torch.randperm(s.numel(), generator=torch.Generator().manual_seed(0))[:1_000_000]]
    qs = np.quantile(s.double().numpy(), np.linspace(0, 1, n_tau)) if s.numel() else np.zeros(0)
    taus = sorted(set([0.0] + [float(q) * (1 + 1e-6) + 1e-12 for q in qs]))
    return taus + [math.inf]


# A bound's exits from exit_records' rows (nll, top1, conf: (K+1, N), row K the full depth), the depth of each exit
# choice (K+1,) and the grid size: (tau, exit choice per token (N,)) for each threshold.

def oracle_exits(records, depth, n_tau):
    """agree against the final distribution's argmax instead of the previous one's (needs the full pass)."""
    top1, conf = records["top1"], records["conf"]
    score = torch.where(top1[:-1] == top1[-1:], conf[:-1], torch.full_like(conf[:-1], math.inf))
    return threshold_exits(score, n_tau)


def optimal_exits(records, depth, n_tau):
    """tau = lambda: each token picks the exit minimising nll + lambda * depth fraction (uses the labels)."""
    nll = records["nll"].double()
    frac = depth / depth[-1]
    for tau in [0.0] + [float(t) for t in np.geomspace(1e-3, 1e2, n_tau - 2)] + [math.inf]:
        if math.isfinite(tau):
            yield tau, (nll + tau * frac[:, None]).argmin(0)
        else:  # lambda = inf: the cheapest exit; ties go to the earliest candidate
            yield tau, torch.zeros(nll.size(1), dtype=torch.long)


# score: a rule's score function (above); None for a bound
# previous: the rule compares a candidate with the previous one (the first candidate: with the state entering the
#   loop, whose readout it pays for when it reads heads)
# head: the rule reads out every candidate it passes (else only the one where it stops)
# bound: a bound's exits (above): it needs the full pass or the labels, so it is studied teacher-forced only and
#   charged no readouts
Criterion = namedtuple("Criterion", "score previous head bound", defaults=(None, False, True, None))
CRITERIA = dict(
    entropy=Criterion(entropy_score),
    kl=Criterion(kl_score, previous=True),
    change=Criterion(change_score, previous=True, head=False),
    agree=Criterion(agree_score, previous=True),
    oracle=Criterion(bound=oracle_exits),
    optimal=Criterion(bound=optimal_exits),
)
def decode_criteria():
    """The rules (the criteria a decoder can apply: not the bounds), registered ones included."""
    return tuple(c for c, rule in CRITERIA.items() if rule.bound is None)


def check_criterion(criterion, decoding=False):
    allowed = decode_criteria() if decoding else tuple(CRITERIA)
    if criterion not in allowed:
        bounds = " and ".join(c for c in CRITERIA if c not in allowed)
        raise ValueError(f"unknown exit criterion {criterion!r}: use one of {allowed}"
                         + (f" ({bounds} need the full pass or the labels)" if decoding else ""))


def readout(model, h, label, cache=None, rows=None):
    """Logits of a state of the walk, or of the positions a (B, T) mask `rows` selects. While decoding, a model with
    a coda runs it with the KV cache (the coda's slots then hold this token's coda states until a later readout of
    the same token overwrites them); a coda attends over the whole sequence, so it runs on every position."""
    if model.config.n_coda:
        logits = model.readout(h, label, cache)
        return logits if rows is None else logits[rows]
    return model.readout(h if rows is None else h[rows], label)


# one walk, read out and scored at the candidates: the teacher-forced study, decoding and eval.py consume it
Candidate = namedtuple("Candidate", "pos label h logits logp scores reads")


def scored_candidates(model, x, walk, cands, criteria, cache=None, read_all=False, rows=None):
    """Read out and score the candidate exits along `walk` (model.walk's iterator of (label, state, _) over the
    embedded x). Yields a Candidate at each walk position in `cands`: its label and state h; logits and logp, its
    readout and log-probabilities (None where no criterion reads the head, unless read_all); scores {criterion:
    score per token} for the rules `criteria`; reads, the readouts made for it (the first one's may include the
    state entering the loop). Then, if the walk runs to its end, the full depth (scores and logits None: the
    caller reads it out). rows: a (B, T) mask, the positions read out and scored (default: all). A caller that
    stops early closes this generator and then finishes or closes the walk itself."""
    rules = {c: CRITERIA[c] for c in criteria}
    read_head = read_all or any(r.head for r in rules.values())
    read_entry = any(r.previous and r.head for r in rules.values())
    pick = (lambda t: t) if rows is None else (lambda t: t[rows])
    cand_set = set(cands)
    entry_h, entry_label, prev_h, prev_logp, first = x, ENTRY, pick(x), None, True
    for pos, (label, h, _) in enumerate(walk):
        if label.part == "prelude":
            entry_h, entry_label, prev_h = h, label, pick(h)
        if pos not in cand_set:
            continue
        reads, logits, logp = 0, None, None
        if first and read_entry:  # the first candidate is compared with the state entering the loop
            prev_logp = log_probs(readout(model, entry_h, entry_label, cache, rows))
            reads += 1
        first = False
        if read_head:
            logits = readout(model, h, label, cache, rows)
            logp = log_probs(logits)
            reads += 1
        hs = pick(h)
        scores = {c: r.score(logp, prev_logp, hs, prev_h) for c, r in rules.items()}
        yield Candidate(pos, label, h, logits, logp, scores, reads)
        prev_h, prev_logp = hs, logp
    yield Candidate(pos, label, h, None, None, None, 0)


# ---------------------------------------------------------------------------------------------------------------
# decoding with early exit


# the one exit decision and its KV fill: decoding (decode_step) and eval.py's teacher-forced scoring use it
ExitWalk = namedtuple("ExitWalk", "label h k_exit reads scores exit_logits")


def walk_with_exits(model, x, walk, cands, criterion, tau, fill, cache=None, rows=None, together=False,
                    labels=None, schedule=None, on_exit=None):
    """Consume `walk` (model.walk over the embedded x) letting positions exit at the candidate positions `cands`
    where the criterion's score < tau. rows: a (B, T) mask of the positions that may exit (default: all).
    together (decoding a batch): the batch exits at the first candidate where every row may, and the walk stops
    there: fill='propagate' writes the skipped steps' cache entries (labels: the plan) from the exited state
    (GPT.fill_cache), 'recompute' runs the rest of the walk anyway. Otherwise (teacher-forced scoring) each
    position exits on its own: with propagate it keeps its exited state through the rest of the walk, so the later
    steps' cache entries come from that state as a propagate fill's would; with recompute the walk goes on.
    on_exit(new, logits): called at each exit with the mask of the positions exiting there (over rows) and the
    logits of that candidate's readout. Returns ExitWalk: the last (label, state) the walk reached; k_exit, each
    position's exit choice (len(cands): none); reads, the readouts made; scores, the criterion's score at each
    candidate passed; exit_logits, the readout of the last exit (None without one)."""
    K, frozen = len(cands), FrozenStates()
    if not together:
        walk = frozen.walk(walk)
    candidates = scored_candidates(model, x, walk, cands if criterion else [], [criterion] if criterion else [],
                                   cache, rows=rows)
    exited = k_exit = exit_logits = None
    reads, scores = 0, []
    for cand in candidates:
        if cand.scores is None:  # the full depth
            return ExitWalk(cand.label, cand.h, k_exit, reads, scores, exit_logits)
        reads += cand.reads
        score = cand.scores[criterion]
        scores.append(score)
        new = score < tau
        if together:  # the batch as one: all rows exit here, or none
            if not bool(new.all()):
                continue
            exited = torch.zeros_like(new)
        else:
            if exited is None:
                exited, k_exit = torch.zeros_like(new), torch.full_like(score, K, dtype=torch.long)
            new &= ~exited
            if not bool(new.any()):
                continue
        k = cands.index(cand.pos)
        k_exit = torch.full_like(score, k, dtype=torch.long) if together else k_exit.masked_fill_(new, k)
        exited |= new
        exit_logits = cand.logits
        if exit_logits is None and (together or fill == "recompute"):  # a rule without heads reads where it stops
            exit_logits = readout(model, cand.h, cand.label, cache, rows)
            reads += 1
        if on_exit is not None:
            on_exit(new, exit_logits)
        if together:
            candidates.close()
            finish_after_exit(model, walk, cand, fill, labels, x, cache, schedule)
            return ExitWalk(cand.label, cand.h, k_exit, reads, scores, exit_logits)
        if fill == "propagate":
            frozen.add(cand.h, new, rows)


def finish_after_exit(model, walk, cand, fill, labels, x, cache, schedule):
    """After a decoding batch exits at candidate `cand`: propagate stops the walk and fills the skipped steps'
    cache entries from the exited state; recompute runs the rest of the walk anyway (exact caches, no saving)."""
    if fill == "propagate":
        walk.close()  # stop the depth here
        model.fill_cache([lab for lab in labels[cand.pos + 1:] if lab.part != "coda"], cand.h,
                         model.rope(cache.pos, x.size(1)), cache, schedule)
    else:
        last(walk)


class FrozenStates:
    """Teacher-forced scoring's propagate fill: exited positions keep their exited state through the rest of the
    walk (its loop steps; the coda runs on every position), so the later steps' cache entries come from that state
    as a propagate fill's would."""

    def __init__(self):
        self.h = self.mask = None

    def walk(self, walk):
        for label, h, cond in walk:
            if self.h is not None and label.part == "loop":
                h.copy_(torch.where(self.mask[..., None], self.h, h))
            yield label, h, cond

    def add(self, h, new, rows=None):
        """Freeze the positions `new` (a mask over `rows`, a (B, T) mask; None: all) at the states h."""
        mask = new.clone() if rows is None else torch.zeros_like(rows)
        if rows is not None:
            mask[rows] = new
        self.h = torch.where(mask[..., None], h, h if self.h is None else self.h)
        self.mask = mask if self.mask is None else self.mask | mask


@torch.no_grad()
def decode_step(model, tok, cache, labels, cands, criterion, tau, fill, schedule=None):
    """Run one new token (B, 1) through the depth at `schedule` (labels: its depth_labels) with the cache, exiting
    at the first candidate where every row satisfies the criterion. Returns (logits (B, V), stats)."""
    x = model.embed(tok, cache.pos)
    walk = model.walk(x, model.rope(cache.pos, 1), cache, {}, schedule)
    ex = walk_with_exits(model, x, walk, cands, criterion, tau, fill, cache, together=True, labels=labels,
                         schedule=schedule)
    exited = ex.exit_logits is not None
    logits = ex.exit_logits if exited else readout(model, ex.h, ex.label, cache)
    cache.pos += 1
    exit_pos = cands[int(ex.k_exit.flatten()[0])] if exited else None
    steps_run = len(labels) if (not exited or fill == "recompute") else exit_pos + 1
    n_fill = 0 if (not exited or fill == "recompute") else sum(lab.part != "coda" for lab in labels[exit_pos + 1:])
    # readouts: head evaluations; early_readouts: those of states before the coda (each also runs the coda)
    stats = dict(exit=labels[exit_pos].index if exited else labels[-1].index, exited=exited, steps=steps_run,
                 readouts=ex.reads + (not exited), early_readouts=ex.reads, fills=n_fill,
                 scores=[score.flatten().tolist() for score in ex.scores])
    return logits[:, -1], stats


@torch.no_grad()
def generate_with_exit(model, idx, max_new_tokens, criterion="entropy", tau=0.0, fill="propagate",
                       every_layer=False, temperature=0.0, top_k=None, generator=None, schedule=None):
    """Autoregressive decoding with the KV cache where each new token may exit early.

    idx: (B, T) prompt; the prompt is prefilled at full depth. criterion None (or tau <= 0 with a threshold
    criterion) decodes at full depth. Returns a dict: tokens (B, T + max_new_tokens); logits (B, N, V), the
    distribution each new token was drawn from; per generated token after the first (the first comes from the
    prefill) a dict in `stats`: exit (effective-layer index it stopped at), exited, steps (layers run),
    readouts, early_readouts, fills, scores (per candidate checked, per row), context; labels and candidates of
    the depth; decode_s (wall time of the decoding steps); the cache; the schedule (as forward's, None: the trained
    depth) it decoded at."""
    if criterion is not None:
        check_criterion(criterion, decoding=True)
    if fill not in FILLS:
        raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")
    labels = depth_labels(model, schedule)
    cands = exit_candidates(model, labels, every_layer)
    stats, logits, run = [], [], dict(cache=None, t0=None)
    sync = torch.cuda.synchronize if idx.is_cuda else (lambda: None)

    def step(tok, cache):  # one decoding step through the exits; the clock starts at the first
        if run["t0"] is None:
            sync()
            run.update(cache=cache, t0=time.perf_counter())
        context = cache.pos + 1
        out, st = decode_step(model, tok, cache, labels, cands, criterion, tau, fill, schedule)
        stats.append(dict(st, context=context))
        return out
    tokens = model.generate(idx, max_new_tokens, temperature, top_k, generator, schedule, step, logits_out=logits)
    sync()
    decode_s = time.perf_counter() - run["t0"] if run["t0"] is not None else 0.0
    return dict(tokens=tokens, logits=torch.stack(logits, 1), stats=stats, labels=labels, candidates=cands,
                decode_s=decode_s, cache=run["cache"], schedule=schedule)


def decode_flops(model, labels, stats, schedule=None):
    """Forward FLOPs actually executed per decoded token (token_flops of what each step ran: layers, readouts, K/V
    fills) and those of plain full-depth decoding of the same tokens, at `schedule` (labels: its depth_labels)."""
    at0 = step_flops(model, labels, 0, True, schedule)
    at1 = step_flops(model, labels, 1, True, schedule)
    run = full = 0.0
    for st in stats:  # a step's cost at context c: its cost at 0 plus c times the per-context-token slope
        costs = ([a + (b - a) * st["context"] for a, b in zip(at0[0], at1[0])],) + at0[1:]
        run += token_flops(costs, labels, st["steps"], st["early_readouts"], st["readouts"] > st["early_readouts"],
                           st["fills"])
        full += token_flops(costs, labels, len(labels))
    n = max(len(stats), 1)
    return run / n, full / n


def summarize_generation(model, result):
    """One line about a generate_with_exit result: exits, mean depth, FLOPs saved."""
    st, labels = result["stats"], result["labels"]
    if not st:
        return "no decoding steps"
    run, full = decode_flops(model, labels, st, result["schedule"])
    frac = sum(s["exited"] for s in st) / len(st)
    depth = sum(s["exit"] + 1 for s in st) / len(st)
    return (f"{frac:.0%} of tokens exited early, mean exit depth {depth:.2f} of {len(labels)}, "
            f"FLOPs saved {1 - run / full:.1%}, {len(st) / max(result['decode_s'], 1e-9):.1f} decode steps/s")
