"""fp16 training with a loss scaler (GPUs without native bf16, such as the T4 of free notebook services), tested on
the CPU through the GPU's code path: the scaler's mechanics change nothing at scale 1; scaled fp16 gradients are
fp32's within fp16 rounding; a step whose gradients overflow is skipped whole (the weights, their independent decay,
the MoE bias step) and the scale halves; the CPU cross-entropy kernel hands fp16 logits to the plain loss; train.py
in fp16 keeps the scaler in its checkpoint and resumes bit for bit. And the device and dtype a run picks: CUDA, then
Apple's MPS, then the CPU; fp16 on GPUs without native bf16; FSDP with fp16 refused."""
import copy
import os

import pytest
import torch

import distributed
import optim
import train
from configurator import ConfigError
from model import GPT, GPTConfig
from test_train import TINY as TRAIN_TINY, losses, stop_with_signal

TINY = dict(block_size=16, vocab_size=61, n_layer=2, n_embd=32, head_dim=16, n_loop=2, n_expert=4, top_k=2,
            moe_bias_rate=0.01)
OPT = dict(lr=1e-2, weight_decay=0.0, wd_independent=True, adam_eps=1e-8, beta1=0.9, beta2=0.95, optimizer="adamw")


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 61, (2, 17), generator=g)
    return x[:, :-1], x[:, 1:]


def step(model, scaler, weight_decay=0.1):
    opt = optim.make_optimizer(model, OPT, "cpu")
    ctx = torch.autocast("cpu", dtype=torch.float16)
    return opt, optim.train_step(model, opt, lambda _: batch(), ctx=ctx, grad_clip=1.0, weight_decay=weight_decay,
                                 schedule=1.0, scaler=scaler)


def test_a_step_with_the_scaler_at_scale_one_is_the_step_without_it():
    """The scaler's mechanics (scaled backward, unscale before clipping, decay, step, MoE bias) change nothing when
    the scale is 1 and no gradient overflows: bit for bit."""
    a = GPT(GPTConfig(**TINY)).init_weights(0)
    b = copy.deepcopy(a)
    step(a, None)
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1000)
    step(b, scaler)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    assert all(torch.equal(m.expert_bias, n.expert_bias) for m, n in zip(a.modules(), b.modules())
               if hasattr(m, "expert_bias"))


def test_scaled_fp16_gradients_are_the_fp32_gradients_within_fp16_rounding():
    model = GPT(GPTConfig(**TINY)).init_weights(0)
    x, y = batch()

    def grads(dtype, scale):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16, enabled=dtype == torch.float16):
            _, loss, aux = model(x, y)
        ((loss + sum(aux.values())) * scale).backward()
        return torch.cat([p.grad.flatten() / scale for p in model.parameters() if p.grad is not None])
    exact, scaled = grads(torch.float32, 1.0), grads(torch.float16, 2.0 ** 12)
    assert ((scaled - exact).norm() / exact.norm()).item() < 1e-2


def test_an_overflowing_step_is_skipped_whole_and_the_scale_halves(monkeypatch):
    model = GPT(GPTConfig(**TINY)).init_weights(0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    biases = [m.expert_bias.clone() for m in model.modules() if hasattr(m, "expert_bias")]
    real_backward = torch.Tensor.backward

    def poisoned(self, *args, **kwargs):  # every gradient becomes inf, as an fp16 overflow would make it
        real_backward(self, *args, **kwargs)
        for p in model.parameters():
            if p.grad is not None:
                p.grad.fill_(float("inf"))
    monkeypatch.setattr(torch.Tensor, "backward", poisoned)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    step(model, scaler, weight_decay=0.5)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # no update, no decay
    assert all(torch.equal(m.expert_bias, b) for m, b in
               zip([m for m in model.modules() if hasattr(m, "expert_bias")], biases))
    assert all(m.expert_load.sum() == 0 for m in model.modules() if hasattr(m, "expert_load"))
    assert scaler.get_scale() == 2.0 ** 9


def test_the_cpu_loss_kernel_leaves_fp16_logits_to_the_plain_loss():
    plain = GPT(GPTConfig(**TINY)).init_weights(0)
    fast = GPT(GPTConfig(**TINY), cpu_kernels=True)
    fast.load_state_dict(plain.state_dict())
    logits = torch.randn(2, 16, 61).half().requires_grad_()
    targets = batch()[1]
    (ga,) = torch.autograd.grad(fast.loss(logits, targets), logits)
    (gb,) = torch.autograd.grad(plain.loss(logits, targets), logits)
    assert torch.equal(ga, gb)


# ---- devices and dtypes: what students have, with the device queries stubbed ----

def test_auto_picks_cuda_then_mps_then_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert distributed.pick_device("auto") == "mps" and distributed.pick_device("mps") == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert distributed.pick_device("auto") == "cpu"
    with pytest.raises(ConfigError, match="--device=mps: this machine has no Apple GPU"):
        distributed.pick_device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert distributed.pick_device("auto") == "cuda"


@pytest.mark.parametrize("capability, dtype", [((7, 5), torch.float16), ((8, 0), torch.bfloat16),
                                               ((9, 0), torch.bfloat16)])
def test_the_default_dtype_follows_the_gpus_native_bf16(monkeypatch, capability, dtype):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert distributed.default_dtype("cuda:0") == dtype  # a T4 (7.5) emulates bf16: fp16 with a loss scaler
    assert distributed.default_dtype("cpu") == distributed.default_dtype("mps") == torch.float32


def test_fsdp_with_fp16_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda backend: None)
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 1)
    cfg = {k: v for k, v in vars(train).items() if not k.startswith("_")}
    with pytest.raises(ConfigError, match="--fsdp=True with float16 needs a sharded loss scaler"):
        distributed.setup(dict(cfg, device="cpu", dtype="float16", fsdp=True))


def test_train_py_in_fp16_learns_saves_its_scaler_and_resumes_bit_for_bit(data_dir, tmp_path, monkeypatch):
    """The GPU's fp16 path on the CPU (autocast fp16, the loss scaler; the CPU fast paths off, as on a GPU): a run
    stopped by SIGTERM after step 5 resumes to the uninterrupted run's losses, its scaler's state restored."""
    run = TRAIN_TINY + data_dir + ["--dtype=float16", "--cpu_kernels=False", "--n_loop=2", "--n_expert=4",
                                   "--moe_bias_rate=0.001", "--max_iters=12", "--eval_interval=4",
                                   "--eval_tokens=512"]  # (evaluations are not what this test checks)
    whole, cut = str(tmp_path / "whole"), str(tmp_path / "cut")
    train.main(run + [f"--out_dir={whole}"])
    ref = losses(whole)
    assert ref[11] < ref[0]
    scaler = torch.load(os.path.join(whole, "ckpt.pt"), weights_only=True)["scaler"]
    assert scaler["scale"] > 0 and "_growth_tracker" in scaler

    def hands_the_scaler(args):  # train.py hands the scaler to the step
        assert isinstance(args[-1], torch.amp.GradScaler)
    stop_with_signal(monkeypatch, run + [f"--out_dir={cut}"], check=hands_the_scaler)
    train.main(run + [f"--out_dir={cut}", "--resume"])
    assert losses(cut) == ref
