"""
Reading finished runs, for every script that studies them (sample.py, analyze.py, early_exit.py, eval.py, hf/,
the lab): a run's checkpoint and its model (load_model), the device such a script runs on, JSON-lines files, and
the provenance a result JSON names so that it regenerates (records/README.md): its command, the code's commit and
the sha256 of each input. Training never needs these: train.py writes runs (checkpoint.py, runlog.py), this reads
them.
"""
import hashlib
import json
import os
import shlex
import subprocess

import torch

import kernels
from checkpoint import read_checkpoint
from configurator import ConfigError
from distributed import cpu_threads, pick_device
from model import GPT, GPTConfig


def checkpoint_of(run_dir):
    """The checkpoint in a run directory: ckpt.pt, or ckpt/ (DCP) of an --fsdp run; any other path as it is."""
    if not os.path.isdir(run_dir) or os.path.exists(os.path.join(run_dir, "run.pt")):
        return run_dir
    sharded = os.path.join(run_dir, "ckpt")
    return sharded if os.path.isdir(sharded) else os.path.join(run_dir, "ckpt.pt")


def load_model(run_dir, device="cpu"):
    """(model in eval mode, checkpoint dict) from a run directory's checkpoint (or a path to one). On the CPU with
    the run's CPU fast paths (train.py's cpu_kernels, on unless the run turned them off), as the run computed."""
    path = checkpoint_of(run_dir)
    ckpt = read_checkpoint(path, device)
    train_config = ckpt.get("train_config") if isinstance(ckpt.get("train_config"), dict) else {}
    fast = kernels.wanted(device, train_config.get("cpu_kernels", True))  # the run's CPU fast paths, on a CPU
    try:
        model = GPT(GPTConfig(**ckpt["model_config"]), cpu_kernels=fast)
        model.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError, AttributeError) as e:  # a damaged or foreign config or state dict
        raise ConfigError(f"{path} holds a model this code cannot build or load ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:100]}): it was damaged or comes from another program; train "
                          "again or use another run") from None
    return model.to(device).eval(), ckpt


def use_device(cfg, say=lambda line: None):
    """The device of a script that runs models (sample, eval, early_exit, analyze) from its device and threads keys:
    pick_device's choice, and on the CPU torch's thread count (cpu_threads; not said unless `say` is given: these
    scripts' output is their results, and a refusal is one line)."""
    if cfg["threads"] < 0:
        raise ConfigError(f"config error: --threads={cfg['threads']} must be >= 0 (0 = auto)")
    device = pick_device(cfg["device"])
    if device == "cpu":
        torch.set_num_threads(cpu_threads(cfg["threads"], say))
    return device


def json_lines(path, advice, prefix=""):
    """(line number, row) of each non-blank line of a JSON-lines file; a line that is not JSON (or not UTF-8) stops
    in one line naming the file and line, then `advice`."""
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield n, json.loads(line.decode("utf-8"))
                except ValueError as e:  # UnicodeDecodeError is one too
                    raise ConfigError(f"{prefix}{path}, line {n}: not a JSON row ({str(e)[:80]}): {advice}") from None


# -----------------------------------------------------------------------------------------------------------------
# provenance: what a result names so that it regenerates (records/README.md): the code's commit and its inputs' sha256

SNAPSHOT_REVISION = ".snapshot_revision"  # a snapshot's commit, in a file at its top (ignored by git)


def git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def snapshot_revision(repo):
    """The commit of a tree without git whose top holds SNAPSHOT_REVISION (an archive snapshot, or the copy a lent
    GPU machine gets), else None; a checkout (a .git at its top) always asks git."""
    path = os.path.join(repo, SNAPSHOT_REVISION)
    if os.path.exists(os.path.join(repo, ".git")) or not os.path.isfile(path):
        return None
    with open(path) as f:
        return f.read().strip()


def git_revision(repo):
    """HEAD's full hash, '+dirty' when tracked files differ from it; in a snapshot (which lies inside the checkout's
    ignored out/, so git would name the checkout's HEAD), the commit it was made from."""
    if snapshot_revision(repo):
        return snapshot_revision(repo)
    try:
        dirty = git(repo, "status", "--porcelain", "--untracked-files=no").strip()
        return git(repo, "rev-parse", "HEAD").strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        return "unknown"


def file_sha256(path):
    """The sha256 of a file; of a directory (a sharded checkpoint), of its files' names and bytes in sorted order."""
    digest = hashlib.sha256()
    files = [path] if not os.path.isdir(path) else sorted(
        os.path.join(d, f) for d, _, names in os.walk(path) for f in names)
    for name in files:
        if os.path.isdir(path):
            digest.update(os.path.relpath(name, path).encode())
        with open(name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):  # in blocks: a checkpoint may be larger than memory
                digest.update(block)
    return digest.hexdigest()


def provenance(inputs, command):
    """What a committed result JSON names so that it regenerates (records/README.md): the command, quoted to run as
    printed in a shell, the code's commit (HEAD, '+dirty' when tracked files differ) and each input's sha256."""
    return dict(command=shlex.join(command), code=git_revision(os.path.dirname(os.path.abspath(__file__))),
                inputs={p: file_sha256(p) for p in inputs})


def run_provenance(run_dirs, script, argv):
    """What a study of these runs' checkpoints names in its JSON so that it regenerates (records/README.md): its
    command, the code's commit and the sha256 of each checkpoint read (early_exit.py, eval.py, analyze.py)."""
    return provenance([checkpoint_of(d) for d in run_dirs], ["python", script] + list(argv))
