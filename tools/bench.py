"""
Training speed: tokens/s and model FLOP utilisation (MFU) of one training step (forward, backward, AdamW), for
fp32 and bf16 (autocast), eager and compiled. FLOPs per token are accounting.py's "schwethelm" count (every matmul,
attention included).

    python -m tools.bench                      # the default model of train.py (byte vocab, d=128, 4 layers, B=16)
    python -m tools.bench --preset=nanogpt     # nanoGPT's GPT-2-vocab model (d=256, 8 layers, T=256, B=8)
    python -m tools.bench --n_embd=512 --dtypes=bfloat16          # any GPTConfig key changes the model
    python -m tools.bench --clock=cpu --threads=1                 # on a shared machine (see below)

MFU = the step's FLOPs / its median time, divided by a reference rate R. On CUDA R is the device's dense bf16 peak.
On CPU R is this machine's own best: the fastest 2048^3 matmul in the setup's dtype (best of 5 after a warm-up,
same clock and threads as the steps), timed before any model is built and again after every round, R being the
fastest of all these. A neighbour that slows some measurements cannot lower R, and a step cannot honestly beat
it: a step faster than R means R itself was measured badly (e.g. the machine was busy during every measurement),
so that row's MFU is reported as n/a (null in the JSON) with a note, never as a number above 100%.
bf16 needs hardware support on CPU (AVX512-BF16 or AMX-BF16 on x86, BF16 on Arm, as torch.cpu.get_capabilities()
reports it). Without it torch emulates bf16 at a small fraction of the fp32 rate (1.3 vs 61 GFLOP/s on one core of
an AVX2-only AMD EPYC): both the steps and R would time the emulation, so bf16 is skipped with a one-line note.

On a GPU, one command measures the paper-scale path (Lee et al. 2026, arXiv:2605.09165, presets at d=1024, bf16,
compiled, the GPT-2 vocabulary's head padded to 50304 rows as nanoGPT does: cuBLAS has no fast kernel for a matrix
of 50257 columns, and that one matmul would dominate the step): Base, Looped 8x2, MoE and Looped-MoE, each with its
tokens/s, MFU, peak memory (weights, optimizer state and the step's transient peak), graph breaks per compiled block
(torch._dynamo.explain; target 0) and whether a steady-state step is free of host syncs
(torch.cuda.set_sync_debug_mode("error")), then the ratios MoE / dense step time and Looped / Base tokens/s at equal
executed FLOPs:

    python -m tools.bench --device=cuda --preset=gpu --out=gpu.json     # any GPTConfig key still applies, e.g. --n_embd
    python -m tools.bench --device=cuda --preset=gpu --profile=True     # + each model's GPU kernel time by kind

The setups (model x dtype x compile) are built and warmed up first, then timed in `rounds` interleaved rounds of `steps`
steps each; each line is the median step. On a machine shared with other jobs wall-clock times mostly measure
the neighbours: --clock=cpu times CPU seconds of this process instead (use it with --threads=1, where no thread
ever waits for a descheduled sibling), which gives the MFU this code would reach on one quiet core.
"""
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext

import torch

from configurator import ConfigError, configure
from distributed import pick_device
from model import GPT, GPTConfig
from optim import make_optimizer, train_step
import kernels
import accounting
import train
from distributed import cpu_matmul_rate, cpu_threads, keep_freed_memory, native_bf16, peak_flops

preset = "default"  # default (train.py's model) | nanogpt (d=256, 8 layers, GPT-2 vocab, B=8, T=256) | gpu (see above)
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
profile = False  # on CUDA: each setup's GPU kernel time per step by kind of kernel (torch.profiler, after the timings)


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


GPU_MODELS = {  # the GPU preset: Lee et al. 2026 (arXiv:2605.09165) presets at d=1024, bf16, compiled
    "base": "config/sparse_base.py", "looped": "config/sparse_looped.py", "moe": "config/sparse_moe.py",
    "looped_moe": "config/sparse_looped_moe.py"}


def preset_model(path, overrides):
    """GPTConfig of a train.py config file (its model keys; the training keys are read and dropped), with
    --key=value overrides."""
    train_keys = {k: v for k, v in vars(train).items() if not k.startswith("_")}
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return configure(train_keys, GPTConfig, [os.path.join(here, path)] + overrides, doc_source=train.__file__)[1]


def graph_breaks(model_cfg, dev, ctx, x):
    """Graph breaks of each block and of the loss (GPT.compile compiles both) as torch.compile sees
    them: torch._dynamo.explain of each forward on the arguments it gets in one training forward pass of an eager
    copy of the model. Target 0. (explain resets dynamo's caches: run it after the timings.)"""
    model = GPT(model_cfg).init_weights(0).to(dev)  # (traced, its MoE layers pick a compiled block's dispatch)
    calls = {}

    def record(i):
        def hook(module, args, kwargs):
            calls.setdefault(i, (args, kwargs))  # the first call of each block (a looped block runs more often)
        return hook
    hooks = [block.register_forward_pre_hook(record(i), with_kwargs=True) for i, block in enumerate(model.blocks)]
    with ctx:
        logits, _, _ = model(x, x)
    for h in hooks:
        h.remove()
    with ctx:
        breaks = {f"block {i}": torch._dynamo.explain(model.blocks[i].forward)(*a, **k).graph_break_count
                  for i, (a, k) in sorted(calls.items())}
        breaks["loss"] = torch._dynamo.explain(model.loss)(logits, x).graph_break_count
    return breaks


# (kind, substrings of a CUDA kernel's name): the first kind that matches. Order matters: a grouped GEMM is a
# cutlass GEMM too, and Triton's fused kernels are named after the ops they fuse (e.g. index_select).
KERNEL_KINDS = [
    ("grouped matmul", ("GroupProblemShape",)), ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas")),
    ("attention", ("sdpa", "flash", "fmha")), ("optimizer and clipping", ("FusedOpti", "adam", "multi_tensor")),
    ("fused elementwise", ("triton",)), ("gather / scatter", ("index", "gather", "scatter")),
    ("sort / scan", ("sort", "scan")), ("copies", ("Memcpy", "Memset", "copy"))]


def kernel_kind(name):
    """The kind of a CUDA kernel, from its name (KERNEL_KINDS); "other" when none matches."""
    return next((kind for kind, keys in KERNEL_KINDS if any(k.lower() in name.lower() for k in keys)), "other")


def kernel_ms(rows, steps):
    """GPU kernel time per step by kind, in ms, from a profile's key_averages() rows over `steps` steps. A range
    named on the host (record_function, an optimizer's step) is listed on the device too, as a user annotation
    spanning the same kernels again: those rows are dropped, so each kernel counts once."""
    ms = dict.fromkeys([kind for kind, _ in KERNEL_KINDS] + ["other"], 0.0)
    for r in rows:
        if r.device_type == torch.autograd.DeviceType.CUDA and not r.is_user_annotation:
            ms[kernel_kind(r.key)] += r.device_time_total / 1e3 / steps
    return ms


def kernel_profile(step, steps=3):
    """Where a training step's GPU time goes (e.g. what an MoE step spends beyond the dense one): kernel_ms of
    `steps` steps under torch.profiler."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return kernel_ms(prof.key_averages(), steps)


def resident_bytes(model, optimizer):
    """Bytes of the weights, buffers and optimizer state (what stays allocated between steps)."""
    tensors = [*model.parameters(), *model.buffers()]
    tensors += [v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())


def probe_step(step, model, optimizer):
    """One more steady-state step on CUDA: its peak memory (resident bytes + the step's transient peak) and
    whether it ran free of host syncs (torch.cuda.set_sync_debug_mode('error') raises at the first one)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        sync_free, why = True, ""
    except RuntimeError as e:
        sync_free, why = False, str(e).strip().splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before + resident_bytes(model, optimizer)
    return dict(peak_mem_gib=peak / 2 ** 30, sync_free=sync_free, sync_error=why)


def preset_models(cfg, model_cfg, argv):
    """{name: GPTConfig} of the preset; fills the preset's own defaults into cfg where the command line gave none."""
    given = {a[2:].split("=", 1)[0] for a in argv if a.startswith("--")}
    if cfg["preset"] == "default":
        return {"default": model_cfg}
    if cfg["preset"] == "nanogpt":
        cfg["batch_size"] = 8 if "batch_size" not in given else cfg["batch_size"]
        return {"nanogpt": GPTConfig(**{**model_cfg.to_dict(), "n_embd": 256, "n_layer": 8, "block_size": 256,
                                        "vocab_size": 50257, "mup": False})}
    if cfg["preset"] == "gpu":
        if not cfg["device"].startswith("cuda"):
            raise ConfigError(f"bench.py: --preset=gpu measures the GPU path (d=1024, bf16, compiled) and needs a "
                              f"CUDA device, not {cfg['device']!r}: run it with --device=cuda on a machine with a GPU")
        keys = [a for a in argv if a.startswith("--") and a[2:].split("=", 1)[0] in GPTConfig.__dataclass_fields__]
        cfg.update({k: v for k, v in dict(dtypes="bfloat16", compiles="True", warmup=3).items() if k not in given})
        return {name: preset_model(path, ["--n_embd=1024", "--vocab_pad_multiple=64"] + keys)
                for name, path in GPU_MODELS.items()}
    raise ValueError(f"preset must be default|nanogpt|gpu, got {cfg['preset']!r}")


def make_setup(name, mcfg, dtype_name, dtype, compiled, cfg, sync):
    """One (model, dtype, compiled) case with its own model and optimizer, warmed up: train.py's step, clipping
    included, on a fixed random batch."""
    dev, B, T = cfg["device"], cfg["batch_size"], mcfg.block_size
    x = torch.randint(0, mcfg.vocab_size, (B, T), device=dev)
    model = GPT(mcfg, cpu_kernels=kernels.wanted(dev, not compiled)).init_weights(0).to(dev)  # as train.py
    if compiled:
        model.compile()
    opt_cfg = dict(lr=1e-3, weight_decay=0.0, wd_independent=True, adam_eps=1e-8, optimizer="adamw", beta1=0.9,
                   beta2=0.95)
    optimizer = make_optimizer(model, opt_cfg, dev.split(":")[0])
    ctx = nullcontext() if dtype == torch.float32 else torch.autocast(dev.split(":")[0], dtype=dtype)

    def step():
        train_step(model, optimizer, lambda _: (x, x), ctx=ctx, grad_clip=1.0)
    for _ in range(cfg["warmup"]):
        step()
    sync()
    return dict(name=name, model_cfg=mcfg, x=x, dtype=dtype_name, torch_dtype=dtype, compiled=compiled, model=model,
                optimizer=optimizer, ctx=ctx, step=step, tokens=B * T, times=[],
                flops=accounting.flops_per_token(model, "schwethelm", T) * B * T)


def report(s, cfg, ref, label):
    """The result row of one timed case, printed as one line."""
    dt = statistics.median(s["times"])
    flops = s["flops"] / dt
    mfu = flops / s["peak"] if s["peak"] else None
    if mfu is not None and mfu > 1:  # faster than the reference matmul: the reference is what went wrong
        mfu = None
    row = dict(preset=cfg["preset"], model=s["name"], n_embd=s["model_cfg"].n_embd, dtype=s["dtype"],
               compiled=s["compiled"], clock=cfg["clock"], threads=torch.get_num_threads(), step_s=dt,
               tokens_per_s=s["tokens"] / dt, flops_per_s=flops, peak_flops_per_s=s["peak"], mfu=mfu,
               **{k: s[k] for k in ("peak_mem_gib", "sync_free", "sync_error", "graph_breaks", "kernel_ms") if k in s})
    if mfu is not None:
        share = f"{100 * mfu:5.1f}% of {s['peak'] / 1e9:.0f} GFLOP/s ({ref})"
    else:
        share = "MFU n/a: faster than the unreliable reference" if s["peak"] else "MFU n/a: unknown peak"
    extra = ""
    if "peak_mem_gib" in s:
        extra += f" | peak mem {s['peak_mem_gib']:.1f} GiB | host syncs: {'none' if s['sync_free'] else 'YES'}"
    if "graph_breaks" in s:
        extra += f" | graph breaks {max(s['graph_breaks'].values(), default=0)} per block/loss"
    print(f"{label}{s['dtype']:>8} {'compiled' if s['compiled'] else 'eager':>8}: {dt * 1e3:7.1f} ms/step "
          f"{s['tokens'] / dt:9,.0f} tok/s {flops / 1e9:7.1f} GFLOP/s = {share}{extra}", flush=True)
    if s.get("sync_error"):
        print(f"  first host sync: {s['sync_error']}")
    if "kernel_ms" in s:
        busy = sum(s["kernel_ms"].values())
        print(f"  GPU kernels per step: {busy:.1f} ms of {dt * 1e3:.1f} ({100 * busy / (dt * 1e3):.0f}% busy): "
              + " | ".join(f"{kind} {t:.1f}" for kind, t in s["kernel_ms"].items() if t >= 0.05))
    return row


def check_settings(cfg):
    """One line for a setting that cannot work, before anything is built or timed."""
    for key, least in (("batch_size", 1), ("steps", 1), ("rounds", 1), ("warmup", 0), ("threads", 0)):
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")
    check_lists_and_out(cfg, dtypes=("float32", "bfloat16"), compiles=("False", "True"))


def check_lists_and_out(cfg, **lists):
    """One line for a comma-separated key with a value outside its allowed ones, or an --out in no directory
    (bench.py and bench_moe.py)."""
    for key, allowed in lists.items():
        names = [name.strip() for name in cfg[key].split(",") if name.strip()]
        if not names or any(name not in allowed for name in names):
            raise ConfigError(f"config error: --{key}={cfg[key]!r} must be a comma-separated list of "
                              f"{' | '.join(allowed)}")
    if cfg["out"] and not os.path.isdir(os.path.dirname(os.path.abspath(cfg["out"]))):
        raise ConfigError(f"config error: --out={cfg['out']}: {os.path.dirname(os.path.abspath(cfg['out']))} is not "
                          "a directory: create it or choose another --out")


def main(argv=None):
    argv = list(argv if argv is not None else sys.argv[1:])
    defaults = {k: v for k, v in globals().items() if not k.startswith("_")}
    cfg, model_cfg = configure(defaults, GPTConfig, argv, doc_source=__file__,
                               choices=dict(preset=("default", "nanogpt", "gpu"), clock=("wall", "cpu")))
    check_settings(cfg)
    cfg["device"] = pick_device(cfg["device"])
    models = preset_models(cfg, model_cfg, argv)
    on_cuda = cfg["device"].startswith("cuda")
    if cfg["profile"] and not on_cuda:
        raise ConfigError(f"bench.py: --profile=True times GPU kernels and needs a CUDA device, not "
                          f"{cfg['device']!r}: drop --profile on a CPU")
    if not on_cuda:
        torch.set_num_threads(cpu_threads(cfg["threads"]))
        keep_freed_memory()  # as train.py does on CPU
    now = timer(cfg["clock"])
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    dtypes = {name: {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]
              for name in runnable_dtypes(cfg["dtypes"], "cuda" if on_cuda else "cpu")}
    # reference FLOP/s per dtype; on CPU measured before any model exists, then again after each round (the best)
    peaks = {dtype: peak_flops("cuda", dtype) if on_cuda else cpu_matmul_rate(dtype, now)
             for dtype in dtypes.values()}
    compiles = [c.strip() == "True" for c in cfg["compiles"].split(",")]
    setups = [make_setup(name, mcfg, dtype_name, dtype, compiled, cfg, sync)  # all warmed up before any timing
              for name, mcfg in models.items() for dtype_name, dtype in dtypes.items() for compiled in compiles]
    for _ in range(cfg["rounds"]):
        for s in setups:
            for _ in range(cfg["steps"]):
                t = now()
                s["step"]()
                sync()
                s["times"].append(now() - t)
        if not on_cuda:
            for dtype in peaks:
                peaks[dtype] = max(peaks[dtype], cpu_matmul_rate(dtype, now))
    for s in setups:
        s["peak"] = peaks[s["torch_dtype"]]
        if on_cuda:
            s.update(probe_step(s["step"], s["model"], s["optimizer"]))
            if cfg["profile"]:
                s["kernel_ms"] = kernel_profile(s["step"])
    for s in setups:  # after the timings and every probe: explain resets dynamo's caches (a probe would recompile)
        if s["compiled"]:
            s["graph_breaks"] = graph_breaks(s["model_cfg"], cfg["device"], s["ctx"], s["x"])
    ref = "bf16 peak" if on_cuda else f"{cfg['clock']}-clock matmul in this dtype, {torch.get_num_threads()} threads"
    results = [report(s, cfg, ref, f"{s['name']} " if len(models) > 1 else "") for s in setups]
    ratios = model_ratios(results)
    for k, v in ratios.items():
        print(f"{k}: {v:.3f}")
    if cfg["out"]:
        with open(cfg["out"], "w") as f:
            json.dump({"models": {k: m.to_dict() for k, m in models.items()}, "batch_size": cfg["batch_size"],
                       "device": torch.cuda.get_device_name() if on_cuda else "cpu", "results": results,
                       "ratios": ratios}, f, indent=1)


def model_ratios(rows):
    """The GPU preset's targets: MoE / dense step time (Base and Looped), and Looped / Base tokens/s at equal
    executed FLOPs (FLOP/s ratio: Looped 8x2 executes Base's FLOPs per token)."""
    by = {r["model"]: r for r in rows}
    out = {}
    for sparse, dense in (("moe", "base"), ("looped_moe", "looped")):
        if sparse in by and dense in by:
            out[f"{sparse} / {dense} step time"] = by[sparse]["step_s"] / by[dense]["step_s"]
    if "looped" in by and "base" in by:
        out["looped / base tokens/s at equal executed FLOPs"] = by["looped"]["flops_per_s"] / by["base"]["flops_per_s"]
    return out


if __name__ == "__main__":
    from configurator import run
    run(main)
