"""The GPU path, tested on the CPU: no host read (a GPU sync) in a steady-state training step, batches prefetched
one ahead, the MFU peak table, optional wandb logging, and bench.py's GPU preset."""
import json
import os
import sys
import types

import numpy as np
import pytest
import torch

import data
import model
import distributed
import runlog
import train
from configurator import ConfigError
from test_train import TINY, losses

HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "__array__")
LOOPED_MOE = ["--n_layer=2", "--n_loop=2", "--n_expert=4", "--top_k=2", "--moe_dispatch=grouped",
              "--moe_bias_rate=0.001", "--grad_accum=2"]


def run_counting_reads(argv, monkeypatch):
    """train.main(argv) with every host read of a tensor counted; returns the reads per training step: entry s
    counts those from the start of step s to the start of step s + 1 (its log line, the next step's evaluation),
    entry 0 those before the first step (the first evaluation)."""
    per_step, real = [0], {name: getattr(torch.Tensor, name) for name in HOST_READS}
    real_step = train.train_step

    def step(*args, **kwargs):
        per_step.append(0)
        return real_step(*args, **kwargs)
    monkeypatch.setattr(train, "train_step", step)
    for name in HOST_READS:
        def counted(self, *args, _real=real[name], **kwargs):
            per_step[-1] += 1
            return _real(self, *args, **kwargs)
        setattr(torch.Tensor, name, counted)
    try:
        train.main(argv)
    finally:
        for name in HOST_READS:
            setattr(torch.Tensor, name, real[name])
    return per_step


def test_a_steady_state_step_reads_nothing_on_the_host(data_dir, tmp_path, monkeypatch):
    """A looped MoE model (grouped dispatch, bias balancing, 2 micro-batches per step), the GPU's code path run on
    the CPU (model.py's plain operations, as without kernels.py's fast paths): no host read between log and eval
    steps, exactly one read per log line and per evaluation. Its losses are those of the CPU's fast paths."""
    monkeypatch.setattr(runlog, "peak_flops", lambda *a: 1e12)  # not the 2 s matmul timing: MFU is not tested here
    argv = TINY + data_dir + LOOPED_MOE + ["--max_iters=12", "--log_interval=5", "--eval_interval=6"]
    cpu_path = str(tmp_path / "cpu")
    train.main(argv + [f"--out_dir={cpu_path}"])
    reads = run_counting_reads(argv + [f"--out_dir={tmp_path / 'gpu'}", "--cpu_kernels=False"], monkeypatch)
    # before step 0: eval; steps 0, 10: log; 5, 11: log + the eval of the step after; the rest: nothing
    assert reads == [1, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, 2]
    gpu_losses = losses(tmp_path / "gpu")
    assert list(gpu_losses) == [0, 5, 10, 11]
    assert gpu_losses == pytest.approx(losses(cpu_path), rel=1e-5)


def test_prefetched_batches_are_the_batches_of_their_step(data_dir, tmp_path, monkeypatch):
    """train.py's batches, fetched one ahead, are exactly TokenData.get_batch(step, micro) for the micro-batch the
    model trains on (a control read here, without the prefetcher), and the losses are those of a run without
    the look-ahead."""
    monkeypatch.setattr(runlog, "peak_flops", lambda *a: 1e12)
    argv = TINY + data_dir + ["--max_iters=3", "--grad_accum=2", "--eval_interval=3"]
    seen, real_step = [], train.train_step

    def step(model, optimizer, get_batch, *args, **kwargs):
        def recorded(micro):
            seen.append(get_batch(micro))
            return seen[-1]
        return real_step(model, optimizer, recorded, *args, **kwargs)
    monkeypatch.setattr(train, "train_step", step)
    train.main(argv + [f"--out_dir={tmp_path / 'ahead'}"])
    tokens = data.TokenData(data_dir[2].split("=", 1)[1])
    expected = [tokens.get_batch(s, m, 0, 1, 2, 4, 32, 1337) for s in range(3) for m in range(2)]
    assert len(seen) == len(expected) == 6
    for (x, y), (ex, ey) in zip(seen, expected):
        assert torch.equal(x, torch.from_numpy(ex)) and torch.equal(y, torch.from_numpy(ey))
    monkeypatch.setattr(train.Prefetcher, "get", lambda self, key, next_key: self.load(key))  # no look-ahead
    train.main(argv + [f"--out_dir={tmp_path / 'plain'}"])
    assert losses(tmp_path / "ahead") == losses(tmp_path / "plain")


def test_the_prefetcher_fetches_each_batch_once_and_ahead():
    fetched = []

    def fetch(key):
        fetched.append(key)
        return np.full((1, 2), key), np.full((1, 2), key + 1)  # TokenData's batches are numpy arrays
    p = train.Prefetcher(fetch, "cpu")
    x, _ = p.get(0, 1)
    assert fetched == [0, 1] and x[0, 0] == 0  # the batch asked for, and the next one read ahead
    x, y = p.get(1, 2)
    assert fetched == [0, 1, 2] and x[0, 0] == 1 and y[0, 0] == 2
    x, _ = p.get(5, 6)  # not the one read ahead (e.g. after a resume): fetched on the spot
    assert fetched == [0, 1, 2, 5, 6] and x[0, 0] == 5


def test_a_muonh_step_reads_nothing_on_the_host(monkeypatch):
    """MuonH chooses the plain Muon step for a zero matrix on the device (`if radius == 0` was a sync per matrix);
    the step is still the renormalised one (tests/test_loop.py pins its values)."""
    from optim import MuonH
    torch.manual_seed(0)
    p, z = torch.nn.Parameter(torch.randn(8, 6)), torch.nn.Parameter(torch.zeros(5, 4))
    opt = MuonH([p, z], lr=0.1, momentum=0.95)
    p.grad, z.grad = torch.randn(8, 6), torch.ones(5, 4)
    radius, before = p.detach().norm().item(), p.detach().clone()
    reads = []
    for name in HOST_READS:
        def counted(self, *args, _real=getattr(torch.Tensor, name), _name=name, **kwargs):
            reads.append(_name)
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counted)
    opt.step()
    monkeypatch.undo()
    assert reads == []
    assert z.detach().abs().min() > 0  # the zero matrix moved (plain Muon step)
    assert not torch.equal(p.detach(), before) and p.detach().norm().item() == pytest.approx(radius, rel=1e-6)


def wandb_stand_in(calls):
    """A module named wandb that records init, log and finish (the package is not a requirement)."""
    import importlib.machinery
    stub = types.ModuleType("wandb")
    stub.__spec__ = importlib.machinery.ModuleSpec("wandb", None)

    class Run:
        def log(self, record, step=None):
            calls.append(("log", json.loads(json.dumps(record)), step))

        def finish(self):
            calls.append(("finish",))
    stub.init = lambda **kwargs: calls.append(("init", kwargs)) or Run()
    return stub


def test_wandb_logs_what_log_jsonl_logs(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(runlog, "peak_flops", lambda *a: 1e12)
    argv = TINY + data_dir + ["--max_iters=3", "--eval_interval=2"]
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", wandb_stand_in(calls))
    out = tmp_path / "tracked"
    train.main(argv + [f"--out_dir={out}", "--wandb_project=loops", "--wandb_run_name=r1", "--wandb_mode=offline"])
    (kind, init), *logged, finish = calls
    assert kind == "init" and finish == ("finish",)
    assert (init["project"], init["name"], init["mode"]) == ("loops", "r1", "offline")
    assert init["config"]["train"]["max_iters"] == 3 and init["config"]["model"]["n_layer"] == 2
    records = [json.loads(line) for line in open(out / "log.jsonl")]
    assert [c[1] for c in logged] == records and [c[2] for c in logged] == [r["step"] for r in records]
    assert len(records) == 6  # evals at steps 0, 2, 3 and train logs at steps 0, 1, 2


def test_wandb_is_imported_only_when_asked_for(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(runlog, "peak_flops", lambda *a: 1e12)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError, find_spec finds nothing
    argv = TINY + data_dir + ["--max_iters=1", "--eval_interval=1"]
    train.main(argv + [f"--out_dir={tmp_path / 'plain'}"])  # never imports it
    with pytest.raises(ConfigError, match=r"^config error: --wandb_project needs the wandb package: pip "
                                                r"install wandb"):
        train.main(argv + [f"--out_dir={tmp_path / 'tracked'}", "--wandb_project=loops"])
    assert not os.path.exists(tmp_path / "tracked")  # refused before anything was written


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA GH200 480GB", 989e12),
    ("NVIDIA A100-SXM4-40GB", 312e12), ("NVIDIA A100 80GB PCIe", 312e12), ("NVIDIA L4", 121e12),
    ("NVIDIA L40S", 362e12), ("NVIDIA L40", 181e12), ("NVIDIA A10", 125e12), ("NVIDIA GeForce RTX 4090", 165.2e12),
    ("NVIDIA B200", 2250e12), ("AMD Instinct MI300X", 1307.4e12),
    ("NVIDIA A10G", None), ("Tesla V100-SXM2-16GB", None), ("NVIDIA GeForce RTX 4090 D", None),
])
def test_the_gpu_peak_table_matches_device_names(name, peak):
    assert distributed.gpu_bf16_peak(name) == peak


def test_an_unknown_gpu_gets_no_mfu_rather_than_a_guess(monkeypatch):
    said = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A10G")
    assert distributed.peak_flops("cuda", torch.bfloat16, said.append) is None
    assert said == ["unknown device 'NVIDIA A10G': no MFU (add its dense bf16 peak to distributed.GPU_BF16_PEAK)"]
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 PCIe")
    assert distributed.peak_flops("cuda", torch.bfloat16, said.append) == 756e12
    assert distributed.peak_flops("cuda", torch.float32, said.append) is None  # the table holds bf16 peaks


# ---- bench.py --preset=gpu (the parts a CPU can run) -------------------------------------------------------------

def test_a_bare_cuda_device_becomes_an_indexed_one(monkeypatch):
    """torch.cuda.set_device refuses a bare "cuda" (the first single-GPU run failed on it): train.py's setup picks
    the process's GPU by index."""
    picked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", picked.append)
    # setup turns TF32 on: put both back after. Saved and restored by hand: monkeypatch's undo of an attribute of
    # torch's cuBLAS module raised AttributeError at teardown in a one-process run (issue 47)
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    cfg = {k: v for k, v in vars(train).items() if not k.startswith("_")}
    try:
        env = distributed.setup(dict(cfg, device="cuda", dtype="float32"))
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved
    assert (env.device, env.device_type, picked) == ("cuda:0", "cuda", ["cuda:0"])


def test_the_gpu_bench_refuses_a_cpu_with_one_line():
    from tools import bench
    with pytest.raises(bench.ConfigError, match=r"^bench.py: --preset=gpu measures the GPU path \(d=1024, bf16, "
                                                r"compiled\) and needs a CUDA device, not 'cpu'"):
        bench.main(["--preset=gpu", "--device=cpu"])


def test_the_gpu_bench_models_are_the_papers_presets_at_d1024():
    from tools import bench
    cfg = dict(preset="gpu", device="cuda", dtypes="float32", compiles="False", warmup=2)
    models = bench.preset_models(cfg, None, ["--preset=gpu", "--device=cuda", "--dtypes=float32"])
    shapes = {name: (c.n_embd, c.n_layer, c.n_loop, c.n_expert, c.top_k, c.vocab_size, c.padded_vocab, c.block_size)
              for name, c in models.items()}
    assert shapes == {"base": (1024, 16, 1, 0, 2, 50257, 50304, 1024), "looped": (1024, 8, 2, 0, 2, 50257, 50304, 1024),
                      "moe": (1024, 16, 1, 8, 2, 50257, 50304, 1024),
                      "looped_moe": (1024, 8, 2, 8, 2, 50257, 50304, 1024)}
    assert (cfg["dtypes"], cfg["compiles"], cfg["warmup"]) == ("float32", "True", 3)  # the preset's, unless given
    unpadded = bench.preset_models(cfg, None, ["--preset=gpu", "--vocab_pad_multiple=1"])
    assert unpadded["base"].padded_vocab == 50257
    rows = [dict(model="base", step_s=1.0, flops_per_s=4.0), dict(model="looped", step_s=1.2, flops_per_s=3.0),
            dict(model="moe", step_s=1.5, flops_per_s=2.0), dict(model="looped_moe", step_s=1.8, flops_per_s=1.0)]
    assert bench.model_ratios(rows) == {"moe / base step time": 1.5, "looped_moe / looped step time": 1.5,
                                        "looped / base tokens/s at equal executed FLOPs": 0.75}


def test_graph_breaks_are_counted_per_block_and_for_the_gpu_loss(monkeypatch):
    """torch._dynamo.explain runs on a CPU: a tiny looped MoE and a dense model (with the GPU's compiled loss)
    trace without a graph break; one put into the block is counted in every block."""
    from tools import bench
    x = torch.randint(0, 61, (2, 16))
    tiny = dict(vocab_size=61, n_layer=2, n_embd=32, head_dim=16, block_size=16)
    looped_moe = model.GPTConfig(**tiny, n_loop=2, n_expert=4, top_k=2)
    assert bench.graph_breaks(looped_moe, "cpu", torch.autocast("cpu", torch.bfloat16), x) == {"block 0": 0,
                                                                                               "block 1": 0, "loss": 0}
    dense = model.GPTConfig(**tiny)
    assert bench.graph_breaks(dense, "cpu", torch.autocast("cpu", torch.bfloat16), x) == {"block 0": 0, "block 1": 0,
                                                                                          "loss": 0}
    real = model.Block.forward

    def with_a_break(self, x, *args, **kwargs):
        x = x * 1.0
        torch._dynamo.graph_break()
        return real(self, x, *args, **kwargs)
    monkeypatch.setattr(model.Block, "forward", with_a_break)
    assert bench.graph_breaks(dense, "cpu", torch.autocast("cpu", torch.bfloat16), x) == {"block 0": 1, "block 1": 1,
                                                                                          "loss": 0}


def test_the_gpu_profile_sorts_kernels_by_kind_and_counts_each_once():
    """bench.py --profile: kernel names seen in an H200 profile go to their kind, and a range named on the host
    (the optimizer's step), which the device side lists again with its kernels' time, is not counted twice."""
    from tools import bench
    names = {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": "matmul",
             "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversalI"
             "NS5_17GroupProblemShapeIN4cute5tupleIJiiiEEEEE": "grouped matmul",
             "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64": "attention",
             "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
             "FusedOptimizerTensorListMetadata<4>": "optimizer and clipping",
             "triton_red_fused__fused_rms_norm__to_copy_add_index_select_mul_2": "fused elementwise",
             "void at::native::indexFuncLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>":
                 "gather / scatter",
             "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<>": "sort / scan",
             "Memcpy DtoD (Device -> Device)": "copies", "void at::native::vectorized_elementwise_kernel<4>": "other"}
    assert {name: bench.kernel_kind(name) for name in names} == names
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA

    def row(key, device, us, annotation=False):
        return types.SimpleNamespace(key=key, device_type=device, device_time_total=us, is_user_annotation=annotation)
    triton = "triton_poi_fused_mul_silu_silu_backward_2"  # inductor names its launch on the host like the kernel
    rows = [row("Optimizer.step#AdamW.step", cpu, 6000), row("Optimizer.step#AdamW.step", cuda, 6000, True),
            row("void at::native::multi_tensor_apply_kernel<FusedOptimizer>", cuda, 6000),
            row("nvjet_sm90_tst_256x128", cuda, 30000), row("aten::mm", cpu, 30000), row(triton, cpu, 3000),
            row(triton, cuda, 3000)]
    ms = bench.kernel_ms(rows, steps=3)
    assert (ms["optimizer and clipping"], ms["matmul"], ms["fused elementwise"], sum(ms.values())) == (2, 10, 1, 13)


def test_the_gpu_profile_refuses_a_cpu_with_one_line():
    from tools import bench
    with pytest.raises(bench.ConfigError, match=r"^bench.py: --profile=True times GPU kernels and needs a CUDA device"):
        bench.main(["--profile=True", "--device=cpu"])
