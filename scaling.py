"""
The command line of the scaling studies: the counts of a config (accounting.py), its memory per GPU, and the lab's
sweeps and fits (lab/sweep.py, lab/fits.py) under one name, the one the sweep specs and records cite:

    python scaling.py count config/sparse_looped_moe.py --n_embd=704 --flops_budget=1e18
    python scaling.py count config/sparse_base.py --memory --gpus=8
    python scaling.py count config/loopmoe_cpu.py --measure_flops=True   # the FLOP count against torch's own
    python scaling.py sweep config/sweeps/isoflop_cpu.py [--dry_run]
    python scaling.py fit out/sweeps/isoflop_cpu/results.jsonl --law=isoflop
    python scaling.py figures records/
    python scaling.py power config/sweeps/isodepth_cpu.py --calibrate=records/schwethelm2026/isodepth_pilot_cpu.jsonl

It stands above the lab: nothing imports it but the tests (tests/test_layout.py), and train.py reads its counts from
accounting.py.
"""
import json
import math
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import train
import accounting
from accounting import block_executions, model_on_meta
from checkpoint import check_training
from configurator import ConfigError, configure, run
from lab import fits, sweep
from model import GPT, GPTConfig


# -----------------------------------------------------------------------------------------------------------------
# memory per GPU (train.py under DDP or --fsdp; python scaling.py count CONFIG --memory --gpus=N)

def shard_bytes(shape, element_size, gpus):
    """Bytes of the largest shard FSDP2 (fully_shard) keeps of a tensor: dim 0 split in torch.chunk's way, so
    rank 0 holds ceil(d0/gpus) rows (the others the same or fewer)."""
    if not shape:
        return element_size
    rows = -(-shape[0] // gpus)
    return rows * math.prod(shape[1:]) * element_size


def optimizer_state_shapes(model, cfg):
    """The fp32 state tensors the optimizer keeps per parameter, as shapes: AdamW (fused or not) two moments and a
    0-dim step counter; MuonH one momentum buffer for the 2-D hidden matrices (torch.optim.Muon), AdamW for the
    rest (optim.MuonHAdamW)."""
    shapes = []
    for group in model.param_groups():
        for p in group["params"]:
            muon = cfg.get("optimizer") == "muonh" and group["role"] == "hidden" and p.dim() == 2
            shapes += [tuple(p.shape)] if muon else [tuple(p.shape), tuple(p.shape), ()]
    return shapes


def activation_bytes_per_token(model, act_bytes):
    """Bytes one token's forward stores for the backward, as (per call of each block in model.blocks, head).
    Counted from the tensors autograd saves in model.py (r = 4: the fp32 residual stream, p = act_bytes: 2 under
    bf16 autocast, 4 in fp32; C width, h = n_head*head_dim, F the FFN hidden size):
      attention  r*C (the norm's input) + casts(3) + p*(3h + 2h) (q, k, v; SDPA's output and its copy into the
                 output projection) + 4*n_head (SDPA's log-sum-exp)
      dense FFN  r*C + casts(2) + 4*p*F (SwiGLU: two projections, the SiLU and the product) or casts(1) + 2*p*F
      MoE FFN    r*C + 3*4*E (router logits, probabilities, scores) + per routed slot 2*p*C + 4*p*H (gathered
                 input, SwiGLU, output), + the shared experts as a dense FFN of hidden S*H
      head       r*C + p*C + 2*p*V (the logits, and their gradient, which the chunked cross-entropy stores)
    where casts(n) = n*p*C under autocast (each linear layer keeps its own bf16 copy of the fp32 normed input) and
    r*C in fp32 (one tensor shared). Korthikanti et al. 2022 (arXiv:2205.05198, §4.1) count the same way. MLA's
    latents, conditioning modulators and sandwich norms are left out (an estimate for those models)."""
    cfg = model.config
    p, r, C = act_bytes, 4, cfg.n_embd
    h = cfg.n_head * cfg.head_dim

    def casts(n):
        return n * p * C if p < 4 else r * C

    def mlp(hidden):
        return casts(2) + 4 * p * hidden if cfg.mlp == "swiglu" else casts(1) + 2 * p * hidden

    attention = r * C + casts(3) + p * 5 * h + 4 * cfg.n_head
    per_block = []
    for block in model.blocks:
        ffn = block.ffn
        if hasattr(ffn, "n_expert"):
            H = ffn.w_down.shape[-1]
            routed_slot = 2 * p * C + (4 if cfg.mlp == "swiglu" else 2) * p * H
            shared = mlp(ffn.shared_down.shape[-1]) if ffn.shared_down is not None else 0
            ffn_bytes = r * C + 12 * ffn.n_expert + ffn.top_k * routed_slot + shared
        else:
            ffn_bytes = r * C + mlp(ffn.c_proj.weight.shape[-1])
        per_block.append(attention + ffn_bytes)
    head = r * C + p * C + 2 * p * cfg.padded_vocab
    return per_block, head


def memory_per_gpu(model, cfg, gpus=1):
    """Predicted bytes per GPU of a train.py run (cfg: its keys) on `gpus` GPUs, under DDP and under --fsdp:
    parameters and gradients (fp32), optimizer state (optimizer_state_shapes), and the activations of one
    micro-batch of batch_size x block_size tokens, stored (activation_bytes_per_token, times each block's
    backpropagated runs per pass, block_executions) or checkpointed (each block call keeps only its fp32 input; one
    block at a time is recomputed in the backward). DDP: every GPU holds everything, and its gradient buckets are a
    second copy of the gradients. FSDP: the largest shard (shard_bytes) of each, plus transient unsharded weights:
    the root (embedding, head, ...) in fp32 and its gradient, two blocks' weights in the gathered dtype (the one
    running and the next) and one block's unsharded gradient. In bf16, autocast's bf16 copy of each fp32 weight
    lives until the backward has used it (weight_copies: all weights under DDP; under FSDP the root's, the blocks
    gather bf16 weights). The dtype is the run's: auto means bf16 (a GPU). Allocator slack, the CUDA context and
    communication buffers come on top."""
    bf16 = cfg.get("dtype", "auto") in ("auto", "bfloat16")
    params = list(model.parameters())
    total = sum(p.numel() for p in params) * 4
    state = optimizer_state_shapes(model, cfg)
    per_block, head = activation_bytes_per_token(model, 2 if bf16 else 4)
    runs = [bwd for _, bwd in block_executions(model)]
    tokens = cfg["batch_size"] * model.config.block_size
    stored = tokens * (sum(n * b for n, b in zip(runs, per_block)) + head)
    checkpointed = tokens * (sum(runs) * 4 * model.config.n_embd + max(per_block) + head)
    block_params = [sum(p.numel() for p in block.parameters()) for block in model.blocks]
    root = sum(p.numel() for p in params) - sum(block_params)
    fsdp_params = sum(shard_bytes(tuple(p.shape), 4, gpus) for p in params)
    out = {}
    for mode in ("ddp", "fsdp"):
        sharded = mode == "fsdp"
        m = dict(params=fsdp_params if sharded else total,
                 grads=fsdp_params if sharded else 2 * total,
                 optimizer=sum(shard_bytes(s, 4, gpus) if sharded else shard_bytes(s, 4, 1) for s in state),
                 gathered=8 * root + max(block_params) * (2 * (2 if bf16 else 4) + 4) if sharded else 0,
                 weight_copies=2 * (root if sharded else root + sum(block_params)) if bf16 else 0,
                 activations=stored, activations_checkpointed=checkpointed)
        m["total"] = sum(m[k] for k in ("params", "grads", "optimizer", "gathered", "weight_copies", "activations"))
        m["total_checkpointed"] = m["total"] - stored + checkpointed
        out[mode] = m
    return out


GPU_USABLE = 0.9  # the share of a GPU's memory a run's tensors may fill: the CUDA context, NCCL's buffers and the
# caching allocator's fragmentation take the rest (a rule of thumb: tests/test_cuda.py checks the tensors' bytes
# against the allocator's count, not what it reserves beyond them)


def gpus_needed(model, cfg, gpu_bytes, most=1024):
    """How many GPUs of gpu_bytes a run needs, without and with activation checkpointing, if its tensors may fill
    GPU_USABLE of each: DDP 1 if it fits on one (more GPUs do not lower its memory per GPU), else None; FSDP the
    fewest that fit (None: more than `most`)."""
    gpu_bytes = GPU_USABLE * gpu_bytes
    out = {}
    for mode in ("ddp", "fsdp"):
        for total in ("total", "total_checkpointed"):
            tries = range(1, most + 1) if mode == "fsdp" else [1]
            out[f"{mode}_{total.replace('total', '').strip('_') or 'stored'}"] = next(
                (n for n in tries if memory_per_gpu(model, cfg, n)[mode][total] <= gpu_bytes), None)
    return out


# -----------------------------------------------------------------------------------------------------------------
# command line: count

COUNT_KEYS = dict(
    flops_convention="lee",  # lee (6*N_active, Lee et al.) | schwethelm (6*executed params + attention)
    flops_budget=0.0,  # if > 0: also print the tokens this training budget buys
    seq_len=0,  # attention context T for the FLOP count; 0 = block_size
    memory=False,  # also predict the memory per GPU of the run under DDP and FSDP (train.py --fsdp)
    gpus=8,  # --memory: GPUs the run shards over
    gpu_gib=80.0,  # --memory: memory of one GPU (GiB), to say how many the run needs
    measure_flops=False,  # also run one training forward and backward under torch's FlopCounterMode (CPU, seconds)
)


def measured_flops_per_token(model_cfg, seed=0, B=2):
    """FLOPs per token of one training step (forward and backward, at block_size) as torch's FlopCounterMode counts
    the matmuls that actually run: an independent check of accounting.py's "schwethelm" count, which includes the
    attention (the math SDPA kernel, whose matmuls the counter sees)."""
    torch.manual_seed(seed)
    model = GPT(model_cfg).init_weights(seed)
    T = model_cfg.block_size
    idx = torch.randint(0, model_cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss, aux = model(idx, idx)
        (loss + sum(aux.values())).backward()
    return counter.get_total_flops() / (B * T)


def counts(model, convention="lee", flops_budget=0.0, seq_len=None):
    """Everything `scaling.py count` prints, as a dict."""
    out = accounting.count_params(model)
    out["flops_convention"] = convention
    out["flops_per_token"] = accounting.flops_per_token(model, convention, seq_len)
    for conv in accounting.CONVENTIONS:
        out[f"flops_per_token_{conv}"] = accounting.flops_per_token(model, conv, seq_len)
    out["forward_flops_per_token"] = accounting.forward_flops_per_token(model, seq_len)
    out["kv_cache_per_token_layer"], out["kv_cache_per_token"] = accounting.kv_cache_per_token(model)
    if flops_budget > 0:
        out["flops_budget"] = flops_budget
        out["tokens"] = flops_budget / out["flops_per_token"]
    return out


def main_count(argv):
    # train.py's keys are accepted too, so every training config counts as it is (its vocab_size, not the data's)
    cfg, model_cfg = configure({**train.defaults(), **COUNT_KEYS}, GPTConfig, argv, doc_source=train.__file__,
                               choices=train._CHOICES,
                               usage="python scaling.py count [config/file.py ...] [--key=value ...]")
    check_training(cfg)  # what train.py would refuse is not counted either
    for key, least in (("seq_len", 0), ("gpus", 1)):
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")
    if not cfg["gpu_gib"] > 0:
        raise ConfigError(f"config error: --gpu_gib={cfg['gpu_gib']} must be > 0")
    model = model_on_meta(model_cfg)
    out = counts(model, cfg["flops_convention"], cfg["flops_budget"], cfg["seq_len"] or None)
    if cfg["measure_flops"]:  # the schwethelm count at block_size, beside what torch counts running the model
        schwethelm = accounting.flops_per_token(model, "schwethelm")
        measured = measured_flops_per_token(model_cfg, cfg["seed"])
        out["measured_flops_per_token"] = measured
        out["schwethelm_over_measured"] = schwethelm / measured
    if cfg["memory"]:
        out["memory_per_gpu"] = memory_per_gpu(model, cfg, cfg["gpus"])
        out["memory_per_gpu"]["gpus"] = cfg["gpus"]
        out["fsdp_gpus_needed"] = gpus_needed(model, cfg, cfg["gpu_gib"] * 2 ** 30)
    print(json.dumps(out, indent=1))
    if cfg["memory"]:
        print(memory_table(out["memory_per_gpu"], cfg, out["fsdp_gpus_needed"]), file=sys.stderr)
    return out


def memory_table(mem, cfg, needed):
    """The --memory prediction as a few lines (GiB per GPU)."""
    gib = 2 ** 30
    rows = ["params", "grads", "optimizer", "gathered", "weight_copies", "activations", "activations_checkpointed",
            "total",
            "total_checkpointed"]
    dtype = "bfloat16" if cfg["dtype"] in ("auto", "bfloat16") else "float32"
    lines = [f"memory per GPU (GiB), micro-batch {cfg['batch_size']} x block_size, {dtype}:",
             f"{'':26s}{'DDP':>10s}{'FSDP x' + str(mem['gpus']):>12s}"]
    lines += [f"{k:26s}{mem['ddp'][k] / gib:10.2f}{mem['fsdp'][k] / gib:12.2f}" for k in rows]
    for key, n in needed.items():
        mode, acts = key.split("_")
        what = ("no GPU count fits" if n is None else "fits on 1 GPU" if mode == "ddp" else
                f"needs {n} GPU" + "s" * (n > 1))
        lines.append(f"{mode.upper()}, activations {acts}: {what} of {cfg['gpu_gib']:g} GiB "
                     f"({100 * GPU_USABLE:.0f}% of it for the run's tensors)")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    elsewhere = {"sweep": "sweep", "fit": "fits", "figures": "fits", "power": "fits"}  # command -> its module
    commands = ("count",) + tuple(elsewhere)
    if argv[:1] in (["--help"], ["-h"]):  # as every other script: the usage, exit 0
        print(f"usage: python scaling.py {{{'|'.join(commands)}}} [...]  (python scaling.py COMMAND --help: its keys)\n"
              f"  count    parameters and FLOPs of a config: python scaling.py count config/sparse_base.py\n"
              f"  sweep    run a sweep spec's grid: python scaling.py sweep config/sweeps/isoflop_cpu.py --dry_run\n"
              f"  fit      fit a law to a sweep's rows: python scaling.py fit records/lee2026/isoflop_cpu.jsonl ...\n"
              f"  figures  redraw every record figure from the committed rows: python scaling.py figures records/\n"
              f"  power    simulate a design's power before running it")
        return None
    if not argv or argv[0] not in commands:
        raise ConfigError(f"usage: python scaling.py {{{'|'.join(commands)}}} [...]; "
                          f"e.g. python scaling.py count config/sparse_base.py --n_embd=512"
                          + (f" ({argv[0]!r} is not a command)" if argv else ""))
    if argv[0] == "count":
        return main_count(argv[1:])
    return getattr({"sweep": sweep, "fits": fits}[elsewhere[argv[0]]], "main_" + argv[0])(argv[1:])


if __name__ == "__main__":
    run(main)
