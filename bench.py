"""
Training speed: tokens/s and model FLOP utilisation (MFU) of one training step (forward, backward, AdamW), for
fp32 and bf16, eager and compiled. On CPU the reference is the rate of a 2048^3 matmul in the same dtype, timed in
this process; on CUDA the device's dense bf16 peak.

    python bench.py                      # the default model of train.py
    python bench.py --preset=nanogpt     # nanoGPT's GPT-2-vocab model (d=256, 8 layers, T=256, B=8)
    python bench.py config/sparse_looped.py --n_embd=256 --dtypes=bfloat16 --compiles=False

Prints one line per (dtype, compile) with the median step time over `steps` timed steps; the numbers go to a JSON
file when out is set.
"""
import json
import statistics
import time
from contextlib import nullcontext

import torch

from configurator import configure
from loop import build_model
from model import GPTConfig
import scaling
import train

preset = "default"  # default (train.py's model, byte vocab) | nanogpt (d=256, 8 layers, GPT-2 vocab, B=8, T=256)
batch_size = 16  # sequences per step
dtypes = "float32,bfloat16"  # comma-separated dtypes to measure
compiles = "False,True"  # comma-separated: eager and/or torch.compile per block
steps = 10  # timed steps (after warmup)
warmup = 3  # untimed steps (compile happens here)
device = "cpu"  # cpu | cuda
out = ""  # optional JSON file for the results


def step_time(model, optimizer, x, y, ctx, n_steps, n_warmup, sync):
    times = []
    for i in range(n_warmup + n_steps):
        t = time.perf_counter()
        with ctx:
            _, loss, aux = model(x, y)
            objective = loss + sum(aux.values()) if aux else loss
        objective.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        if i >= n_warmup:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None):
    defaults = {k: v for k, v in globals().items() if not k.startswith("_")}
    cfg, model_cfg = configure(defaults, GPTConfig, argv, doc_source=__file__)
    if cfg["preset"] == "nanogpt":
        model_cfg = GPTConfig(**{**model_cfg.to_dict(), "n_embd": 256, "n_layer": 8, "block_size": 256,
                                 "vocab_size": 50257, "mup": False})
        cfg["batch_size"] = 8 if "--batch_size" not in " ".join(argv or []) else cfg["batch_size"]
    dev = cfg["device"]
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    T = model_cfg.block_size
    results = []
    for dtype_name in cfg["dtypes"].split(","):
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
        ctx = nullcontext() if dtype == torch.float32 else torch.autocast(dev.split(":")[0], dtype=dtype)
        peak = train.peak_flops("cuda" if dev.startswith("cuda") else "cpu", dtype)
        for compiled in [c.strip() == "True" for c in cfg["compiles"].split(",")]:
            torch.manual_seed(0)
            model = build_model(model_cfg).init_weights(0).to(dev)
            if compiled:
                model.compile_blocks()
            opt_cfg = dict(lr=1e-3, weight_decay=0.0, wd_independent=True, adam_eps=1e-8, optimizer="adamw",
                           beta1=0.9, beta2=0.95)
            optimizer = train.make_optimizer(model, opt_cfg, "cuda" if dev.startswith("cuda") else "cpu")
            x = torch.randint(0, model_cfg.vocab_size, (cfg["batch_size"], T), device=dev)
            dt = step_time(model, optimizer, x, x, ctx, cfg["steps"], cfg["warmup"], sync)
            tokens = cfg["batch_size"] * T
            flops = scaling.flops_per_token(model, "schwethelm", T) * tokens / dt
            row = dict(preset=cfg["preset"], dtype=dtype_name, compiled=compiled, step_s=dt, tokens_per_s=tokens / dt,
                       flops_per_s=flops, peak_flops_per_s=peak, mfu=flops / peak)
            results.append(row)
            print(f"{dtype_name:>8} {'compiled' if compiled else 'eager':>8}: {dt * 1e3:7.1f} ms/step "
                  f"{tokens / dt:9,.0f} tok/s {flops / 1e9:7.1f} GFLOP/s = {100 * flops / peak:5.1f}% of "
                  f"{peak / 1e9:.0f} GFLOP/s ({'matmul in this dtype' if dev == 'cpu' else 'bf16 peak'})",
                  flush=True)
    if cfg["out"]:
        with open(cfg["out"], "w") as f:
            json.dump({"model": model_cfg.to_dict(), "results": results}, f, indent=1)


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
