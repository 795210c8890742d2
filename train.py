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
main() reads top to bottom: settings, model and optimizer, data, the loop (evaluation and checkpoints in it), the
end. Processes and devices live in distributed.py, checkpoints and the rules that keep a run safe in checkpoint.py,
the optimizers and the training step in optim.py, the run's log (config.json, log.jsonl, result.json) in runlog.py.
A run directory (out_dir) holds ckpt.pt (with --fsdp: ckpt/, a torch.distributed.checkpoint directory that
sample.py and the analyses read as well), config.json, log.jsonl (one JSON object per logged step) and, at the end,
result.json.
"""
import torch
import torch.distributed as dist

import accounting
import kernels
from checkpoint import (Checkpoints, SignalStop, check_training, checkpoint_path, load_sharded,
                        no_empty_run_dir_on_refusal, open_run)
import configurator
from configurator import configure, run
from data import load_for_run, training_vocab
from distributed import is_sharded, setup, shard_model, wrap_ddp
from loop import trajectory_rng
from model import GPT, GPTConfig
from optim import lr_multiplier, make_optimizer, set_lr, train_step
from runlog import RunLog, print_sample

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
verify_data = False  # also check large token files against meta.json's sha256 (up to 256 MiB together, every run does)
# optimization
batch_size = 16  # sequences per micro-batch (per rank)
grad_accum = 1  # micro-batches per step across ALL ranks (must be divisible by the number of ranks)
max_iters = 800  # optimizer steps (ignored when flops_budget > 0)
flops_budget = 0.0  # if > 0: train for budget / (FLOPs per token) tokens (accounting.py)
flops_convention = "lee"  # lee (6*N_active) | schwethelm (6*executed params + attention), see accounting.py
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
device = "auto"  # auto (cuda, else mps, else cpu) | cpu | mps | cuda | cuda:N
dtype = "auto"  # auto: bfloat16 on CUDA >= 8.0, float16 (loss-scaled) on older GPUs, else float32 | the three
compile = False  # torch.compile each block and the loss (GPT.compile: the depth loop stays in Python)
cpu_kernels = True  # eager CPU runs: the fast paths of kernels.py (same math; a resume keeps the run's setting)
threads = 0  # torch threads on CPU; 0 = auto: OMP_NUM_THREADS if set, else the cores the load average leaves idle
ddp_find_unused = False  # DDP find_unused_parameters (needed when some weights get no gradient in a step)
fsdp = False  # torchrun: shard weights, gradients, optimizer state over the ranks (FSDP2); checkpoints become ckpt/
activation_checkpointing = False  # recompute each block's activations in the backward (GPT.run_block): less memory
seed = 1337  # seeds the init and the batch order
# ---------------------------------------------------------------------------------------------------------------
_CHOICES = dict(tokenizer=("auto", "byte", "gpt2"), flops_convention=("lee", "schwethelm"),
                optimizer=("adamw", "muonh"), schedule=("wsd_sqrt", "wsd_linear", "cosine", "linear", "constant"),
                dtype=("auto", "float32", "bfloat16", "float16"), wandb_mode=("online", "offline"))


def defaults():
    """This file's own keys and their defaults (the settings above, as main() reads them): `scaling.py count` accepts
    them, and the sweeps' planner (lab/sweep.py) parses a point exactly as a run will, stopping on a bad key first."""
    return {k: v for k, v in globals().items() if not k.startswith("_") and isinstance(v, configurator.SIMPLE_TYPES)}


# ---------------------------------------------------------------------------------------------------------------
# the run's parts, in the order main uses them

def to_device(x, y, device):
    """A batch (TokenData's numpy arrays) as tensors on the device; on CUDA through pinned memory, asynchronously (a
    copy from pageable memory would wait for the device to finish its queued work first)."""
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    if str(device).startswith("cuda"):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


class Prefetcher:
    """A run's batches one ahead: get(key, next_key) returns the batch fetch(key) on the device and, before that,
    reads the batch of next_key and queues its copy (to_device), so on a GPU the host prepares it while the device
    still works through the steps queued before. fetch(key) -> (x, y) on the CPU must depend on the key only: the
    batches are the same with or without the look-ahead (a key that was not prefetched is fetched on the spot)."""

    def __init__(self, fetch, device):
        self.fetch, self.device, self.ahead = fetch, device, None

    def get(self, key, next_key):
        batch = self.ahead[1] if self.ahead is not None and self.ahead[0] == key else self.load(key)
        self.ahead = (next_key, self.load(next_key))
        return batch

    def load(self, key):
        return to_device(*self.fetch(key), self.device)


@torch.no_grad()
def evaluate(model, data, cfg, env):
    """Mean cross-entropy over the fixed validation tokens (windows split across ranks, summed in one all_reduce),
    as a tensor on the device: accumulated there, read by the caller (one host sync per evaluation)."""
    model.eval()
    total = torch.zeros(2, device=env.device, dtype=torch.float64)
    batches = list(data.val_batches(cfg["batch_size"], model.config.block_size, cfg["eval_tokens"]))
    for x, y in batches[env.rank::env.world_size]:
        x, y = to_device(x, y, env.device)
        with env.ctx:
            _, loss, _ = model(x, y)
        total[0] += loss.detach().double() * y.numel()
        total[1] += y.numel()
    if is_sharded(model):  # every rank runs as many forwards as the others (each gathers weights)
        for _ in range(-(-len(batches) // env.world_size) - len(batches[env.rank::env.world_size])):
            with env.ctx:
                model(batches[0][0].to(env.device))
    if env.world_size > 1:
        dist.all_reduce(total)
    model.train()
    return total[0] / total[1]


def build(cfg, model_cfg, ckpt, env):
    """The model (checkpointed and compiled blocks, DDP-wrapped or sharded: `model`; the bare one: `raw_model`),
    its optimizer, fp16's loss scaler (None in other dtypes), and the step and best validation loss to start from (a
    resumed checkpoint's)."""
    torch.manual_seed(cfg["seed"])
    raw_model = GPT(model_cfg, cpu_kernels=kernels.wanted(env.device, cfg["cpu_kernels"] and not cfg["compile"]),
                    activation_checkpointing=cfg["activation_checkpointing"])
    raw_model.init_weights(cfg["seed"])
    raw_model.to(env.device)
    if cfg["compile"]:
        raw_model.compile()  # each block and the loss (GPT.compile)
    if cfg["fsdp"]:
        shard_model(raw_model, env.dtype)
    optimizer = make_optimizer(raw_model, cfg, env.device_type)
    scaler = torch.amp.GradScaler(env.device_type) if env.dtype == torch.float16 else None  # fp16's loss scale
    start_step, best_val = 0, float("inf")
    if ckpt is not None:
        if cfg["fsdp"]:
            load_sharded(checkpoint_path(cfg), raw_model, optimizer, ckpt["optimizer_saved"])
        else:
            raw_model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        start_step, best_val = ckpt["step"], ckpt["best_val"]
        torch.set_rng_state(ckpt["rng_cpu"])
        env.say(f"resumed {cfg['out_dir']} at step {start_step}")
    model = wrap_ddp(raw_model, env, cfg["ddp_find_unused"]) if env.ddp and not cfg["fsdp"] else raw_model
    return model, raw_model, optimizer, scaler, start_step, best_val


def steps_for(cfg, raw_model):
    """(optimizer steps, tokens per step, FLOPs per token in the run's convention): max_iters, or the steps that
    spend flops_budget."""
    T = raw_model.config.block_size
    flops_per_token = accounting.flops_per_token(raw_model, cfg["flops_convention"], T)
    tokens_per_step = cfg["batch_size"] * T * cfg["grad_accum"]
    if cfg["flops_budget"] > 0:
        return max(1, round(cfg["flops_budget"] / flops_per_token / tokens_per_step)), tokens_per_step, flops_per_token
    return cfg["max_iters"], tokens_per_step, flops_per_token


def main(argv=None):
    # ---- settings: this file's keys, GPTConfig's, a config file, --key=value; the run directory checked ----
    cfg, model_cfg = configure(defaults(), GPTConfig, argv, doc_source=__file__, choices=_CHOICES)
    check_training(cfg)  # the training keys configure() cannot judge alone: checkpoint.py
    env = setup(cfg)  # processes (torchrun), device, precision, threads: distributed.py
    cfg["tokenizer"], model_cfg.vocab_size = training_vocab(cfg["tokenizer"], model_cfg.vocab_size, env.say)
    with no_empty_run_dir_on_refusal(cfg["out_dir"]):  # refused before it starts: no empty directory left
        ckpt, changes = open_run(cfg, model_cfg, env.master, env.say)  # refusals and resume checks: checkpoint.py
        if ckpt is not None:
            model_cfg = GPTConfig(**ckpt["model_config"])

        # ---- model, optimizer, data ----
        model, raw_model, optimizer, scaler, start_step, best_val = build(cfg, model_cfg, ckpt, env)
        T = model_cfg.block_size
        max_steps, tokens_per_step, flops_per_token = steps_for(cfg, raw_model)
        data = load_for_run(cfg, env, T, max(max_steps * tokens_per_step, T + 1), dist.barrier)  # what it draws
    entropy = data.unigram_entropy()  # what a model that ignores the context scores: the collapse line
    log = RunLog(cfg, env, raw_model, data, start_step if ckpt is not None else None, changes,
                 ckpt.get("wall_s", 0.0) if ckpt is not None else 0.0)
    log.announce(max_steps, tokens_per_step, flops_per_token)
    checkpoints = Checkpoints(cfg, env, entropy, model_cfg.vocab_size, ckpt, start_step, best_val,
                              sharded=(raw_model, optimizer) if cfg["fsdp"] else None)  # and the collapse guard
    batches = Prefetcher(lambda key: data.get_batch(*key, env.rank, env.world_size, env.accum, cfg["batch_size"], T,
                                                    cfg["seed"]), env.device)

    # ---- the loop ----
    # Nothing in a steady-state step reads a value on the host (a GPU sync): the loss and a non-finite flag stay on
    # the device and are read, with the rest of a log record, in one read at log steps (and the flag at eval steps).
    non_finite = torch.zeros((), dtype=torch.bool, device=env.device)  # any training loss not finite since a read
    val_loss = ckpt.get("val_loss", float("nan")) if ckpt is not None else float("nan")

    def state(at):  # what a run resumed at step `at` needs (written only when saved)
        return None if not (env.master or cfg["fsdp"]) else lambda: dict(
            model=raw_model.state_dict(), optimizer=optimizer.state_dict(), model_config=model_cfg.to_dict(),
            scaler=scaler.state_dict() if scaler is not None else None,
            train_config=cfg, step=at, best_val=best_val, val_loss=val_loss, rng_cpu=torch.get_rng_state(),
            data_position=dict(step=at, micro_batches_done=at * cfg["grad_accum"]), wall_s=log.wall())
    stop = SignalStop(env.say)  # SIGINT, SIGTERM, SIGUSR1/2: finish the step, save, exit (checkpoint.py)
    try:
        for step in range(start_step, max_steps + 1):
            if step % cfg["eval_interval"] == 0 or step == max_steps:  # evaluation and checkpoint
                with log.paused():  # throughput counts training time only
                    val_loss = checkpoints.read_val(step, evaluate(raw_model, data, cfg, env), non_finite, raw_model)
                    best_val = min(best_val, val_loss)
                    log.val(step, max_steps, tokens_per_step, val_loss)
                    checkpoints.after_eval(step, val_loss, step > start_step or ckpt is None, state(step))
            if step == max_steps:
                break

            schedule = lr_multiplier(step, max_steps, cfg)
            set_lr(optimizer, cfg["lr"] * schedule)

            def get_batch(micro):  # this micro-batch, and the next one prefetched
                return batches.get((step, micro), (step, micro + 1) if micro + 1 < env.accum else (step + 1, 0))

            def rng(micro):  # LoopFormer's trajectory sampler, seeded by the global micro-batch index
                return trajectory_rng(cfg["seed"], step * cfg["grad_accum"] + micro * env.world_size + env.rank)

            loss, aux, grad_norm = train_step(model, optimizer, get_batch, env.accum, env.ctx, cfg["grad_clip"],
                                              cfg["weight_decay"] if cfg["wd_independent"] else 0.0, schedule,
                                              env.world_size, rng, scaler)
            non_finite |= ~torch.isfinite(loss)
            logged = log.train(step, max_steps, tokens_per_step, loss, aux, grad_norm, cfg["lr"] * schedule, non_finite,
                               checkpoints.stop)
            if stop.due(env, logged):
                checkpoints.save_for_resume(step + 1, stop.received, state(step + 1))
    finally:
        stop.restore()

    # ---- the end: result.json, a sample ----
    log.finish(max_steps, tokens_per_step, flops_per_token, val_loss, best_val, entropy)
    if cfg["sample_tokens"] > 0 and (env.master or cfg["fsdp"]):  # a sharded model generates on every rank
        print_sample(raw_model, data.meta["tokenizer"], cfg, env)
    log.close()
    if env.ddp:
        dist.barrier()  # tear down together: a rank that leaves while the other still works can abort in gloo
        dist.destroy_process_group()


if __name__ == "__main__":
    run(main)
