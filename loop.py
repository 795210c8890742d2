"""
Looped transformers (work in progress: the loop.py issue fills this file with LoopedGPT).

build_model / load_model are the one place that turns a config or a run directory into a model.
"""
import os

import torch

from model import GPT, GPTConfig


def build_model(config):
    """GPT for a plain config, LoopedGPT for anything looped."""
    if config.n_loop > 1 or config.n_prelude or config.n_coda:
        raise NotImplementedError("looped models are not implemented yet")
    return GPT(config)


def load_model(run_dir, device="cpu"):
    """(model in eval mode, checkpoint dict) from a run directory's ckpt.pt (or a path to a .pt file)."""
    path = os.path.join(run_dir, "ckpt.pt") if os.path.isdir(run_dir) else run_dir
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}: pass the out_dir of a train.py run")
    ckpt = torch.load(path, map_location=device, weights_only=True)
    model = build_model(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval(), ckpt
