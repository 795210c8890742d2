"""Run by tests/test_train.py under torchrun with 2 gloo ranks: one launch (each costs ~13 s of the suite) holds all
the sharded runs that test_fsdp_* check afterwards, and the DDP run of test_train's two_ranks fixture.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/fsdp_worker.py OUT --data_source=...

- OUT/two_ranks: a plain DDP run of the keys in OUT/two_ranks.json (tests/test_train.py's TINY + DDP_RUN, which
  test_ddp_two_ranks_match_one_process_with_accumulation runs in one process and the signalled ranks resume to);
- OUT/<case>_ddp and OUT/<case>_fsdp: the same 10 steps of 2 micro-batches through train.main with DDP and with
  --fsdp, for a plain GPT (AdamW, clipping, independent weight decay), a looped model (a prelude, one shared block
  called once per pass, a coda) and a looped MoE model with bias balancing whose FSDP run also checkpoints
  activations; and 3 steps with MuonH (on DTensor shards its Newton-Schulz iterations gather each matrix: 0.5 s a
  step here);
- OUT/bf16: a few --fsdp steps in bfloat16;
- OUT/memory_rank<r>.json: the bytes of parameters, gradients and optimizer state that rank r holds under FSDP,
  beside scaling.memory_per_gpu's prediction;
- OUT/cut: the gpt case's --fsdp run again, killed (SIGKILL) while it swaps in its step-10 (last) checkpoint, between
  the two renames; the test resumes it with torchrun train.py --resume and compares it with OUT/gpt_fsdp.
"""
import json
import os
import signal
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import distributed  # noqa: E402
import runlog  # noqa: E402
import train  # noqa: E402
from model import GPT  # noqa: E402
from model import GPTConfig  # noqa: E402
from optim import make_optimizer  # noqa: E402
import scaling  # noqa: E402

TINY = ["--n_layer=2", "--n_embd=64", "--head_dim=16", "--block_size=32", "--batch_size=4", "--sample_tokens=0",
        "--eval_tokens=1024", "--log_interval=1", "--grad_accum=2"]
RUN = ["--max_iters=10", "--eval_interval=5"]
CASES = {
    "gpt": [],
    "looped": ["--n_prelude=1", "--n_layer=1", "--n_coda=1", "--n_loop=3"],
    "moe": ["--n_layer=1", "--n_loop=2", "--n_expert=4", "--top_k=2", "--moe_bias_rate=0.01"],
    "muonh": ["--optimizer=muonh", "--n_layer=1", "--max_iters=3"],
}
FSDP_EXTRA = {"moe": ["--activation_checkpointing=True"]}


def local_bytes(tensors):
    """Bytes this rank holds of these tensors (a DTensor: its local shard)."""
    return sum(t.to_local().nbytes if hasattr(t, "to_local") else t.nbytes for t in tensors)


def measure_memory(root, tiny, rank):
    """One sharded step of the gpt case's model and optimizer: the bytes held after the backward (parameters,
    gradients) and after the optimizer step (its state), and what scaling.py predicts for 2 GPUs."""
    defaults = {k: v for k, v in vars(train).items() if not k.startswith("_")}
    cfg, model_cfg = train.configure(defaults, GPTConfig, tiny)
    model = GPT(model_cfg).init_weights(0)
    distributed.shard_model(model, torch.float32)
    optimizer = make_optimizer(model, cfg, "cpu")
    x = torch.randint(0, 257, (cfg["batch_size"], model_cfg.block_size))
    model(x, x)[1].backward()
    held = dict(params=local_bytes(model.parameters()), grads=local_bytes(p.grad for p in model.parameters()))
    optimizer.step()
    held["optimizer"] = local_bytes(t for s in optimizer.state.values() for t in s.values())
    with torch.device("meta"):
        predicted = scaling.memory_per_gpu(GPT(model_cfg), cfg, gpus=2)
    with open(os.path.join(root, f"memory_rank{rank}.json"), "w") as f:
        json.dump(dict(held=held, predicted=predicted), f)


def kill_between_the_renames():
    """SIGKILL this process right after the second rename of an old checkpoint to ckpt.old (step 10's swap; rank 0
    renames, and torchrun then stops rank 1)."""
    real, renamed = os.replace, []

    def replace(src, dst):
        real(src, dst)
        if dst.endswith("ckpt.old"):
            renamed.append(dst)
            if len(renamed) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace  # the os module every file of the run uses (checkpoint.py renames)


def main():
    root, data = sys.argv[1], sys.argv[2:]
    rank = int(os.environ["RANK"])
    runlog.peak_flops = lambda *a: 1e12  # not the 2 s matmul timing: MFU is not tested here
    # one process group for every run: initialising a second one in the same process after destroying the first
    # hangs now and then in torch 2.13 (one rank returns from init_process_group, the other waits for ever)
    dist.init_process_group("gloo")
    dist.init_process_group = dist.destroy_process_group = lambda *args, **kwargs: None
    tiny = TINY + data
    with open(os.path.join(root, "two_ranks.json")) as f:
        train.main(json.load(f) + data + [f"--out_dir={root}/two_ranks"])
    for case, extra in CASES.items():
        for mode in ("ddp", "fsdp"):
            more = ["--fsdp=True"] + FSDP_EXTRA.get(case, []) if mode == "fsdp" else []
            train.main(tiny + RUN + extra + more + [f"--out_dir={root}/{case}_{mode}"])
    train.main(tiny + ["--fsdp=True", "--dtype=bfloat16", "--max_iters=3", "--eval_interval=3",
                       f"--out_dir={root}/bf16"])
    measure_memory(root, tiny, rank)
    kill_between_the_renames()
    train.main(tiny + RUN + ["--fsdp=True", f"--out_dir={root}/cut"])
    raise SystemExit("the cut run was not killed")


if __name__ == "__main__":
    main()
