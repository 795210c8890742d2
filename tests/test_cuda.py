"""The GPU path on a GPU: skipped without CUDA (CI has none; run `python3 -m pytest -q tests/test_cuda.py` where one
is). Every model family computes on CUDA in fp32 what it computes on the CPU; cached decoding there is the full
forward; a compiled block is the eager one; the attention call takes the flash kernel in bf16; and train.py runs
compiled in bf16, learns, and a run stopped by a signal resumes to the uninterrupted run's losses."""
import copy

import pytest
import torch

import early_exit as ee

import exits
import reference
import train
from loop import is_looped, trajectory_rng
from model import GPT, GPTConfig
from test_train import TINY, losses, read_log, stop_with_signal

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
COMPILED = ["moe_grouped", "mla_looped_moe", "loopformer_shortcut", "hyper_connections"]


@pytest.fixture(autouse=True)
def exact_fp32():
    """fp32 matmuls in full fp32 (no TF32), so CUDA and CPU differ only by summation order."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def relative_error(a, b):
    """||a - b|| / ||b|| in float64 on the CPU: fp32 with another summation order lands far under 1e-4."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def moved(got, want):
    """The outputs that differ by more than fp32 rounding: relative error over 1e-4, unless every element is within
    1e-6 of its reference (a quantity near 0, such as the KL between a tiny model's consecutive passes, has no
    meaningful relative error)."""
    assert got.keys() == want.keys()
    far = {k: relative_error(got[k], want[k]) for k in want}
    return {k: e for k, e in far.items()
            if e > 1e-4 and (got[k].detach().double().cpu() - want[k].detach().double().cpu()).abs().max() > 1e-6}


def run(model, x, y):
    """Training forward and backward, eval logits, the depth walk's states and exit scores, on the model's device."""
    dev = next(model.parameters()).device
    x, y = x.to(dev), y.to(dev)
    model.train()
    logits, loss, aux = model(x, y, rng=trajectory_rng(0, 0))
    (loss + sum(aux.values())).backward()
    out = {"train_logits": logits, "loss": loss, **{f"aux/{k}": v for k, v in aux.items()}}
    out.update({f"grad/{n}": p.grad for n, p in model.named_parameters() if p.grad is not None})
    model.eval()
    with torch.no_grad():
        out["eval_logits"] = model(x)[0]
        out.update({f"state/{i}": h for i, (_, h) in enumerate(model.states(x))})
        if is_looped(model.config):
            labels = exits.depth_labels(model)
            scores = ee.exit_records(model, x, y, exits.exit_candidates(model, labels), ["entropy", "kl"])["scores"]
            out.update({f"exit/{k}": v for k, v in scores.items()})
    return out


@pytest.mark.parametrize("name", list(reference.FAMILIES))
def test_every_family_computes_on_cuda_what_it_computes_on_the_cpu(name):
    cpu = GPT(GPTConfig(**reference.TINY, **reference.FAMILIES[name])).init_weights(0)
    gpu = copy.deepcopy(cpu).cuda()
    x, y = reference.batch(1)
    assert not moved(run(gpu, x, y), run(cpu, x, y))


@pytest.mark.parametrize("name", ["plain", "looped", "prelude_coda_linear", "looped_moe", "mla_looped_moe"])
def test_cached_decoding_on_cuda_is_the_full_forward_and_the_cpus_tokens(name):
    cpu = GPT(GPTConfig(**reference.TINY, **reference.FAMILIES[name])).init_weights(0).eval()
    gpu = copy.deepcopy(cpu).cuda()
    prompt = reference.batch(3)[0][:, :4]
    drawn = []
    tokens = gpu.generate(prompt.cuda(), 12, temperature=0, logits_out=drawn)
    assert torch.equal(tokens.cpu(), cpu.generate(prompt, 12, temperature=0))
    with torch.no_grad():
        full = gpu(tokens)[0][:, prompt.size(1) - 1:-1, :gpu.config.vocab_size]
    assert relative_error(torch.stack(drawn, 1), full) < 1e-5


@pytest.mark.parametrize("name", COMPILED)
def test_a_compiled_model_on_cuda_computes_what_the_eager_one_does(name):
    cfg = dict(reference.FAMILIES[name])
    if cfg.get("moe_dispatch") == "grouped":
        cfg["moe_dispatch"] = "batched"  # compiled grouped_mm needs bf16 (moe.resolve_dispatch); bf16 is tested below
    eager = GPT(GPTConfig(**reference.TINY, **cfg)).init_weights(0).cuda()
    compiled = copy.deepcopy(eager)
    compiled.compile()
    x, y = reference.batch(1)
    assert not moved(run(compiled, x, y), run(eager, x, y))


def test_bf16_attention_takes_the_flash_kernel_and_grouped_experts_compile():
    """With only the flash backend allowed, a bf16 forward and backward of a looped MoE model (grouped dispatch,
    compiled) runs: the attention call is one flash can take (causal, no explicit mask). Its loss is the fp32
    model's within bf16 rounding."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cfg = GPTConfig(**dict(reference.TINY, block_size=64, n_embd=128, head_dim=64), **reference.FAMILIES["looped_moe"],
                    moe_dispatch="grouped")
    model = GPT(cfg).init_weights(0).cuda()
    x, y = (t.cuda() for t in reference.batch(2, rows=4, length=64))
    with torch.no_grad():
        fp32_loss = model(x, y)[1]
    model.compile()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss, aux = model(x, y)
        (loss + sum(aux.values())).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    assert abs(loss.item() - fp32_loss.item()) < 2e-2 * fp32_loss.item()


CUDA_RUN = TINY + ["--device=cuda", "--dtype=bfloat16", "--compile=True", "--n_layer=2", "--n_loop=2",
                   "--n_expert=4", "--top_k=2", "--moe_bias_rate=0.001", "--max_iters=12", "--eval_interval=4"]


def test_train_py_on_cuda_compiled_bf16_learns_and_resumes_after_a_signal(data_dir, tmp_path, monkeypatch):
    """A looped MoE run (auto dispatch: grouped in bf16) learns and logs its peak memory; the same run stopped by
    SIGTERM after step 5 saves, exits resumable, and resumes to the uninterrupted run's losses: bit for bit where
    two uninterrupted runs agree bit for bit, else within bf16 rounding (CUDA's atomic adds, e.g. in the backward
    of index_select, sum in a varying order)."""
    whole, again, cut = (str(tmp_path / name) for name in ("whole", "again", "cut"))
    train.main(CUDA_RUN + data_dir + [f"--out_dir={whole}"])
    train.main(CUDA_RUN + data_dir + [f"--out_dir={again}"])
    ref = losses(whole)
    assert ref[11] < ref[0] - 0.5
    assert all(r["peak_mem_gib"] > 0 for r in read_log(whole) if "loss" in r)
    stop_with_signal(monkeypatch, CUDA_RUN + data_dir + [f"--out_dir={cut}"])
    train.main(CUDA_RUN + data_dir + [f"--out_dir={cut}", "--resume"])
    resumed, noise = losses(cut), losses(again)
    assert resumed.keys() == ref.keys() == noise.keys()
    run_to_run = max(abs(noise[s] - ref[s]) for s in ref)
    off = max(abs(resumed[s] - ref[s]) for s in ref)
    print(f"resumed vs uninterrupted: {off:.3g}; two uninterrupted runs: {run_to_run:.3g}")
    assert off == 0 if run_to_run == 0 else off < 1e-2, (resumed, ref)


# ---- NCCL (one rank under torchrun) and the memory prediction ---------------------------------------------------

MEMORY_MODEL = ["--n_embd=512", "--head_dim=64", "--block_size=1024", "--batch_size=8"]
MEMORY_RUNS = {  # name: (train.py keys, which scaling.memory_per_gpu entry predicts the run)
    "ddp_stored": (["--n_layer=8"], ("ddp", "total")),
    "fsdp_stored": (["--n_layer=8", "--fsdp=True"], ("fsdp", "total")),
    "fsdp_looped_moe_checkpointed": (["--n_layer=2", "--n_loop=2", "--n_expert=8", "--top_k=2", "--fsdp=True",
                                      "--activation_checkpointing=True"], ("fsdp", "total_checkpointed")),
}


@pytest.fixture(scope="module")
def nccl_runs(data_dir, tmp_path_factory):
    """Each MEMORY_RUNS run: 6 eager bf16 steps through torchrun with one rank, so the process group is NCCL's."""
    import subprocess
    import sys
    from test_train import REPO, TRAIN_PY
    root, done = tmp_path_factory.mktemp("nccl"), {}
    for name, (keys, _) in MEMORY_RUNS.items():
        out = str(root / name)
        res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                              TRAIN_PY] + data_dir + MEMORY_MODEL + keys +
                             ["--device=cuda", "--dtype=bfloat16", "--compile=False", "--max_iters=6",
                              "--warmup_iters=2", "--eval_interval=3", "--eval_tokens=8192", "--log_interval=1",
                              "--sample_tokens=0", f"--out_dir={out}"], cwd=REPO, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        done[name] = out
    return done


@pytest.mark.xdist_group("nccl")  # with -n N --dist loadgroup the runs are made once, in one worker
def test_nccl_ddp_and_fsdp_on_one_gpu_learn_alike(nccl_runs):
    """DDP and FSDP2 through NCCL (one rank) train the same model to the same losses within bf16 rounding (FSDP
    gathers bf16 weights where DDP's autocast casts them), and both learn."""
    ddp, fsdp = losses(nccl_runs["ddp_stored"]), losses(nccl_runs["fsdp_stored"])
    assert ddp.keys() == fsdp.keys() and ddp[max(ddp)] < ddp[0] - 0.3
    assert max(abs(ddp[s] - fsdp[s]) for s in ddp) < 2e-2, (ddp, fsdp)


@pytest.mark.xdist_group("nccl")
@pytest.mark.parametrize("name", list(MEMORY_RUNS))
def test_memory_prediction_is_what_the_gpu_allocates(nccl_runs, name):
    """`scaling.py count --memory`'s bytes per GPU (parameters, gradients, optimizer state, gathered weights,
    autocast's copies, one micro-batch's activations stored or checkpointed) against the run's peak of
    torch.cuda.max_memory_allocated (the caching allocator's count: no CUDA context or NCCL buffers): within 10%."""
    import scaling
    keys, (mode, total) = MEMORY_RUNS[name]
    predicted = scaling.main(["count"] + MEMORY_MODEL + keys + ["--vocab_size=256", "--dtype=bfloat16",
                                                               "--memory", "--gpus=1"])["memory_per_gpu"][mode]
    measured = max(r["peak_mem_gib"] for r in read_log(nccl_runs[name]) if "peak_mem_gib" in r) * 2 ** 30
    parts = ", ".join(f"{k} {v / 2 ** 30:.3f}" for k, v in predicted.items())
    print(f"{name}: measured {measured / 2 ** 30:.3f} GiB, predicted {predicted[total] / 2 ** 30:.3f} ({parts})")
    assert measured == pytest.approx(predicted[total], rel=0.10)
