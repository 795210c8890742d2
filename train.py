"""
Train a plain, looped or MoE transformer. One process:

    python train.py                                   # the small default run on the offline corpus (CPU)
    python train.py config/sparse_looped.py --n_embd=256 --max_iters=2000

DDP on one node (nccl on CUDA, gloo on CPU); the same command line gives the same training with or without
torchrun, because grad_accum counts micro-batches across all ranks:

    torchrun --standalone --nproc_per_node=8 train.py config/x.py --grad_accum=8

Models beyond one GPU: --fsdp=True shards parameters, gradients and optimizer state over the ranks (FSDP2), and
--activation_checkpointing=True recomputes each block's activations in the backward instead of storing them;
`python scaling.py count config/x.py --memory --gpus=8` predicts the memory per GPU either way.

Resume a killed run exactly (same batches, same losses): add --resume to the same command.
A run directory (out_dir) holds ckpt.pt (with --fsdp: ckpt/, a torch.distributed.checkpoint directory that
sample.py and the analyses read as well), config.json, log.jsonl (one JSON object per logged step) and, at the end,
result.json.
"""
import ctypes
import importlib.util
import json
import math
import os
import re
import shutil
import time
from collections import namedtuple
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from configurator import ConfigError, configure, run
from data import Prefetcher, TokenData, default_data_dir, ensure_data, hf_of, to_device, training_vocab
from checkpoint import read_checkpoint
from distributed import pick_device
from loop import trajectory_rng
from model import GPT, GPTConfig
from optim import is_sharded, lr_multiplier, make_optimizer, set_lr, train_step
import kernels
import scaling

# ---------------------------------------------------------------------------------------------------------------
# defaults (the model's keys are GPTConfig's, in model.py; `python train.py --help` lists everything)
out_dir = "out/default"  # run directory: ckpt.pt, config.json, log.jsonl, result.json
resume = False  # continue the run in out_dir from its ckpt.pt (the same command: other settings are refused)
resume_changes = ""  # with --resume, keys allowed to differ from the run's, e.g. max_iters,eval_interval (logged)
overwrite = False  # start a new run in an out_dir that already holds one (its checkpoint and log are replaced)
collapse_evals = 3  # stop after this many evals in a row collapsed or no better than uniform (0 = off)
eval_interval = 100  # steps between validation evaluations (and checkpoints)
eval_tokens = 65536  # validation tokens per evaluation (a fixed set)
log_interval = 10  # steps between log lines
wandb_project = ""  # also log what log.jsonl logs to this Weights & Biases project (pip install wandb); "" = off
wandb_run_name = ""  # the wandb run's name; "" = wandb picks one
wandb_mode = "online"  # online | offline (written under ./wandb without a network; upload later with `wandb sync`)
sample_tokens = 300  # tokens of text to print at the end (0 = none)
# data
data_source = "offline"  # offline | kjv | shakespeare | fineweb-edu (streamed as far as the run needs) | files:<glob>
tokenizer = "auto"  # byte | gpt2 (vocab_size follows it) | auto: byte if vocab_size is its 257, else name one
data_dir = ""  # token files; "" = data/<source>_<tokenizer> in the repository
text_column = "text"  # parquet files (and fineweb-edu): the column that holds the documents' text
hf_dataset = "HuggingFaceFW/fineweb-edu"  # what fineweb-edu streams: a Hub dataset or a local folder of its files
hf_config = "sample-10BT"  # its config (sample-10BT, sample-100BT, sample-350BT); "" = none
hf_split = "train"  # its split
# optimization
batch_size = 16  # sequences per micro-batch (per rank)
grad_accum = 1  # micro-batches per step across ALL ranks (must be divisible by the number of ranks)
max_iters = 800  # optimizer steps (ignored when flops_budget > 0)
flops_budget = 0.0  # if > 0: train for budget / (FLOPs per token) tokens (scaling.py accounting)
flops_convention = "lee"  # lee (6*N_active) | schwethelm (6*executed params + attention), see scaling.py
optimizer = "adamw"  # adamw | muonh (MuonH on matrices + AdamW on the rest, Schwethelm et al.)
lr = 3e-3  # peak learning rate (base LR: muP and the other rules scale it per parameter group)
schedule = "wsd_sqrt"  # wsd_sqrt | wsd_linear | cosine | linear | constant
warmup_iters = 50  # linear warmup steps
decay_frac = 0.1  # WSD: fraction of all steps spent in the final decay
min_lr_frac = 0.05  # LR at the end of the decay, as a fraction of the peak
beta1 = 0.9  # AdamW beta1
beta2 = 0.999  # AdamW beta2
adam_eps = 1e-8  # AdamW epsilon (before per-group scaling)
weight_decay = 1e-4  # weight decay on matrices
wd_independent = True  # True: theta <- theta*(1 - wd*s_t), s_t = lr_t/lr (Lee et al.); False: torch AdamW's lr_t*wd
grad_clip = 1.0  # clip the global gradient norm (0 = off)
# system
device = "auto"  # auto | cpu | cuda | cuda:N
dtype = "auto"  # auto (bfloat16 on CUDA, float32 on CPU) | float32 | bfloat16
compile = False  # torch.compile each block (the depth loop stays in Python)
cpu_kernels = True  # eager CPU runs: the fast paths of kernels.py (same math; a resume keeps the run's setting)
threads = 0  # torch threads on CPU; 0 = auto: OMP_NUM_THREADS if set, else the cores the load average leaves idle
ddp_find_unused = False  # DDP find_unused_parameters (needed when some weights get no gradient in a step)
fsdp = False  # torchrun: shard weights, gradients, optimizer state over the ranks (FSDP2); checkpoints become ckpt/
activation_checkpointing = False  # recompute each block's activations in the backward: less memory, one more forward
seed = 1337  # seeds the init and the batch order
# ---------------------------------------------------------------------------------------------------------------
_CHOICES = dict(tokenizer=("auto", "byte", "gpt2"), flops_convention=("lee", "schwethelm"),
                optimizer=("adamw", "muonh"), schedule=("wsd_sqrt", "wsd_linear", "cosine", "linear", "constant"),
                dtype=("auto", "float32", "bfloat16"), wandb_mode=("online", "offline"))
# keys that may differ on --resume without changing the run, and those --resume_changes may change on purpose
_RESUME_NEUTRAL = ("resume", "resume_changes", "overwrite", "out_dir", "log_interval", "sample_tokens", "wandb_project",
                   "wandb_run_name", "wandb_mode")
_RESUME_CHANGEABLE = ("max_iters", "flops_budget", "eval_interval", "eval_tokens", "collapse_evals", "data_dir",
                      "device", "compile", "activation_checkpointing")


def check_config(cfg):
    """One line for the training keys that configure() cannot judge alone."""
    for key in ("batch_size", "grad_accum", "eval_interval", "eval_tokens", "log_interval"):
        if cfg[key] < 1:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= 1")
    for key in ("max_iters", "warmup_iters", "sample_tokens", "collapse_evals", "threads", "lr", "weight_decay",
                "grad_clip", "flops_budget", "adam_eps"):
        if cfg[key] < 0:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= 0")
    for key in ("decay_frac", "min_lr_frac", "beta1", "beta2"):
        if not 0 <= cfg[key] <= 1:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be between 0 and 1")
    source = cfg["data_source"]
    if source not in ("offline", "kjv", "shakespeare", "fineweb-edu") and not source.startswith("files:"):
        raise ConfigError(f"config error: --data_source={source!r} is not one of offline | kjv | shakespeare | "
                          "fineweb-edu | files:<glob>")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg["device"]):
        raise ConfigError(f"config error: --device={cfg['device']!r} is not one of auto | cpu | cuda | cuda:N")
    if cfg["wandb_project"] and importlib.util.find_spec("wandb") is None:
        raise ConfigError("config error: --wandb_project needs the wandb package: pip install wandb (or drop "
                          "--wandb_project; log.jsonl holds the same records)")
    unknown = set(changed_keys(cfg)) - set(_RESUME_CHANGEABLE)
    if unknown:
        raise ConfigError(f"config error: --resume_changes names {', '.join(sorted(unknown))}: only "
                          f"{', '.join(_RESUME_CHANGEABLE)} may change when a run resumes (start a new run instead)")


def changed_keys(cfg):
    return [k.strip() for k in cfg["resume_changes"].split(",") if k.strip()]


def check_world(grad_accum, world_size):
    """grad_accum counts micro-batches across all ranks, so every rank must get the same number."""
    if grad_accum % world_size:
        up = -(-grad_accum // world_size) * world_size
        options = f"--grad_accum={up}" + (f" or {up - world_size}" if up > world_size else "")
        raise ConfigError(f"config error: grad_accum={grad_accum} (micro-batches per step over all ranks) must be "
                          f"divisible by the {world_size} ranks: use {options}")


def run_differences(ckpt, cfg, model_cfg):
    """{key: (the run's value, this command's value)} for every setting in which this command differs from the run
    saved in ckpt. vocab_size is left out: the data sets it (its keys are compared)."""
    run_cfg = ckpt["train_config"]
    diff = {k: (run_cfg[k], v) for k, v in cfg.items()
            if k in run_cfg and k not in _RESUME_NEUTRAL and run_cfg[k] != v}
    run_model = GPTConfig(**ckpt["model_config"]).to_dict()
    diff.update({k: (run_model[k], v) for k, v in model_cfg.to_dict().items()
                 if k != "vocab_size" and run_model[k] != v})
    return diff


def check_resume(ckpt, cfg, model_cfg, path):
    """Resume only the same run: refuse (naming the keys) unless every difference is one --resume_changes allows."""
    diff = run_differences(ckpt, cfg, model_cfg)
    refused = {k: d for k, d in diff.items() if k not in changed_keys(cfg)}
    if refused:
        what = ", ".join(f"{k} (run: {a!r}, now: {b!r})" for k, (a, b) in refused.items())
        hint = (f"; to change them on purpose add --resume_changes={','.join(refused)}"
                if set(refused) <= set(_RESUME_CHANGEABLE) else
                "; resume with the run's settings (its config.json) or start a new run in another --out_dir")
        raise ConfigError(f"--resume: this command differs from the run in {path}: {what}{hint}")
    return diff


def open_run(cfg, model_cfg, master, say):
    """Check the run directory before any work. Returns (the checkpoint to resume or None, {key: (run's value,
    new value)} for the settings --resume_changes changed). A new run never replaces an existing one by accident."""
    out = cfg["out_dir"]
    path = checkpoint_path(cfg)
    other = os.path.join(out, "ckpt.pt" if cfg["fsdp"] else "ckpt")  # the other format's (see --fsdp)
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, f".write_test_{os.getpid()}")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"cannot write to out_dir {out!r} ({e.strerror}): choose another --out_dir") from None
    if master:
        clean_up_after_kill(path, say)
    if dist.is_initialized():
        dist.barrier()  # the other ranks read what rank 0 has put back
    if cfg["resume"]:
        if not os.path.exists(path):
            trained = f" (it was trained with --fsdp={not cfg['fsdp']})" if os.path.exists(other) else ""
            raise ConfigError(f"--resume: no checkpoint at {path}{trained}; drop --resume to start a new run")
        ckpt = read_checkpoint(path, weights=not cfg["fsdp"])  # --fsdp: build() reads the shards of each rank
        return ckpt, check_resume(ckpt, cfg, model_cfg, path)
    held = [p for p in (path, other) if os.path.exists(p)]
    if held and not cfg["overwrite"]:
        raise ConfigError(f"{out} already holds a run ({os.path.basename(held[0])}): add --resume to continue it, "
                          "--overwrite to start it again, or choose another --out_dir")
    if master and os.path.exists(other):  # a new run's checkpoint is the only one in out_dir
        shutil.rmtree(other) if os.path.isdir(other) else os.remove(other)
    return None, {}


def checkpoint_path(cfg):
    """ckpt.pt, or with --fsdp the directory ckpt/ (torch.distributed.checkpoint: each rank writes its shards)."""
    return os.path.join(cfg["out_dir"], "ckpt" if cfg["fsdp"] else "ckpt.pt")


def clean_up_after_kill(path, say):
    """A run killed while it wrote a checkpoint leaves path.tmp, cut off: removed. A sharded checkpoint killed
    between the two renames of replace_dir leaves path.old and no path: the last complete one, put back."""
    tmp, old = path + ".tmp", path + ".old"
    if os.path.exists(tmp):
        shutil.rmtree(tmp) if os.path.isdir(tmp) else os.remove(tmp)
        say(f"removed {tmp}, a checkpoint cut off by a kill ({os.path.basename(path)} is the last complete one)")
    if os.path.exists(old):
        if os.path.exists(path):
            shutil.rmtree(old)
        else:
            os.replace(old, path)
            say(f"put back {path} from {old}, left by a kill between two renames")


def save_checkpoint(path, state):
    """Write atomically: a killed run never leaves a half-written ckpt.pt."""
    tmp = path + ".tmp"
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------------
# FSDP2: sharded training and its checkpoints (torch.distributed.fsdp, torch.distributed.checkpoint; imported
# where used: 0.6 s that runs without --fsdp do not pay)

def shard_model(model, dtype):
    """fully_shard each block, then the rest (embedding, head, norms, what runs between loop passes) as the root
    unit: each rank stores 1/world_size of every tensor, a block's weights are all-gathered just before each of its
    calls (a shared block: once per loop pass) and freed after it, gradients are reduce-scattered. With bf16 the
    blocks gather their weights in bf16 and reduce gradients in fp32; the root keeps fp32 weights and no input is
    cast, so the residual stream stays in fp32 as under DDP's autocast. The model changes in place (same module,
    same state_dict keys); build the optimizer after this, on the sharded parameters."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    for block in model.blocks:
        fully_shard(block, mp_policy=bf16 if dtype == torch.bfloat16 else MixedPrecisionPolicy())
    fully_shard(model)


def optimizer_parts(optimizer):
    """The torch optimizers inside ours (MuonHAdamW steps two)."""
    return optimizer.parts() if hasattr(optimizer, "parts") else [optimizer]


def save_sharded(path, model, optimizer, run_state, master):
    """Every rank writes its shards of the weights and the optimizer state (DCP) into path.tmp, rank 0 adds run.pt
    (the rest of what ckpt.pt holds), then replace_dir swaps it in: a kill -9 at any moment leaves a complete
    checkpoint (clean_up_after_kill). Before the first optimizer step there is no optimizer state to save."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    tmp = path + ".tmp"
    parts = optimizer_parts(optimizer)
    state = {"model": get_model_state_dict(model)}
    if any(o.state for o in parts):
        state["optimizer"] = get_optimizer_state_dict(model, parts)
    dcp.save(state, checkpoint_id=tmp)  # returns once every shard and the metadata are written (and fsynced)
    if master:
        save_checkpoint(os.path.join(tmp, "run.pt"), dict(run_state, optimizer_saved="optimizer" in state))
        replace_dir(tmp, path)
    dist.barrier()


def replace_dir(new, path):
    """Rename the directory new to path (a directory cannot replace a non-empty one in one rename: two, then
    the old one is removed)."""
    old = path + ".old"
    if os.path.exists(path):
        os.replace(path, old)
    os.replace(new, path)
    shutil.rmtree(old, ignore_errors=True)


def load_sharded(path, model, optimizer, optimizer_saved):
    """Each rank reads its shards of the checkpoint directory into the sharded model and optimizer (DCP reshards
    when the number of ranks changed). The optimizer state is taken (initialised by torch) before the weights are
    set, so that its initialising step cannot touch them."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)
    parts = optimizer_parts(optimizer)
    state = {"model": get_model_state_dict(model)}
    if optimizer_saved:
        state["optimizer"] = get_optimizer_state_dict(model, parts)
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])
    if optimizer_saved:
        set_optimizer_state_dict(model, parts, state["optimizer"])


def keep_freed_memory():
    """Stop glibc from returning large freed blocks to the OS. Blocks over 32 MiB (logits and their gradient
    for a 50k vocabulary) are otherwise mmap-ed fresh every step and page-faulted in again: about 7% of a
    nanogpt-sized bf16 step here (bench.py), more on wall clock. Same effect as starting Python with
    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647. Linux/glibc only; returns False where it does nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1) == 1


def cpu_threads(threads, say=print, cores=None, load=None, env=None):
    """Torch's CPU thread count, said in one line: `threads` if > 0, else OMP_NUM_THREADS if the environment sets
    it, else (auto) the cores the 1-minute load average leaves idle, at least one. Every OpenMP thread waits for the
    slowest at each op, so a thread sharing its core with another job stalls them all: with one busy neighbour on 2
    cores the default run took 9.5 min on one thread and was heading for 30-57 min on two. cores defaults to torch's
    current thread count (at start, one per physical core), load to os.getloadavg() (machine-wide), env to
    os.environ."""
    env = os.environ if env is None else env
    if threads > 0:
        n, why = threads, "the threads key"
    elif env.get("OMP_NUM_THREADS", "").strip():
        n, why = int(env["OMP_NUM_THREADS"]), "OMP_NUM_THREADS"
    else:
        cores = cores or torch.get_num_threads()
        if load is None:
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        n = max(1, cores - math.floor(load + 0.5))
        why = f"auto: {cores} cores, load average {load:.2f}; choose with --threads=N or OMP_NUM_THREADS"
    say(f"CPU threads: {n} ({why})")
    return n


def native_bf16(capabilities=None):
    """True if this CPU multiplies bf16 in hardware (x86: AVX512-BF16 or AMX-BF16; Arm: BF16), as torch detects it
    (torch.cpu.get_capabilities(), the cpuinfo library's reading of the CPU's feature flags)."""
    caps = torch.cpu.get_capabilities() if capabilities is None else capabilities
    return any(caps.get(flag, False) for flag in ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16"))


def cpu_matmul_rate(dtype, now=time.perf_counter, n=2048, repeats=5):
    """FLOP/s of an n^3 matmul in `dtype` on this CPU, timed in this process with the clock `now` (best of
    `repeats`: a busy neighbour can slow a repeat but not speed one up): the MFU reference on CPU."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b  # warm up
    best = float("inf")
    for _ in range(repeats):
        t = now()
        a @ b
        best = min(best, now() - t)
    return 2 * n ** 3 / best


# Dense bf16 tensor-core peaks (FLOP/s with fp32 accumulation, without 2:4 sparsity), from the vendors' datasheets:
# NVIDIA H100 datasheet (SXM 989.4 T, PCIe 756 T, NVL 835 T); NVIDIA H200 datasheet (SXM 989 T, NVL 835 T); NVIDIA
# GH200 datasheet (989 T); NVIDIA A100 datasheet (40 and 80 GB, SXM and PCIe: 312 T); NVIDIA B200 (HGX B200
# datasheet: 4.5 P with sparsity, 2.25 P dense); NVIDIA L40S datasheet (362 T), L40 datasheet (181 T), L4 datasheet
# (121 T), A10 datasheet (125 T); NVIDIA Ada Lovelace whitepaper (RTX 4090: 165.2 T) and Ampere GA102 whitepaper
# (RTX 3090: 71 T); AMD Instinct MI300X datasheet (1307.4 T). Patterns are searched in torch.cuda.get_device_name()
# (e.g. "NVIDIA H100 80GB HBM3" is the SXM part), first match wins; a GPU not listed gets no MFU, never a guess.
GPU_BF16_PEAK = [
    (r"H100.*PCIe", 756e12), (r"H[12]00 NVL", 835e12), (r"H100|H200", 989e12), (r"A100", 312e12),
    (r"B200", 2250e12), (r"L40S", 362e12), (r"\bL40\b", 181e12), (r"\bL4\b", 121e12), (r"\bA10\b", 125e12),
    (r"RTX 4090$", 165.2e12), (r"RTX 3090$", 71e12), (r"MI300X", 1307.4e12),
]


def gpu_bf16_peak(name):
    """The dense bf16 peak FLOP/s of the GPU called `name` (torch.cuda.get_device_name()), None if not listed."""
    return next((peak for pattern, peak in GPU_BF16_PEAK if re.search(pattern, name, re.IGNORECASE)), None)


def peak_flops(device_type, dtype, say=print):
    """The reference FLOP/s for MFU, or None (no MFU): on a GPU its dense bf16 peak (bf16 runs only), on a CPU the
    rate of a matmul timed here (cpu_matmul_rate)."""
    if device_type == "cuda":
        name = torch.cuda.get_device_name()
        peak = gpu_bf16_peak(name)
        if peak is None:
            say(f"unknown device {name!r}: no MFU (add its dense bf16 peak to train.GPU_BF16_PEAK)")
        elif dtype != torch.bfloat16:
            say(f"no MFU: the peak of {name} is known for bfloat16 only")
            return None
        return peak
    if dtype == torch.bfloat16 and not native_bf16():
        say("warning: this CPU has no native bf16 (avx512_bf16, amx_bf16 or Arm bf16): torch emulates it, tens of "
            "times slower than fp32 (use --dtype=float32); MFU is not reported")
        return None
    return cpu_matmul_rate(dtype)


@torch.no_grad()
def evaluate(model, data, cfg, ctx, device, rank, world_size):
    """Mean cross-entropy over the fixed validation tokens (windows split across ranks, summed in one all_reduce),
    as a tensor on the device: accumulated there, read by the caller (one host sync per evaluation)."""
    model.eval()
    total = torch.zeros(2, device=device, dtype=torch.float64)
    batches = list(data.val_batches(cfg["batch_size"], model.config.block_size, cfg["eval_tokens"]))
    for x, y in batches[rank::world_size]:
        x, y = to_device(x, y, device)
        with ctx:
            _, loss, _ = model(x, y)
        total[0] += loss.detach().double() * y.numel()
        total[1] += y.numel()
    if is_sharded(model):  # every rank runs as many forwards as the others (each gathers weights)
        for _ in range(-(-len(batches) // world_size) - len(batches[rank::world_size])):
            with ctx:
                model(batches[0][0].to(device))
    if world_size > 1:
        dist.all_reduce(total)
    model.train()
    return total[0] / total[1]


def weights_finite(model):
    """True (a bool tensor on the device: no host read) if every weight is finite; sharded weights: this rank's
    shards, then all ranks agree (one all_reduce)."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]  # a DTensor's shard
    finite = torch.stack([torch.isfinite(p).all() for p in local]).all()
    if is_sharded(model):
        finite = finite.float()
        dist.all_reduce(finite, op=dist.ReduceOp.MIN)
        finite = finite > 0
    return finite


def read_scalars(values, env, reduce=0):
    """Scalars (device tensors or numbers) as Python floats in ONE host read: a sync on a GPU, so the loop reads
    only at log and eval steps. With DDP the first `reduce` values are first averaged over the ranks (one
    all_reduce)."""
    t = torch.stack([torch.as_tensor(v, device=env.device).detach().double().reshape(()) for v in values])
    if env.ddp and reduce:
        mean = t[:reduce] / env.world_size
        dist.all_reduce(mean)
        t = torch.cat([mean, t[reduce:]])
    return t.tolist()


def describe(c):
    """The model in a few words: its depth plan and its FFN."""
    depth = f"{c.n_layer} layers" + (f" x {c.n_loop} passes" if c.n_loop > 1 else "")
    depth = f"{c.n_prelude} + {depth} + {c.n_coda}" if c.n_prelude or c.n_coda else depth
    return depth + (f", {c.n_expert} experts (top {c.top_k})" if c.n_expert else "")


def format_time(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


# ---------------------------------------------------------------------------------------------------------------
# the run, step by step: setup, model and optimizer, data, the loop (evaluation and checkpoints inside), the end

Env = namedtuple("Env", "ddp rank world_size local_rank master device device_type dtype ctx accum say")


def setup(cfg, model_cfg):
    """Processes (DDP through torchrun), device, precision, threads, the vocabulary; the run directory checked.
    Returns (Env, checkpoint to resume or None, the settings --resume_changes changed)."""
    ddp = int(os.environ.get("RANK", -1)) != -1
    if cfg["fsdp"] and not ddp:
        raise ConfigError("config error: --fsdp=True shards the model over the ranks that torchrun starts: launch "
                          "torchrun --nproc_per_node=N train.py ... (N >= 1)")
    if ddp:
        backend = "nccl" if torch.cuda.is_available() and cfg["device"] != "cpu" else "gloo"
        dist.init_process_group(backend=backend)
        rank, world_size, local_rank = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    else:
        rank, world_size, local_rank = 0, 1, 0
    master = rank == 0
    device = pick_device(cfg["device"])
    if device == "cuda" and ddp:
        device = f"cuda:{local_rank}"
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    if device_type == "cpu":
        keep_freed_memory()
    if device_type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dtype_name = cfg["dtype"] if cfg["dtype"] != "auto" else ("bfloat16" if device_type == "cuda" else "float32")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    ctx = nullcontext() if dtype == torch.float32 else torch.autocast(device_type, dtype=dtype)
    check_world(cfg["grad_accum"], world_size)
    say = print if master else (lambda *a, **k: None)
    try:  # before open_run, so that a resumed run compares the tokenizer it trained with
        cfg["tokenizer"], model_cfg.vocab_size, note = training_vocab(cfg["tokenizer"], model_cfg.vocab_size)
    except ValueError as e:
        raise ConfigError(f"config error: {e}") from None
    if note:
        say(note)
    ckpt, changes = open_run(cfg, model_cfg, master, say)
    if device_type == "cpu":
        torch.set_num_threads(cpu_threads(cfg["threads"], say))
    env = Env(ddp, rank, world_size, local_rank, master, device, device_type, dtype, ctx,
              cfg["grad_accum"] // world_size, say)  # accum: micro-batches per rank per step
    return env, ckpt, changes


def build(cfg, model_cfg, ckpt, env):
    """The model (checkpointed and compiled blocks, DDP-wrapped or sharded: `model`; the bare one: `raw_model`),
    its optimizer, and the step and best validation loss to start from (a resumed checkpoint's)."""
    torch.manual_seed(cfg["seed"])
    raw_model = GPT(model_cfg)
    raw_model.init_weights(cfg["seed"])
    raw_model.to(env.device)
    kernels.on_cpu(raw_model, env.device, cfg["cpu_kernels"] and not cfg["compile"])
    if cfg["compile"]:
        raw_model.compile_blocks()
    if cfg["activation_checkpointing"]:
        raw_model.checkpoint_blocks()
    if cfg["fsdp"]:
        shard_model(raw_model, env.dtype)
    optimizer = make_optimizer(raw_model, cfg, env.device_type)
    start_step, best_val = 0, float("inf")
    if ckpt is not None:
        if cfg["fsdp"]:
            load_sharded(checkpoint_path(cfg), raw_model, optimizer, ckpt["optimizer_saved"])
        else:
            raw_model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
        start_step, best_val = ckpt["step"], ckpt["best_val"]
        torch.set_rng_state(ckpt["rng_cpu"])
        env.say(f"resumed {cfg['out_dir']} at step {start_step}")
    model = raw_model  # with --fsdp the sharded model itself
    if env.ddp and not cfg["fsdp"]:
        model = DDP(raw_model, device_ids=[env.local_rank] if env.device_type == "cuda" else None,
                    find_unused_parameters=cfg["ddp_find_unused"],
                    broadcast_buffers=False)  # each rank keeps its own MoE load counters (moe.update_biases sums them)
    return model, raw_model, optimizer, start_step, best_val


def steps_for(cfg, raw_model):
    """(optimizer steps, tokens per step, FLOPs per token in the run's convention): max_iters, or the steps that
    spend flops_budget."""
    T = raw_model.config.block_size
    flops_per_token = scaling.flops_per_token(raw_model, cfg["flops_convention"], T)
    tokens_per_step = cfg["batch_size"] * T * cfg["grad_accum"]
    if cfg["flops_budget"] > 0:
        return max(1, round(cfg["flops_budget"] / flops_per_token / tokens_per_step)), tokens_per_step, flops_per_token
    return cfg["max_iters"], tokens_per_step, flops_per_token


def load_data(cfg, env, T, run_tokens):
    """The token files, prepared by rank 0 (a stream only as far as the run draws: run_tokens and the val set)."""
    stream = cfg["data_source"] == "fineweb-edu"
    need = dict(max_tokens=run_tokens, min_val_tokens=cfg["eval_tokens"] + 1) if stream else {}
    data_dir = cfg["data_dir"] or default_data_dir(cfg["data_source"], cfg["tokenizer"], hf_of(cfg))

    def prepare():
        try:
            ensure_data(data_dir, cfg["data_source"], cfg["tokenizer"], text_column=cfg["text_column"],
                        hf=hf_of(cfg), **need)
        except (FileNotFoundError, RuntimeError, ValueError) as e:  # data.py's messages say what to do
            raise ConfigError(f"data: {e}") from None
    if env.master:
        prepare()
    if env.ddp:
        dist.barrier()  # rank 0 prepares the token files once
        if env.local_rank == 0 and not env.master:  # another node: finds rank 0's files on a shared filesystem, or
            prepare()  # prepares the same ones on its own disk (data.py's docstring)
        dist.barrier()
    data = TokenData(data_dir, train_tokens=run_tokens if stream else None)
    for split in ("train", "val"):
        if len(data.splits[split]) <= T:
            raise ConfigError(f"data: {data_dir} holds {len(data.splits[split]):,} {split} tokens, fewer than one "
                              f"window of block_size+1 = {T + 1}: add text or lower --block_size")
    used, meta = len(data.splits["train"]), data.meta
    if run_tokens > used:
        more = " (the stream has no more)" if stream else ""
        env.say(f"note: the data repeats: the run draws {run_tokens:,} training tokens from the {used:,} in "
                f"{data_dir}, each about {run_tokens / used:.1f} times{more}")
    share = f"the first {used:,} of " if used < meta["train_tokens"] else ""
    env.say(f"data: {data_dir} ({meta['tokenizer']}, {share}{meta['train_tokens']:,} train / {meta['val_tokens']:,} "
            f"val tokens), unigram entropy of the training tokens {data.unigram_entropy():.4f} nats")
    return data


class RunLog:
    """log.jsonl and the console: one JSON object and one line per record (rank 0 only). A resumed run first
    drops the lines it will write again. With --wandb_project every record also goes to a wandb run (wandb is
    imported only then), whose config is `config`."""

    def __init__(self, cfg, master, resume_step=None, config=None):
        self.path, self.master, self.wandb = os.path.join(cfg["out_dir"], "log.jsonl"), master, None
        if master:
            kept = []
            if resume_step is not None and os.path.exists(self.path):
                kept = [line for line in open(self.path) if json.loads(line)["step"] < resume_step]
            with open(self.path, "w") as f:
                f.writelines(kept)
            if cfg["wandb_project"]:
                import wandb
                self.wandb = wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run_name"] or None,
                                        mode=cfg["wandb_mode"], config=config)

    def __call__(self, record, line):
        if self.master:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
            if self.wandb is not None:
                self.wandb.log(record, step=record["step"])
            print(line, flush=True)

    def close(self):
        if self.wandb is not None:
            self.wandb.finish()


class Checkpoints:
    """When to write ckpt.pt after an evaluation. A val loss at or above the unigram entropy of the training
    tokens predicts no better than token frequencies: after a checkpoint below that line it is a collapse (never
    saved over that checkpoint, and a stop when it lasts collapse_evals evals); before, a warning, and a stop when
    collapse_evals evals after warm-up are no better than guessing uniformly (ln V: a diverged or stuck run)."""

    def __init__(self, cfg, env, entropy, vocab_size, ckpt, start_step, best_val, sharded=None):
        self.cfg, self.say, self.entropy, self.uniform = cfg, env.say, entropy, math.log(vocab_size)
        self.uniform_evals = 0  # evals in a row after warm-up at or above (within 1% of) ln V
        self.path, self.master = checkpoint_path(cfg), env.master
        self.sharded = sharded  # --fsdp: (model, optimizer), saved by every rank
        self.last_saved = start_step if ckpt is not None else None
        self.saved_val = ckpt.get("val_loss", best_val) if ckpt is not None else float("inf")
        self.collapsed_evals = 0  # evals in a row back at or above the entropy (never saved: 0 at a checkpoint)

    def after_eval(self, step, val_loss, may_save, state):
        """Save state() unless val_loss is a collapse; returns the reason to stop, or None."""
        above = val_loss >= self.entropy
        self.collapsed_evals = self.collapsed_evals + 1 if above and self.saved_val < self.entropy else 0
        after_warmup = step > self.cfg["warmup_iters"]
        self.uniform_evals = self.uniform_evals + 1 if after_warmup and val_loss >= 0.99 * self.uniform else 0
        if above and (after_warmup or self.collapsed_evals):
            self.say(f"warning: val loss {val_loss:.4f} >= {self.entropy:.4f}, the unigram entropy of the training "
                     "tokens: the model predicts no better than token frequencies")
        keep = self.cfg["collapse_evals"] and (self.collapsed_evals or self.uniform_evals)  # no collapsed model
        if may_save:
            if keep:
                self.say(f"step {step}: not saved, to keep the checkpoint of step {self.last_saved} (val loss "
                         f"{self.saved_val:.4f})")
            elif self.sharded is not None:
                run_state = {k: v for k, v in state().items() if k not in ("model", "optimizer")}
                save_sharded(self.path, *self.sharded, run_state, self.master)
            elif state is not None:  # rank 0 writes
                save_checkpoint(self.path, state())
        if may_save and not keep:
            self.last_saved, self.saved_val = step, val_loss
        if self.cfg["collapse_evals"] and self.collapsed_evals >= self.cfg["collapse_evals"]:
            return (f"step {step}: training collapsed (val loss back at or above the unigram entropy "
                    f"{self.entropy:.4f} for {self.collapsed_evals} evals)")
        if self.cfg["collapse_evals"] and self.uniform_evals >= self.cfg["collapse_evals"]:
            return (f"step {step}: training diverged or is stuck (val loss {val_loss:.4f}, no better than guessing "
                    f"uniformly, ln V = {self.uniform:.4f}, for {self.uniform_evals} evals after warm-up)")
        return None

    def stop(self, reason, env):
        if self.saved_val < self.entropy:
            env.say(f"{reason}; stopping. The last good checkpoint is {self.path} (step {self.last_saved}, val loss "
                    f"{self.saved_val:.4f}): lower lr, raise warmup_iters or turn on grad_clip, then --resume")
        else:
            env.say(f"{reason}; stopping. No checkpoint got below the unigram entropy (the last, {self.path}, is "
                    f"of step {self.last_saved}): start again with a lower lr or a longer warm-up (--overwrite)")
        if env.ddp:
            dist.destroy_process_group()
        raise SystemExit(1)


def main(argv=None):
    defaults = {k: v for k, v in globals().items() if not k.startswith("_")}
    cfg, model_cfg = configure(defaults, GPTConfig, argv, doc_source=__file__, choices=_CHOICES)
    check_config(cfg)
    env, ckpt, changes = setup(cfg, model_cfg)
    say = env.say

    # ---- model, optimizer, steps, data ----
    if ckpt is not None:
        model_cfg = GPTConfig(**ckpt["model_config"])
    model, raw_model, optimizer, start_step, best_val = build(cfg, model_cfg, ckpt, env)
    T = model_cfg.block_size
    max_steps, tokens_per_step, flops_per_token = steps_for(cfg, raw_model)
    run_tokens = max(max_steps * tokens_per_step, T + 1)  # training tokens the run draws (at least one window)
    data = load_data(cfg, env, T, run_tokens)
    counts = scaling.count_params(raw_model)
    mfu_flops = scaling.flops_per_token(raw_model, "schwethelm", T)  # MFU counts the work done, attention included
    peak = peak_flops(env.device_type, env.dtype, say)
    peak = peak * env.world_size if peak else None
    say(f"model: {describe(model_cfg)}, {counts['params_unique']:,} parameters "
        f"({counts['params_active_nonembed']:,} active non-embedding), {flops_per_token:.3g} FLOPs/token "
        f"({cfg['flops_convention']})")
    say(f"training: {max_steps} steps x {tokens_per_step:,} tokens on {env.world_size} x {env.device} in "
        f"{str(env.dtype).replace('torch.', '')}{', compiled' if cfg['compile'] else ''}; peak for MFU "
        f"{f'{peak:.3g} FLOP/s' if peak else 'unknown (no MFU)'}")
    if env.master:
        with open(os.path.join(cfg["out_dir"], "config.json"), "w") as f:
            json.dump({"train": cfg, "model": model_cfg.to_dict(), "world_size": env.world_size, "data": data.meta},
                      f, indent=1)
    log = RunLog(cfg, env.master, start_step if ckpt is not None else None,
                 config={"train": cfg, "model": model_cfg.to_dict(), "world_size": env.world_size})
    if changes:
        log({"step": start_step, "event": "resume_changes", "changed": {k: list(v) for k, v in changes.items()}},
            "resumed with changed settings (not an exact continuation; max_iters and flops_budget move the "
            "schedule's decay): " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items()))
    entropy = data.unigram_entropy()  # what a model that ignores the context scores: the collapse line
    checkpoints = Checkpoints(cfg, env, entropy, model_cfg.vocab_size, ckpt, start_step, best_val,
                              sharded=(raw_model, optimizer) if cfg["fsdp"] else None)

    # ---- the loop ----
    # Nothing in a steady-state step reads a value on the host (a GPU sync): the loss and a non-finite flag stay on
    # the device and are read, with the rest of a log record, in one read at log steps (and the flag at eval steps).
    t_start = t_last = time.time()
    tokens_since, train_loss, val_loss = 0, float("nan"), float("nan")
    non_finite = torch.zeros((), dtype=torch.bool, device=env.device)  # any training loss not finite since a read
    batches = Prefetcher(lambda key: data.get_batch(*key, env.rank, env.world_size, env.accum, cfg["batch_size"], T,
                                                    cfg["seed"]), env.device)
    for step in range(start_step, max_steps + 1):
        last = step == max_steps
        if step % cfg["eval_interval"] == 0 or last:  # ---- evaluation and checkpoint ----
            t_eval = time.time()
            val = evaluate(raw_model, data, cfg, env.ctx, env.device, env.rank, env.world_size)
            bad, val_loss, weights_ok = read_scalars([non_finite, val, weights_finite(raw_model)], env, reduce=1)
            if bad or not math.isfinite(val_loss) or not weights_ok:
                checkpoints.stop(f"step {step}: the loss or the weights are not finite (val loss {val_loss})", env)
            best_val = min(best_val, val_loss)
            log({"step": step, "tokens": step * tokens_per_step, "val_loss": val_loss},
                f"step {step}/{max_steps} | val loss {val_loss:.4f}")
            state = (lambda: {
                "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                "model_config": model_cfg.to_dict(), "train_config": cfg, "step": step, "best_val": best_val,
                "val_loss": val_loss, "rng_cpu": torch.get_rng_state(),
                "data_position": {"step": step, "micro_batches_done": step * cfg["grad_accum"]},
            }) if env.master or cfg["fsdp"] else None
            reason = checkpoints.after_eval(step, val_loss, step > start_step or ckpt is None, state)
            if reason:
                checkpoints.stop(reason, env)
            t_last += time.time() - t_eval  # throughput counts training time only
        if last:
            break

        schedule = lr_multiplier(step, max_steps, cfg)
        lr = cfg["lr"] * schedule
        set_lr(optimizer, lr)

        def get_batch(micro):  # this micro-batch, and the next one prefetched
            return batches.get((step, micro), (step, micro + 1) if micro + 1 < env.accum else (step + 1, 0))

        def rng(micro):  # LoopFormer's trajectory sampler, seeded by the global micro-batch index
            return trajectory_rng(cfg["seed"], step * cfg["grad_accum"] + micro * env.world_size + env.rank)

        loss_sum, aux_sums, grad_norm = train_step(
            model, optimizer, get_batch, env.accum, env.ctx, cfg["grad_clip"],
            cfg["weight_decay"] if cfg["wd_independent"] else 0.0, schedule, env.world_size, rng)
        tokens_since += tokens_per_step
        non_finite |= ~torch.isfinite(loss_sum)
        if step % cfg["log_interval"] == 0 or step == max_steps - 1:
            extra = list(aux_sums.values()) + ([] if grad_norm is None else [grad_norm])
            train_loss, bad, *extra = read_scalars([loss_sum, non_finite] + extra, env, reduce=2)
            if bad:
                checkpoints.stop(f"step {step}: a training loss since the last log line is not finite (now "
                                 f"{train_loss})", env)
            dt = time.time() - t_last
            tok_s = tokens_since / dt
            mfu = tok_s * mfu_flops / peak if peak else None
            eta = (max_steps - step - 1) * tokens_per_step / tok_s
            record = {"step": step, "tokens": (step + 1) * tokens_per_step, "loss": train_loss, "lr": lr,
                      "tokens_per_s": tok_s, "mfu": mfu}
            record.update(zip(aux_sums, extra))
            if grad_norm is not None:
                record["grad_norm"] = extra[-1]
            text = f"step {step}/{max_steps} | loss {train_loss:.4f}"
            text += "".join(f" | {k} {v:.4f}" for k, v in zip(aux_sums, extra))
            text += f" | lr {lr:.2e} | {tok_s:,.0f} tok/s | mfu {f'{100 * mfu:.1f}%' if mfu is not None else 'n/a'}"
            if env.device_type == "cuda":  # the allocator's own count: no sync
                record["peak_mem_gib"] = torch.cuda.max_memory_allocated(env.device) / 2 ** 30
                text += f" | peak mem {record['peak_mem_gib']:.1f} GiB"
            log(record, f"{text} | eta {format_time(eta)}")
            t_last, tokens_since = time.time(), 0

    # ---- the end: result.json, a sample ----
    wall = time.time() - t_start
    if env.master:
        result = {"val_loss": val_loss, "best_val_loss": best_val, "train_loss": train_loss, "steps": max_steps,
                  "tokens": max_steps * tokens_per_step, "flops": max_steps * tokens_per_step * flops_per_token,
                  "flops_convention": cfg["flops_convention"], "wall_s": wall,
                  "unigram_entropy": entropy, "above_unigram_entropy": val_loss >= entropy, **counts}
        with open(os.path.join(cfg["out_dir"], "result.json"), "w") as f:
            json.dump(result, f, indent=1)
        say(f"done in {format_time(wall)}: val loss {val_loss:.4f} nats (unigram entropy {entropy:.4f}); run "
            f"directory {cfg['out_dir']}")
        if val_loss >= entropy and max_steps > cfg["warmup_iters"]:
            say("warning: the run ended at or above the unigram entropy: it learned nothing beyond token "
                "frequencies (try another lr; see log.jsonl)")
    if cfg["sample_tokens"] > 0 and (env.master or cfg["fsdp"]):  # a sharded model generates on every rank
        print_sample(raw_model, data.meta["tokenizer"], cfg, env)
    log.close()
    if env.ddp:
        dist.barrier()  # tear down together: a rank that leaves while the other still works can abort in gloo
        dist.destroy_process_group()


def print_sample(model, tokenizer, cfg, env):
    from data import get_tokenizer
    tok = get_tokenizer(tokenizer)
    prompt = torch.tensor([tok.encode("And the")], device=env.device)
    n = min(cfg["sample_tokens"], model.config.block_size - prompt.size(1))
    g = torch.Generator(device=env.device).manual_seed(cfg["seed"])
    model.eval()
    with env.ctx:
        out = model.generate(prompt, n, temperature=0.8, top_k=50, generator=g)
    env.say("sample:\n" + tok.decode(out[0].tolist()))


if __name__ == "__main__":
    run(main)
