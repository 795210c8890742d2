"""Bad input ends in one line that says what to do, never a traceback: random --key=value lists thrown at the
configurator and the model builder (property-based, hypothesis), and damaged checkpoints in every tool that
loads one."""
import os
import re
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import analyze
import early_exit
import distributed
import checkpoint
import train
from configurator import ConfigError, configure
from model import GPT
from model import CHOICES
from model import GPTConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_DEFAULTS = {k: v for k, v in vars(train).items() if not k.startswith("_")}
# keys whose values name places on disk or switch the run's mode: not what this property is about
SKIP = {"out_dir", "data_dir", "data_source", "resume", "overwrite", "device"}
KEYS = sorted(k for k in {**TRAIN_DEFAULTS, **GPTConfig.__dataclass_fields__}
              if k not in SKIP and not callable(TRAIN_DEFAULTS.get(k)) and not isinstance(TRAIN_DEFAULTS.get(k),
                                                                                             type(os)))
ENUMS = {**CHOICES, **train._CHOICES}
NUMBERS = ["-1", "0", "1", "2", "3", "7", "16", "63", "100", "0.5", "-0.5", "1e9", "1e999", "nan"]


def value_for(key):
    """Plausible and implausible text for one key: numbers, booleans, misspellings of its choices, junk."""
    words = [w + suffix for w in ENUMS.get(key, ()) for suffix in ("", "x")]
    return st.sampled_from(NUMBERS + words + ["True", "False", "", "abc", "(1, 2)", "None"])


arguments = st.lists(st.sampled_from(KEYS).flatmap(lambda k: value_for(k).map(lambda v: f"--{k}={v}")),
                     min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(argv=arguments)
def test_random_bad_keys_give_one_line_and_no_traceback(argv):
    try:
        cfg, model_cfg = configure(TRAIN_DEFAULTS, GPTConfig, argv, doc_source=train.__file__,
                                   choices=train._CHOICES)
        checkpoint.check_training(cfg)
        with torch.device("meta"):  # paper-size shapes cost nothing here
            GPT(model_cfg)
    except ConfigError as e:
        message = str(e)
        assert message.startswith(("config error:", "GPTConfig")) and "\n" not in message, message


@pytest.mark.parametrize("argv,says", [
    (["--n_embd=100"], "n_embd=100 is not a multiple of head_dim=64"),
    (["--head_dim=63", "--n_head=2"], "RoPE needs an even head_dim"),
    (["--n_layer=0"], "n_layer must be >= 1"),
    (["--n_expert=4", "--top_k=5"], "top_k=5 must be between 1 and n_expert=4"),
    (["--batch_size=0"], "--batch_size=0 must be >= 1"),
    (["--schedule=cosin"], "did you mean 'cosine'"),
    (["--injection=lin", "--n_loop=2"], "injection must be one of none | linear | additive"),
    (["--lr=1e999"], "must be a finite number"),
    (["--resume_changes=n_layer"], "only max_iters"),
])
def test_each_named_bad_input_says_what_is_wrong(argv, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace("|", r"\|")):
        cfg, _ = configure(TRAIN_DEFAULTS, GPTConfig, argv, doc_source=train.__file__, choices=train._CHOICES)
        checkpoint.check_training(cfg)


def test_a_config_error_is_one_line_and_exit_code_2():
    out = subprocess.run([sys.executable, "train.py", "--n_embd=100"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "n_embd=100" in out.stderr


def test_grad_accum_not_divisible_by_the_ranks_suggests_values():
    with pytest.raises(ConfigError, match="use --grad_accum=4 or 2"):
        distributed.check_world(3, 2)
    distributed.check_world(4, 2)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """An empty and a cut-off checkpoint, each in a run directory."""
    d = tmp_path_factory.mktemp("damaged")
    model = GPT(GPTConfig(n_layer=1, n_embd=32, head_dim=16, block_size=16)).init_weights(0)
    good = d / "good.pt"
    torch.save({"model": model.state_dict(), "model_config": model.config.to_dict()}, good)
    runs = {}
    for name, data in (("empty", b""), ("cut", good.read_bytes()[: good.stat().st_size // 2])):
        (d / name).mkdir()
        (d / name / "ckpt.pt").write_bytes(data)
        runs[name] = str(d / name)
    return runs


@pytest.mark.parametrize("kind", ["empty", "cut"])
def test_damaged_checkpoints_are_one_line_in_every_tool(damaged, kind, tmp_path):
    run_dir = damaged[kind]
    says = "not a readable checkpoint"
    with pytest.raises(ConfigError, match=says):
        train.main([f"--out_dir={run_dir}", "--resume", "--data_dir=" + str(tmp_path / "unused")])
    with pytest.raises(ConfigError, match=says):
        early_exit.main([f"--ckpt={run_dir}", f"--out_dir={tmp_path}/ee"])
    with pytest.raises(ConfigError, match=says):
        analyze.main(["jsd", f"--ckpt={run_dir}", f"--out_dir={tmp_path}"])
    out = subprocess.run([sys.executable, "sample.py", f"--ckpt={run_dir}"], cwd=REPO, capture_output=True,
                         text=True)
    assert out.returncode == 2 and says in out.stderr and out.stderr.strip().count("\n") == 0


def test_a_broken_config_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "syntax.py").write_text("n_layer = 2\nn_embd = (\n")
    (tmp_path / "missing.py").write_text(f"exec(open({str(tmp_path / 'nothere.py')!r}).read())\n")
    for name, says in (("syntax.py", "line 2: SyntaxError"), ("missing.py", "line 1: FileNotFoundError")):
        with pytest.raises(ConfigError, match=f"config file '{tmp_path / name}', {says}"):
            configure(TRAIN_DEFAULTS, GPTConfig, [str(tmp_path / name)], doc_source=train.__file__)


def test_more_named_bad_inputs_are_one_line():
    with pytest.raises(ConfigError, match="--seed=-1 must be >= 0"):
        cfg, _ = configure(TRAIN_DEFAULTS, GPTConfig, ["--seed=-1"], doc_source=train.__file__, choices=train._CHOICES)
        checkpoint.check_training(cfg)
    if torch.cuda.device_count() < 8:
        with pytest.raises(ConfigError, match="--device=cuda:7: this machine has"):
            distributed.pick_device("cuda:7")
    import sample
    ckpt = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints", "plain.pt")
    for argv, says in ((["--temperature=-1"], "--temperature=-1.0 must be >= 0"),
                       (["--prompt=FILE:/nonexistent/prompt.txt"], "cannot read it"),
                       (["--max_new_tokens=0"], "--max_new_tokens=0 must be >= 1")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            sample.main([f"--ckpt={ckpt}"] + argv)


@pytest.mark.parametrize("command,says", [("iteradaln", "no block receives per-loop conditioning"),
                                          ("routing", "has no MoE layer that runs on more than one pass")])
def test_an_analysis_of_a_model_without_its_part_is_one_line(tmp_path, command, says):
    ckpt = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints", "plain.pt")
    with pytest.raises(ConfigError, match=says):
        analyze.main([command, f"--ckpt={ckpt}", f"--out_dir={tmp_path}"])


def test_sample_help_lists_keys_not_module_constants(capsys):
    """sample.py --help listed --FILLS, the early-exit module's constant that exit_fill's choices come from."""
    import sample
    with pytest.raises(SystemExit) as e:
        sample.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code in (0, None) and "--exit_fill" in out and "FILLS" not in out


SCRIPTS = sorted(f for f in os.listdir(REPO) if f.endswith(".py") and '__name__ == "__main__"' in open(
    os.path.join(REPO, f)).read()) + ["lab/campaign.py", "lab/perturb.py", "tools/side_by_side.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help_and_a_bogus_key(script, run_script):
    """Every script a user runs (and each package's entry point): --help prints its help and exits 0; --bogus=1 ends
    with one line that names the key, exit 2 (issue 47: some printed nothing and exited 0, or printed their whole
    docstring, or exited 1)."""
    code, out, err = run_script(script, "--help")
    assert code == 0 and out.strip(), f"{script} --help: exit {code}, printed {out[:200]!r}"
    code, out, err = run_script(script, "--bogus=1")
    lines = (out + err).strip().splitlines()
    assert code == 2 and len(lines) == 1 and "bogus" in lines[0], f"{script} --bogus=1: exit {code}: {lines[:3]}"
