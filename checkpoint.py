"""
Checkpoints: reading a run's checkpoint (one file, or the torch.distributed.checkpoint directory of an --fsdp run)
and loading its model, as every script that reads a run does.
"""
import os
import warnings

import torch

import kernels
from configurator import ConfigError
from model import GPT, GPTConfig


def read_checkpoint(path, device="cpu", weights=True):
    """The checkpoint dict of a train.py run: a ckpt.pt file, or the ckpt/ directory of an --fsdp run (see
    read_sharded_model; weights=False leaves its weights on disk). A missing, empty or truncated file is one line
    saying what to do."""
    sharded = os.path.isdir(path)
    file = os.path.join(path, "run.pt") if sharded else path  # a sharded checkpoint's run state (train.save_sharded)
    if not os.path.exists(file):
        raise ConfigError(f"no checkpoint at {path}: pass the out_dir of a train.py run")
    try:
        ckpt = torch.load(file, map_location=device, weights_only=True)
    except Exception as e:  # torch reports a cut-off or empty file as one of several errors, each with a traceback
        raise ConfigError(f"{file} is not a readable checkpoint ({os.path.getsize(file):,} bytes: {str(e)[:80]}); "
                          "it was cut off or is not a train.py checkpoint: train again or use another run") from None
    if sharded and weights and isinstance(ckpt, dict):
        ckpt["model"] = read_sharded_model(path, device)
    if not (isinstance(ckpt, dict) and "model_config" in ckpt and ("model" in ckpt or not weights)):
        raise ConfigError(f"{path} is not a train.py checkpoint (no model / model_config entries)")
    return ckpt


def read_sharded_model(path, device="cpu"):
    """The model's state dict, whole, from a torch.distributed.checkpoint directory written by train.py --fsdp, in
    one process: tensors of the shapes its metadata lists, filled by dcp.load from the shards of every rank (any
    number of them). Only the weights are read, in place: no converted copy on disk, and the optimizer state,
    twice the weights' size, stays unread. (torch.distributed.checkpoint.format_utils converts the whole
    directory to one torch.save file, for tools that want one.)"""
    import torch.distributed.checkpoint as dcp
    listed = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    model = {key.removeprefix("model."): torch.empty(m.size, dtype=m.properties.dtype, device=device)
             for key, m in listed.items() if key.startswith("model.")}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load({"model": model}, checkpoint_id=path, no_dist=True)
    return model


def checkpoint_of(run_dir):
    """The checkpoint in a run directory: ckpt.pt, or ckpt/ (DCP) of an --fsdp run; any other path as it is."""
    if not os.path.isdir(run_dir) or os.path.exists(os.path.join(run_dir, "run.pt")):
        return run_dir
    sharded = os.path.join(run_dir, "ckpt")
    return sharded if os.path.isdir(sharded) else os.path.join(run_dir, "ckpt.pt")


def load_model(run_dir, device="cpu"):
    """(model in eval mode, checkpoint dict) from a run directory's checkpoint (or a path to one). On the CPU with
    the run's CPU fast paths (train.py's cpu_kernels, on unless the run turned them off), as the run computed."""
    ckpt = read_checkpoint(checkpoint_of(run_dir), device)
    model = GPT(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    kernels.on_cpu(model, device, ckpt.get("train_config", {}).get("cpu_kernels", True))
    return model.to(device).eval(), ckpt
