"""Tests of eval.py: scores of a hand-built model whose log-probabilities are known, the depth axis (the trained loop
count is the plain model, FLOPs against torch's FlopCounterMode, teacher-forced exits against exit decoding), the
generated probes, the prompts against lm-evaluation-harness's own task definitions, the harness adapter through
lm_eval.simple_evaluate, and the command line. Fixtures: tests/fixtures/eval/<task>/<split>.jsonl, rows written
for these tests in each dataset's schema (not copied from the datasets)."""
import glob
import io
import itertools
import json
import math
import os
import random
import re
from contextlib import redirect_stdout
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import early_exit as ee

import exits
import eval as ev
from hf import harness
from configurator import ConfigError
from data import get_tokenizer
from model import GPT
from model import GPTConfig, KVCache

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "eval")
BYTE = get_tokenizer("byte")


# -----------------------------------------------------------------------------------------------------------------
# a model whose log-probabilities are known: a byte bigram table


def bigram_model(C=8, seed=0):
    """A GPT whose blocks are the identity (zero output projections) and whose logits after byte b are the row
    L[b % C] of a table: wte[b] = e_(b % C), RMSNorm makes it sqrt(C) e, the head divides by sqrt(C)."""
    rng = random.Random(seed)
    table = [[rng.uniform(-3.0, 3.0) for _ in range(257)] for _ in range(C)]
    cfg = GPTConfig(block_size=64, vocab_size=257, n_layer=1, n_embd=C, head_dim=C, norm_eps=1e-12, mup=False)
    model = GPT(cfg).init_weights(0).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.wte.weight[torch.arange(257), torch.arange(257) % C] = 1.0
        model.lm_head.weight.copy_(torch.tensor(table, dtype=torch.float32).T / math.sqrt(C))
    return model, table


def hand_logp(table, prev, nxt):
    row = table[prev % len(table)]
    return row[nxt] - math.log(sum(math.exp(v) for v in row))


def hand_ll(table, context, continuation):
    """Sum of log p(continuation bytes | previous byte), by hand (the harness's split of context and continuation
    is trivial for bytes once trailing spaces move to the continuation)."""
    ctx, cont = context.encode(), continuation.encode()
    seq = ctx + cont
    return sum(hand_logp(table, seq[i - 1], seq[i]) for i in range(len(ctx), len(seq))), len(cont)


def test_scores_of_a_model_with_known_log_probabilities():
    model, table = bigram_model()
    rng = random.Random(1)
    alphabet = "abcdefgh é—ü"
    mc = ev.Task("t", "mc", None, None, "x", None, None, "acc")
    word = lambda: "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))  # noqa: E731
    items = [dict(query=f"Q{i}: pick one\nA:", choices=[word() for _ in range(4)], gold=i % 4) for i in range(16)]
    scorers = [ev.Scorer(model, BYTE, shared=True), ev.Scorer(model, BYTE, shared=False)]
    sensitive = dict(norm=0, bytes=0)
    for d in items:
        hand = [hand_ll(table, d["query"], " " + c) for c in d["choices"]]
        lls = [h[0] for h in hand]
        chars = [len(c) for c in d["choices"]]
        nbytes = [len(c.encode()) for c in d["choices"]]
        argmax = lambda xs: max(range(len(xs)), key=xs.__getitem__)  # noqa: E731
        per_char, per_byte = [l / n for l, n in zip(lls, chars)], [l / n for l, n in zip(lls, nbytes)]
        want = dict(acc=float(argmax(lls) == d["gold"]),
                    acc_norm=float(argmax(per_char) == d["gold"]), acc_bytes=float(argmax(per_byte) == d["gold"]),
                    cont_loss=-hand[d["gold"]][0] / hand[d["gold"]][1])
        sensitive["norm"] += argmax(lls) != argmax(per_char)
        sensitive["bytes"] += argmax(per_char) != argmax(per_byte)
        for scorer in scorers:
            res = scorer.score([[ev.encode_pair(BYTE, c, t) for c, t in ev.requests(mc, d)]])[0]
            assert [r[0] for r in res] == pytest.approx(lls, abs=1e-4)
            got = ev.item_metrics(mc, d, res)
            assert {k: got[k] for k in want} == pytest.approx(want, abs=1e-5)
    assert sensitive["norm"] and sensitive["bytes"], "the items must tell acc, acc_norm and acc_bytes apart"

    # WinoGrande's partial scoring: two contexts, one continuation
    part = ev.Task("w", "partial", None, None, "x", None, None, "acc")
    d = ev._winogrande(dict(sentence="The cup did not fit in the bag because _ was too big.", option1="the cup",
                            option2="the bag", answer="2"))
    hand = [hand_ll(table, c, " " + d["target"]) for c in d["contexts"]]
    res = scorers[0].score([[ev.encode_pair(BYTE, c, t) for c, t in ev.requests(part, d)]])[0]
    assert [r[0] for r in res] == pytest.approx([h[0] for h in hand], abs=1e-4)
    got = ev.item_metrics(part, d, res)
    assert got["acc"] == float(hand[1][0] > hand[0][0])
    assert got["cont_loss"] == pytest.approx(-hand[1][0] / hand[1][1], abs=1e-5)

    # a language-modelling item: acc is 1 exactly when every continuation byte is the greedy one
    greedy = [ord(":")]
    for _ in range(5):
        row = table[greedy[-1] % len(table)]
        greedy.append(max(range(256), key=row.__getitem__))
    lm = ev.Task("l", "lm", None, None, "x", None, None, "acc", "")
    for answer, acc in ((bytes(greedy[1:]).decode("latin-1"), 1.0), ("zzzzz", 0.0)):
        if acc == 1.0:  # the greedy chain may leave ASCII: score its bytes directly
            res = scorers[1].score([[(list(b"Answer:"), greedy[1:])]])[0]
            want_ll = sum(hand_logp(table, a, b) for a, b in zip(greedy, greedy[1:]))
        else:
            res = scorers[1].score([[ev.encode_pair(BYTE, "Answer:", answer)]])[0]
            want_ll = hand_ll(table, "Answer:", answer)[0]
        assert res[0][0] == pytest.approx(want_ll, abs=1e-4)
        assert ev.item_metrics(lm, dict(query="", answer=answer), res)["acc"] == acc


def test_encode_pair_moves_trailing_spaces_and_uses_end_of_text_for_empty_contexts():
    assert ev.encode_pair(BYTE, "ab ", "c") == (list(b"ab"), list(b" c"))
    assert ev.encode_pair(BYTE, "", "xy") == ([BYTE.eot], list(b"xy"))


# -----------------------------------------------------------------------------------------------------------------
# the depth axis


def tiny_looped(seed=0, **kw):
    cfg = GPTConfig(**{**dict(block_size=32, vocab_size=257, n_layer=2, n_loop=2, n_embd=32, head_dim=8), **kw})
    model = GPT(cfg).init_weights(seed).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)  # spread the entropies so thresholds separate tokens
    return model


def byte_requests(seed=0, n_items=4, n_choices=3):
    """Items of shared contexts whose lengths differ by less than eval.SHARED_SLACK: they batch together."""
    rng = random.Random(seed)
    groups = []
    for _ in range(n_items):
        ctx = [rng.randrange(256) for _ in range(rng.randint(20, 21))]
        groups.append([(ctx, [rng.randrange(256) for _ in range(rng.randint(1, 5))]) for _ in range(n_choices)])
    return groups


def forward_ll(model, ctx, cont):
    """The plain model's forward pass, independently of eval.py."""
    seq = torch.tensor(ctx + cont)
    with torch.no_grad():
        logp = F.log_softmax(model(seq[None, :-1])[0][0].float(), -1)
    return float(logp[torch.arange(len(ctx) - 1, len(seq) - 1), seq[len(ctx):]].sum())


def test_the_trained_loop_count_is_the_plain_model_and_other_counts_differ():
    model = tiny_looped()
    groups = byte_requests()
    plain = [[forward_ll(model, c, t) for c, t in g] for g in groups]
    tokens = {}
    for shared in (True, False):
        scorer = ev.Scorer(model, BYTE, ev.Setting("loops=2", 2), shared=shared)
        at_trained = scorer.score(groups)
        assert [[r[0] for r in g] for g in at_trained] == [pytest.approx(p, abs=1e-5) for p in plain]
        tokens[shared] = scorer.tokens
    assert tokens[True] < tokens[False] / 2  # the contexts ran once per item, not once per choice
    for M in (1, 3):
        other = ev.Scorer(model, BYTE, ev.Setting(f"loops={M}", M)).score(groups)
        assert max(abs(r[0] - p) for g, pg in zip(other, plain) for r, p in zip(g, pg)) > 1e-2
    assert not hasattr(model, "schedule")  # the model's own depth is untouched: a schedule is an argument


def test_flops_per_token_match_torch_flop_counter():
    """Rows of one scored token (context 1, so causal and full-square attention agree): the FLOPs eval.py counts
    equal what FlopCounterMode counts while it runs, at the trained and other loop counts."""
    from torch.utils.flop_counter import FlopCounterMode
    model = tiny_looped()
    groups = [[([i], [i + 1])] for i in range(5)]
    per_token = []
    for M in (1, 2, 3):
        scorer = ev.Scorer(model, BYTE, ev.Setting(f"loops={M}", M))
        counter = FlopCounterMode(display=False)
        with sdpa_kernel(SDPBackend.MATH), counter:  # the math kernel, whose QK^T and AV the counter sees
            scorer.score(groups)
        assert scorer.flops == pytest.approx(counter.get_total_flops(), rel=1e-9)
        per_token.append(scorer.flops_per_token)
    assert per_token[0] < per_token[1] < per_token[2]


@pytest.mark.parametrize("kw", [dict(), dict(n_coda=0, loop_cond="index", cond_init="normal")])
def test_teacher_forced_exits_are_exit_decoding_fed_the_gold_tokens(kw):
    model = tiny_looped(n_loop=3, **kw)
    rng = random.Random(2)
    seq = [rng.randrange(256) for _ in range(14)]
    labels = exits.depth_labels(model)
    cands = exits.exit_candidates(model, labels)
    x, y = torch.tensor([seq[:-1]]), torch.tensor([seq[1:]])
    first = ee.exit_records(model, x, y, cands, ["entropy"])["scores"]["entropy"][0, 3:]
    s = first.sort().values  # tau halfway between two scores: some positions exit at the first boundary, some do
    tau = float(s[len(s) // 2 - 1] + s[len(s) // 2]) / 2  # not, and none sits at tau, where rounding would decide
    scorer = ev.Scorer(model, BYTE, ev.Setting("exit", None, "entropy", tau, "propagate"))
    (ll, _, n), = scorer.score([[(seq[:4], seq[4:])]])[0]
    # decoding: positions 0..2 prefilled at full depth, then each token through decode_step with the cache
    cache = KVCache(model.n_slots(), 1, len(seq))
    model(torch.tensor([seq[:3]]), cache=cache)
    want, stats = 0.0, []
    for t in range(3, len(seq) - 1):
        ctx = cache.pos + 1
        logits, st = exits.decode_step(model, torch.tensor([[seq[t]]]), cache, labels, cands, "entropy", tau,
                                    "propagate")
        st["context"] = ctx
        stats.append(st)
        want += float(F.log_softmax(logits[0].float(), -1)[seq[t + 1]])
    exited = sum(st["exited"] for st in stats)
    assert 0 < exited < len(stats)
    assert ll == pytest.approx(want, abs=1e-4)
    assert sum(scorer.exits[:-1]) == exited
    # FLOPs of the scored tokens = what decode_flops charges those decoding steps
    plain_a, plain_b = scorer.costs["plain"]
    prefill = sum(plain_a + plain_b * (p + 1) for p in range(3))
    assert scorer.flops - prefill == pytest.approx(exits.decode_flops(model, labels, stats)[0] * len(stats), rel=1e-9)
    # tau = 0 never exits: the plain result
    never = ev.Scorer(model, BYTE, ev.Setting("exit", None, "entropy", 0.0, "recompute"))
    assert never.score([[(seq[:4], seq[4:])]])[0][0][0] == pytest.approx(forward_ll(model, seq[:4], seq[4:]),
                                                                        abs=1e-5)


# -----------------------------------------------------------------------------------------------------------------
# generated probes and data


def run_program(query):
    """The code-format probe's program, executed: what print() writes."""
    program = query.split("Here is a Python program:\n")[1].split("\nWhat does it print?")[0]
    buf = io.StringIO()
    with redirect_stdout(buf):
        exec(program, {})
    return buf.getvalue().strip()


def resolve_math(query):
    """The math-format probe's assignments, resolved by substitution."""
    assigns, q = re.match(r"Given (.*)\. What is (\w)\?", query).groups()
    env = dict(a.split("=") for a in assigns.split(", "))
    v = env[q]
    while not v.isdigit():
        v = env[v]
    return v


def test_generated_probes_are_seeded_and_their_answers_are_right():
    for name in ev.PROBES:
        a, b = ev.probe_docs(name, 20, seed=3), ev.probe_docs(name, 20, seed=3)
        assert a == b and a != ev.probe_docs(name, 20, seed=4)
        assert a != ev.probe_docs(name, 20, seed=3, split="train")  # the few-shot pool is another stream
    for d in ev.probe_docs("varassign_d1_code", 30, 0) + ev.probe_docs("varassign_d0_code", 30, 0):
        assert run_program(d["query"]) == d["answer"] and 1 <= int(d["answer"]) <= 25
    for d in ev.probe_docs("varassign_d1_math", 30, 0):
        assert resolve_math(d["query"]) == d["answer"]
        assert len(re.findall(r"\b\w=\d+", d["query"])) == 5 and len(re.findall(r"\b\w=[a-z]\b", d["query"])) == 5
    d = ev.probe_docs("induction_head", 1, 0)[0]
    first, repeat = d["query"].split("\n")
    assert first.split()[6:] == d["answer"].split() and repeat.split() == first.split()[:6]


def test_missing_data_names_the_dataset_and_the_fetch_command(tmp_path):
    with pytest.raises(ConfigError, match=r"Rowan/hellaswag.*python eval.py --fetch --tasks=hellaswag"):
        ev.build_items(ev.TASKS["hellaswag"], str(tmp_path), 0, 0, 0)


def test_held_out_text_reads_the_validation_split_text_files_and_parquet(tmp_path):
    """--text sources of the perplexity task: val (the run's prepared validation split, cut at end-of-text),
    plain text files (one document each) and parquet files (a document per row), each capped at max_tokens."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from data import TokenData
    from prepare import prepare
    texts = ["first document, plain text.", "the second one\nhas two lines.", "a third, in parquet only."]
    for i, t in enumerate(texts[:2]):
        (tmp_path / f"doc{i}.txt").write_text(t)
    label, docs = ev.text_documents(str(tmp_path / "*.txt"), BYTE, {}, 10_000)
    assert label == "*.txt" and docs == [BYTE.encode(t) for t in texts[:2]]
    assert ev.text_documents(str(tmp_path / "*.txt"), BYTE, {}, 30)[1] == [BYTE.encode(texts[0]),
                                                                            BYTE.encode(texts[1])[:3]]
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"text": texts, "id": [1, 2, 3]}), tmp_path / "pq" / "part.parquet")
    assert ev.text_documents(str(tmp_path / "pq" / "*.parquet"), BYTE, {}, 10_000)[1] == [BYTE.encode(t) for t in texts]
    data_dir = str(tmp_path / "prepared")
    prepare("files:" + str(tmp_path / "*.txt"), data_dir, tokenizer="byte", val_fraction=0.5, seed=0)
    label, docs = ev.text_documents("val", BYTE, {"train_config": {"data_dir": data_dir}}, 10_000)
    val = TokenData(data_dir).splits["val"].tolist()
    assert label == "val" and docs and sum(docs, []) == [t for t in val if t != BYTE.eot]
    with pytest.raises(ConfigError, match="needs the checkpoint's prepared data"):
        ev.text_documents("val", BYTE, {"train_config": {"data_dir": str(tmp_path / "none")}}, 100)


def test_rolling_windows_cover_every_token_once_with_the_most_context():
    toks = list(range(10, 33))
    windows = ev.rolling_windows(toks, 0, 8)
    assert [t for _, cont in windows for t in cont] == toks
    assert windows[0][0] == [0] and all(len(c) + len(t) == 9 for c, t in windows[1:])


# -----------------------------------------------------------------------------------------------------------------
# lm-evaluation-harness: the same prompts, and the adapter

HARNESS_YAML = dict(  # our task -> lm-evaluation-harness 0.4.13's definition
    hellaswag="hellaswag/hellaswag.yaml", arc_easy="arc/arc_easy.yaml", arc_challenge="arc/arc_challenge.yaml",
    boolq="super_glue/boolq/default.yaml", commonsense_qa="commonsense_qa/default.yaml",
    openbookqa="openbookqa/openbookqa.yaml", piqa="piqa/piqa.yaml", social_iqa="siqa/siqa.yaml",
    copa="super_glue/copa/default.yaml", sciq="sciq/sciq.yaml", race="race/race.yaml",
    winogrande="winogrande/default.yaml", lambada_openai="lambada/lambada_openai.yaml",
    triviaqa="triviaqa/default.yaml", nq_open="nq_open/nq_open.yaml", webqs="webqs/webqs.yaml",
    tydiqa_goldp_en="tydiqa/tydiqa_goldp_en.yaml", asdiv="asdiv/default.yaml",
    bigbench_dyck_languages="bigbench/generate_until/dyck_languages.yaml",
    bigbench_qa_wikidata="bigbench/generate_until/qa_wikidata.yaml")


def harness_task(name):
    """The harness's own task definition over our fixture rows (no download)."""
    import datasets
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml
    cfg = load_yaml(os.path.join(os.path.dirname(lm_eval.__file__), "tasks", HARNESS_YAML[name]))
    splits = {}
    for fname in os.listdir(os.path.join(FIXTURES, name)):
        splits[fname.split(".")[0]] = datasets.Dataset.from_list(ev.read_rows(os.path.join(FIXTURES, name, fname)))
    cfg["custom_dataset"] = lambda **kw: datasets.DatasetDict(splits)
    return ConfigurableTask(config=cfg)


def harness_pairs(task, doc, i, shots=()):
    """(context, continuation) pairs of the harness's requests; a generation request's continuation is the gold
    target after the target delimiter."""
    if shots:
        task.sampler.sample = lambda n, eval_doc=None, **kw: list(shots)[:n]
    ctx = task.fewshot_context(doc, len(shots))
    insts = task.construct_requests(doc, ctx, metadata=(task.config.task, i, 1))
    args = [inst.args for inst in (insts if isinstance(insts, list) else [insts])]
    if task.OUTPUT_TYPE == "generate_until":
        target = task.doc_to_target(doc)
        target = target[0] if isinstance(target, list) else target
        return [(args[0][0], task.config.target_delimiter + str(target))]
    return args


def test_requests_equal_lm_evaluation_harness_for_every_task_format():
    for name in HARNESS_YAML:
        ours = ev.TASKS[name]
        theirs = harness_task(name)
        docs = ev.task_docs(ours, ours.split, FIXTURES, 0)
        their_docs = list(theirs.eval_docs)
        assert len(docs) == len(their_docs), name
        pool = ev.task_docs(ours, ours.fewshot_split, FIXTURES, 0) if ours.fewshot_split else []
        their_pool = list(theirs.fewshot_docs()) if pool and theirs.has_training_docs() else []
        for i, (d, hd) in enumerate(zip(docs, their_docs)):
            pairs = harness_pairs(theirs, hd, i)
            if name == "webqs":  # the harness scores every accepted answer (its few-shot examples break on them: a
                pairs = pairs[:1]  # list of indices); we score the first one as the gold continuation
            assert ev.requests(ours, d) == pairs, name
            if their_pool and name != "webqs":
                theirs_with_shots = harness_pairs(theirs, hd, i, their_pool[:2])[:len(pairs)]
                assert ev.requests(ours, d, pool[:2]) == theirs_with_shots, name


def test_rolling_windows_equal_lm_evaluation_harness():
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
    toks = list(range(100, 137))
    for max_len in (5, 8, 37, 64):
        theirs = [make_disjoint_window(w) for w in get_rolling_token_windows(toks, 0, max_len, 1)]
        assert [(list(c), list(t)) for c, t in theirs] == ev.rolling_windows(toks, 0, max_len)


ADAPTER_YAMLS = {
    "fx_mc.yaml": """task: fx_mc
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {dir}/mc.jsonl
output_type: multiple_choice
validation_split: validation
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{gold}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
  - metric: acc_bytes
""",
    "fx_wino.yaml": """include: {harness}/winogrande/default.yaml
task: fx_wino
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    validation: {fixtures}/winogrande/validation.jsonl
    train: {fixtures}/winogrande/train.jsonl
""",
    "fx_lambada.yaml": """include: {harness}/lambada/lambada_openai.yaml
task: fx_lambada
tag: []
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: {fixtures}/lambada_openai/test.jsonl
""",
    "fx_rolling.yaml": """task: fx_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {fixtures}/lambada_openai/test.jsonl
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
""",
    "fx_gen.yaml": """task: fx_gen
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {dir}/mc.jsonl
output_type: generate_until
validation_split: validation
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices[gold]}}}}"
generation_kwargs:
  until: ["\\n", "e"]
  max_gen_toks: 6
metric_list:
  - metric: exact_match
""",
}
MC_ROWS = [dict(question="Which drink is hot?", choices=["tea", "iced café", "cold milk"], gold=0),
           dict(question="Which is a colour?", choices=["blue", "seven", "über"], gold=0),
           dict(question="Pick the fruit", choices=["chair", "apple", "rock", "naïve pear"], gold=1)]


def test_harness_adapter_gives_eval_py_scores_through_simple_evaluate(tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager
    with open(tmp_path / "mc.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in MC_ROWS)
    harness_tasks = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    for fname, text in ADAPTER_YAMLS.items():
        (tmp_path / fname).write_text(text.format(dir=tmp_path, harness=harness_tasks, fixtures=FIXTURES))
    model = tiny_looped(block_size=64)
    setting = ev.Setting("loops=3", 3)  # through the adapter at another depth than the trained one
    lm = harness.harness_model_class()(scorer=ev.Scorer(model, BYTE, setting))
    out = lm_eval.simple_evaluate(model=lm, tasks=["fx_mc", "fx_wino", "fx_lambada", "fx_rolling", "fx_gen"],
                                  task_manager=TaskManager(include_defaults=False, include_path=str(tmp_path)),
                                  bootstrap_iters=0, log_samples=False)["results"]
    scorer = ev.Scorer(model, BYTE, setting)
    mc = ev.Task("fx_mc", "mc", None, None, "validation", None, lambda r: ev._mc(
        f"Question: {r['question']}\nAnswer:", r["choices"], r["gold"]), "acc")
    mine = ev.evaluate_task(scorer, mc, [(mc.doc(r), ev.requests(mc, mc.doc(r))) for r in MC_ROWS], progress=False)
    for m in ("acc", "acc_norm", "acc_bytes"):
        assert out["fx_mc"][f"{m},none"] == pytest.approx(mine[m])
    for task, ours in (("fx_wino", "winogrande"), ("fx_lambada", "lambada_openai")):
        mine = ev.evaluate_task(scorer, ev.TASKS[ours], ev.build_items(ev.TASKS[ours], FIXTURES, 0, 0, 0),
                                progress=False)
        for m in ("acc", "perplexity") if ours == "lambada_openai" else ("acc",):
            assert out[task][f"{m},none"] == pytest.approx(mine[m], rel=1e-6)
    texts = [r["text"] for r in ev.read_rows(os.path.join(FIXTURES, "lambada_openai", "test.jsonl"))]
    mine = ev.evaluate_perplexity(scorer, "fx", [BYTE.encode(t) for t in texts], progress=False)
    for m in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert out["fx_rolling"][f"{m},none"] == pytest.approx(mine[m], rel=1e-6)
    generated = [scorer.generate(BYTE.encode(f"Question: {r['question']}\nAnswer:"), 6, ["\n", "e"]) for r in MC_ROWS]
    assert all("\n" not in g and "e" not in g for g in generated)
    assert out["fx_gen"]["exact_match,none"] == pytest.approx(
        sum(g.strip() == r["choices"][r["gold"]] for g, r in zip(generated, MC_ROWS)) / len(MC_ROWS))


def test_harness_unknown_task_is_one_line_naming_the_nearest(tmp_path):
    """A misspelt harness task was lm_eval's KeyError traceback from simple_evaluate: now one line naming the nearest
    known names, before any model runs (only the local YAMLs are indexed here: the harness's own take seconds)."""
    model = tiny_looped()
    torch.save(dict(model=model.state_dict(), model_config=model.config.to_dict(),
                    train_config=dict(tokenizer="byte")), tmp_path / "ckpt.pt")
    (tmp_path / "yamls").mkdir()
    (tmp_path / "yamls" / "fx_mc.yaml").write_text(ADAPTER_YAMLS["fx_mc.yaml"].format(dir=tmp_path))
    base = [f"--ckpt={tmp_path}", "--harness_defaults=False", "--progress=False"]
    with pytest.raises(ConfigError, match=r"'fx_mcc' is not a task lm-evaluation-harness knows; nearest known: fx_mc"):
        harness.main(base + ["--tasks=fx_mcc", f"--include_path={tmp_path / 'yamls'}"])
    with pytest.raises(ConfigError, match="no task is indexed"):
        harness.main(base + ["--tasks=hellaswagg"])


def test_eval_py_harness_names_the_adapters_command():
    """The harness runs from hf/ (issue 52: the reading path never imports a package): eval.py --harness is one line
    naming the command, before any checkpoint is read."""
    with pytest.raises(ConfigError, match=r"python -m hf\.harness --ckpt="):
        ev.main(["--ckpt=out/nowhere", "--harness", "--tasks=hellaswag"])


# -----------------------------------------------------------------------------------------------------------------
# the command line


def test_command_line_writes_every_depth_setting(tmp_path):
    model = tiny_looped()
    torch.save(dict(model=model.state_dict(), model_config=model.config.to_dict(),
                    train_config=dict(tokenizer="byte")), tmp_path / "ckpt.pt")
    out = tmp_path / "ev"
    res = ev.main([f"--ckpt={tmp_path}", "--tasks=winogrande,arc_easy,lambada_openai,induction_head",
                   f"--data_dir={FIXTURES}", "--limit=3", "--loops=1,3", "--exit_tau=3", f"--out_dir={out}",
                   "--progress=False"])
    saved = json.load(open(f"{out}/eval.json"))
    from lab.sweep import file_sha256  # the evaluation names what regenerates it: command, commit, checkpoint sha256
    ckpt = os.path.join(str(tmp_path), "ckpt.pt")
    assert saved["provenance"]["command"].startswith("python eval.py --ckpt=")
    assert saved["provenance"]["inputs"] == {ckpt: file_sha256(ckpt)}
    settings = list(saved["results"][tmp_path.name])
    assert settings == ["loops=2 (trained)", "loops=1", "loops=3", "exit entropy<3"]
    flops = [res[tmp_path.name][s]["tasks"]["arc_easy"]["flops_per_token"] for s in settings]
    assert flops[1] < flops[0] < flops[2] and flops[3] < flops[0]
    assert os.path.getsize(f"{out}/eval.png") > 0
    with pytest.raises(ConfigError, match="did you mean 'lee_core9'"):
        ev.main([f"--ckpt={tmp_path}", "--tasks=lee_core", "--progress=False"])


def test_bad_input_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "ckpt.pt").write_bytes(b"")
    with pytest.raises(ConfigError, match="not a readable checkpoint"):
        ev.main([f"--ckpt={tmp_path / 'empty'}", "--progress=False"])
    model = tiny_looped()
    torch.save(dict(model=model.state_dict(), model_config=model.config.to_dict()), tmp_path / "ckpt.pt")
    for argv, says in ((["--budget=3"], "1 <= M <= n_loop=2"), (["--criterion=oracle"], "is not one of"),
                       (["--tasks=perplexity"], "needs --text=val")):
        with pytest.raises(ConfigError, match=says):
            ev.main([f"--ckpt={tmp_path}", "--progress=False", *argv])
    with pytest.raises(ConfigError, match=r"^eval\.py: --text=bogus: no files match it: give --text=val") as e:
        ev.main([f"--ckpt={tmp_path}", "--progress=False", "--tasks=perplexity", "--text=bogus"])
    assert "data_source" not in str(e.value)  # (train.py's key: it named data_source=files:<glob>)
    with pytest.raises(ConfigError, match="does not fit the model's context"):
        ev.Scorer(model, BYTE).score([[([1], list(range(40)))]])


@pytest.mark.parametrize("damage,says", [
    (lambda rows: rows[:1] + ["{broken\n"] + rows[1:], "arc_easy/test.jsonl, line 2: not a JSON row"),
    (lambda rows: [json.dumps({k: v for k, v in json.loads(rows[0]).items() if k != "question"}) + "\n"] + rows[1:],
     "arc_easy, test split, row 1: KeyError: 'question'"),
    (lambda rows: [json.dumps(dict(json.loads(rows[0]), answerKey="Z")) + "\n"] + rows[1:],
     "arc_easy, test split, row 1:")])
def test_damaged_task_rows_are_one_line_naming_the_row(tmp_path, damage, says):
    import shutil
    shutil.copytree(os.path.join(FIXTURES, "arc_easy"), tmp_path / "arc_easy")
    path = tmp_path / "arc_easy" / "test.jsonl"
    path.write_text("".join(damage(open(path).readlines())))
    with pytest.raises(ConfigError, match=re.escape(says)):
        ev.build_items(ev.TASKS["arc_easy"], str(tmp_path), 0, 0, None)


def committed_evaluations():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return sorted(glob.glob(os.path.join(root, "records", "*", "eval*.json"))
                  + glob.glob(os.path.join(root, "course", "*", "eval.json")))


@pytest.mark.parametrize("path", committed_evaluations(), ids=os.path.basename)
def test_committed_evaluation_figures_redraw_from_their_json_readably(path, tmp_path):
    """`python eval.py --redraw=FILE.json` draws a committed evaluation's figure from its JSON alone; the figure
    passes the slide checks and draws every setting's score of every model."""
    from figure_checks import assert_drawn, figure_problems
    import matplotlib.figure
    copy = tmp_path / os.path.basename(path)
    copy.write_text(open(path).read())
    figures = []  # the figure as --redraw saves it (test_command_line_writes_every_depth_setting writes a PNG)
    with mock.patch.object(matplotlib.figure.Figure, "savefig", lambda fig, png, **kw: figures.append((fig, png))):
        (png,) = ev.main([f"--redraw={copy}"])
    ((fig, written),) = figures
    assert written == png
    saved = json.load(open(path))
    assert figure_problems(fig) == []
    fig.canvas.draw()  # the settings' names: none printed over another (issue 50), none a field name
    for ax in fig.axes:
        boxes = [(t.get_text(), t.get_window_extent()) for t in ax.texts]
        assert not [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]
        assert all("_" not in t and "loops=" not in t for t, _ in boxes)
    name, _, metric, _, _ = saved["plan"][0]
    assert_drawn(fig, [(np.mean([t["flops_per_token"] for t in r["tasks"].values()]) / 1e6, r["tasks"][name][metric])
                       for per in saved["results"].values() for r in per.values() if name in r["tasks"]])
    import matplotlib.pyplot as plt
    plt.close(fig)
