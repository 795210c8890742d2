"""
Training speed: tokens/s and model FLOP utilisation (MFU) of one training step (forward, backward, AdamW), for
fp32 and bf16 (autocast), eager and compiled. FLOPs per token are scaling.py's "schwethelm" count (every matmul,
attention included).

    python bench.py                      # the default model of train.py (byte vocab, d=128, 4 layers, B=16)
    python bench.py --preset=nanogpt     # nanoGPT's GPT-2-vocab model (d=256, 8 layers, T=256, B=8)
    python bench.py --n_embd=512 --dtypes=bfloat16          # any GPTConfig key changes the model
    python bench.py --clock=cpu --threads=1                 # on a shared machine (see below)

MFU = the step's FLOPs / its median time, divided by a reference rate R. On CUDA R is the device's dense bf16 peak.
On CPU R is this machine's own best: the fastest 2048^3 matmul in the setup's dtype (best of 5 after a warm-up,
same clock and threads as the steps), timed before any model is built and again after every round, R being the
fastest of all these. A neighbour that slows some measurements cannot lower R, and a step cannot honestly beat
it: a step faster than R means R itself was measured badly (e.g. the machine was busy during every measurement),
so that row's MFU is reported as n/a (null in the JSON) with a note, never as a number above 100%.
bf16 needs hardware support on CPU (AVX512-BF16 or AMX-BF16 on x86, BF16 on Arm, as torch.cpu.get_capabilities()
reports it). Without it torch emulates bf16 at a small fraction of the fp32 rate (1.3 vs 61 GFLOP/s on one core of
an AVX2-only AMD EPYC): both the steps and R would time the emulation, so bf16 is skipped with a one-line note.

The setups (dtype x compile) are built and warmed up first, then timed in `rounds` interleaved rounds of `steps`
steps each; each line is the median step. On a machine shared with other jobs wall-clock times mostly measure
the neighbours: --clock=cpu times CPU seconds of this process instead (use it with --threads=1, where no thread
ever waits for a descheduled sibling), which gives the MFU this code would reach on one quiet core.
"""
import json
import statistics
import time
from contextlib import nullcontext

import torch

from configurator import configure
from loop import build_model, pick_device
from model import GPTConfig
from optim import make_optimizer, train_step
import scaling
import train
from train import cpu_matmul_rate, native_bf16

preset = "default"  # default (train.py's model, byte vocab) | nanogpt (d=256, 8 layers, GPT-2 vocab, B=8, T=256)
batch_size = 16  # sequences per step (the nanogpt preset uses 8 unless given)
dtypes = "float32,bfloat16"  # comma-separated dtypes to measure
compiles = "False,True"  # comma-separated: eager and/or torch.compile per block
steps = 5  # timed steps per round
rounds = 2  # interleaved rounds over all setups (total timed steps per setup = rounds * steps)
warmup = 2  # untimed steps per setup before timing (compilation happens here)
clock = "wall"  # wall (elapsed time) | cpu (CPU time of this process: robust on a shared machine)
threads = 0  # torch threads on CPU; 0 = auto, as train.py: OMP_NUM_THREADS if set, else the idle cores
device = "auto"  # auto (cuda if there is one) | cpu | cuda
out = ""  # optional JSON file for the results


def timer(clock_name):
    if clock_name not in ("wall", "cpu"):
        raise ValueError(f"clock must be wall|cpu, got {clock_name!r}")
    return time.process_time if clock_name == "cpu" else time.perf_counter


def runnable_dtypes(names, device_type):
    """The dtypes in `names` (comma-separated) worth timing on `device_type`: on a CPU without native bf16 the
    bfloat16 entry is dropped with a one-line note (its timings would measure torch's emulation)."""
    names = [name.strip() for name in names.split(",") if name.strip()]
    if device_type == "cpu" and "bfloat16" in names and not native_bf16():
        names.remove("bfloat16")
        print("bfloat16 skipped: this CPU has no native bf16 (avx512_bf16, amx_bf16 or Arm bf16), so torch would "
              "emulate it, tens of times slower than fp32")
    return names


def main(argv=None):
    defaults = {k: v for k, v in globals().items() if not k.startswith("_")}
    cfg, model_cfg = configure(defaults, GPTConfig, argv, doc_source=__file__)
    cfg["device"] = pick_device(cfg["device"])
    if cfg["preset"] == "nanogpt":
        model_cfg = GPTConfig(**{**model_cfg.to_dict(), "n_embd": 256, "n_layer": 8, "block_size": 256,
                                 "vocab_size": 50257, "mup": False})
        cfg["batch_size"] = 8 if "--batch_size" not in " ".join(argv or []) else cfg["batch_size"]
    elif cfg["preset"] != "default":
        raise ValueError(f"preset must be default|nanogpt, got {cfg['preset']!r}")
    dev = cfg["device"]
    on_cuda = dev.startswith("cuda")
    if not on_cuda:
        torch.set_num_threads(train.cpu_threads(cfg["threads"]))
        train.keep_freed_memory()  # as train.py does on CPU
    now = timer(cfg["clock"])
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    T, B = model_cfg.block_size, cfg["batch_size"]
    x = torch.randint(0, model_cfg.vocab_size, (B, T), device=dev)

    dtypes = {name: {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]
              for name in runnable_dtypes(cfg["dtypes"], "cuda" if on_cuda else "cpu")}
    # reference FLOP/s per dtype; on CPU measured before any model exists, then again after each round (the best)
    peaks = {dtype: train.peak_flops("cuda", dtype) if on_cuda else cpu_matmul_rate(dtype, now)
             for dtype in dtypes.values()}
    setups = []  # every (dtype, compiled) with its own model and optimizer, warmed up before any timing
    for dtype_name, dtype in dtypes.items():
        for compiled in [c.strip() == "True" for c in cfg["compiles"].split(",")]:
            model = build_model(model_cfg).init_weights(0).to(dev)
            if compiled:
                model.compile_blocks()
            opt_cfg = dict(lr=1e-3, weight_decay=0.0, wd_independent=True, adam_eps=1e-8, optimizer="adamw",
                           beta1=0.9, beta2=0.95)
            optimizer = make_optimizer(model, opt_cfg, "cuda" if on_cuda else "cpu")
            ctx = nullcontext() if dtype == torch.float32 else torch.autocast(dev.split(":")[0], dtype=dtype)
            for _ in range(cfg["warmup"]):
                train_step(model, optimizer, lambda _: (x, x), ctx=ctx)
            sync()
            flops_per_step = scaling.flops_per_token(model, "schwethelm", T) * B * T
            setups.append(dict(dtype=dtype_name, torch_dtype=dtype, compiled=compiled, model=model,
                               optimizer=optimizer, ctx=ctx, flops=flops_per_step, times=[]))
    for _ in range(cfg["rounds"]):
        for s in setups:
            for _ in range(cfg["steps"]):
                t = now()
                train_step(s["model"], s["optimizer"], lambda _: (x, x), ctx=s["ctx"])
                sync()
                s["times"].append(now() - t)
        if not on_cuda:
            for dtype in peaks:
                peaks[dtype] = max(peaks[dtype], cpu_matmul_rate(dtype, now))

    ref = "bf16 peak" if on_cuda else f"{cfg['clock']}-clock matmul in this dtype, {torch.get_num_threads()} threads"
    results = []
    for s in setups:
        dt = statistics.median(s["times"])
        flops = s["flops"] / dt
        s["peak"] = peaks[s["torch_dtype"]]
        mfu = flops / s["peak"]
        if mfu > 1:  # faster than the reference matmul: the reference is what went wrong
            mfu = None
        row = dict(preset=cfg["preset"], n_embd=model_cfg.n_embd, dtype=s["dtype"], compiled=s["compiled"],
                   clock=cfg["clock"], threads=torch.get_num_threads(), step_s=dt, tokens_per_s=B * T / dt,
                   flops_per_s=flops, peak_flops_per_s=s["peak"], mfu=mfu)
        results.append(row)
        share = f"{100 * mfu:5.1f}% of" if mfu is not None else "MFU n/a: faster than the unreliable reference"
        print(f"{s['dtype']:>8} {'compiled' if s['compiled'] else 'eager':>8}: {dt * 1e3:7.1f} ms/step "
              f"{B * T / dt:9,.0f} tok/s {flops / 1e9:7.1f} GFLOP/s = {share} "
              f"{s['peak'] / 1e9:.0f} GFLOP/s ({ref})", flush=True)
    if cfg["out"]:
        with open(cfg["out"], "w") as f:
            json.dump({"model": model_cfg.to_dict(), "batch_size": B, "results": results}, f, indent=1)


if __name__ == "__main__":
    from configurator import run
    run(main)
