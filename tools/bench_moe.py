"""
Measured speed of the MoE dispatch paths (moe.py): training-step time of MoE / Base and Looped-MoE / Looped at
the same width and the same active parameters, for each dispatch path and dtype, plus one FFN layer alone.

    python -m tools.bench_moe                                   # d=256, 8 effective layers, fp32 and bf16, all paths
    python -m tools.bench_moe --dtypes=bfloat16 --paths=batched --steps=20
    python -m tools.bench_moe config/sparse_moe_cpu.py --n_embd=128

Models (from the config, default GPTConfig + the keys below): Base = n_layer dense layers; MoE = the same with
n_expert experts (top_k active, hidden d_ff/top_k, so the active FFN params equal Base's); Looped = n_layer/2
layers passed twice; Looped-MoE = the same with experts. Each step is forward + backward + AdamW + the bias update.
Timings are medians over `repeats` rounds, and the models are interleaved within a round so that a busy machine
slows them alike. Target (the MoE issue): ratio <= 1.3. Prints a table and, with --out, writes JSON.
On a CPU without native bf16 (see bench.py) bf16 is skipped with a one-line note: torch would emulate it.
"""
import json
import statistics
import sys
import time
from contextlib import nullcontext

import torch

from configurator import ConfigError, configure, run
from distributed import pick_device
from model import GPT, MLP, GPTConfig
import kernels
import moe
from analyze import record_routing
from tools.bench import check_lists_and_out, runnable_dtypes
from distributed import cpu_threads

# ---------------------------------------------------------------------------------------------------------------
batch_size = 8  # sequences per step
seq_len = 256  # tokens per sequence
steps = 3  # timed steps per model per round
warmup = 2  # untimed steps per model before the rounds
repeats = 3  # rounds; the reported time is the median over rounds
dtypes = "float32,bfloat16"  # comma-separated: float32, bfloat16 (CPU autocast / CUDA autocast)
paths = "grouped,batched,loop"  # dispatch paths to time (auto resolves to one of them)
ffn_tokens = 4096  # tokens of the single-FFN-layer benchmark (0 = skip it)
device = "auto"  # auto (cuda if there is one) | cpu | cuda
threads = 0  # torch threads on CPU; 0 = auto, as train.py: OMP_NUM_THREADS if set, else the idle cores
clock = "wall"  # wall | process (CPU time of this process: steadier on a shared machine, use with --threads=1)
out = ""  # if set: write the results as JSON to this path
# ---------------------------------------------------------------------------------------------------------------
SCRIPT_KEYS = ("batch_size", "seq_len", "steps", "warmup", "repeats", "dtypes", "paths", "ffn_tokens", "device",
               "threads", "clock", "out")
# model keys this benchmark sets before any config file or --key=value (which override them): Base has n_layer
# layers, the looped models n_layer/2 x 2; the MoE models n_expert experts with top_k active
MODEL_DEFAULTS = dict(n_embd=256, n_layer=8, n_expert=8, top_k=2)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def make_steps(model, dtype, dev):
    """Two closures on a fixed random batch: a full training step (forward, backward, AdamW, bias update) and
    forward + backward alone (the dispatch cost, without the optimizer's cost of the extra stored experts)."""
    V = model.config.vocab_size
    idx = torch.randint(0, V, (cfg["batch_size"], cfg["seq_len"] + 1), device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # fused: one kernel for all, as train.py
    ctx = nullcontext() if dtype == torch.float32 else torch.autocast(dev.type, dtype=dtype)

    def fwd_bwd():
        with ctx:
            _, loss, aux = model(idx[:, :-1], idx[:, 1:])
            objective = loss + sum(aux.values()) if aux else loss
        objective.backward()

    def train_step():
        fwd_bwd()
        opt.step()
        opt.zero_grad(set_to_none=True)
        moe.update_biases(model)

    def fwd_bwd_only():
        fwd_bwd()
        model.zero_grad(set_to_none=True)
    return train_step, fwd_bwd_only


def time_steps(step, n, dev):
    clock = time.process_time if cfg["clock"] == "process" else time.perf_counter
    sync(dev)
    t = clock()
    for _ in range(n):
        step()
    sync(dev)
    return (clock() - t) / n


def bench_models(base_cfg, dtype, dev, path_list):
    """ms per training step and per forward+backward of Base, Looped and their MoE versions for each path
    (medians over rounds), and the load imbalance (max / mean expert load) the MoE models saw."""
    half = max(1, base_cfg.n_layer // 2)
    variants = {"Base": dict(n_expert=0), "Looped": dict(n_expert=0, n_layer=half, n_loop=2)}
    for p in path_list:
        variants[f"MoE/{p}"] = dict(moe_dispatch=p)
        variants[f"Looped-MoE/{p}"] = dict(moe_dispatch=p, n_layer=half, n_loop=2)
    steppers, imbalance = {}, {}
    for name, kw in variants.items():
        c = GPTConfig(**{**base_cfg.to_dict(), **kw})
        torch.manual_seed(0)
        model = GPT(c, cpu_kernels=kernels.wanted(dev)).init_weights(0).to(dev).train()  # as train.py's eager runs
        steppers[name] = make_steps(model, dtype, dev)
        for s in steppers[name]:
            time_steps(s, cfg["warmup"], dev)
        if c.n_expert and name.startswith("MoE"):
            with record_routing(model) as records:
                steppers[name][1]()
            loads = [torch.bincount(r["experts"].flatten(), minlength=c.n_expert).float() for r in records]
            imbalance[name.split("/")[0]] = statistics.mean((l.max() / l.mean()).item() for l in loads)
    times = {name: ([], []) for name in steppers}
    for _ in range(cfg["repeats"]):
        for name, pair in steppers.items():
            for t, s in zip(times[name], pair):
                t.append(time_steps(s, cfg["steps"], dev))
    step_ms = {name: 1000 * statistics.median(t[0]) for name, t in times.items()}
    fb_ms = {name: 1000 * statistics.median(t[1]) for name, t in times.items()}
    return step_ms, fb_ms, imbalance


def bench_ffn(base_cfg, dtype, dev, path_list):
    """ms of forward + backward of one FFN layer on ffn_tokens tokens: dense MLP vs MoE per path."""
    N, C = cfg["ffn_tokens"], base_cfg.n_embd
    x = torch.randn(1, N, C, device=dev)
    probe = torch.randn(1, N, C, device=dev)
    ctx = nullcontext() if dtype == torch.float32 else torch.autocast(dev.type, dtype=dtype)
    layers = {"dense": MLP(base_cfg).to(dev)}
    for p in path_list:
        layers[f"MoE/{p}"] = moe.MoE(GPTConfig(**{**base_cfg.to_dict(), "moe_dispatch": p})).to(dev).train()
        torch.nn.init.normal_(layers[f"MoE/{p}"].router.weight, 0, 0.02)

    def step_for(layer):
        def step():
            xi = x.detach().requires_grad_()
            with ctx:
                y = layer(xi)
                y = y[0] if isinstance(y, tuple) else y
            (y.float() * probe).sum().backward()
        return step
    steppers = {name: step_for(layer) for name, layer in layers.items()}
    for s in steppers.values():
        time_steps(s, cfg["warmup"], dev)
    times = {name: [] for name in steppers}
    for _ in range(cfg["repeats"]):
        for name, s in steppers.items():
            times[name].append(time_steps(s, cfg["steps"], dev))
    return {name: 1000 * statistics.median(ts) for name, ts in times.items()}


def main(argv=None):
    global cfg
    defaults = {k: globals()[k] for k in SCRIPT_KEYS}
    argv = [f"--{k}={v}" for k, v in MODEL_DEFAULTS.items()] + list(sys.argv[1:] if argv is None else argv)
    cfg, model_cfg = configure(defaults, GPTConfig, argv=argv, doc_source=__file__,
                               choices=dict(clock=("wall", "process")))
    if model_cfg.n_expert == 0:
        raise ConfigError("config error: bench_moe.py compares MoE with dense models: set n_expert > 0")
    for key, least in (("batch_size", 1), ("seq_len", 1), ("steps", 1), ("warmup", 0), ("repeats", 1),
                       ("ffn_tokens", 0), ("threads", 0)):
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")
    if cfg["seq_len"] > model_cfg.block_size:
        raise ConfigError(f"config error: --seq_len={cfg['seq_len']} is longer than block_size="
                          f"{model_cfg.block_size}: lower it or raise --block_size")
    check_lists_and_out(cfg, dtypes=("float32", "bfloat16"), paths=tuple(moe.DISPATCH))
    dev = torch.device(pick_device(cfg["device"]))
    if dev.type == "cpu":
        torch.set_num_threads(cpu_threads(cfg["threads"]))
    path_list = [p for p in cfg["paths"].split(",") if p]
    results = dict(device=str(dev), threads=torch.get_num_threads(), clock=cfg["clock"], torch=torch.__version__,
                   config=dict(n_embd=model_cfg.n_embd, n_layer=model_cfg.n_layer, n_expert=model_cfg.n_expert,
                               top_k=model_cfg.top_k, d_ff=model_cfg.d_ff, batch_size=cfg["batch_size"],
                               seq_len=cfg["seq_len"], vocab_size=model_cfg.vocab_size), runs={})
    print(f"device {dev}, {torch.get_num_threads()} threads, {cfg['clock']} clock; d={model_cfg.n_embd}, "
          f"{model_cfg.n_layer} effective layers, E={model_cfg.n_expert}, k={model_cfg.top_k}, "
          f"tokens/step={cfg['batch_size'] * cfg['seq_len']}")
    for name in runnable_dtypes(cfg["dtypes"], dev.type):  # bf16 only where the CPU has it natively
        dtype = dict(float32=torch.float32, bfloat16=torch.bfloat16)[name]
        step_ms, fb_ms, imbalance = bench_models(model_cfg, dtype, dev, path_list)
        ffn_ms = bench_ffn(model_cfg, dtype, dev, path_list) if cfg["ffn_tokens"] else {}
        results["runs"][name] = dict(step_ms=step_ms, fwd_bwd_ms=fb_ms, ffn_ms=ffn_ms, load_max_over_mean=imbalance)
        print(f"\n{name}: ms per training step (fwd+bwd+AdamW) and per fwd+bwd; ratios to the dense model of the "
              f"same shape (expert load max/mean at init: {imbalance.get('MoE', 0):.2f})")
        for dense in ("Base", "Looped"):
            print(f"  {dense:<22}{step_ms[dense]:9.1f}{fb_ms[dense]:9.1f}")
        for p in path_list:
            for sparse, dense in (("MoE", "Base"), ("Looped-MoE", "Looped")):
                key = f"{sparse}/{p}"
                print(f"  {key:<22}{step_ms[key]:9.1f}{fb_ms[key]:9.1f}   {sparse}/{dense}: step "
                      f"{step_ms[key] / step_ms[dense]:5.2f}  fwd+bwd {fb_ms[key] / fb_ms[dense]:5.2f}")
        if ffn_ms:
            print(f"  one FFN layer, {cfg['ffn_tokens']} tokens, fwd+bwd: dense {ffn_ms['dense']:.1f} ms; " +
                  ", ".join(f"{p} {ffn_ms['MoE/' + p] / ffn_ms['dense']:.2f}x" for p in path_list))
    auto = moe.resolve_dispatch("auto", dev, torch.bfloat16)
    print(f"\nmoe_dispatch='auto' picks {auto!r} on {dev.type}")
    if cfg["out"]:
        with open(cfg["out"], "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {cfg['out']}")


if __name__ == "__main__":
    run(main)
