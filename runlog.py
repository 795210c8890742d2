"""
The record of a training run: config.json, log.jsonl (one JSON object per logged step), the console line of each
record, result.json and a sample of text at the end, and the run's clock (its throughput counts training time only;
a resumed run adds the seconds its earlier segments trained). With --wandb_project every record also goes to a
Weights & Biases run.
train.py makes one RunLog and calls it at its log, evaluation and end steps; rank 0 writes, every rank reads the
scalars of a log line together (distributed.read_scalars).
"""
import contextlib
import json
import math
import os
import time

import torch

import accounting
from data import get_tokenizer
from distributed import peak_flops, read_scalars


class RunLog:
    """config.json, log.jsonl and the console: one JSON object and one line per record (rank 0 only), and the
    run's clock (throughput counts training time only). A resumed run first drops the lines it will write again.
    With --wandb_project every record also goes to a wandb run (wandb is imported only then)."""

    def __init__(self, cfg, env, model, data, resume_step=None, changes=None, wall_before=0.0):
        self.cfg, self.env, self.model, self.master, self.wandb = cfg, env, model, env.master, None
        self.wall_before = wall_before  # seconds the run trained before this segment (a resumed run)
        self.path = os.path.join(cfg["out_dir"], "log.jsonl")
        config = {"train": cfg, "model": model.config.to_dict(), "world_size": env.world_size}
        if self.master:
            with open(os.path.join(cfg["out_dir"], "config.json"), "w") as f:
                json.dump({**config, "data": data.meta}, f, indent=1)
            kept = []
            if resume_step is not None and os.path.exists(self.path):
                kept = [line for line in open(self.path) if json.loads(line)["step"] < resume_step]
            with open(self.path, "w") as f:
                f.writelines(kept)
            if cfg["wandb_project"]:
                import wandb  # optional: --wandb_project only
                self.wandb = wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run_name"] or None,
                                        mode=cfg["wandb_mode"], config=config)
        if changes:
            self({"step": resume_step, "event": "resume_changes", "changed": {k: list(v) for k, v in changes.items()}},
                 "resumed with changed settings (not an exact continuation; max_iters and flops_budget move the "
                 "schedule's decay): " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items()))
        self.tokens_since, self.train_loss = 0, float("nan")

    def __call__(self, record, line):
        if self.master:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
            if self.wandb is not None:
                self.wandb.log(record, step=record["step"])
            print(line, flush=True)

    def announce(self, max_steps, tokens_per_step, flops_per_token):
        """The model and the run in two lines; the peak FLOP/s that MFU divides by (None: no MFU)."""
        cfg, env, model = self.cfg, self.env, self.model
        counts = accounting.count_params(model)
        self.mfu_flops = accounting.flops_per_token(model, "schwethelm", model.config.block_size)  # attention included
        peak = peak_flops(env.device_type, env.dtype, env.say)
        self.peak = peak * env.world_size if peak else None
        env.say(f"model: {describe(model.config)}, {counts['params_unique']:,} parameters "
                f"({counts['params_active_nonembed']:,} active non-embedding), {flops_per_token:.3g} FLOPs/token "
                f"({cfg['flops_convention']})")
        env.say(f"training: {max_steps} steps x {tokens_per_step:,} tokens on {env.world_size} x {env.device} in "
                f"{str(env.dtype).replace('torch.', '')}{', compiled' if cfg['compile'] else ''}; peak for MFU "
                f"{f'{self.peak:.3g} FLOP/s' if self.peak else 'unknown (no MFU)'}")
        if 0 < max_steps <= cfg["warmup_iters"]:  # said, not changed: the schedule is the one asked for
            env.say(f"warning: the run's {max_steps} steps end within its warm-up (warmup_iters={cfg['warmup_iters']}):"
                    f" the LR only rises, to {max_steps / cfg['warmup_iters']:.0%} of --lr, and never decays; lower "
                    "--warmup_iters or train longer")
        if env.device_type == "cuda" and model.config.padded_vocab % 64 and model.config.padded_vocab > 4096:
            env.say(f"note: the head has {model.config.padded_vocab} rows, not a multiple of 64, for which GPUs have "
                    "no fast matmul kernel: --vocab_pad_multiple=64 runs it several times faster")
        self.t_start = self.t_last = time.time()

    def wall(self):
        """Seconds since the run started, summed over its segments."""
        return self.wall_before + time.time() - self.t_start

    @contextlib.contextmanager
    def paused(self):
        """Time inside does not count as training time."""
        t = time.time()
        yield
        self.t_last += time.time() - t

    def val(self, step, max_steps, tokens_per_step, val_loss):
        self({"step": step, "tokens": step * tokens_per_step, "val_loss": val_loss},
             f"step {step}/{max_steps} | val loss {val_loss:.4f}")

    def train(self, step, max_steps, tokens_per_step, loss, aux, grad_norm, lr, non_finite, stop):
        """After each step; at log steps (returns True) one host read of everything logged (stop(reason) if a loss
        is not finite), one record and one line."""
        self.tokens_since += tokens_per_step
        if not (step % self.cfg["log_interval"] == 0 or step == max_steps - 1):
            return False
        extra = list(aux.values()) + ([] if grad_norm is None else [grad_norm])
        self.train_loss, bad, *extra = read_scalars([loss, non_finite] + extra, self.env, reduce=2)
        if bad:
            stop(f"step {step}: a training loss since the last log line is not finite (now {self.train_loss})")
        tok_s = self.tokens_since / (time.time() - self.t_last)
        mfu = tok_s * self.mfu_flops / self.peak if self.peak else None
        eta = (max_steps - step - 1) * tokens_per_step / tok_s
        record = {"step": step, "tokens": (step + 1) * tokens_per_step, "loss": self.train_loss, "lr": lr,
                  "tokens_per_s": tok_s, "mfu": mfu}
        record.update(zip(aux, extra))
        if grad_norm is not None:
            record["grad_norm"] = extra[-1]
        text = f"step {step}/{max_steps} | loss {self.train_loss:.4f}"
        text += "".join(f" | {k} {v:.4f}" for k, v in zip(aux, extra))
        text += f" | lr {lr:.2e} | {tok_s:,.0f} tok/s | mfu {f'{100 * mfu:.1f}%' if mfu is not None else 'n/a'}"
        if self.env.device_type == "cuda":  # the allocator's own count: no sync
            record["peak_mem_gib"] = torch.cuda.max_memory_allocated(self.env.device) / 2 ** 30
            text += f" | peak mem {record['peak_mem_gib']:.1f} GiB"
        self(record, f"{text} | eta {format_time(eta)}")
        self.t_last, self.tokens_since = time.time(), 0
        return True

    def finish(self, max_steps, tokens_per_step, flops_per_token, val_loss, best_val, entropy):
        """result.json (strict JSON: a value that is not a finite number is null) and the closing line (rank 0)."""
        wall = self.wall()
        if not self.master:
            return
        result = {"val_loss": val_loss, "best_val_loss": best_val, "train_loss": self.train_loss, "steps": max_steps,
                  "tokens": max_steps * tokens_per_step, "flops": max_steps * tokens_per_step * flops_per_token,
                  "flops_convention": self.cfg["flops_convention"], "wall_s": wall, "unigram_entropy": entropy,
                  "above_unigram_entropy": val_loss >= entropy, **accounting.count_params(self.model),
                  "device": str(self.env.device), "dtype": str(self.env.dtype).removeprefix("torch.")}  # as resolved
        result = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in result.items()}
        with open(os.path.join(self.cfg["out_dir"], "result.json"), "w") as f:
            json.dump(result, f, indent=1, allow_nan=False)
        self.env.say(f"done in {format_time(wall)}: val loss {val_loss:.4f} nats (unigram entropy {entropy:.4f}); run "
                     f"directory {self.cfg['out_dir']}")
        if val_loss >= entropy:
            self.env.say("warning: the run ended at or above the unigram entropy: it learned nothing beyond token "
                         "frequencies (try another lr; see log.jsonl)")

    def close(self):
        if self.wandb is not None:
            self.wandb.finish()


def print_sample(model, tokenizer, cfg, env):
    """The run's closing sample: sample_tokens tokens after "And the", from the trained model."""
    tok = get_tokenizer(tokenizer)
    prompt = torch.tensor([tok.encode("And the")], device=env.device)
    n = min(cfg["sample_tokens"], model.config.block_size - prompt.size(1))
    g = torch.Generator(device=env.device).manual_seed(cfg["seed"])
    model.eval()
    with env.ctx:
        out = model.generate(prompt, n, temperature=0.8, top_k=50, generator=g)
    env.say("sample:\n" + tok.decode(out[0].tolist()))


def describe(c):
    """The model in a few words: its depth plan and its FFN."""
    depth = f"{c.n_layer} layers" + (f" x {c.n_loop} passes" if c.n_loop > 1 else "")
    depth = f"{c.n_prelude} + {depth} + {c.n_coda}" if c.n_prelude or c.n_coda else depth
    return depth + (f", {c.n_expert} experts (top {c.top_k})" if c.n_expert else "")


def format_time(seconds):
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"
