"""
Checkpoints and the rules that keep a run's work safe:
- refusing training settings no run can use (check_training; GPTConfig's own refusals are model.py's);
- reading a run's checkpoint (one file, or the torch.distributed.checkpoint directory of an --fsdp run), to resume
  it here and, in runs.py, to load its model for every script that studies a run;
- opening a run directory: a new run never replaces an existing one by accident, a resume continues only the
  same run (every difference refused unless --resume_changes allows it), the leftovers of a kill are cleaned up;
- writing checkpoints atomically, and the collapse guard (Checkpoints): a collapsed or diverged model is never
  saved over the last good one, and a run that stays collapsed stops, saying what to do.
"""
import contextlib
import errno
import fcntl
import importlib.util
import math
import os
import re
import shutil
import signal
import warnings

import torch
import torch.distributed as dist

from configurator import EXIT_RESUMABLE, ConfigError  # noqa: F401 (EXIT_RESUMABLE: the exit code of a stopped run)
from distributed import read_scalars, weights_finite
from model import GPTConfig


def read_checkpoint(path, device="cpu", weights=True):
    """The checkpoint dict of a train.py run: a ckpt.pt file, or the ckpt/ directory of an --fsdp run (see
    read_sharded_model; weights=False leaves its weights on disk). A missing, empty or truncated file is one line
    saying what to do."""
    sharded = os.path.isdir(path)
    file = os.path.join(path, "run.pt") if sharded else path  # a sharded checkpoint's run state (save_sharded)
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
    import torch.distributed.checkpoint as dcp  # heavy (most of a second): --fsdp checkpoints only
    listed = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    model = {key.removeprefix("model."): torch.empty(m.size, dtype=m.properties.dtype, device=device)
             for key, m in listed.items() if key.startswith("model.")}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load({"model": model}, checkpoint_id=path, no_dist=True)
    return model


# -----------------------------------------------------------------------------------------------------------------
# opening a run, saving, the collapse guard

# keys that may differ on --resume without changing the run, and those --resume_changes may change on purpose
RESUME_NEUTRAL = ("resume", "resume_changes", "overwrite", "out_dir", "log_interval", "sample_tokens", "wandb_project",
                   "wandb_run_name", "wandb_mode", "verify_data")


# the settings a resumed run may change (--resume_changes), with a logged line: the rest must be the run's
RESUME_CHANGEABLE = ("max_iters", "flops_budget", "eval_interval", "eval_tokens", "collapse_evals", "data_dir",
                      "device", "compile", "activation_checkpointing")


def changed_keys(cfg):
    return [k.strip() for k in cfg["resume_changes"].split(",") if k.strip()]


def check_training(cfg):
    """train.py's keys that configure() cannot judge alone: ranges, the data source, the device, wandb, the keys
    --resume_changes names."""
    for key in ("batch_size", "grad_accum", "eval_interval", "eval_tokens", "log_interval"):
        if cfg[key] < 1:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= 1")
    for key in ("max_iters", "warmup_iters", "sample_tokens", "collapse_evals", "threads", "lr", "weight_decay",
                "grad_clip", "flops_budget", "adam_eps", "seed"):
        if cfg[key] < 0:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= 0")
    for key in ("decay_frac", "min_lr_frac", "beta1", "beta2"):
        if not 0 <= cfg[key] <= 1:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be between 0 and 1")
    source = cfg["data_source"]
    if source not in ("offline", "kjv", "shakespeare", "fineweb-edu") and not source.startswith("files:"):
        raise ConfigError(f"config error: --data_source={source!r} is not one of offline | kjv | shakespeare | "
                          "fineweb-edu | files:<glob>")
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", cfg["device"]):
        raise ConfigError(f"config error: --device={cfg['device']!r} is not one of auto | cpu | mps | cuda | cuda:N")
    if cfg["wandb_project"] and importlib.util.find_spec("wandb") is None:
        raise ConfigError("config error: --wandb_project needs the wandb package: pip install wandb (or drop "
                          "--wandb_project; log.jsonl holds the same records)")
    unknown = set(changed_keys(cfg)) - set(RESUME_CHANGEABLE)
    if unknown:
        raise ConfigError(f"config error: --resume_changes names {', '.join(sorted(unknown))}: only "
                          f"{', '.join(RESUME_CHANGEABLE)} may change when a run resumes (start a new run instead)")


def run_differences(ckpt, cfg, model_cfg):
    """{key: (the run's value, this command's value)} for every setting in which this command differs from the run
    saved in ckpt. vocab_size is left out: the data sets it (its keys are compared)."""
    run_cfg = ckpt["train_config"]
    diff = {k: (run_cfg[k], v) for k, v in cfg.items()
            if k in run_cfg and k not in RESUME_NEUTRAL and run_cfg[k] != v}
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
                if set(refused) <= set(RESUME_CHANGEABLE) else
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
        lock_run_dir(out)
        clean_up_after_kill(path, say)
        if os.path.exists(os.path.join(out, "result.json")):  # written at a run's end: this run has not ended
            os.remove(os.path.join(out, "result.json"))
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


_held_locks = {}  # run directory -> the open lock file this process holds (the OS releases it when we die)


@contextlib.contextmanager
def no_empty_run_dir_on_refusal(out):
    """A run refused before it starts (a --resume without a checkpoint, data that fails its checks) leaves no run
    directory behind that it made itself: a new, still empty one (its lock file aside) is removed."""
    made = not os.path.exists(out)
    try:
        yield
    except ConfigError:
        if made and os.path.isdir(out) and set(os.listdir(out)) <= {".lock"}:
            lock = _held_locks.pop(os.path.realpath(out), None)
            if lock is not None:
                lock.close()
            shutil.rmtree(out, ignore_errors=True)
        raise


def lock_run_dir(out):
    """One run per directory: an exclusive lock on out_dir/.lock for the rest of this process's life (flock; the OS
    drops it when the process dies, so a kill never leaves a stale lock). Another process's run in it is refused,
    naming its pid; this process may open its own directory again (a test's second run)."""
    real = os.path.realpath(out)
    if real in _held_locks:
        return
    f = open(os.path.join(out, ".lock"), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise ConfigError(f"{out} is in use by another run (process {holder}): wait for it to end, or choose "
                          "another --out_dir") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    _held_locks[real] = f


# a run stopped by one of these saves a checkpoint to resume from, then exits with EXIT_RESUMABLE
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2")  # Ctrl-C, schedulers and `timeout`, Slurm's warnings


class SignalStop:
    """While a run trains: the first of STOP_SIGNALS asks it to stop after the current step (it saves and exits
    with EXIT_RESUMABLE); a second Ctrl-C stops at once. restore() puts the previous handlers back."""

    def __init__(self, say):
        self.received, self.say = None, say
        self.previous = {name: signal.signal(getattr(signal, name), self.handle) for name in STOP_SIGNALS}

    def handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.received is not None and name == "SIGINT":
            self.say("second Ctrl-C: stopping now, without saving (the last checkpoint stays)")
            raise SystemExit(130)
        self.received = name
        self.say(f"{name}: finishing this step, then saving a checkpoint to resume from (Ctrl-C again: stop now)")

    def due(self, env, log_step):
        """True when the run should stop now. With DDP the ranks agree at log steps, where the loop reads values on
        the host anyway (one all_reduce of the flag): no rank leaves a collective the others wait in."""
        if not env.ddp:
            return self.received is not None
        if not log_step:
            return False
        flag = torch.tensor(float(getattr(signal, self.received) if self.received else 0), device=env.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # the signal's number: every rank stops under its name
        if flag and self.received is None:  # another rank's signal
            self.received = signal.Signals(int(flag)).name
        return bool(flag)

    def restore(self):
        for name, handler in self.previous.items():
            signal.signal(getattr(signal, name), handler)


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
    """Write atomically: a killed run never leaves a half-written ckpt.pt, and a write that fails (a full disk)
    leaves the last complete one as it was and stops the run in one line."""
    tmp = path + ".tmp"
    try:
        torch.save(state, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError of its zip writer
        if os.path.exists(tmp):
            os.remove(tmp)
        raise write_failed(e, path, tmp) from None
    os.replace(tmp, path)


def write_failed(e, path, tmp):
    """The one line for a checkpoint write that failed (its partial tmp already removed): a full disk named as
    such, and whether the last complete checkpoint at path is intact."""
    folder = os.path.dirname(os.path.abspath(path))
    kept = f"the last checkpoint, {path}, is intact" if os.path.exists(path) else "no checkpoint was written"
    free = shutil.disk_usage(folder).free
    if getattr(e, "errno", None) == errno.ENOSPC or free < 64 * 2 ** 20:
        return ConfigError(f"no space left on {folder} ({free / 2 ** 20:.0f} MiB free) writing {tmp}: {kept}; "
                           "free some space, then --resume")
    return ConfigError(f"cannot write {tmp} ({str(e)[:80]}): {kept}")


class Checkpoints:
    """When to write ckpt.pt after an evaluation. A val loss at or above the unigram entropy of the training
    tokens predicts no better than token frequencies: after a checkpoint below that line it is a collapse (never
    saved over that checkpoint, and a stop when it lasts collapse_evals evals); before, a warning, and a stop when
    collapse_evals evals after warm-up are no better than guessing uniformly (ln V: a diverged or stuck run)."""

    def __init__(self, cfg, env, entropy, vocab_size, ckpt, start_step, best_val, sharded=None):
        self.cfg, self.env, self.say, self.entropy, self.uniform = cfg, env, env.say, entropy, math.log(vocab_size)
        self.uniform_evals = 0  # evals in a row after warm-up at or above (within 1% of) ln V
        self.path, self.master = checkpoint_path(cfg), env.master
        self.sharded = sharded  # --fsdp: (model, optimizer), saved by every rank
        self.last_saved = start_step if ckpt is not None else None
        self.saved_val = ckpt.get("val_loss", best_val) if ckpt is not None else float("inf")
        self.collapsed_evals = 0  # evals in a row back at or above the entropy (never saved: 0 at a checkpoint)

    def read_val(self, step, val, non_finite, model):
        """The val loss (a device tensor) as a float, read in one host read with the training losses' non-finite
        flag and the weights' finiteness: a stop if any of them is not finite."""
        bad, val_loss, weights_ok = read_scalars([non_finite, val, weights_finite(model)], self.env, reduce=1)
        if bad or not math.isfinite(val_loss) or not weights_ok:
            self.stop(f"step {step}: the loss or the weights are not finite (val loss {val_loss})")
        return val_loss

    def after_eval(self, step, val_loss, may_save, state):
        """Save state() unless val_loss is a collapse; stop when the collapse or a divergence lasts."""
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
            else:
                self.write(state)
        if may_save and not keep:
            self.last_saved, self.saved_val = step, val_loss
        if self.cfg["collapse_evals"] and self.collapsed_evals >= self.cfg["collapse_evals"]:
            self.stop(f"step {step}: training collapsed (val loss back at or above the unigram entropy "
                      f"{self.entropy:.4f} for {self.collapsed_evals} evals)")
        if self.cfg["collapse_evals"] and self.uniform_evals >= self.cfg["collapse_evals"]:
            self.stop(f"step {step}: training diverged or is stuck (val loss {val_loss:.4f}, no better than "
                      f"guessing uniformly, ln V = {self.uniform:.4f}, for {self.uniform_evals} evals after warm-up)")

    def write(self, state):
        """Write state() (a dict as ckpt.pt holds it): every rank its shards with --fsdp, else rank 0 (state None
        on the other ranks)."""
        if self.sharded is not None:
            run_state = {k: v for k, v in state().items() if k not in ("model", "optimizer")}
            save_sharded(self.path, *self.sharded, run_state, self.master)
        elif state is not None:
            save_checkpoint(self.path, state())

    def save_for_resume(self, step, signal_name, state):
        """After a stop signal: a checkpoint to resume from at `step`, unless the collapse guard is keeping the last
        good one; then exit with EXIT_RESUMABLE."""
        if self.cfg["collapse_evals"] and (self.collapsed_evals or self.uniform_evals):
            self.say(f"{signal_name}: stopped before step {step}, not saved, to keep the checkpoint of step "
                     f"{self.last_saved} (val loss {self.saved_val:.4f}); --resume continues from there")
        else:
            self.write(state)
            self.say(f"{signal_name}: stopped before step {step} and saved {self.path}; add --resume to the same "
                     "command to continue")
        if self.env.ddp:
            dist.destroy_process_group()
        raise SystemExit(EXIT_RESUMABLE)

    def stop(self, reason):
        if self.saved_val < self.entropy:
            self.say(f"{reason}; stopping. The last good checkpoint is {self.path} (step {self.last_saved}, val loss "
                     f"{self.saved_val:.4f}): lower lr, raise warmup_iters or turn on grad_clip, then --resume")
        else:
            self.say(f"{reason}; stopping. No checkpoint got below the unigram entropy (the last, {self.path}, is "
                     f"of step {self.last_saved}): start again with a lower lr or a longer warm-up (--overwrite)")
        if self.env.ddp:
            dist.destroy_process_group()
        raise SystemExit(1)


# -----------------------------------------------------------------------------------------------------------------
# FSDP2's checkpoints (torch.distributed.checkpoint, DCP): every rank writes and reads its shards

def optimizer_parts(optimizer):
    """The torch optimizers inside ours (MuonHAdamW steps two)."""
    return optimizer.parts() if hasattr(optimizer, "parts") else [optimizer]


def save_sharded(path, model, optimizer, run_state, master):
    """Every rank writes its shards of the weights and the optimizer state (DCP) into path.tmp, rank 0 adds run.pt
    (the rest of what ckpt.pt holds), then replace_dir swaps it in: a kill -9 at any moment leaves a complete
    checkpoint (clean_up_after_kill). Before the first optimizer step there is no optimizer state to save."""
    import torch.distributed.checkpoint as dcp  # heavy (most of a second): --fsdp checkpoints only
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict  # (--fsdp only)
    tmp = path + ".tmp"
    parts = optimizer_parts(optimizer)
    state = {"model": get_model_state_dict(model)}
    if any(o.state for o in parts):
        state["optimizer"] = get_optimizer_state_dict(model, parts)
    from torch.distributed.checkpoint.api import CheckpointException  # (a BaseException, not an Exception)
    try:
        dcp.save(state, checkpoint_id=tmp)  # returns once every shard and the metadata are written (and fsynced)
    except (OSError, RuntimeError, CheckpointException) as e:  # a full disk on any rank: the last one stays
        if master:
            shutil.rmtree(tmp, ignore_errors=True)
        raise write_failed(e, path, tmp) from None
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
    import torch.distributed.checkpoint as dcp  # heavy (most of a second): --fsdp checkpoints only
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,  # (--fsdp)
                                                         set_model_state_dict, set_optimizer_state_dict)
    parts = optimizer_parts(optimizer)
    state = {"model": get_model_state_dict(model)}
    if optimizer_saved:
        state["optimizer"] = get_optimizer_state_dict(model, parts)
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])
    if optimizer_saved:
        set_optimizer_state_dict(model, parts, state["optimizer"])
