"""
Reference outputs of every model family, saved once from the commit before a refactor and compared after it
(tests/test_reference.py): a refactor that keeps behaviour keeps these bit for bit.

    git worktree add /tmp/before <commit before the refactor>
    cp tests/reference.py /tmp/before/tests/ && cd /tmp/before && OMP_NUM_THREADS=1 python tests/reference.py \
        --out=<repo>/tests/fixtures/reference

What is saved, per family (tiny models, fp32, one thread, eager, the CPU fast paths on):
- a training-mode forward and backward on a fixed batch: logits, loss, every auxiliary term, every gradient
  (elastic objectives draw from the trajectory generator of micro-batch 0);
- eval-mode logits and the hidden state after every step of the depth walk (the analyses read those);
- four optimizer steps of optim.train_step (losses, auxiliary terms, gradient norms) and the val loss after them;
- greedy and sampled cached decoding; for looped models exit decoding (entropy, propagate fill) and the
  teacher-forced exit scores; for MoE models the routing records;
and for one looped model eval.py's scores at its trained depth, another loop count and an exit rule; and the log
of a tiny train.py run (every field but timings and MFU) with its result.json. The same functions compute the
current code's outputs in the test, so this file follows the code's API; the saved outputs do not change.
"""
import argparse
import hashlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import early_exit as ee  # noqa: E402

import exits  # noqa: E402
import eval as ev  # noqa: E402
import analyze  # noqa: E402
import optim  # noqa: E402
from data import get_tokenizer  # noqa: E402
from distributed import native_bf16  # noqa: E402
from loop import is_looped, trajectory_rng  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

TINY = dict(block_size=24, vocab_size=257, n_layer=2, n_embd=32, head_dim=16)
LOOP = dict(n_loop=3)
SANDWICH = dict(n_loop=2, n_prelude=1, n_coda=1, loop_norm=True)
MOE = dict(n_expert=4, top_k=2)
FAMILIES = {
    "plain": {},
    "plain_variants": dict(pos_emb="learned", mlp="gelu", tie_embeddings=True, logit_softcap=10.0, qk_norm=True,
                           norm_gain=True, init="uniform"),
    "plain_relu2_gpt2_init": dict(mlp="relu2", proj_init="gpt2", head_init_std=1e-3, mup_base_width=16),
    "looped": LOOP,
    "prelude_coda_none": SANDWICH,
    "prelude_coda_linear": dict(SANDWICH, injection="linear"),
    "prelude_coda_additive": dict(SANDWICH, injection="additive"),
    "hyper_connections": dict(SANDWICH, n_loop=3, hc_lanes=2),
    "hyper_connections_sum": dict(SANDWICH, hc_lanes=2, hc_pool="sum"),
    "truncated_bptt": dict(SANDWICH, n_loop=3, injection="linear", bptt_loops=1),
    "index": dict(LOOP, loop_cond="index", cond_init="normal", cond_lr_scale=0.1),
    "loopformer_shortcut": dict(LOOP, n_loop=4, loop_cond="loopformer", cond_init="normal", elastic="shortcut"),
    "loopformer_greedy_logits": dict(LOOP, loop_cond="loopformer", cond_init="normal", elastic="shortcut",
                                     trajectory_sampler="greedy", consistency_on="logits"),
    "early_exit_objective": dict(LOOP, loop_cond="index", elastic="early_exit"),
    "random_depth": dict(LOOP, elastic="random_depth"),
    "iteradaln_sandwich": dict(SANDWICH, loop_norm=False, loop_cond="iteradaln", cond_init="normal",
                               sandwich_norm=True),
    "residual_sqrt": dict(n_loop=2, residual_scaling="sqrt"),
    "residual_linear": dict(n_loop=2, residual_scaling="linear"),
    "residual_factorized": dict(n_loop=2, residual_scaling="factorized", residual_lambda=2.0, residual_ref_layers=4),
    "moe": dict(MOE, moe_lb_coef=0.01, moe_z_coef=0.001),
    "moe_sigmoid_shared_seq_bias": dict(MOE, n_shared_expert=1, moe_d_ff=24, moe_router="sigmoid", moe_seq_coef=1e-3,
                                        moe_bias_rate=1e-2, moe_route_scale=2.5, moe_first_dense=1),
    "moe_capacity_batched": dict(MOE, moe_capacity_factor=1.0, moe_dispatch="batched"),
    "moe_grouped": dict(MOE, moe_dispatch="grouped", moe_lb_coef=0.0, moe_z_coef=0.0, moe_bias_rate=1e-2),
    "looped_moe": dict(MOE, n_loop=2, moe_bias_rate=1e-2),
    "mla": dict(attn="mla", kv_lora_rank=16, rope_head_dim=8, q_lora_rank=16, v_head_dim=8),
    "mla_looped_moe": dict(MOE, n_loop=2, n_prelude=1, n_coda=1, attn="mla", kv_lora_rank=16, rope_head_dim=8),
}
TRAIN = dict(lr=3e-3, weight_decay=1e-4, wd_independent=True, adam_eps=1e-8, beta1=0.9, beta2=0.999, optimizer="adamw",
             grad_clip=1.0, warmup_iters=2, schedule="wsd_sqrt", decay_frac=0.5, min_lr_frac=0.05)
OPTIMIZER = {"truncated_bptt": "muonh"}  # one family also steps MuonH (Schwethelm et al.'s optimizer)
B, T, STEPS = 2, 16, 4


def batch(seed, rows=B, length=T):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (rows, length + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def make(name):
    cfg = GPTConfig(**TINY, **FAMILIES[name])
    return GPT(cfg, cpu_kernels=True).init_weights(0)  # as every eager CPU run: the CPU fast paths on


def family_outputs(name):
    """Everything this family's model computes on fixed inputs (the module docstring lists it)."""
    out = {}
    x, y = batch(1)
    model = make(name).train()
    logits, loss, aux = model(x, y, rng=trajectory_rng(0, 0))
    (loss + sum(aux.values())).backward()
    out["train_logits"], out["train_loss"] = logits.detach(), loss.detach()
    out.update({f"aux/{k}": v.detach() for k, v in aux.items()})
    out.update({f"grad/{n}": p.grad for n, p in model.named_parameters() if p.grad is not None})
    model.zero_grad(set_to_none=True)

    model.eval()
    with torch.no_grad():
        out["eval_logits"] = model(x)[0]
        for i, (label, h) in enumerate(model.states(x)):
            out[f"state/{i}/{tuple(label)}"] = h

    model = make(name).train()
    cfg = dict(TRAIN, optimizer=OPTIMIZER.get(name, "adamw"))
    opt = optim.make_optimizer(model, cfg, "cpu")
    for step in range(STEPS):
        s = optim.lr_multiplier(step, STEPS, cfg)
        optim.set_lr(opt, cfg["lr"] * s)
        loss, aux, norm = optim.train_step(model, opt, lambda micro: batch(100 + 2 * step + micro), accum=2,
                                           grad_clip=cfg["grad_clip"], weight_decay=cfg["weight_decay"], schedule=s,
                                           rng=lambda micro: trajectory_rng(0, 2 * step + micro))
        out[f"step/{step}/loss"], out[f"step/{step}/grad_norm"] = loss, norm
        out.update({f"step/{step}/{k}": v for k, v in aux.items()})
    model.eval()
    with torch.no_grad():
        out["val_loss"] = model(*batch(7, 4))[1]
        out["weights_after_steps"] = torch.cat([p.detach().flatten() for p in model.parameters()])
        prompt = batch(3)[0][:, :4]
        out["greedy"] = model.generate(prompt, 8, temperature=0)
        out["sampled"] = model.generate(prompt, 8, temperature=1.0, top_k=20,
                                        generator=torch.Generator().manual_seed(5))
        if model.config.n_expert:
            with analyze.record_routing(model) as records:
                model(x)
            for i, r in enumerate(records):
                out[f"routing/{i}/{r['layer']}/{r['loop']}/experts"] = r["experts"]
                out[f"routing/{i}/{r['layer']}/{r['loop']}/gates"] = r["gates"]
    if is_looped(model.config):
        out.update(exit_outputs(model, x, y))
    return out


def exit_outputs(model, x, y):
    """Teacher-forced exit scores and exit decoding (tau: the median first-boundary entropy, so some tokens exit)."""
    out = {}
    labels = exits.depth_labels(model)
    cands = exits.exit_candidates(model, labels)
    scores = ee.exit_records(model, x, y, cands, ["entropy", "kl"])["scores"]
    out.update({f"exit_scores/{k}": v for k, v in scores.items()})
    tau = float(scores["entropy"][0].median())
    for fill in ("propagate", "recompute"):
        res = exits.generate_with_exit(model, x[:, :4], 8, "entropy", tau, fill)
        out[f"exit_decode/{fill}/tokens"], out[f"exit_decode/{fill}/logits"] = res["tokens"], res["logits"]
        out[f"exit_decode/{fill}/exits"] = torch.tensor([st["exit"] for st in res["stats"]])
        out[f"exit_decode/{fill}/flops"] = torch.tensor(exits.decode_flops(model, labels, res["stats"]),
                                                        dtype=torch.float64)
    return out


def eval_outputs():
    """eval.py's log-likelihoods and FLOPs for a looped model with a coda: trained depth, 1 loop, an exit rule."""
    model = make("prelude_coda_linear").eval()
    tok = get_tokenizer("byte")
    rng = random.Random(0)
    groups = [[([rng.randrange(256) for _ in range(rng.randint(1, 9))], [rng.randrange(256) for _ in range(3)])
               for _ in range(3)] for _ in range(4)]
    out = {}
    for label, setting in (("full", ev.Setting("full")), ("loops1", ev.Setting("loops=1", 1)),
                           ("exit", ev.Setting("exit", None, "entropy", 4.0, "propagate"))):
        scorer = ev.Scorer(model, tok, setting)
        rows = scorer.score(groups)
        out[f"eval/{label}/ll"] = torch.tensor([r[0] for g in rows for r in g], dtype=torch.float64)
        out[f"eval/{label}/greedy"] = torch.tensor([bool(r[1]) for g in rows for r in g])
        out[f"eval/{label}/flops"] = torch.tensor(scorer.flops, dtype=torch.float64)
    return out


def corpus(folder):
    """A deterministic byte corpus of made-up words (not the repository's own files, which a refactor changes)."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7))) for _ in range(300)]
    for i in range(4):
        text = " ".join(rng.choice(words) for _ in range(6000))
        with open(os.path.join(folder, f"doc{i}.txt"), "w") as f:
            f.write(text)


def train_log_outputs():
    """A tiny train.py run (the main job's path, in this process; the peak FLOP/s that only MFU reads is not timed):
    every log field but timings and MFU, result.json and the sample."""
    import contextlib
    import io
    from unittest import mock
    import runlog
    import train
    with tempfile.TemporaryDirectory() as tmp:
        corpus(tmp)
        out_dir = os.path.join(tmp, "run")
        argv = [f"--data_source=files:{tmp}/*.txt", "--tokenizer=byte", f"--data_dir={tmp}/tokens",
                f"--out_dir={out_dir}", "--n_layer=1", "--n_loop=2", "--n_embd=32", "--head_dim=16", "--block_size=32",
                "--batch_size=4", "--grad_accum=2", "--max_iters=12", "--eval_interval=6", "--eval_tokens=1024",
                "--log_interval=3", "--warmup_iters=3", "--sample_tokens=16", "--threads=1", "--n_expert=4",
                "--moe_bias_rate=0.01"]
        printed = io.StringIO()
        with mock.patch.object(runlog, "peak_flops", lambda *a: None), contextlib.redirect_stdout(printed):
            train.main(argv)
        log = [json.loads(line) for line in open(os.path.join(out_dir, "log.jsonl"))]
        result = json.load(open(os.path.join(out_dir, "result.json")))
    timing = ("tokens_per_s", "mfu", "wall_s")
    where = ("device", "dtype")  # where the run ran (result.json names it since 2026-11-28), not what it computed
    log = [{k: v for k, v in r.items() if k not in timing} for r in log]
    result = {k: v for k, v in result.items() if k not in timing + where}
    printed = printed.getvalue()
    sample = printed.split("sample:\n", 1)[1] if "sample:\n" in printed else ""
    return dict(log=log, result=result, sample=sample)


def digest(t):
    """A tensor as its exact bytes' sha256 (the bit-for-bit check) and, for a comparison across machines whose
    kernels round differently, its float64 projections onto four fixed random vectors and its largest magnitude."""
    t = torch.as_tensor(t).detach().contiguous()
    flat = t.double().flatten()
    g = torch.Generator().manual_seed(flat.numel())
    proj = (torch.randn(4, flat.numel(), generator=g, dtype=torch.float64) @ flat).tolist() if flat.numel() else []
    return dict(sha=hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()[:16], shape=list(t.shape),
                dtype=str(t.dtype).replace("torch.", ""), proj=proj,
                absmax=float(flat.abs().max()) if flat.numel() else 0.0)


MEMORY_PRESETS = ("sparse_looped_moe.py", "loopmoe.py", "recur_r4.py")  # count --memory: dense, MoE, MLA + MoE


def count_outputs():
    """`python scaling.py count` of every training preset in config/ in both FLOP conventions, and with --memory for
    three of them (the memory model's search over GPU counts is slow)."""
    import contextlib
    import glob
    import io
    import scaling
    out = {}
    for path in sorted(glob.glob(os.path.join(REPO, "config", "*.py"))):
        if os.path.basename(path).startswith("eval_"):  # eval.py's settings, not a model
            continue
        for convention in ("lee", "schwethelm"):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                memory = ["--memory"] if convention == "lee" and os.path.basename(path) in MEMORY_PRESETS else []
                counted = scaling.main_count([path, f"--flops_convention={convention}"] + memory)
            out[f"{os.path.basename(path)}/{convention}"] = dict(counted, table=err.getvalue())
    return out


CHECKPOINTS = ("plain", "looped", "prelude_coda_linear", "hyper_connections", "truncated_bptt", "index",
               "loopformer_shortcut", "iteradaln_sandwich", "residual_factorized", "moe_sigmoid_shared_seq_bias",
               "looped_moe", "mla_looped_moe")  # one tiny checkpoint of each family, as train.py writes them


def write_checkpoints(folder):
    """Tiny checkpoints in train.py's format (model, model_config, train_config) for the loading test."""
    import train
    os.makedirs(folder, exist_ok=True)
    for name in CHECKPOINTS:
        family = dict(FAMILIES[name], moe_d_ff=16 if "moe_d_ff" in FAMILIES[name] else 0)
        cfg = GPTConfig(**dict(TINY, n_embd=16, head_dim=8, n_layer=1), **family)
        model = GPT(cfg).init_weights(1)
        train_config = dict(train.defaults(), tokenizer="byte")
        torch.save(dict(model=model.state_dict(), model_config=cfg.to_dict(), train_config=train_config, step=0),
                   os.path.join(folder, f"{name}.pt"))


def checkpoint_outputs(folder):
    """The logits of each saved checkpoint, loaded as every script loads a run."""
    from runs import load_model
    x = batch(1)[0]
    out = {}
    for name in CHECKPOINTS:
        model, _ = load_model(os.path.join(folder, f"{name}.pt"))
        with torch.no_grad():
            out[name] = model(x)[0]
    return out


def fingerprint():
    """What a bit-for-bit comparison depends on besides our code: torch's version and the CPU's kernels. The ISA
    level alone does not say which: on a 2-core AMD EPYC with AVX-512 and native bf16 every reference case differs
    in its last bits from the AVX-512 Intel Xeon without native bf16 that saved them."""
    return dict(torch=torch.__version__, cpu=torch.backends.cpu.get_cpu_capability(), machine=platform.machine(),
                native_bf16=native_bf16())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "reference"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    for name in FAMILIES:
        save(args.out, name, family_outputs(name))
        print(name, flush=True)
    save(args.out, "eval", eval_outputs())
    save(args.out, "train", train_log_outputs())
    save(args.out, "count", count_outputs())
    checkpoints = os.path.join(os.path.dirname(args.out), "checkpoints")
    write_checkpoints(checkpoints)
    save(args.out, "checkpoints", checkpoint_outputs(checkpoints))
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(dict(commit=commit, **fingerprint()), f, indent=1)
    print(f"{len(FAMILIES) + 4} files from {commit[:10]} -> {args.out}")


def save(folder, name, outputs):
    digests = {k: digest(v) if isinstance(v, torch.Tensor) else v for k, v in outputs.items()}
    with open(os.path.join(folder, f"{name}.json"), "w") as f:  # one output a line: a diff names what moved
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in digests.items()) + "\n}\n")


if __name__ == "__main__":
    main()
