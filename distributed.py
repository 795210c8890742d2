"""
Devices and processes: which device a script runs on; a training run's processes (DDP through torchrun), device,
precision and CPU threads (setup); FSDP2 sharding; reading values across ranks in one host read; the facts of the
machine that MFU and thread counts rest on (bf16 support, the peak FLOP/s).
"""
import ctypes
import math
import os
import re
import time
from collections import namedtuple
from contextlib import nullcontext

import torch
import torch.distributed as dist

from configurator import ConfigError


def pick_device(name):
    """The torch device for a script's device key: auto = CUDA if there is a GPU, else Apple's MPS, else the CPU. A
    device that this machine does not have is one line (ConfigError)."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", name):
        raise ConfigError(f"config error: --device={name!r} is not one of auto | cpu | mps | cuda | cuda:N")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("config error: --device=mps: this machine has no Apple GPU that torch can use "
                          "(torch.backends.mps.is_available() is False); use --device=cpu or auto")
    if name.startswith("cuda"):
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"config error: --device={name}: this machine has {torch.cuda.device_count()} CUDA "
                              "device(s) (torch.cuda.device_count()); use --device=cpu or auto")
    return name


Env = namedtuple("Env", "ddp rank world_size local_rank master device device_type dtype ctx accum say")


def setup(cfg):
    """Processes (DDP through torchrun), device, precision and CPU threads of a run: its Env (accum: micro-batches
    per rank per step; say: print on rank 0, nothing elsewhere)."""
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
    if device == "cuda":  # an indexed device (torch.cuda.set_device refuses a bare "cuda"): each rank its own GPU
        device = f"cuda:{local_rank}"
    device_type = device.split(":")[0]  # cuda | mps | cpu
    if device_type == "cpu":
        keep_freed_memory()
    if device_type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dtype = default_dtype(device) if cfg["dtype"] == "auto" else getattr(torch, cfg["dtype"])
    if dtype == torch.float16 and cfg["fsdp"]:
        raise ConfigError("config error: --fsdp=True with float16 needs a sharded loss scaler, which train.py does "
                          "not build: use --dtype=bfloat16 or float32 with --fsdp")
    ctx = nullcontext() if dtype == torch.float32 else torch.autocast(device_type, dtype=dtype)
    check_world(cfg["grad_accum"], world_size)
    say = print if master else (lambda *a, **k: None)
    if device_type == "cpu":
        torch.set_num_threads(cpu_threads(cfg["threads"], say))
    return Env(ddp, rank, world_size, local_rank, master, device, device_type, dtype, ctx,
               cfg["grad_accum"] // world_size, say)


def default_dtype(device):
    """dtype=auto: bf16 on a CUDA GPU with native bf16 (compute capability 8.0 and later: A100, H100, RTX 30xx
    on); fp16 with a loss scaler on older ones (the T4 of free notebooks: torch.cuda.is_bf16_supported() says True
    there, through emulation); fp32 on a CPU, whatever it supports, and on Apple's MPS."""
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16
    return torch.float32


def check_world(grad_accum, world_size):
    """grad_accum counts micro-batches across all ranks, so every rank must get the same number."""
    if grad_accum % world_size:
        up = -(-grad_accum // world_size) * world_size
        options = f"--grad_accum={up}" + (f" or {up - world_size}" if up > world_size else "")
        raise ConfigError(f"config error: grad_accum={grad_accum} (micro-batches per step over all ranks) must be "
                          f"divisible by the {world_size} ranks: use {options}")


def keep_freed_memory():
    """Stop glibc from returning large freed blocks to the OS. Blocks over 32 MiB (logits and their gradient
    for a 50k vocabulary) are otherwise mmap-ed fresh every step and page-faulted in again (tools/bench.py's nanogpt
    preset in bf16 measures the cost). Same effect as starting Python with
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
    slowest at each op, so a thread sharing its core with another job stalls them all (README: the main job with one
    busy neighbour on 2 cores, on one thread and on two). cores defaults to torch's
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


# -----------------------------------------------------------------------------------------------------------------
# FSDP2 (torch.distributed.fsdp; imported where used: a slow import that runs without --fsdp do not pay) and reads
# across ranks

def shard_model(model, dtype):
    """fully_shard each block, then the rest (embedding, head, norms, what runs between loop passes) as the root
    unit: each rank stores 1/world_size of every tensor, a block's weights are all-gathered just before each of its
    calls (a shared block: once per loop pass) and freed after it, gradients are reduce-scattered. With bf16 the
    blocks gather their weights in bf16 and reduce gradients in fp32; the root keeps fp32 weights and no input is
    cast, so the residual stream stays in fp32 as under DDP's autocast. The model changes in place (same module,
    same state_dict keys); build the optimizer after this, on the sharded parameters."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # heavy: --fsdp runs only
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    for block in model.blocks:
        fully_shard(block, mp_policy=bf16 if dtype == torch.bfloat16 else MixedPrecisionPolicy())
    fully_shard(model)


def wrap_ddp(model, env, find_unused=False):
    """DDP around the model (the sharded model of --fsdp is not wrapped). Buffers are not broadcast: each rank keeps
    its own MoE load counters, which moe.update_biases sums."""
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[env.local_rank] if env.device_type == "cuda" else None,
        find_unused_parameters=find_unused, broadcast_buffers=False)


def is_sharded(model):
    """True for a model that FSDP2's fully_shard has turned into an FSDPModule (asked without importing
    torch.distributed.fsdp, slow, at every start)."""
    return hasattr(model, "set_requires_gradient_sync")


def sync_gradients(model, on):
    """Whether the next backward synchronises gradients across ranks: with gradient accumulation only the last
    micro-batch's does, the others accumulate unsynchronised gradients locally (DDP and FSDP2 each have their own
    switch; one process has none)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model.require_backward_grad_sync = on
    elif is_sharded(model):
        model.set_requires_gradient_sync(on)


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



# -----------------------------------------------------------------------------------------------------------------
# the machine's peak, for MFU

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
    rate of a matmul timed here (cpu_matmul_rate) in fp32 or native bf16; none on MPS or for fp16 on a CPU."""
    if device_type == "cuda":
        name = torch.cuda.get_device_name()
        peak = gpu_bf16_peak(name)
        if peak is None:
            say(f"unknown device {name!r}: no MFU (add its dense bf16 peak to distributed.GPU_BF16_PEAK)")
        elif dtype != torch.bfloat16:
            say(f"no MFU: the peak of {name} is known for bfloat16 only")
            return None
        return peak
    if device_type != "cpu":  # Apple's MPS: no peak table
        say(f"no MFU on {device_type}: its peak FLOP/s is not known here")
        return None
    if dtype == torch.float16:  # fp16 on a CPU only tests the GPU path: its matmuls are emulated, far below fp32
        say("no MFU: float16 on a CPU runs emulated matmuls (use it to test the GPU's fp16 path, not for speed)")
        return None
    if dtype == torch.bfloat16 and not native_bf16():
        say("warning: this CPU has no native bf16 (avx512_bf16, amx_bf16 or Arm bf16): torch emulates it, tens of "
            "times slower than fp32 (use --dtype=float32); MFU is not reported")
        return None
    return cpu_matmul_rate(dtype)
