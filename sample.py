"""
Generate text from a trained run with the KV cache (plain, looped and MoE models alike):

    python sample.py --ckpt=out/default --prompt="And the" --max_new_tokens=200
"""
import torch

from configurator import ConfigError, configure, run
from data import get_tokenizer
from runs import load_model, use_device
from exits import FILLS as _FILLS, decode_criteria, generate_with_exit, summarize_generation  # (_FILLS: not a key)

ckpt = "out/default"  # run directory (or path to a ckpt.pt) written by train.py
prompt = "\n"  # text to continue; "FILE:path" reads it from a file
num_samples = 2  # independent samples
max_new_tokens = 200  # tokens to generate per sample (prompt + new tokens must fit in block_size)
temperature = 0.8  # 0 = greedy; < 1 sharper, > 1 more random
top_k = 50  # keep only the top_k most likely tokens (0 = all)
seed = 1337  # sampling seed
device = "auto"  # auto (cuda if there is one) | cpu | cuda | cuda:N
threads = 0  # torch threads on CPU; 0 = auto, as train.py: OMP_NUM_THREADS if set, else the idle cores
dtype = "float32"  # float32 | bfloat16 (autocast)
exit_criterion = "none"  # early exit per token (exits.py): none | entropy | kl | change | agree
exit_tau = 0.0  # early exit: a token stops at the first candidate exit whose criterion score is below this
exit_fill = "propagate"  # early exit: KV slots of skipped layers: propagate (cheap, approximate) | recompute (exact)
exit_every_layer = False  # early exit: looped models may stop after any loop layer, not only at loop boundaries


def main(argv=None):
    defaults = {k: v for k, v in globals().items() if not k.startswith("_")}
    cfg, _ = configure(defaults, None, argv, doc_source=__file__,
                       choices=dict(dtype=("float32", "bfloat16"), exit_criterion=("none",) + decode_criteria(),
                                    exit_fill=_FILLS))
    for key, least in (("temperature", 0), ("top_k", 0), ("num_samples", 1), ("max_new_tokens", 1), ("seed", 0),
                       ("exit_tau", 0)):
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")
    cfg["device"] = use_device(cfg)
    model, state = load_model(cfg["ckpt"], cfg["device"])
    tok = get_tokenizer(state["train_config"].get("tokenizer", "gpt2"))
    text = cfg["prompt"]
    if text.startswith("FILE:"):
        try:
            text = open(text[5:]).read()
        except OSError as e:
            raise ConfigError(f"config error: --prompt=FILE:{text[5:]}: cannot read it ({e.strerror})") from None
    ids = tok.encode(text) or [tok.eot]
    idx = torch.tensor([ids] * cfg["num_samples"], device=cfg["device"])
    n = min(cfg["max_new_tokens"], model.config.block_size - idx.size(1))
    if n <= 0:
        raise ConfigError(f"the prompt has {idx.size(1)} tokens, the model's block_size is "
                          f"{model.config.block_size}: shorten the prompt")
    if n < cfg["max_new_tokens"]:
        print(f"note: {n} new tokens, not {cfg['max_new_tokens']}: the prompt's {idx.size(1)} and the new tokens "
              f"must fit the model's block_size={model.config.block_size}")
    g = torch.Generator(device=cfg["device"]).manual_seed(cfg["seed"])
    amp = torch.autocast(cfg["device"].split(":")[0], dtype=torch.bfloat16) if cfg["dtype"] == "bfloat16" else None
    with amp or torch.no_grad():
        if cfg["exit_criterion"] == "none":
            out = model.generate(idx, n, temperature=cfg["temperature"], top_k=cfg["top_k"] or None, generator=g)
        else:  # one sample at a time: a batch can only exit where all of its rows may
            rows = []
            for i in range(idx.size(0)):
                res = generate_with_exit(model, idx[i:i + 1], n, cfg["exit_criterion"], cfg["exit_tau"],
                                         cfg["exit_fill"], cfg["exit_every_layer"], cfg["temperature"],
                                         cfg["top_k"] or None, g)
                rows.append(res["tokens"])
                print(f"[sample {i}] {summarize_generation(model, res)}")
            out = torch.cat(rows)
    for row in out.tolist():
        print(tok.decode(row))
        print("-" * 60)


if __name__ == "__main__":
    run(main)
