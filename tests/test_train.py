"""train.py: schedules, weight decay, config errors, checkpoints, exact resume after a kill, DDP equivalence,
and a short run that learns."""
import json
import math
import os
import runpy
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

import optim
import checkpoint
import runlog
import train
from configurator import ConfigError, configure
from runs import load_model
from model import GPT, CrossEntropy, GPTConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_PY = "tests/train_without_mfu_timing.py"  # train.py less MFU's matmul timing, for the processes tests start
TINY = ["--n_layer=2", "--n_embd=64", "--head_dim=16", "--block_size=32", "--batch_size=4", "--sample_tokens=0",
        "--eval_tokens=2048", "--log_interval=1"]


def read_log(out_dir):
    return [json.loads(line) for line in open(os.path.join(out_dir, "log.jsonl"))]


def losses(out_dir):
    return {r["step"]: r["loss"] for r in read_log(out_dir) if "loss" in r}


# ---- schedules and optimizer ----------------------------------------------------------------------------------

def sched(**kw):
    cfg = dict(warmup_iters=10, min_lr_frac=0.05, schedule="wsd_sqrt", decay_frac=0.1)
    cfg.update(kw)
    return cfg


def test_schedule_values_at_chosen_steps():
    m = optim.lr_multiplier
    assert m(0, 100, sched()) == pytest.approx(0.1) and m(9, 100, sched()) == pytest.approx(1.0)
    assert m(50, 100, sched()) == 1.0 and m(90, 100, sched()) == 1.0
    # WSD sqrt cooldown (Lee et al.): p = 5/10 -> 0.05 + 0.95*(1 - sqrt(0.5))
    assert m(95, 100, sched()) == pytest.approx(0.05 + 0.95 * (1 - math.sqrt(0.5)))
    assert m(100, 100, sched()) == pytest.approx(0.05)
    assert m(95, 100, sched(schedule="wsd_linear", min_lr_frac=0.0)) == pytest.approx(0.5)
    # cosine from the end of warmup: halfway -> (1 + f)/2
    assert m(55, 100, sched(schedule="cosine", min_lr_frac=0.1)) == pytest.approx(0.55)
    assert m(100, 100, sched(schedule="cosine", min_lr_frac=0.1)) == pytest.approx(0.1)
    # linear decay to 10% (Schwethelm et al.)
    assert m(55, 100, sched(schedule="linear", min_lr_frac=0.1)) == pytest.approx(0.55)
    with pytest.raises(ValueError, match="schedule"):
        m(50, 100, sched(schedule="exp"))


@pytest.mark.parametrize("lr", [0.0, 1e-3, 10.0])
def test_independent_weight_decay_is_exactly_lambda_per_step_at_any_lr(lr):
    model = GPT(GPTConfig(vocab_size=50, n_layer=1, n_embd=32, head_dim=16)).init_weights(0)
    cfg = dict(weight_decay=0.01, wd_independent=True, adam_eps=1e-8, lr=lr, optimizer="adamw", beta1=0.9,
               beta2=0.999)
    opt = optim.make_optimizer(model, cfg, "cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(3):
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optim.decay_weights(opt, 0.01)
        opt.step()
    for n, p in model.named_parameters():  # all parameters are matrices here, all decay
        torch.testing.assert_close(p.detach(), before[n] * 0.99 ** 3, rtol=1e-6, atol=0)


def test_independent_weight_decay_follows_the_schedule(data_dir, tmp_path):
    """Wortsman et al. 2023 (arXiv:2309.14322): independent decay is decoupled from the peak LR, not from the
    schedule. With lr=0 Adam moves nothing, so after training each matrix is its init times prod_t (1 - wd*s_t):
    warm-up and cool-down decay less than the plateau (a constant 1 - wd per step fails this)."""
    out, wd, steps = str(tmp_path / "wd"), 0.05, 12
    cfg = dict(warmup_iters=4, schedule="wsd_linear", decay_frac=0.5, min_lr_frac=0.0)
    train.main(TINY + data_dir + [f"--out_dir={out}", f"--max_iters={steps}", f"--eval_interval={steps}",
                                  "--lr=0.0", f"--weight_decay={wd}", "--grad_clip=0", "--collapse_evals=0"]
               + [f"--{k}={v}" for k, v in cfg.items()])
    factor = math.prod(1 - wd * optim.lr_multiplier(t, steps, cfg) for t in range(steps))
    assert factor > (1 - wd) ** steps * 1.2  # the schedule matters at this size
    final, _ = load_model(out)
    init, _ = load_model(out)
    init.init_weights(1337)  # train.py's default seed
    matrix = "blocks.0.attn.c_q.weight"
    torch.testing.assert_close(final.state_dict()[matrix], init.state_dict()[matrix] * factor, rtol=1e-5, atol=0)


def test_coupled_weight_decay_is_torch_adamw():
    model = GPT(GPTConfig(vocab_size=50, n_layer=1, n_embd=32, head_dim=16)).init_weights(0)
    cfg = dict(weight_decay=0.1, wd_independent=False, adam_eps=1e-8, lr=0.5, optimizer="adamw", beta1=0.9,
               beta2=0.95)
    opt = optim.make_optimizer(model, cfg, "cpu")
    p = model.wte.weight
    before = p.detach().clone()
    for q in model.parameters():
        q.grad = torch.zeros_like(q)
    opt.step()
    torch.testing.assert_close(p.detach(), before * (1 - 0.5 * 0.1))


# ---- config errors -----------------------------------------------------------------------------------------------

def test_config_errors_name_the_closest_key(tmp_path):
    defaults = {"batch_size": 8, "lr": 1e-3, "schedule": "wsd_sqrt"}
    with pytest.raises(ConfigError, match="did you mean 'n_layer'"):
        configure(defaults, GPTConfig, ["--n_layr=3"])
    with pytest.raises(ConfigError, match="expects int"):
        configure(defaults, GPTConfig, ["--batch_size=abc"])
    with pytest.raises(ConfigError, match="expects float"):
        configure(defaults, GPTConfig, ["--lr=True"])
    bad = tmp_path / "bad.py"
    bad.write_text("n_embd = 64\nlearning_rate = 1e-3\n")
    with pytest.raises(ConfigError, match="unknown key 'learning_rate'"):
        configure(defaults, GPTConfig, [str(bad)])
    good = tmp_path / "good.py"
    good.write_text("import math\nn_embd = 64\nlr = 2e-3\n")
    cfg, mcfg = configure(defaults, GPTConfig, [str(good), "--lr=5e-3", "--mup"])
    assert cfg["lr"] == 5e-3 and mcfg.n_embd == 64 and mcfg.mup is True and cfg["batch_size"] == 8


def test_integer_keys_take_whole_numbers_in_scientific_notation(tmp_path):
    """--max_tokens=1e9 (data.py) and --max_iters=2e4 are ints; 1.5 for an int key is still an error."""
    defaults = {"max_iters": 800, "max_tokens": 0, "lr": 1e-3}
    cfg, mcfg = configure(defaults, GPTConfig, ["--max_iters=2e4", "--max_tokens=1e9", "--n_layer=1.6e1"])
    assert (cfg["max_iters"], cfg["max_tokens"], mcfg.n_layer) == (20000, 10**9, 16)
    assert type(cfg["max_iters"]) is int and type(cfg["max_tokens"]) is int and type(mcfg.n_layer) is int
    preset = tmp_path / "p.py"
    preset.write_text("max_iters = 5e4\n")
    assert configure(defaults, GPTConfig, [str(preset)])[0]["max_iters"] == 50000
    for bad in ("--max_iters=1.5", "--max_iters=1e999", "--max_iters=nan"):
        with pytest.raises(ConfigError, match="max_iters expects int"):
            configure(defaults, GPTConfig, [bad])
    with pytest.raises(ConfigError, match=r"n_layer=1000000000 is more than any model here builds \(at most 10,000\)"):
        configure(defaults, GPTConfig, ["--n_layer=1e9"])  # one line, not a build that never ends


def test_config_builds_on_a_file_beside_it(tmp_path, monkeypatch):
    """A config file sees its own path as __file__, so it can exec a base file next to it from any working
    directory (the LoopMoE ladder presets are built that way), then change some keys."""
    (tmp_path / "base.py").write_text("n_embd = 64\nn_layer = 3\nlr = 2e-3\n")
    (tmp_path / "rung.py").write_text('import os\nexec(open(os.path.join(os.path.dirname(__file__), "base.py")).read())'
                                      "\nn_layer = 5\n")
    monkeypatch.chdir(REPO)  # not the configs' folder
    cfg, mcfg = configure({"lr": 1e-3}, GPTConfig, [str(tmp_path / "rung.py")])
    assert (mcfg.n_embd, mcfg.n_layer, cfg["lr"]) == (64, 5, 2e-3)


def test_help_lists_keys_with_descriptions(capsys):
    """In this process (tests/test_bad_input.py runs train.py's command line for its exit code)."""
    with pytest.raises(SystemExit) as e:
        train.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "--wd_independent" in out and "theta <- theta*(1 - wd*s_t)" in out
    assert "--n_embd" in out and "model width" in out and "--cpu_kernels" in out
    with pytest.raises(ConfigError, match="did you mean 'n_embd'"):
        train.main(["--n_embed=64"])



def test_counting_scripts_do_not_import_scipy():
    """scipy is for the scaling-law fits only (lab/fits.py): the scripts that count FLOPs with accounting.py start
    without it."""
    code = "import sys, train, early_exit, tools.bench; print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

# ---- runs --------------------------------------------------------------------------------------------------------

def test_checkpoint_round_trip_and_sample(data_dir, tmp_path):
    out = str(tmp_path / "run")
    train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=6", "--eval_interval=3"])
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)  # plain tensors and containers only
    assert ckpt["step"] == 6 and not any(k.startswith("_orig_mod") for k in ckpt["model"])
    model, _ = load_model(out)
    x = torch.randint(0, 257, (1, 16))
    again, _ = load_model(out)
    torch.testing.assert_close(model(x)[0], again(x)[0])
    result = json.load(open(os.path.join(out, "result.json")))
    assert result["steps"] == 6 and math.isfinite(result["val_loss"])
    log = read_log(out)
    assert {"step", "tokens", "loss", "lr", "tokens_per_s", "mfu"} <= set(log[1])
    sample = subprocess.run([sys.executable, "sample.py", f"--ckpt={out}", "--max_new_tokens=10", "--num_samples=1"],
                            cwd=REPO, capture_output=True, text=True)
    assert sample.returncode == 0, sample.stderr


def test_resume_after_kill_reproduces_uninterrupted_losses(data_dir, tmp_path):
    """A train.py process killed (-9) at an unplanned moment after a checkpoint past step 0; the uninterrupted run
    and the resumed one run here, in this process (no second start of torch)."""
    args = TINY + data_dir + ["--max_iters=120", "--eval_interval=10"]
    ref, cut = str(tmp_path / "ref"), str(tmp_path / "cut")
    train.main(args + [f"--out_dir={ref}"])
    proc = subprocess.Popen([sys.executable, TRAIN_PY] + args + [f"--out_dir={cut}"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:  # kill -9 once a checkpoint after step 0 exists
        time.sleep(0.05)
        if os.path.exists(os.path.join(cut, "log.jsonl")) and any(
                "val_loss" in r and r["step"] >= 30 for r in read_log(cut)):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(losses(cut))
    assert killed_at < 119, "the run finished before it was killed: make it longer"
    train.main(args + [f"--out_dir={cut}", "--resume"])
    assert losses(cut) == losses(ref)  # bit-for-bit: same batches, same state
    assert json.load(open(os.path.join(cut, "result.json")))["val_loss"] == \
        json.load(open(os.path.join(ref, "result.json")))["val_loss"]


DDP_RUN = ["--max_iters=24", "--eval_interval=8", "--grad_accum=2"]


@pytest.fixture(scope="module")
def two_ranks(fsdp_runs):
    """A 2-rank DDP run (gloo) of TINY + DDP_RUN: its run directory. It runs in the FSDP tests' torchrun launch
    (tests/fsdp_worker.py), which saves a launch of its own (~13 s of the suite)."""
    return str(fsdp_runs[0] / "two_ranks")


@pytest.mark.xdist_group("fsdp")
def test_ddp_two_ranks_match_one_process_with_accumulation(data_dir, tmp_path, two_ranks):
    one, two = str(tmp_path / "one"), two_ranks
    train.main(TINY + data_dir + DDP_RUN + [f"--out_dir={one}"])  # one process: this one
    a, b = losses(one), losses(two)
    assert a.keys() == b.keys()
    for step in a:  # all-reduce sums in another order than accumulation: equal up to float rounding
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-5), step
    va = [r["val_loss"] for r in read_log(one) if "val_loss" in r]
    vb = [r["val_loss"] for r in read_log(two) if "val_loss" in r]
    assert vb == pytest.approx(va, rel=1e-5)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(data_dir, tmp_path, monkeypatch):
    calls = {"train": 0}
    real_loss = CrossEntropy.forward  # the loss of an eager CPU run (with kernels.py's fast path inside)

    def loss_that_breaks(self, logits, targets):  # the 5th training step's loss is NaN
        loss = real_loss(self, logits, targets)
        if self.training:
            calls["train"] += 1
            if calls["train"] >= 5:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(CrossEntropy, "forward", loss_that_breaks)
    out = str(tmp_path / "nan")
    with pytest.raises(SystemExit) as e:
        train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=50", "--eval_interval=2"])
    assert e.value.code == 1
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)
    assert ckpt["step"] == 4  # saved before step 4 ran; nothing after the NaN was written
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())


def test_a_new_run_never_replaces_an_existing_one(data_dir, tmp_path):
    out = str(tmp_path / "run")
    train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=6", "--eval_interval=3"])
    log_before = read_log(out)
    with pytest.raises(ConfigError, match="already holds a run.*--resume.*--overwrite"):
        train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=2", "--eval_interval=1"])
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == 6 and read_log(out) == log_before
    train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=2", "--eval_interval=1", "--overwrite"])
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == 2
    with pytest.raises(ConfigError, match="cannot write to out_dir"):  # a file where a directory should be
        train.main(TINY + data_dir + [f"--out_dir={out}/ckpt.pt/sub", "--max_iters=2"])


def test_resume_continues_the_same_run_or_names_what_differs(data_dir, tmp_path):
    out = str(tmp_path / "run")
    base = TINY + data_dir + [f"--out_dir={out}", "--max_iters=6", "--eval_interval=3"]
    train.main(base)
    config = open(os.path.join(out, "config.json")).read()
    for extra, says in ((["--n_layer=3", "--n_embd=96"], "n_layer \\(run: 2, now: 3\\), n_embd"),
                        (["--batch_size=2", "--lr=0.03"], "batch_size \\(run: 4, now: 2\\), lr"),
                        (["--n_expert=4"], "n_expert"),
                        (["--tokenizer=gpt2"], "tokenizer \\(run: 'byte', now: 'gpt2'\\)"),
                        (["--max_iters=9"], "add --resume_changes=max_iters")):
        with pytest.raises(ConfigError, match=says):
            train.main(base + ["--resume"] + extra)
    assert open(os.path.join(out, "config.json")).read() == config  # nothing written by a refused resume
    train.main(base + ["--resume", "--max_iters=9", "--resume_changes=max_iters"])
    log = read_log(out)
    assert {"step": 6, "event": "resume_changes", "changed": {"max_iters": [6, 9]}} in log
    assert max(r["step"] for r in log) == 9


def test_a_collapsed_model_never_replaces_the_good_checkpoint(data_dir, tmp_path, monkeypatch, capsys):
    """Val loss below the unigram entropy at step 2, then back at ln V (a blown-up model): the checkpoint of step 2
    stays, and three such evals in a row stop the run."""
    vals = iter([5.5, 1.0, 5.5, 5.5, 5.5, 5.5])
    monkeypatch.setattr(train, "evaluate", lambda *a, **k: next(vals))
    out = str(tmp_path / "collapse")
    with pytest.raises(SystemExit) as e:
        train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=20", "--eval_interval=2"])
    assert e.value.code == 1
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)
    assert ckpt["step"] == 2 and ckpt["val_loss"] == 1.0
    printed = capsys.readouterr().out
    assert "step 8: training collapsed" in printed and "not saved, to keep the checkpoint of step 2" in printed


def test_a_run_that_never_learns_is_warned_about(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train, "evaluate", lambda *a, **k: 4.0)  # above the unigram entropy, below ln V = 5.55
    out = str(tmp_path / "slow")
    train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=6", "--eval_interval=2", "--warmup_iters=1"])
    printed = capsys.readouterr().out
    assert printed.count("warning: val loss 4.0000 >=") == 3  # steps 2, 4 and 6: after warm-up
    assert "warning: the run ended at or above the unigram entropy" in printed
    assert json.load(open(os.path.join(out, "result.json")))["above_unigram_entropy"] is True


def test_a_run_within_its_warm_up_is_warned_about_at_its_start_and_its_end(data_dir, tmp_path, monkeypatch, capsys):
    """--max_iters below warmup_iters: the LR never peaks or decays (said, the schedule unchanged), and the end's
    unigram-entropy warning is no longer skipped for it."""
    monkeypatch.setattr(train, "evaluate", lambda *a, **k: 4.0)  # above the unigram entropy
    out = str(tmp_path / "short")
    train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=4", "--eval_interval=4", "--warmup_iters=8"])
    printed = capsys.readouterr().out
    assert printed.count("warning: the run's 4 steps end within its warm-up (warmup_iters=8): the LR only rises, "
                         "to 50% of --lr, and never decays") == 1
    assert printed.index("within its warm-up") < printed.index("step 0")  # at the start
    assert "warning: the run ended at or above the unigram entropy" in printed
    lrs = [r["lr"] for r in read_log(out) if "lr" in r]  # the schedule as asked: warm-up only
    assert lrs == pytest.approx([train.lr * (s + 1) / 8 for s in range(4)], rel=1e-6)
    train.main(TINY + data_dir + [f"--out_dir={tmp_path / 'long'}", "--max_iters=4", "--eval_interval=4",
                                  "--warmup_iters=2"])
    assert "within its warm-up" not in capsys.readouterr().out


def test_a_run_no_better_than_uniform_guessing_stops(data_dir, tmp_path, monkeypatch, capsys):
    """--lr=1e4 sits at ln V (or far above it) the whole run: three evals after warm-up stop it (exit code 1)."""
    monkeypatch.setattr(train, "evaluate", lambda *a, **k: math.log(257))
    out = str(tmp_path / "stuck")
    with pytest.raises(SystemExit) as e:
        train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=20", "--eval_interval=2", "--warmup_iters=1"])
    printed = capsys.readouterr().out
    assert e.value.code == 1 and "step 6: training diverged or is stuck" in printed
    assert "No checkpoint got below the unigram entropy" in printed  # never called "the last good checkpoint"
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == 0  # steps 2-6 were not saved


def test_a_checkpoint_cut_off_by_a_kill_is_cleaned_up(data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "ckpt.pt.tmp").write_bytes(b"half a checkpoint")
    train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=2", "--eval_interval=2"])
    assert not (out / "ckpt.pt.tmp").exists() and "removed" in capsys.readouterr().out


def test_a_paper_preset_trains_on_prepared_fineweb_edu_tokens(tmp_path, monkeypatch, capsys):
    """python train.py config/sparse_base.py (width-reduced), a local folder of parquet files standing in for the
    Hub's FineWeb-Edu: GPT-2 tokens are streamed as far as the run needs (its training tokens and the validation
    set), then it trains. A longer run streams more from where the stream stopped, and says when the data repeats."""
    from data import FINEWEB_EDU
    from test_data import fineweb_stand_in
    assert {k: getattr(train, k) for k in FINEWEB_EDU} == FINEWEB_EDU  # train.py's keys default to data.py's
    hf, texts = fineweb_stand_in(tmp_path / "hub")
    tokens = tmp_path / "tokens"
    small = ["config/sparse_base.py", "--n_layer=2", "--n_embd=64", "--block_size=32", "--batch_size=2",
             "--eval_tokens=32", "--sample_tokens=0", f"--hf_dataset={hf['hf_dataset']}", "--hf_config=",
             f"--data_dir={tokens}"]
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(runlog, "peak_flops", lambda *a: 1e12)  # not the 2 s matmul timing: MFU is not tested here
    real_run = subprocess.run

    def prepare_here(cmd, **kwargs):  # the prepare.py command train.py starts, run in this process: a second
        if not cmd[1].endswith("prepare.py"):  # interpreter (tests with data_dir start one) would only add seconds
            return real_run(cmd, **kwargs)
        monkeypatch.setattr(sys, "argv", cmd[1:])
        try:
            runpy.run_path(cmd[1], run_name="__main__")
        except SystemExit as e:
            return subprocess.CompletedProcess(cmd, e.code or 0, stderr="")
        return subprocess.CompletedProcess(cmd, 0, stderr="")
    monkeypatch.setattr(subprocess, "run", prepare_here)
    train.main(small + ["--max_iters=2", "--eval_interval=2", f"--out_dir={tmp_path / 'run'}"])
    meta = json.load(open(tokens / "meta.json"))
    assert (meta["source"], meta["tokenizer"], meta["dtype"]) == ("fineweb-edu", "gpt2", "uint16")
    assert meta["train_tokens"] >= 2 * 2 * 32 and meta["val_tokens"] >= 33  # what the run needs, and only that:
    assert not meta["exhausted"] and meta["documents"] < len(texts) / 2
    printed = capsys.readouterr().out
    assert f"data: {tokens} (gpt2, the first 128 of {meta['train_tokens']:,} train" in printed
    assert json.load(open(tmp_path / "run" / "result.json"))["steps"] == 2
    assert GPTConfig(**torch.load(tmp_path / "run" / "ckpt.pt")["model_config"]).vocab_size == 50257

    class Prepared(Exception):
        pass

    def stop(*args):  # called right after the data are ready: no need to train
        raise Prepared
    monkeypatch.setattr(runlog, "peak_flops", stop)
    with pytest.raises(Prepared):  # 1,000 steps of 64 tokens: more than the 1,500 documents hold
        train.main(small + ["--max_iters=1000", f"--out_dir={tmp_path / 'long'}"])
    printed = capsys.readouterr().out
    assert "fewer than the 64,000 + 33 asked for: streaming more fineweb-edu from where it stopped" in printed
    longer = json.load(open(tokens / "meta.json"))
    assert longer["exhausted"] and longer["documents"] == len(texts)
    assert (f"note: the data repeats: the run draws 64,000 training tokens from the {longer['train_tokens']:,} in "
            f"{tokens}, each about {64_000 / longer['train_tokens']:.1f} times (the stream has no more)") in printed


def test_the_vocabulary_follows_a_named_tokenizer_only(data_dir, tmp_path, capsys, monkeypatch):
    """A preset that sets vocab_size=50257 and no tokenizer stops with one line saying what to pass (before this,
    it trained on bytes with vocab_size silently reset to 257); naming the byte tokenizer trains on bytes, with a
    note."""
    preset = tmp_path / "gpt2_sized.py"
    preset.write_text("vocab_size = 50257  # GPT-2\nn_layer = 2\n")
    run = TINY + data_dir[:1] + [f"--data_dir={tmp_path / 'tokens'}", "--max_iters=1", "--eval_interval=1"]
    with pytest.raises(ConfigError, match=r"^config error: vocab_size=50257 is set but no tokenizer: pass "
                                          r"--tokenizer=gpt2 \(its vocabulary\) or --tokenizer=byte"):
        train.main([str(preset)] + run + [f"--out_dir={tmp_path / 'refused'}"])
    assert not os.path.exists(tmp_path / "tokens")  # stopped before any data was prepared
    monkeypatch.setattr(runlog, "peak_flops", lambda *a: 1e12)  # not the 2 s matmul timing: MFU is not tested here
    train.main([str(preset)] + run + ["--tokenizer=byte", f"--out_dir={tmp_path / 'bytes'}"])
    assert "note: vocab_size=50257 of the config is replaced by 257, the byte tokenizer's" in capsys.readouterr().out
    assert GPTConfig(**torch.load(tmp_path / "bytes" / "ckpt.pt")["model_config"]).vocab_size == 257


def test_short_cpu_run_learns_a_nat(tmp_path):
    """On the real offline corpus (byte level), validation loss falls >= 1 nat below its initial value in 60 steps
    (the default 50 of warmup, then the decay: about 3 nats)."""
    out = str(tmp_path / "learn")
    train.main(["--n_layer=2", "--n_embd=128", "--block_size=64", "--batch_size=8", "--max_iters=60",
                "--eval_interval=60", "--eval_tokens=8192", "--sample_tokens=0", "--log_interval=20",
                f"--data_dir={tmp_path / 'offline'}", f"--out_dir={out}"])
    vals = [r["val_loss"] for r in read_log(out) if "val_loss" in r]
    assert vals[0] - vals[-1] >= 1.0, vals


# ---- FSDP2, sharded checkpoints, memory, DDP (one torchrun launch of tests/fsdp_worker.py, one resume launch) -----

def torchrun(args, **kw):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"] + args,
                          cwd=REPO, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), **kw)


@pytest.fixture(scope="module")
def fsdp_runs(data_dir, tmp_path_factory):
    """The runs of tests/fsdp_worker.py (its docstring lists them). The launch ends with its planned SIGKILL."""
    root = tmp_path_factory.mktemp("fsdp")
    (root / "two_ranks.json").write_text(json.dumps(TINY + DDP_RUN))  # the worker's OUT/two_ranks run
    res = torchrun(["tests/fsdp_worker.py", str(root)] + data_dir)
    assert (root / "memory_rank1.json").exists() and (root / "cut" / "ckpt.old").exists(), res.stderr[-4000:]
    return root, data_dir


@pytest.mark.xdist_group("fsdp")
@pytest.mark.parametrize("case", ["gpt", "looped", "moe", "muonh"])
def test_fsdp_trains_as_ddp(fsdp_runs, case):
    """2 gloo ranks, 10 steps of 2 micro-batches (MuonH: 3): the same losses, validation losses and final weights
    (MoE router biases included) with --fsdp as with DDP; the looped case's shared block is called once per pass,
    the MoE one checkpoints activations under FSDP. The sharded checkpoint is read whole by load_model, as
    sample.py and the analyses read it."""
    root, _ = fsdp_runs
    ddp, fsdp = str(root / f"{case}_ddp"), str(root / f"{case}_fsdp")
    a, b = losses(ddp), losses(fsdp)
    assert sorted(a) == sorted(b) == list(range(3 if case == "muonh" else 10))
    for step in a:  # reduce-scatter sums in another order than all-reduce: equal up to float rounding
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-5), step
    va = [r["val_loss"] for r in read_log(ddp) if "val_loss" in r]
    assert [r["val_loss"] for r in read_log(fsdp) if "val_loss" in r] == pytest.approx(va, rel=1e-5)
    assert os.path.isdir(os.path.join(fsdp, "ckpt")) and not os.path.exists(os.path.join(fsdp, "ckpt.pt"))
    (m_ddp, c_ddp), (m_fsdp, c_fsdp) = load_model(ddp), load_model(fsdp)
    assert c_fsdp["step"] == len(a) and c_fsdp["model_config"] == c_ddp["model_config"]
    state = m_ddp.state_dict()
    assert state.keys() == m_fsdp.state_dict().keys()
    atol = 1e-3 if case == "muonh" else 1e-5  # MuonH orthogonalises in bf16 (torch.optim.Muon): rounding grows
    for name, value in m_fsdp.state_dict().items():
        torch.testing.assert_close(value, state[name], rtol=0, atol=atol, msg=name)
    if case == "moe":
        assert state["blocks.0.ffn.expert_bias"].abs().sum() > 0  # the biases moved, and moved alike


@pytest.mark.xdist_group("fsdp")
def test_fsdp_bf16_smoke(fsdp_runs):
    root, _ = fsdp_runs
    steps = losses(str(root / "bf16"))
    assert sorted(steps) == [0, 1, 2] and all(math.isfinite(v) for v in steps.values())
    assert steps[2] < steps[0]


@pytest.mark.xdist_group("fsdp")
def test_fsdp_memory_prediction_is_what_each_rank_holds(fsdp_runs):
    """scaling.memory_per_gpu's FSDP parameters, gradients and optimizer state are the bytes rank 0 (the largest
    shards) holds after a step, and rank 1 holds no more; both together hold DDP's one copy."""
    root, _ = fsdp_runs
    ranks = [json.load(open(root / f"memory_rank{r}.json")) for r in (0, 1)]
    predicted = ranks[0]["predicted"]
    for key in ("params", "grads", "optimizer"):
        assert ranks[0]["held"][key] == predicted["fsdp"][key], key
        assert ranks[1]["held"][key] <= predicted["fsdp"][key], key
    assert ranks[0]["held"]["params"] + ranks[1]["held"]["params"] == predicted["ddp"]["params"]


@pytest.mark.xdist_group("fsdp")
def test_fsdp_resume_after_kill_between_the_renames(fsdp_runs):
    """The worker killed the --fsdp run while it swapped in its step-10 checkpoint (the old one renamed away, the
    new one complete but not renamed in): --resume puts step 5's back, drops the other, and the resumed run's
    losses equal the uninterrupted run's."""
    root, data_dir = fsdp_runs
    cut = root / "cut"
    assert not (cut / "ckpt").exists() and (cut / "ckpt.tmp" / ".metadata").exists()
    res = torchrun([TRAIN_PY] + TINY + data_dir + ["--grad_accum=2", "--eval_tokens=1024", "--max_iters=10",
                                                     "--eval_interval=5", "--fsdp=True", f"--out_dir={cut}",
                                                     "--resume"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "put back" in res.stdout and "resumed" in res.stdout and "at step 5" in res.stdout
    assert not (cut / "ckpt.tmp").exists() and not (cut / "ckpt.old").exists()
    assert losses(str(cut)) == losses(str(root / "gpt_fsdp"))
    assert json.load(open(cut / "result.json"))["val_loss"] == \
        json.load(open(root / "gpt_fsdp" / "result.json"))["val_loss"]


def test_sharded_checkpoint_swap_leaves_a_complete_one(tmp_path):
    """replace_dir's two renames, and what clean_up_after_kill finds after a kill at each point."""
    said = []
    path = str(tmp_path / "ckpt")
    os.makedirs(path + ".tmp")
    checkpoint.replace_dir(path + ".tmp", path)  # the first checkpoint
    assert os.listdir(tmp_path) == ["ckpt"]
    os.makedirs(path + ".tmp")
    open(path + ".tmp/new", "w").close()
    checkpoint.clean_up_after_kill(path, said.append)  # killed while writing: the cut-off one goes
    assert os.listdir(tmp_path) == ["ckpt"] and "removed" in said[0]
    os.replace(path, path + ".old")  # killed between the renames: the old one comes back
    os.makedirs(path + ".tmp")
    checkpoint.clean_up_after_kill(path, said.append)
    assert os.listdir(tmp_path) == ["ckpt"] and "put back" in said[-1]
    os.makedirs(path + ".old")  # killed before the old one was removed: it goes
    checkpoint.clean_up_after_kill(path, said.append)
    assert os.listdir(tmp_path) == ["ckpt"]


def test_fsdp_needs_torchrun(data_dir, tmp_path):
    with pytest.raises(ConfigError, match="--fsdp=True shards the model over the ranks that torchrun starts"):
        train.main(TINY + data_dir + ["--fsdp=True", f"--out_dir={tmp_path / 'one'}"])


# ---- one run per directory, signals save, result.json -------------------------------------------------------

SIGNAL_RUN = ["--max_iters=12", "--eval_interval=4"]


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("uninterrupted") / "run")
    train.main(TINY + data_dir + SIGNAL_RUN + [f"--out_dir={out}"])
    return losses(out)


def stop_with_signal(monkeypatch, args, sig="SIGTERM", check=None):
    """train.main(args) with `sig` sent to this process while step 5 trains (from inside the step: an exact moment);
    the run must finish the step, save and exit with EXIT_RESUMABLE. check, if given, sees each step's arguments."""
    real_step, calls = train.train_step, []

    def step_then_signal(*args, **kwargs):
        if check is not None:
            check(args)
        out = real_step(*args, **kwargs)
        calls.append(1)
        if len(calls) == 6:
            os.kill(os.getpid(), getattr(signal, sig))
        return out
    monkeypatch.setattr(train, "train_step", step_then_signal)
    with pytest.raises(SystemExit) as e:
        train.main(args)
    monkeypatch.setattr(train, "train_step", real_step)
    assert e.value.code == checkpoint.EXIT_RESUMABLE


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2"])
def test_a_stop_signal_finishes_the_step_saves_and_the_resumed_run_is_the_uninterrupted_one(data_dir, tmp_path,
                                                                                         monkeypatch, sig,
                                                                                         uninterrupted):
    common = TINY + data_dir + SIGNAL_RUN
    cut = str(tmp_path / "cut")
    before = signal.getsignal(getattr(signal, sig))
    stop_with_signal(monkeypatch, common + [f"--out_dir={cut}"], sig)
    saved = torch.load(os.path.join(cut, "ckpt.pt"), weights_only=True)
    assert saved["step"] == 6 and saved["wall_s"] > 0  # step 5 finished, then saved
    assert signal.getsignal(getattr(signal, sig)) is before  # the handlers are put back
    train.main(common + [f"--out_dir={cut}", "--resume"])
    assert losses(cut) == uninterrupted  # bit for bit
    assert json.load(open(os.path.join(cut, "result.json")))["wall_s"] > saved["wall_s"]  # both segments


@pytest.mark.xdist_group("fsdp")
def test_a_signal_to_one_ddp_rank_stops_both_at_the_same_step_and_the_resumed_run_is_the_uninterrupted_one(
        data_dir, tmp_path, two_ranks):
    """A SIGTERM to one rank of a 2-rank run only (a node's agent, an OOM warning, a kill by pid): the ranks agree at
    the next log step (SignalStop.due: one all_reduce of the signal), both stop after that step (a rank that left
    alone would leave the other waiting in a collective), rank 0 saves, both exit with EXIT_RESUMABLE, and the
    resumed run is the uninterrupted one (two_ranks, under torchrun). The ranks here are started with the
    environment torchrun gives its workers, so that the test signals one by its pid and reads each one's exit
    code (torchrun would report only the first to exit, and SIGTERM the other)."""
    cut = str(tmp_path / "cut")
    ranks = start_ranks(TINY + data_dir + DDP_RUN + [f"--out_dir={cut}"])
    deadline = time.time() + 120
    while time.time() < deadline and max(logged_steps(cut), default=-1) < 2:  # training, past its first steps
        time.sleep(0.01)
    ranks[1].send_signal(signal.SIGTERM)
    out = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [checkpoint.EXIT_RESUMABLE] * 2, out[0][-2000:] + out[1][-2000:]
    saved = torch.load(os.path.join(cut, "ckpt.pt"), weights_only=True)["step"]
    assert 3 <= saved < 24 and f"SIGTERM: stopped before step {saved} and saved" in out[0]
    assert max(losses(cut)) == saved - 1  # the step both finished is the last one logged
    ranks = start_ranks(TINY + data_dir + DDP_RUN + [f"--out_dir={cut}", "--resume"])
    out = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], out[0][-2000:] + out[1][-2000:]
    assert losses(cut) == losses(two_ranks)  # bit for bit


def start_ranks(args, n=2):
    """n train.py processes as the ranks of one run, with the environment torchrun gives its workers (gloo)."""
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n),
               LOCAL_WORLD_SIZE=str(n))
    return [subprocess.Popen([sys.executable, TRAIN_PY] + args, cwd=REPO, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)))
            for rank in range(n)]


def logged_steps(out_dir):
    """The training steps log.jsonl holds so far (a line being written is skipped)."""
    path, steps = os.path.join(out_dir, "log.jsonl"), []
    for line in open(path) if os.path.exists(path) else ():
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:
            pass
    return steps


def test_a_second_ctrl_c_stops_at_once(data_dir, tmp_path, monkeypatch):
    real_step = train.train_step

    def step_twice_interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        return real_step(*args, **kwargs)
    monkeypatch.setattr(train, "train_step", step_twice_interrupted)
    out = str(tmp_path / "run")
    with pytest.raises(SystemExit) as e:
        train.main(TINY + data_dir + ["--max_iters=12", "--eval_interval=4", f"--out_dir={out}"])
    assert e.value.code == 130
    assert torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)["step"] == 0  # only the step-0 checkpoint


def test_one_run_per_directory_while_it_lives(data_dir, tmp_path):
    out = str(tmp_path / "run")
    args = [sys.executable, "train.py"] + TINY + data_dir + ["--max_iters=100000", f"--out_dir={out}"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(out, "log.jsonl")) and time.time() < deadline:
            time.sleep(0.05)
        for extra in (["--overwrite"], ["--resume"]):  # a second run or a resume, while the first one lives
            with pytest.raises(ConfigError, match=f"is in use by another run \\(process {proc.pid}\\)"):
                train.main(TINY + data_dir + ["--max_iters=2", f"--out_dir={out}"] + extra)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    train.main(TINY + data_dir + ["--max_iters=2", "--eval_interval=1", f"--out_dir={out}", "--overwrite"])  # freed


def test_result_json_is_strict_and_only_written_at_a_runs_end(data_dir, tmp_path, monkeypatch):
    out = str(tmp_path / "run")
    train.main(TINY + data_dir + ["--max_iters=0", f"--out_dir={out}"])  # no training step: no train loss
    result = json.loads(open(os.path.join(out, "result.json")).read(),
                        parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert result["train_loss"] is None and math.isfinite(result["val_loss"])
    real_step = train.train_step

    def step_then_term(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_step(*args, **kwargs)
    monkeypatch.setattr(train, "train_step", step_then_term)
    with pytest.raises(SystemExit):  # a new run in its place, stopped before its end: the old result is gone
        train.main(TINY + data_dir + ["--max_iters=4", "--eval_interval=1", f"--out_dir={out}", "--overwrite"])
    assert not os.path.exists(os.path.join(out, "result.json"))


def test_a_validation_set_smaller_than_one_window_is_one_line(data_dir, tmp_path):
    with pytest.raises(ConfigError, match="--eval_tokens=16 is less than one validation window of block_size=32"):
        train.main(TINY + data_dir + ["--eval_tokens=16", f"--out_dir={tmp_path / 'run'}"])


def test_a_full_disk_is_one_line_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    path = str(tmp_path / "ckpt.pt")
    checkpoint.save_checkpoint(path, {"step": 1})

    def full(state, file):  # what torch's zip writer raises when the disk fills
        open(file, "wb").write(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file")
    monkeypatch.setattr(checkpoint.torch, "save", full)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda p: shutil_usage(free=1024))
    with pytest.raises(ConfigError, match=f"no space left on {tmp_path} .*the last checkpoint, {path}, is intact"):
        checkpoint.save_checkpoint(path, {"step": 2})
    assert not os.path.exists(path + ".tmp")
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"step": 1}


def shutil_usage(free):
    import collections
    return collections.namedtuple("usage", "total used free")(2 ** 40, 2 ** 40 - free, free)


def test_a_full_disk_during_a_sharded_save_is_one_line_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    """--fsdp's DCP save on a full disk (as DCP reports a failed rank: a CheckpointException): one line, the partial
    ckpt.tmp/ removed, the last complete ckpt/ untouched."""
    from torch.distributed.checkpoint.api import CheckpointException
    import torch.distributed.checkpoint as dcp
    path = str(tmp_path / "ckpt")
    os.makedirs(path)
    open(os.path.join(path, "run.pt"), "wb").write(b"the last complete checkpoint")

    def full(state, checkpoint_id):
        os.makedirs(checkpoint_id)
        open(os.path.join(checkpoint_id, "__0_0.distcp"), "wb").write(b"partial")
        raise CheckpointException("save", {0: OSError(28, "No space left on device")})
    monkeypatch.setattr(dcp, "save", full)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda p: shutil_usage(free=1024))
    model = GPT(GPTConfig(n_layer=1, n_embd=16, head_dim=8, vocab_size=11, block_size=8))
    optimizer = torch.optim.AdamW(model.parameters())
    with pytest.raises(ConfigError, match=f"no space left on {tmp_path} .*the last checkpoint, {path}, is intact"):
        checkpoint.save_sharded(path, model, optimizer, {"step": 2}, master=True)
    assert not os.path.exists(path + ".tmp")
    assert open(os.path.join(path, "run.pt"), "rb").read() == b"the last complete checkpoint"


def test_a_run_refused_before_it_starts_leaves_no_empty_run_directory(data_dir, tmp_path):
    """A --resume with no checkpoint, or data that fails its checks, once left an empty out_dir behind (issue 47);
    a directory that held something before is left as it was."""
    out = tmp_path / "new"
    with pytest.raises(SystemExit, match="no checkpoint"):
        train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=2", "--resume"])
    assert not out.exists()
    with pytest.raises(SystemExit, match="cannot prepare data|no files|matches no"):
        train.main(TINY + ["--data_source=files:" + str(tmp_path / "none" / "*.txt"), "--tokenizer=byte",
                           f"--data_dir={tmp_path / 'tokens'}", f"--out_dir={out}", "--max_iters=2"])
    assert not out.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="no checkpoint"):
        train.main(TINY + data_dir + [f"--out_dir={kept}", "--max_iters=2", "--resume"])
    assert (kept / "notes.txt").read_text() == "mine"
    train.main(TINY + data_dir + [f"--out_dir={out}", "--max_iters=2", "--eval_interval=2"])  # then a run starts there
    assert (out / "result.json").exists()
