"""
Downstream evaluation: the papers' task suites, scored the way lm-evaluation-harness scores them, at every depth
(loop count, elastic budget, early-exit threshold), each score next to the forward FLOPs it actually cost per token.

    python eval.py --ckpt=out/default --tasks=lee_core9 --data_dir=evaldata        # Lee et al.'s Core 9
    python eval.py config/eval_loopformer.py --ckpt=out/loopformer --data_dir=evaldata --budget=2,4
    python eval.py config/eval_schwethelm.py --ckpt=out/r1,out/r4 --data_dir=evaldata --loops=1,2,4,8
    python eval.py --ckpt=out/looped --tasks=probes,perplexity --text=val --loops=1,2,4 --exit_tau=0.5,1
    python eval.py --fetch --tasks=lee_core9,loopformer --data_dir=evaldata       # on a connected machine
    python -m hf.harness --tasks=hellaswag,gsm8k --ckpt=out/run --loops=4  # lm-eval-harness's tasks, these keys
    python eval.py --bench --ckpt=out/run                                         # shared-context cache speed

Writes eval.json (every number) and eval.png (score vs FLOPs per token, a panel per task, a line per model) into
--out_dir (default: the first run's directory); bench.json and eval_harness.json likewise.

Suites (--tasks takes suite and task names, comma-separated; config/eval_*.py are the same as presets):
  lee_core9    Lee et al. 2026 (arXiv:2605.09165, §5.3): ARC-E, ARC-C, BoolQ, CSQA, HellaSwag, OBQA, PIQA, SIQA,
               WinoGrande and their mean ("Core 9"), with the protocol they name, AI2's OLMES (Gu et al. 2024,
               arXiv:2406.08446): 5 shots and OLMES's per-task normalisation (none: acc, per character: acc_norm,
               PMI: acc_pmi, below). Departures: the prompts are lm-evaluation-harness's, not OLMES's (its curated
               few-shot examples are not shipped with the harness); the 5 shots are drawn per item from the
               training split (seeded), not OLMES's fixed ones; the normalisation per task is our reading of OLMES
               [INF: our copy of Lee et al. does not list it]; OLMES picks the better of its cloze and
               multiple-choice formulations per model, we score only the harness's formulation.
  loopformer   Jeddi et al. 2026 (arXiv:2602.11451, §4.1): zero-shot COPA, HellaSwag, LAMBADA, OpenBookQA, PIQA,
               RACE, SciQ, Social IQa, WinoGrande and ARC (the mean of Easy and Challenge), acc_norm where the
               harness defines it, and their mean; perplexity on held-out text with --text (their Pile,
               FineWeb-Edu and OpenWebText evaluations: any local text or parquet, or the FineWeb-Edu stream).
  schwethelm   Schwethelm et al. 2026 (arXiv:2604.21106, App. H, Table 7): 20 tasks on five axes, per-token
               continuation loss of the gold continuation as the primary signal (accuracy sits at chance for
               small models), the shots of Table 7, at most 10,000 items per task (a seeded uniform subsample).
               The generated reasoning probes (below) are ours and work offline at any scale. Departures: their
               tasks come from the CORE benchmark's files; we build the same tasks from the Hugging Face datasets
               with the harness's prompt where the harness has the task, our own otherwise [INF]; SVAMP's and
               MAWPS's dataset ids are our guesses [INF].
  probes       the five generated probes alone: induction head (Olsson et al. 2022) and variable assignment
               (Saunshi et al. 2025) at depth 0 and 1, in math ("n=22") and code ("n = 22") formats.
  loopmoe      Chen et al. 2026 (arXiv:2606.04438, §5.1): MMLU, HellaSwag, PIQA, WinoGrande, TriviaQA, RACE, BBH,
               GSM8K, MATH, run through lm-evaluation-harness (--harness, config/eval_loopmoe.py); our copy of the
               paper lacks its Table 6, so the shot counts there are inferred [INF].
  perplexity   held-out text from --text: "val" (the checkpoint's validation split), files (*.txt, *.parquet)
               or "fineweb-edu" (streamed; needs the Hub), scored as the harness's loglikelihood_rolling.

Scoring, as lm-evaluation-harness 0.4.13 defines it: a request is a (context, continuation) pair of strings
(trailing spaces of the context move to the continuation; tokens of the continuation are those of the whole
string after the context's), its score the sum of the continuation's token log-probabilities (empty contexts are
the end-of-text token). Multiple choice: acc = argmax of the sums, acc_norm = argmax of sum / characters of the
choice, acc_bytes = argmax of sum / UTF-8 bytes, acc_pmi = argmax of sum minus the choice's unconditional sum
(harness: acc_mutual_info). WinoGrande's partial scoring: the contexts differ (the sentence up to the blank, filled
with each option) and the continuation (the rest of the sentence) is shared. LAMBADA: acc = the last word is the
greedy continuation, perplexity = exp(-mean sum). Rolling perplexity: the document in disjoint windows, each with
as much preceding context as fits. Everywhere: cont_loss = the per-token negative log-likelihood of the gold
continuation, averaged over items (Schwethelm et al.'s primary signal). Requests sharing a prefix (the choices of
one item, WinoGrande's sentence start) run it once and its KV cache serves every continuation (items whose shared
prefixes differ in length by at most 10% batch together, each sharing the batch's shortest prefix); the others are
batched, sorted by length, right-padded (causal attention never sees the padding).

The depth axis. Every task and metric runs at
  --loops=1,2,4,8   passes of the shared block (test-time depth extrapolation beyond the trained count; through
                    loop.py's elastic depth: M passes of step 1/M, so LoopFormer's t and dt follow)
  --budget=2,4      LoopFormer's elastic budgets M <= L (the same uniform M steps; --schedule=4,2,1,1 for one
                    trajectory in units of 1/L)
  --exit_tau=...    training-free early exit at the trained depth with exits.py's criteria (--criterion)
A plain (unlooped) model has one depth; it gets exits at every layer. Each setting reports the score against the
forward FLOPs executed per token, from accounting.py (exits.step_flops): 2 per active parameter of
each step that ran, 4*h*q*(its causal context) attention per step, the head for every position whose prediction is
scored (and every readout an exit criterion evaluated), and the KV fills of exits; averaged over every real token
the model ran (a shared prefix counts once, padding never).

What an exit means in teacher-forced scoring (our definition; it is what exit decoding computes when fed the gold
continuation, and tests/test_eval.py checks that token by token against exits.decode_step):
  - The positions whose prediction is scored (the context's last token and the continuation but its last token)
    may exit; every other position runs the full depth (a decoded prompt is prefilled at full depth too).
  - A scored position stops at the first candidate (loop boundaries of a looped model, every layer of a plain one)
    where its criterion score is below tau; its prediction is the readout of that state.
  - --exit_fill=propagate (default): from there on its state is frozen, and every later layer's KV slot of that
    token is computed from the frozen state (CALM, Schuster et al. 2022; exits.py's propagate fill), so later
    tokens attend to what a decoder that really stopped would have cached; FLOPs count the steps up to the exit,
    the readouts and the fills. For models with input injection or hyper-connections the first layer of each later
    pass reads the injection of the frozen state, not the state itself.
  - --exit_fill=recompute: the later layers run anyway (exact full-depth KV slots, Lee et al.'s teacher-forced
    protocol) and FLOPs count them as skipped: the measure of Lee et al. 2026, §4.3, an upper bound on savings.
  - Models with a coda: the criterion's readout of a candidate runs the coda over the whole sequence at once, so a
    token's candidate coda attends to the other tokens' candidate coda states rather than their final ones (exact
    without a coda).

The tasks (the first sections below): what each one is (dataset, split, how a row becomes a doc, its metric; the
harness's definitions), the generated probes (seeded, offline), the papers' suites, and how a doc with its few-shot
examples becomes the (context, continuation) requests the harness builds. A new task is one row in TASKS (a new
probe: one generator in PROBES).

Data: online, each task loads its Hugging Face dataset (the ids, configs and splits of the harness's task
definitions) through `datasets`; offline, --data_dir=DIR reads DIR/<task>/<split>.jsonl (or .parquet), which
`--fetch` writes on a connected machine. The generated probes need no data.

lm-evaluation-harness: `python -m hf.harness` runs the harness's own task definitions on this file's Scorer, through
its model class (hf/harness.py).
"""
import ast
import difflib
import json
import math
import os
import random
import re
import string
import sys
import time
from collections import namedtuple
from contextlib import nullcontext

import numpy as np
import torch

import early_exit

import exits
import configurator
from configurator import ConfigError, configure, run
from data import TokenData, default_data_dir, get_tokenizer, match_files
from prepare import hub_unreachable, open_stream  # parquet text read as prepare.py streams it
from exits import log_probs
from runs import json_lines, run_provenance, use_device
from loop import is_looped, last
from model import KVCache

LN2 = math.log(2.0)
SHARED_SLACK = 0.1  # items whose shared prefixes differ by at most this fraction batch together (module docstring)

# =====================================================================================================================
# tasks: a dataset row -> a doc (query and answers as strings) -> requests (context, continuation) as the harness
# builds them


# kind: mc (one context, several continuations) | partial (several contexts, one continuation: WinoGrande) |
# lm (context -> gold continuation) | rolling (perplexity of documents).
# cont_delim: what precedes the continuation of the scored item (the harness's target_delimiter for multiple choice
# and generation tasks, "" for its loglikelihood tasks, whose targets carry their own space); delimiter: what joins
# query and answer in a few-shot example. metric: the primary metric when the task is named on its own.
Task = namedtuple("Task", "name kind path config split fewshot_split doc metric cont_delim delimiter "
                          "fewshot_delimiter description", defaults=(" ", " ", "\n\n", ""))


def _hellaswag_clean(text):
    """HellaSwag's WikiHow artefacts, removed as the harness does: bracketed tags, ' [title]' as a sentence end."""
    text = text.strip().replace(" [title]", ". ")
    return re.sub(r"\[.*?\]", "", text).replace("  ", " ")


def _lower_first(s):
    return s[0].lower() + s[1:]


def _race(r):
    """RACE (high): the article, the earlier questions of the passage answered, then the last question."""
    problems = ast.literal_eval(r["problems"]) if isinstance(r["problems"], str) else r["problems"]
    text = "Article: " + r["article"] + "\n\n"
    for p in problems[:-1]:
        answer = p["options"]["ABCD".index(p["answer"])]
        if p["question"][-6:] == "  _  .":  # a cloze question: fill the blank
            text += p["question"][:-5] + answer + "\n"
        else:
            text += "Question: " + p["question"] + "\n" + "Answer: " + answer + "\n"
    q = problems[-1]
    return dict(query=text + q["question"], choices=list(q["options"][:4]), gold="ABCD".index(q["answer"]))


def _winogrande(r):
    blank = r["sentence"].index("_")
    return dict(contexts=[r["sentence"][:blank] + o for o in (r["option1"], r["option2"])],
                target=r["sentence"][blank + 1:].strip(), gold={"1": 0, "2": 1}[str(r["answer"])])


def _coqa(r):
    """Every turn of a CoQA story is an item: the story, the earlier turns answered, the question."""
    docs, text = [], r["story"] + "\n\n"
    for q, a in zip(r["questions"]["input_text"], r["answers"]["input_text"]):
        docs.append(dict(query=text + f"Q: {q}\n\nA:", answer=a))
        text += f"Q: {q}\n\nA: {a}\n\n"
    return docs


def _drop_answer(a):
    """DROP's gold answer as the harness parses it (its first candidate): a number, the spans, or the date."""
    if a["number"] != "":
        return str(a["number"])
    if a["spans"]:
        return ",".join(a["spans"])
    return " ".join([a["date"]["day"], a["date"]["month"], a["date"]["year"]]).strip()


def _number(x):
    x = float(x)
    return str(int(x)) if x == int(x) else str(x)


def _mc(query, choices, gold):
    return dict(query=query, choices=list(choices), gold=gold)


TASKS = {t.name: t for t in [
    # ---- multiple choice (lm-evaluation-harness 0.4.13's task definitions) ----
    Task("hellaswag", "mc", "Rowan/hellaswag", None, "validation", "train", lambda r: _mc(
        _hellaswag_clean(r["activity_label"] + ": " + r["ctx_a"] + " " + r["ctx_b"].capitalize()),
        [_hellaswag_clean(e) for e in r["endings"]], int(r["label"])), "acc_norm"),
    Task("arc_easy", "mc", "allenai/ai2_arc", "ARC-Easy", "test", "train", lambda r: _mc(
        f"Question: {r['question']}\nAnswer:", r["choices"]["text"], r["choices"]["label"].index(r["answerKey"])),
         "acc_norm"),
    Task("arc_challenge", "mc", "allenai/ai2_arc", "ARC-Challenge", "test", "train", lambda r: _mc(
        f"Question: {r['question']}\nAnswer:", r["choices"]["text"], r["choices"]["label"].index(r["answerKey"])),
         "acc_norm"),
    Task("boolq", "mc", "aps/super_glue", "boolq", "validation", "train", lambda r: _mc(
        f"{r['passage']}\nQuestion: {r['question']}?\nAnswer:", ["no", "yes"], int(r["label"])), "acc"),
    Task("commonsense_qa", "mc", "tau/commonsense_qa", None, "validation", "train", lambda r: _mc(
        "Question: " + r["question"].strip()
        + "".join(f"\n{k}. {t}" for k, t in zip("ABCDE", r["choices"]["text"])) + "\nAnswer:",
        list("ABCDE"), "ABCDE".index(r["answerKey"])), "acc"),
    Task("openbookqa", "mc", "allenai/openbookqa", "main", "test", "train", lambda r: _mc(
        r["question_stem"], r["choices"]["text"], r["choices"]["label"].index(r["answerKey"].lstrip())), "acc_norm"),
    Task("piqa", "mc", "baber/piqa", None, "validation", "train", lambda r: _mc(
        f"Question: {r['goal']}\nAnswer:", [r["sol1"], r["sol2"]], int(r["label"])), "acc_norm"),
    Task("social_iqa", "mc", "lighteval/siqa", None, "validation", "train", lambda r: _mc(
        f"Q: {r['context']} {r['question']}\nA:", [r["answerA"], r["answerB"], r["answerC"]], int(r["label"]) - 1),
         "acc"),
    Task("copa", "mc", "aps/super_glue", "copa", "validation", "train", lambda r: _mc(
        r["premise"].strip()[:-1] + {"cause": " because", "effect": " therefore"}[r["question"]],
        [" " + _lower_first(r["choice1"]), " " + _lower_first(r["choice2"])], int(r["label"])), "acc"),
    Task("sciq", "mc", "allenai/sciq", None, "test", "train", lambda r: _mc(
        r["support"].lstrip() + f"\nQuestion: {r['question']}\nAnswer:",
        [r["distractor1"], r["distractor2"], r["distractor3"], r["correct_answer"]], 3), "acc_norm"),
    Task("race", "mc", "EleutherAI/race", "high", "test", None, _race, "acc"),
    Task("winogrande", "partial", "allenai/winogrande", "winogrande_xl", "validation", "train", _winogrande, "acc"),
    # ---- language modelling: context -> gold continuation ----
    Task("lambada_openai", "lm", "EleutherAI/lambada_openai", "default", "test", None, lambda r: dict(
        query=" ".join(r["text"].split(" ")[:-1]), answer=" " + r["text"].split(" ")[-1]), "acc", ""),
    Task("triviaqa", "lm", "mandarjoshi/trivia_qa", "rc.nocontext", "validation", "train", lambda r: dict(
        query=f"Question: {r['question']}?\nAnswer:", answer=r["answer"]["aliases"][0]), "cont_loss"),
    Task("nq_open", "lm", "google-research-datasets/nq_open", None, "validation", "train", lambda r: dict(
        query=f"Q: {r['question']}?\nA:", answer=r["answer"][0]), "cont_loss", " ", " ", "\n",
         "Answer these questions:\n\n"),
    Task("webqs", "lm", "stanfordnlp/web_questions", None, "test", "train", lambda r: dict(
        query=f"Question: {r['question']}\nAnswer:", answer=sorted(r["answers"])[0]), "cont_loss"),
    Task("tydiqa_goldp_en", "lm", "google-research-datasets/tydiqa", "secondary_task", "validation", "train",
         lambda r: dict(query=f"Context: {r['context']}\n\nQuestion: {r['question']}\n\nAnswer:",
                        answer=r["answers"]["text"][0]) if r["id"].startswith("english") else None, "cont_loss"),
    Task("squadv2", "lm", "rajpurkar/squad_v2", None, "validation", "train", lambda r: dict(
        query=f"Title: {r['title']}\n\nBackground: {r['context']}\n\nQuestion: {r['question']}\n\nAnswer:",
        answer=r["answers"]["text"][0]) if r["answers"]["text"] else None, "cont_loss"),  # answerable: 5,928
    Task("drop", "lm", "EleutherAI/drop", None, "validation", "train", lambda r: dict(
        query=f"{r['passage']} {r['question']}", answer=_drop_answer(r["answer"])), "cont_loss", "", ""),
    Task("coqa", "lm", "EleutherAI/coqa", None, "validation", "train", _coqa, "cont_loss"),
    Task("svamp", "lm", "ChilleD/SVAMP", None, "test", "train", lambda r: dict(  # [INF] dataset id and prompt
        query=f"{r['Body'].strip()} {r['Question'].strip()}\nAnswer:", answer=_number(r["Answer"])), "cont_loss"),
    Task("asdiv", "lm", "EleutherAI/asdiv", None, "validation", None, lambda r: dict(
        query=f"{r['body']}\nQuestion:{r['question']}\nAnswer:", answer=r["answer"].split(" (")[0]), "cont_loss",
         ""),
    Task("mawps", "lm", "MU-NLPC/Calc-mawps", None, "test", "train", lambda r: dict(  # [INF] dataset id and prompt
        query=f"{r['question'].strip()}\nAnswer:", answer=_number(r["result_float"])), "cont_loss"),
    Task("bigbench_dyck_languages", "lm", "hails/bigbench", "dyck_languages_zero_shot", "default", "train",
         lambda r: dict(query=r["inputs"], answer=r["targets"][0]), "cont_loss"),
    Task("bigbench_qa_wikidata", "lm", "hails/bigbench", "qa_wikidata_zero_shot", "default", "train",
         lambda r: dict(query=r["inputs"], answer=r["targets"][0]), "cont_loss"),
    Task("bigbench_cs_algorithms", "lm", "hails/bigbench", "cs_algorithms_zero_shot", "default", "train",
         lambda r: dict(query=r["inputs"], answer=r["targets"][0]), "cont_loss"),
]}

# =====================================================================================================================
# generated probes (Schwethelm et al. 2026, arXiv:2604.21106, App. H.1, "reasoning primitives"): seeded, offline


def _words(rng, n):
    """n distinct pronounceable nonsense words (consonant-vowel syllables), so no tokenizer has seen the sequence."""
    out = set()
    while len(out) < n:
        out.add("".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 2))))
    return rng.sample(sorted(out), n)


def induction_doc(rng, n_words=12):
    """Induction head (after Olsson et al. 2022): a random word sequence, then its first half again; the gold
    continuation is the second half, which only copying from the first occurrence predicts."""
    words = _words(rng, n_words)
    half = n_words // 2
    return dict(query=" ".join(words) + "\n" + " ".join(words[:half]), answer=" ".join(words[half:]))


def varassign_doc(rng, depth, fmt, n=5, low=1, high=25):
    """Variable assignment (after Saunshi et al. 2025, as Schwethelm et al. describe it): n direct integer
    assignments (depth 0), or n direct ones plus n one-hop aliases with a one-to-one base-alias mapping (depth 1),
    values in [low, high], in a math ("n=22") or code ("n = 22") surface format with English scaffolding. The
    answer is the queried variable's value."""
    names = rng.sample(string.ascii_lowercase, n * (1 + depth))
    base, aliases = names[:n], names[n:]
    value = {v: rng.randint(low, high) for v in base}
    eq = "=" if fmt == "math" else " = "
    lines = [f"{v}{eq}{value[v]}" for v in base]
    rng.shuffle(lines)
    if depth:
        targets = rng.sample(base, n)  # alias i -> a distinct base variable
        alias_lines = [f"{a}{eq}{b}" for a, b in zip(aliases, targets)]
        rng.shuffle(alias_lines)
        lines += alias_lines
        value.update({a: value[b] for a, b in zip(aliases, targets)})
    q = rng.choice(aliases if depth else base)
    if fmt == "math":
        query = f"Given {', '.join(lines)}. What is {q}?\nAnswer:"
    else:
        query = "Here is a Python program:\n" + "\n".join(lines) + f"\nprint({q})\nWhat does it print?\nAnswer:"
    return dict(query=query, answer=str(value[q]))


PROBES = {
    "induction_head": induction_doc,
    "varassign_d0_math": lambda rng: varassign_doc(rng, 0, "math"),
    "varassign_d0_code": lambda rng: varassign_doc(rng, 0, "code"),
    "varassign_d1_math": lambda rng: varassign_doc(rng, 1, "math"),
    "varassign_d1_code": lambda rng: varassign_doc(rng, 1, "code"),
}
PROBE_ITEMS = 1000  # items per probe (Schwethelm et al., Table 7)
for _name in PROBES:
    TASKS[_name] = Task(_name, "lm", None, None, "generated", "generated", None, "cont_loss")


def probe_docs(name, n, seed, split="test"):
    """n docs of a probe; the few-shot pool ("train") comes from a different seed stream."""
    rng = random.Random(f"{name}:{split}:{seed}")
    return [PROBES[name](rng) for _ in range(n)]


# =====================================================================================================================
# suites: (task, shots, primary metric, group). Items of a group are averaged first (LoopFormer's ARC).

OLMES = dict(arc_easy="acc_norm", arc_challenge="acc_pmi", boolq="acc", commonsense_qa="acc_pmi",
             hellaswag="acc_norm", openbookqa="acc_pmi", piqa="acc_norm", social_iqa="acc_norm", winogrande="acc")
SCHWETHELM = [  # (axis, task, shots), Schwethelm et al. 2026, Table 7
    ("parametric", "triviaqa", 5), ("parametric", "nq_open", 5), ("parametric", "webqs", 5),
    ("reading", "lambada_openai", 0), ("reading", "tydiqa_goldp_en", 3), ("reading", "squadv2", 3),
    ("reading", "drop", 3), ("reading", "coqa", 1),
    ("math", "svamp", 5), ("math", "asdiv", 5), ("math", "mawps", 5),
    ("primitives", "induction_head", 0), ("primitives", "varassign_d0_math", 5),
    ("primitives", "varassign_d0_code", 5), ("primitives", "varassign_d1_math", 5),
    ("primitives", "varassign_d1_code", 5),
    ("compositional", "bigbench_dyck_languages", 10), ("compositional", "bigbench_qa_wikidata", 10),
    ("compositional", "arc_easy", 10), ("compositional", "bigbench_cs_algorithms", 10)]
SUITES = {
    "lee_core9": [(t, 5, m, t) for t, m in OLMES.items()],
    "loopformer": [(t, 0, TASKS[t].metric, "arc" if t.startswith("arc_") else t) for t in (
        "copa", "hellaswag", "lambada_openai", "openbookqa", "piqa", "race", "sciq", "arc_easy", "arc_challenge",
        "social_iqa", "winogrande")],
    "schwethelm": [(t, k, "cont_loss", axis) for axis, t, k in SCHWETHELM],
    "probes": [(t, k, "cont_loss", t) for axis, t, k in SCHWETHELM if axis == "primitives"],
}
SUITE_CAP = dict(schwethelm=10_000)  # items per task at most (Schwethelm et al.: a uniform subsample)
# Chen et al. 2026 (LoopMoE) through lm-evaluation-harness: (harness task, shots) [INF: the shots; our copy of the
# paper lacks its Table 6]
LOOPMOE_HARNESS = "mmlu:5,hellaswag:10,piqa:0,winogrande:5,triviaqa:5,race:0,bbh_fewshot:3,gsm8k:5,minerva_math:4"


def example(task, d):
    """A solved few-shot example: the query, the target delimiter, the gold answer."""
    if task.kind == "partial":
        return d["contexts"][d["gold"]] + task.delimiter + d["target"]
    return d["query"] + task.delimiter + (d["choices"][d["gold"]] if task.kind == "mc" else d["answer"])


def requests(task, d, shots=()):
    """The (context, continuation) string pairs of one doc, with its few-shot examples in front."""
    prefix = task.description + "".join(example(task, s) + task.fewshot_delimiter for s in shots)
    if task.kind == "mc":
        return [(prefix + d["query"], task.cont_delim + c) for c in d["choices"]]
    if task.kind == "partial":
        return [(prefix + c, task.cont_delim + d["target"]) for c in d["contexts"]]
    return [(prefix + d["query"], task.cont_delim + d["answer"])]


# =====================================================================================================================
# the tasks' data: DIR/<task>/<split>.jsonl (or .parquet) written by `eval.py --fetch`, else the Hugging Face Hub


def read_rows(path):
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq  # optional: parquet files only
        return pq.read_table(path).to_pylist()
    return [row for _, row in json_lines(path, "mend the line or fetch the split again (--fetch)", "eval.py: ")]


def fetch_command(names, data_dir):
    return f"python eval.py --fetch --tasks={','.join(names)} --data_dir={data_dir or 'DIR'}"


def task_rows(task, split, data_dir):
    """The rows of one split: DIR/<task>/<split>.jsonl|.parquet with data_dir, else the Hugging Face dataset."""
    if data_dir:
        for ext in ("jsonl", "parquet"):
            path = os.path.join(data_dir, task.name, f"{split}.{ext}")
            if os.path.exists(path):
                return read_rows(path)
        raise ConfigError(f"eval.py: no rows for {task.name} in {data_dir}/{task.name}/{split}.jsonl (dataset "
                          f"{task.path}{'/' + task.config if task.config else ''}, split {split}); on a connected "
                          f"machine: {fetch_command([task.name], data_dir)}")
    why = hub_unreachable()
    if why:
        raise ConfigError(f"eval.py: {task.name} needs {task.path} (split {split}) from the Hugging Face Hub, but "
                          f"{why}; on a connected machine run {fetch_command([task.name], 'DIR')} and pass "
                          "--data_dir=DIR here")
    import datasets  # heavy (seconds): Hub data only
    return list(datasets.load_dataset(task.path, task.config, split=split))


def task_docs(task, split, data_dir, seed, n=PROBE_ITEMS):
    if task.name in PROBES:
        return probe_docs(task.name, n, seed, "train" if split == "fewshot" else "test")
    docs = []
    for n, row in enumerate(task_rows(task, split, data_dir), 1):
        try:
            d = task.doc(row)
            for doc in d if isinstance(d, list) else [] if d is None else [d]:
                answers = doc["choices"] if task.kind == "mc" else doc.get("contexts")
                if answers is not None and not 0 <= doc["gold"] < len(answers):
                    raise IndexError(f"gold answer {doc['gold']} of {len(answers)}")
                docs.append(doc)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ConfigError(f"eval.py: {task.name}, {split} split, row {n}: {type(e).__name__}: {e} (a field "
                              f"this task reads is missing or out of range): mend the row or fetch the split "
                              "again") from None
    return docs


def download(names, data_dir):
    """Write DIR/<task>/<split>.jsonl for every split a task reads (eval and few-shot), from the Hub."""
    import datasets  # heavy (seconds): Hub data only
    for name in names:
        task = TASKS[name]
        if task.path is None:
            continue
        for split in dict.fromkeys(s for s in (task.split, task.fewshot_split) if s):
            path = os.path.join(data_dir, name, f"{split}.jsonl")
            if os.path.exists(path):
                print(f"{path}: already there")
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            ds = datasets.load_dataset(task.path, task.config, split=split)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                for row in ds:
                    f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            os.replace(path + ".tmp", path)
            print(f"{path}: {len(ds):,} rows")


def build_items(task, data_dir, shots, seed, limit):
    """Docs of the eval split (a seeded uniform subsample of `limit`, if set) and their requests with `shots`
    few-shot examples each, drawn per item from the few-shot split (seeded; never the item itself)."""
    docs = task_docs(task, task.split, data_dir, seed, min(limit or PROBE_ITEMS, PROBE_ITEMS))
    if limit and len(docs) > limit:
        keep = sorted(random.Random(f"limit:{task.name}:{seed}").sample(range(len(docs)), limit))
        docs = [docs[i] for i in keep]
    pool = []
    if shots:
        split = "fewshot" if task.name in PROBES else task.fewshot_split
        pool = task_docs(task, split, data_dir, seed) if split else docs
    items = []
    for i, d in enumerate(docs):
        chosen = []
        if shots:
            rng = random.Random(f"shots:{task.name}:{seed}:{i}")
            chosen = [s for s in rng.sample(pool, min(shots + 1, len(pool))) if s is not d][:shots]
        items.append((d, requests(task, d, chosen)))
    return items


# =====================================================================================================================
# held-out text (perplexity)


def text_documents(source, tokenizer, run_state, max_tokens):
    """(label, documents as token lists) of a held-out text source, at most max_tokens tokens."""
    if source == "val":
        tc = run_state.get("train_config", {})
        data_dir = tc.get("data_dir") or default_data_dir(tc.get("data_source", "offline"), tokenizer.name)
        if not os.path.exists(os.path.join(data_dir, "meta.json")):
            raise ConfigError(f"eval.py: --text=val needs the checkpoint's prepared data in {data_dir}: run "
                              "`python prepare.py` (or pass --text=<files>)")
        ids = np.asarray(TokenData(data_dir).splits["val"][:max_tokens], dtype=np.int64).tolist()
        docs = [[]]
        for t in ids:  # documents are separated by the end-of-text token
            if t != tokenizer.eot:
                docs[-1].append(t)
            elif docs[-1]:
                docs.append([])
        return "val", [d for d in docs if d]
    try:
        if source == "fineweb-edu":
            texts = (row["text"] for row in open_stream("fineweb-edu"))
        else:
            try:
                paths, kind = match_files("files:" + source)
            except FileNotFoundError:  # data.py's message names train.py's key (data_source=files:<glob>)
                raise ConfigError(f"eval.py: --text={source}: no files match it: give --text=val (the checkpoint's "
                                  "held-out tokens), --text=fineweb-edu, or a glob of text or parquet files "
                                  "(comma-separated)") from None
            texts = ((row["text"] for row in open_stream("files:" + source)) if kind == "parquet"
                     else map(read_text, paths))
    except (FileNotFoundError, RuntimeError, ValueError) as e:  # data.py's messages say what to do
        raise ConfigError(f"eval.py: --text={source}: {e}") from None
    docs, n = [], 0
    for text in texts:
        ids = tokenizer.encode(text)[:max_tokens - n]
        docs.append(ids)
        n += len(ids)
        if n >= max_tokens:
            break
    return text_label(source), docs


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def text_label(source):
    return source if source in ("val", "fineweb-edu") else os.path.basename(source.rstrip("/*")) or source


def rolling_windows(tokens, prefix, max_len):
    """A document as (context, continuation) token requests that predict every token once: disjoint windows of
    at most max_len predicted tokens, each after as much preceding text as fits (the first after `prefix`, the
    end-of-text token). lm-evaluation-harness's loglikelihood_rolling makes the same windows."""
    reqs, done = [], 0
    while done < len(tokens):
        n = min(max_len, len(tokens) - done)
        reqs.append(([prefix] if done == 0 else tokens[done + n - max_len - 1:done], tokens[done:done + n]))
        done += n
    return reqs


# =====================================================================================================================
# the depth axis

# name: for tables; schedule: None (the trained depth) | int M | list of step sizes; criterion/tau/fill: an exit rule
Setting = namedtuple("Setting", "name schedule criterion tau fill", defaults=(None, None, 0.0, "propagate"))


def depth_settings(model, cfg):
    """The depth settings to evaluate one model at (every one for a looped model; the full depth and the exits for
    a plain one, whose depth is fixed)."""
    def ints(key):
        return [int(v) for v in str(cfg[key]).split(",") if v.strip()]
    taus = [float(v) for v in str(cfg["exit_tau"]).split(",") if v.strip()]
    out = []
    if is_looped(model.config):
        L = model.config.n_loop
        for M in dict.fromkeys(ints("loops") or [L]):
            out.append(Setting(f"loops={M}" + " (trained)" * (M == L), None if M == L else M))
        if ints("loops") and L not in ints("loops"):
            out.insert(0, Setting(f"loops={L} (trained)", None))
        for M in ints("budget"):
            if not 1 <= M <= L:
                raise ConfigError(f"eval.py: --budget={M}: an elastic budget M must satisfy 1 <= M <= n_loop={L}")
            out.append(Setting(f"budget={M}", M))
        if cfg["schedule"]:
            steps = early_exit.parse_schedule(cfg["schedule"], L)
            out.append(Setting(f"schedule={cfg['schedule']}", [s / L for s in steps]))
    else:
        out.append(Setting("full", None))
        if ints("loops") or ints("budget") or cfg["schedule"]:
            print("  a plain model has one depth: --loops, --budget and --schedule leave it as it is", file=sys.stderr)
    for tau in taus:
        out.append(Setting(f"exit {cfg['criterion']}<{tau:g}", None, cfg["criterion"], tau, cfg["exit_fill"]))
    return out


def encode_pair(tok, context, continuation):
    """Token ids (context, continuation) as lm-evaluation-harness's TemplateLM makes them: an empty context is the
    end-of-text token; trailing spaces of the context go to the continuation; the continuation's tokens are those
    of context + continuation after the context's own tokens."""
    if context == "":
        cont = list(tok.encode(continuation))
        return ([tok.eot], cont) if cont[:1] != [tok.eot] else (cont[:1], cont[1:])
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole, ctx = list(tok.encode(context + continuation)), list(tok.encode(context))
    return ctx, whole[len(ctx):]


class Scorer:
    """Log-likelihoods of token requests at one depth setting, with the FLOPs they cost.

    score(groups): groups of (context ids, continuation ids); requests of a group that share a token prefix (one
    item's choices) run it once into a KV cache that serves every continuation (`shared`); everything else is
    batched, sorted by length and right-padded. Returns per request (sum of log-probs, greedy, tokens)."""

    def __init__(self, model, tok, setting=Setting("full"), batch_size=256, batch_tokens=8192, shared=True,
                 autocast=None):
        self.model, self.tok, self.setting = model, tok, setting
        self.batch_size, self.batch_tokens, self.shared = batch_size, batch_tokens, shared
        self.autocast = autocast or nullcontext
        self.T = model.config.block_size
        self.labels = exits.depth_labels(model, setting.schedule)
        self.cands = exits.exit_candidates(model, self.labels) if setting.criterion else []
        self.costs = self.token_costs()
        self.reset()

    # ---- FLOPs ----
    def token_costs(self):
        """Per-token forward FLOPs as (a, b): a + b * context, for a token that is not scored (no readout) and for
        a scored one at each exit choice k = 0..K (K: full depth): early_exit's one exit cost (exit_flops) at
        contexts 0 and 1 (every cost is linear in the context)."""
        s, labels, cands = self.setting, self.labels, self.cands
        at = [exits.step_flops(self.model, labels, c, schedule=s.schedule) for c in (0, 1)]

        def linear(cost):
            a, b = cost(at[0]), cost(at[1])
            return a, b - a
        scored = [linear(lambda c, k=k: exits.exit_flops(c, labels, cands, s.criterion, k, s.fill))
                  for k in range(len(cands) + 1)]
        return dict(plain=linear(lambda c: exits.token_flops(c, labels, len(labels), final=False)),
                    scored=scored)

    def reset(self):
        self.tokens, self.flops, self.scored_tokens, self.exits = 0, 0.0, 0, [0] * (len(self.cands) + 1)

    def count(self, n, ctx_sum, cost):
        self.tokens += n
        self.flops += n * cost[0] + ctx_sum * cost[1]

    @property
    def flops_per_token(self):
        return self.flops / max(self.tokens, 1)

    def summary(self):
        """FLOPs per token and tokens run since reset(); with an exit rule, the fraction of scored positions that
        stopped at each candidate (the last entry: the full depth)."""
        out = dict(flops_per_token=self.flops_per_token, tokens=self.tokens)
        if self.setting.criterion:
            out["exit_fractions"] = [n / max(self.scored_tokens, 1) for n in self.exits]
        return out

    # ---- one forward ----
    def run(self, inp, tgt, lengths, cache=None):
        """inp (B, T) token ids, tgt (B, T) the next tokens or -1 where not scored, lengths (B,) real tokens per row.
        Returns (log-prob of each scored target, greedy?) in row-major order and counts the FLOPs."""
        model, s = self.model, self.setting
        pos = cache.pos if cache is not None else 0
        scored = tgt >= 0
        y = tgt[scored]
        x = model.embed(inp, pos)
        walk = model.walk(x, model.rope(pos, inp.size(1)), cache, {}, s.schedule)
        K = len(self.cands)
        k_exit, early = torch.full_like(y, K), None
        if s.criterion:
            if s.fill == "recompute":  # the exited positions' predictions are their exit readouts
                early = (torch.zeros(y.numel()), torch.zeros(y.numel(), dtype=torch.bool))

                def keep(new, logits):
                    lp = log_probs(logits)
                    early[0][new] = lp[new].gather(1, y[new][:, None])[:, 0].float()
                    early[1][new] = lp[new].argmax(-1) == y[new]
            ex = exits.walk_with_exits(model, x, walk, self.cands, s.criterion, s.tau, s.fill, cache,
                                            rows=scored, on_exit=keep if early is not None else None)
            label, h = ex.label, ex.h
            k_exit = ex.k_exit if ex.k_exit is not None else k_exit
        else:
            label, h = last(walk)
        if cache is not None:
            cache.pos += inp.size(1)
        logp = log_probs(model.readout(h[scored], label))
        out, greedy = logp.gather(1, y[:, None])[:, 0], logp.argmax(-1) == y
        if early is not None:
            out, greedy = torch.where(k_exit < K, early[0], out), torch.where(k_exit < K, early[1], greedy)
        # FLOPs: every real token, with its causal context (its position + 1)
        ctx = torch.arange(pos + 1, pos + 1 + inp.size(1))[None].expand_as(inp)
        real = torch.arange(inp.size(1))[None] < lengths[:, None]
        plain = real & ~scored
        self.count(int(plain.sum()), int(ctx[plain].sum()), self.costs["plain"])
        ctx_scored = ctx[scored]
        for k in range(K + 1):
            at = k_exit == k
            self.count(int(at.sum()), int(ctx_scored[at].sum()), self.costs["scored"][k])
            self.exits[k] += int(at.sum())
        self.scored_tokens += y.numel()
        return out.float(), greedy

    # ---- requests ----
    def window(self, ctx, cont):
        """The token sequence of a request and the index of its first continuation token, cut from the left to
        fit block_size + 1 tokens (as the harness does)."""
        if not cont:
            raise ConfigError("eval.py: a request has an empty continuation (check the task's answers)")
        if len(cont) > self.T:
            raise ConfigError(f"eval.py: a continuation of {len(cont)} tokens does not fit the model's context "
                              f"(block_size={self.T})")
        seq = list(ctx) + list(cont)
        cut = max(0, len(seq) - (self.T + 1))
        return seq[cut:], len(ctx) - cut

    @torch.no_grad()
    def score(self, groups):
        results = [[None] * len(g) for g in groups]
        singles, shared = [], []
        with self.autocast():
            for gi, group in enumerate(groups):
                rows = [self.window(c, t) for c, t in group]
                p = shared_prefix(rows) if (self.shared and len(rows) > 1) else 0
                if p:
                    shared.append((p, gi, rows))
                else:
                    singles += [(gi, ri, row) for ri, row in enumerate(rows)]
            # groups run together when their prefixes differ by at most SHARED_SLACK: each shares the batch's
            # shortest prefix (positions align), the rest of its prefix runs with its rows
            shared.sort(key=lambda t: -t[0])
            i = 0
            while i < len(shared):
                n, n_rows, longest = 0, 0, 0
                while i + n < len(shared) and shared[i + n][0] >= (1 - SHARED_SLACK) * shared[i][0]:
                    p, _, rows = shared[i + n]
                    longest = max(longest, max(len(seq) for seq, _ in rows))
                    if n and (n_rows + len(rows) > self.batch_size or
                              max((n + 1) * p, (n_rows + len(rows)) * (longest - 1 - p)) > self.batch_tokens):
                        break
                    n, n_rows = n + 1, n_rows + len(rows)
                batch = shared[i:i + n]
                for (_, gi, _), r in zip(batch, self.score_shared([rows for _, _, rows in batch], batch[-1][0])):
                    results[gi] = r
                i += n
            singles.sort(key=lambda t: -len(t[2][0]))  # longest first: similar lengths share a batch
            i = 0
            while i < len(singles):
                width = len(singles[i][2][0]) - 1
                n = max(1, min(self.batch_size, self.batch_tokens // max(width, 1)))
                batch = singles[i:i + n]
                for (gi, ri, _), r in zip(batch, self.score_rows([row for _, _, row in batch], 0, None)):
                    results[gi][ri] = r
                i += n
        return results

    def score_rows(self, rows, p, cache):
        """Rows (seq, a) run from position p (after a cached prefix of p tokens, if any): inputs seq[p:-1],
        targets seq[a:] at the input positions a-1.. (all >= p)."""
        B = len(rows)
        width = max(len(seq) - 1 - p for seq, _ in rows)
        inp = torch.zeros(B, width, dtype=torch.long)
        tgt = torch.full((B, width), -1, dtype=torch.long)
        lengths = torch.zeros(B, dtype=torch.long)
        for i, (seq, a) in enumerate(rows):
            n = len(seq) - 1 - p
            inp[i, :n] = torch.tensor(seq[p:-1])
            tgt[i, a - 1 - p:n] = torch.tensor(seq[a:])
            lengths[i] = n
        dev = next(self.model.parameters()).device
        out, greedy = self.run(inp.to(dev), tgt.to(dev), lengths, cache)
        res, j = [], 0
        for seq, a in rows:
            n = len(seq) - a
            res.append((float(out[j:j + n].double().sum()), bool(greedy[j:j + n].all()), n))
            j += n
        return res

    def score_shared(self, groups, p):
        """Groups of rows whose first p tokens are the same within each group: the groups' prefixes run once each, at
        full depth, as one batch into a KV cache; each group's cache rows are copied for its rows, and every row's
        remaining tokens run after them in one batch. Returns the results per group."""
        model = self.model
        dev = next(model.parameters()).device
        rows = [row for group in groups for row in group]
        width = max(len(seq) - 1 - p for seq, _ in rows)
        schedule = self.setting.schedule
        cache = KVCache(model.n_slots(schedule), len(groups), p + width)
        prefix = torch.tensor([group[0][0][:p] for group in groups], device=dev)
        last(model.walk(model.embed(prefix), model.rope(0, p), cache, {}, schedule))
        cache.pos = p
        self.count(p * len(groups), len(groups) * p * (p + 1) // 2, self.costs["plain"])
        owner = torch.repeat_interleave(torch.arange(len(groups), device=dev),
                                        torch.tensor([len(g) for g in groups], device=dev))
        cache.slots = [tuple(copy_rows(t, owner, p) for t in slot) for slot in cache.slots]
        cache.batch_size = len(rows)
        res = self.score_rows(rows, p, cache)
        out, j = [], 0
        for group in groups:
            out.append(res[j:j + len(group)])
            j += len(group)
        return out

    # ---- generation (the harness's generate_until) ----
    @torch.no_grad()
    def generate(self, context_ids, max_new, until=(), eot_stops=True):
        """Greedy decoding with the KV cache at this depth (GPT.generate, exiting through exits.decode_step),
        stopping at the end-of-text token or the first stop string. Returns the text before the first stop
        string."""
        model, s = self.model, self.setting
        max_new = min(max_new, self.T - 1)
        ids = (list(context_ids) or [self.tok.eot])[-(self.T - max_new):]  # the context's end, as the harness
        self.count(len(ids), len(ids) * (len(ids) + 1) // 2, self.costs["plain"])

        def step(tok, cache):  # one decoding step, its FLOPs counted
            context = cache.pos + 1
            logits, st = exits.decode_step(model, tok, cache, self.labels, self.cands, s.criterion, s.tau,
                                                s.fill, s.schedule)
            self.tokens += 1
            self.flops += exits.decode_flops(model, self.labels, [dict(st, context=context)], s.schedule)[0]
            return logits

        def stop(new):
            new = new[0].tolist()
            return (eot_stops and new[-1] == self.tok.eot) or any(u in self.tok.decode(new) for u in until)
        with self.autocast():
            prompt = torch.tensor([ids], device=next(model.parameters()).device)
            out = model.generate(prompt, max_new, temperature=0, schedule=s.schedule, step=step, stop=stop)
        out = out[0, len(ids):].tolist()
        if eot_stops and out and out[-1] == self.tok.eot:
            out = out[:-1]
        text = self.tok.decode(out)
        for u in until:
            text = text.split(u)[0]
        return text


def copy_rows(t, owner, p):
    """A cache buffer (B, heads, max_len, size) with row owner[i] of t's first p positions as row i."""
    out = t.new_empty(len(owner), *t.shape[1:])
    out[:, :, :p] = t[owner, :, :p]
    return out


def shared_prefix(rows):
    """Tokens every row starts with, short enough that each row still has its first scored input (a - 1) after
    it: 0 when nothing useful is shared."""
    seqs = [seq for seq, _ in rows]
    p = 0
    limit = min(a for _, a in rows) - 1
    while p < limit and all(seq[p] == seqs[0][p] for seq in seqs):
        p += 1
    return p


# =====================================================================================================================
# metrics


def item_metrics(task, d, res, uncond=None):
    """Per-item metrics from the request results [(sum log-prob, greedy, tokens)] (harness definitions)."""
    ll = np.array([r[0] for r in res])
    if task.kind == "mc":
        gold = d["gold"]
        chars = np.array([len(c) for c in d["choices"]], dtype=float)
        nbytes = np.array([len(c.encode("utf-8")) for c in d["choices"]], dtype=float)
        m = dict(acc=float(ll.argmax() == gold), acc_norm=float((ll / chars).argmax() == gold),
                 acc_bytes=float((ll / nbytes).argmax() == gold), cont_loss=-res[gold][0] / res[gold][2])
        if uncond is not None:
            m["acc_pmi"] = float((ll - np.array([r[0] for r in uncond])).argmax() == gold)
        return m
    if task.kind == "partial":
        gold = d["gold"]
        return dict(acc=float(ll.argmax() == gold), cont_loss=-res[gold][0] / res[gold][2])
    (s, greedy, n), = res
    return dict(acc=float(greedy), cont_loss=-s / n, ll=s)


def aggregate(per_item):
    """Means over items; LAMBADA-style perplexity = exp(-mean of the continuations' summed log-probs)."""
    out = {k: float(np.mean([m[k] for m in per_item])) for k in per_item[0] if k != "ll"}
    if "ll" in per_item[0]:
        out["perplexity"] = math.exp(-float(np.mean([m["ll"] for m in per_item])))
    return out


class Progress:
    """One status line on stderr: items done, rate, ETA."""

    def __init__(self, what, total, enabled=True):
        self.what, self.total, self.enabled, self.t0 = what, total, enabled, time.time()

    def update(self, done):
        if self.enabled:
            rate = done / max(time.time() - self.t0, 1e-9)
            eta = (self.total - done) / max(rate, 1e-9)
            print(f"\r  {self.what}: {done:,}/{self.total:,} items, {rate:,.1f} items/s, ETA {eta:,.0f}s ",
                  end="", file=sys.stderr, flush=True)

    def close(self):
        if self.enabled:
            print(f"\r  {self.what}: {self.total:,} items in {time.time() - self.t0:,.1f}s" + " " * 20,
                  file=sys.stderr)


def evaluate_task(scorer, task, items, pmi=False, chunk=256, progress=True):
    """Score one task's items; returns the aggregated metrics with the FLOPs per token they cost."""
    tok = scorer.tok
    scorer.reset()
    bar = Progress(task.name, len(items), progress)
    per_item = []
    items = sorted(items, key=lambda it: len(it[1][0][0]))  # similar contexts together: shared prefixes batch
    for start in range(0, len(items), chunk):
        part = items[start:start + chunk]
        groups = [[encode_pair(tok, c, t) for c, t in reqs] for _, reqs in part]
        if pmi:  # the choices after an empty context (harness: acc_mutual_info)
            groups += [[encode_pair(tok, "", task.cont_delim + c) for c in d["choices"]] for d, _ in part]
        res = scorer.score(groups)
        for i, (d, _) in enumerate(part):
            per_item.append(item_metrics(task, d, res[i], res[len(part) + i] if pmi else None))
        bar.update(start + len(part))
    bar.close()
    out = aggregate(per_item)
    out.update(items=len(items), **scorer.summary())
    return out


def evaluate_perplexity(scorer, label, docs, progress=True):
    """Rolling log-likelihood of documents: token perplexity, bits per byte, word and byte perplexity."""
    tok = scorer.tok
    scorer.reset()
    bar = Progress(f"perplexity ({label})", len(docs), progress)
    total, n_tok, n_bytes, n_words = 0.0, 0, 0, 0
    for i, ids in enumerate(docs):
        if not ids:
            continue
        res = scorer.score([[w] for w in rolling_windows(ids, tok.eot, scorer.T)])
        total += sum(r[0][0] for r in res)
        n_tok += len(ids)
        text = tok.decode(ids)
        n_bytes += len(text.encode("utf-8"))
        n_words += len(re.split(r"\s+", text))
        bar.update(i + 1)
    bar.close()
    return dict(perplexity=math.exp(-total / n_tok), bits_per_byte=-total / n_bytes / LN2,
                word_perplexity=math.exp(-total / n_words), byte_perplexity=math.exp(-total / n_bytes),
                cont_loss=-total / n_tok, items=len(docs), tokens_scored=n_tok, **scorer.summary())


# =====================================================================================================================
# speed: the shared-context cache against scoring each choice separately


def bench_groups(docs, n_items, ctx_tokens, cont_tokens, seed=0):
    """4-choice items cut from held-out token documents: a context of 0.7-1.0 times ctx_tokens and four
    continuations of cont_tokens (the true one and three from elsewhere), as token requests."""
    text = [t for d in docs for t in d]
    rng = random.Random(seed)
    groups = []
    for _ in range(n_items):
        n = rng.randint(int(0.7 * ctx_tokens), ctx_tokens)
        start = rng.randrange(0, len(text) - n - cont_tokens)
        others = [rng.randrange(0, len(text) - cont_tokens) for _ in range(3)]
        conts = [text[start + n:start + n + cont_tokens]] + [text[o:o + cont_tokens] for o in others]
        groups.append([(text[start:start + n], c) for c in conts])
    return groups


def benchmark(model, tok, groups, repeats=3, autocast=None):
    """Items/s scoring the same 4-choice items with the shared-context cache and with every choice on its own
    (batched and length-sorted, as the harness does), timed round-robin; medians. Also checks both agree."""
    shared, separate = Scorer(model, tok, shared=True, autocast=autocast), Scorer(model, tok, shared=False,
                                                                                   autocast=autocast)
    ref = [shared.score(groups[:4]), separate.score(groups[:4])]  # warm-up, and the two must agree
    worst = max(abs(a[0] - b[0]) for ga, gb in zip(*ref) for a, b in zip(ga, gb))
    times = {"shared": [], "separate": []}
    for _ in range(repeats):
        for name, s in (("shared", shared), ("separate", separate)):
            t0 = time.perf_counter()
            s.score(groups)
            times[name].append(time.perf_counter() - t0)
    rate = {k: len(groups) / float(np.median(v)) for k, v in times.items()}
    return dict(items=len(groups), shared_items_per_s=rate["shared"], separate_items_per_s=rate["separate"],
                speedup=rate["shared"] / rate["separate"], max_abs_diff_loglik=worst,
                tokens_per_item=sum(len(c) + len(t) for g in groups for c, t in g) / len(groups))


# =====================================================================================================================
# output


def suite_averages(task_results, plan):
    """Per suite named in the plan: the mean primary metric over its groups (a group's tasks averaged first)."""
    out = {}
    for suite in dict.fromkeys(s for _, _, _, _, s in plan if s):
        groups = {}
        for name, _, metric, group, s in plan:
            if s == suite and name in task_results and metric in task_results[name]:
                groups.setdefault(group, []).append(task_results[name][metric])
        if groups:
            out[suite] = dict(mean=float(np.mean([np.mean(v) for v in groups.values()])),
                              groups={g: float(np.mean(v)) for g, v in groups.items()})
    return out


def print_table(results, plan):
    """One table per suite (and one for tasks named on their own): a row per model and depth setting, the primary
    metric of each task, the suite's mean and the forward FLOPs per token (mean over the suite's tasks)."""
    blocks = {}
    for name, _, metric, _, suite in plan:
        blocks.setdefault(suite or "tasks", {}).setdefault(name, metric)
    for suite, cols in blocks.items():
        print(f"\n{suite}: " + ", ".join(f"{n} {m}" for n, m in cols.items()))
        print(f"{'model / setting':30s} {'FLOP/tok':>9s} " + " ".join(f"{n[:10]:>10s}" for n in cols)
              + (f" {'mean':>8s}" if suite != "tasks" else ""))
        for model, per in results.items():
            for setting, r in per.items():
                t = r["tasks"]
                flops = np.mean([t[n]["flops_per_token"] for n in cols if n in t] or [float("nan")])
                row = [f"{t[n][m]:10.4f}" if n in t and m in t[n] else f"{'-':>10s}" for n, m in cols.items()]
                mean = r["suites"].get(suite, {}).get("mean")
                print(f"{(model + ' ' + setting)[:30]:30s} {flops:9.2e} " + " ".join(row)
                      + (f" {mean:8.4f}" if mean is not None else ""))


METRIC_NAMES = {"acc": "accuracy (fraction)", "acc_norm": "accuracy, length-normalised (fraction)",
                "acc_bytes": "accuracy per byte (fraction)", "acc_pmi": "accuracy, PMI (fraction)",
                "cont_loss": "continuation loss (nats)", "perplexity": "perplexity (e^nats per token)",
                "bits_per_byte": "bits per byte (bits)", "word_perplexity": "word perplexity (per word)"}


def panel_title(name):
    """A task or suite as a figure names it: 'varassign_d1_code' -> 'variable assignment, depth 1 (code)'."""
    m = re.fullmatch(r"varassign_d(\d+)_(\w+)", name)
    if m:
        return f"variable assignment, depth {m.group(1)} ({m.group(2)})"
    return {"ppl_val": "validation text"}.get(name, name.replace("_", " "))


def point_name(setting):
    """A setting as a figure names it: 'loops=2 (trained)' -> '2 passes (trained)', 'exit entropy<1' -> 'exit at
    entropy < 1'."""
    if setting.startswith("loops="):
        n, _, rest = setting[len("loops="):].partition(" ")
        return f"{n} pass{'' if n == '1' else 'es'}" + (f" {rest}" if rest else "")
    return setting.replace("exit entropy<", "exit at entropy < ")


def coinciding(pts, within=0.04):
    """[(x, y, [settings])]: the points of one panel with those that would print over each other (closer than
    `within` of the panel's span on both axes) named together at the first of them."""
    xs, ys = [p[0] for p in pts] or [0.0], [p[1] for p in pts] or [0.0]
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    groups = []
    for x, y, setting in pts:
        near = next((g for g in groups if abs(g[0] - x) < within * span_x and abs(g[1] - y) < within * span_y), None)
        if near is None:
            groups.append((x, y, [setting]))
        else:
            near[2].append(setting)
    return groups


def draw(results, plan):
    """One panel per task (its primary metric) and per suite (its mean): each model's depth settings against the
    forward FLOPs per token they executed."""
    import matplotlib  # heavy: only when a figure is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (figures only)
    panels = list(dict.fromkeys((n, m) for n, _, m, _, _ in plan))
    suites = sorted({s for _, _, _, _, s in plan if s and s not in {n for n, _ in panels}})
    suite_metric = {s: m for _, _, m, _, s in plan if s}
    n = len(panels) + len(suites)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for i, (title, metric, get) in enumerate(
            [(name, m, lambda r, name=name, m=m: r["tasks"].get(name, {}).get(m)) for name, m in panels]
            + [(s + ", mean", suite_metric[s], lambda r, s=s: r["suites"].get(s, {}).get("mean")) for s in suites]):
        ax = axes.flat[i]
        named = []  # the points to name: the settings of every model that has more than one
        for j, (model, per) in enumerate(results.items()):
            pts = []
            for setting, r in per.items():
                v = get(r)
                if v is not None and r["tasks"]:
                    pts.append((np.mean([t["flops_per_token"] for t in r["tasks"].values()]), v, setting))
            pts.sort()
            ax.plot([p[0] / 1e6 for p in pts], [p[1] for p in pts], "o-", color=f"C{j}", ms=3,
                    label=model.replace("_", " "))
            named += pts if len(pts) > 1 else []  # (a model's one setting: its legend entry names it)
        for x, y, names in coinciding(named):
            ax.annotate(", ".join(dict.fromkeys(map(point_name, names))), (x / 1e6, y), fontsize=6,
                        textcoords="offset points", xytext=(2, 2))
        ax.set_title(panel_title(title), fontsize=9)
        ax.set_xlabel("forward FLOPs per token (millions)", fontsize=8)
        ax.set_ylabel(METRIC_NAMES.get(metric, metric.replace("_", " ")), fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot(results, plan, path):
    fig = draw(results, plan)
    fig.savefig(path, dpi=120)
    import matplotlib.pyplot as plt  # (figures only)
    plt.close(fig)


# =====================================================================================================================
# command line

ckpt = ""  # run directory (or ckpt.pt); several as a comma-separated list, one line each in the figure
names = ""  # comma-separated legend names (default: the run directories' names)
tasks = "probes"  # comma-separated suites (lee_core9, loopformer, schwethelm, probes) and task names; perplexity
shots = -1  # few-shot examples per item; -1 = each suite's own (bare task names: 0)
limit = 0  # items per task at most (a seeded uniform subsample); 0 = all (Schwethelm: 10,000)
data_dir = ""  # offline rows: <data_dir>/<task>/<split>.jsonl (or .parquet); "" = the Hugging Face datasets
text = ""  # held-out text for the perplexity task: val | files (a glob of .txt/.parquet) | fineweb-edu; comma list
text_tokens = 65536  # perplexity: tokens per text source at most
loops = ""  # comma-separated loop counts (test-time depth); "" = the trained count
budget = ""  # comma-separated LoopFormer elastic budgets M <= n_loop (uniform steps 1/M)
schedule = ""  # one LoopFormer trajectory in units of 1/L, e.g. "4,2,1,1"
exit_tau = ""  # comma-separated early-exit thresholds (at the trained depth)
criterion = "entropy"  # exit criterion: entropy | kl | change | agree (exits.py)
exit_fill = "propagate"  # KV slots of the layers an exited token skips: propagate | recompute (module docstring)
batch_size = 256  # rows per forward at most
batch_tokens = 8192  # rows x length per forward at most
shared = True  # requests sharing a prefix (an item's choices) run it once and reuse its KV cache
seed = 1234  # few-shot sampling, subsampling and the generated probes
device = "auto"  # auto (cuda if there is one) | cpu | cuda | cuda:N
threads = 0  # torch threads on CPU; 0 = auto, as train.py: OMP_NUM_THREADS if set, else the idle cores
dtype = "float32"  # float32 | bfloat16 (autocast)
out_dir = ""  # where eval.json / eval.png (bench.json, eval_harness.json) go; "" = the first run's directory
progress = True  # a status line per task (rate and ETA) on stderr
fetch = False  # download every split the tasks read into data_dir (on a connected machine), then stop
harness = False  # lm-evaluation-harness's own tasks run from its adapter: python -m hf.harness (these keys and more)
bench = False  # benchmark items/s on 4-choice items, shared-context cache vs each choice separately, then stop
bench_items = 256  # bench: items per shape
redraw = ""  # comma-separated eval JSONs this script wrote: draw their figures again beside them, and stop


def run_tokenizer(model, state):
    tc = state.get("train_config", {}) if isinstance(state, dict) else {}
    tok = get_tokenizer(tc.get("tokenizer", "byte"))
    if tok.n_vocab != model.config.vocab_size:
        raise ConfigError(f"eval.py: the checkpoint has vocab_size {model.config.vocab_size} but its tokenizer "
                          f"{tok.name!r} has {tok.n_vocab}")
    return tok


def plan_tasks(cfg):
    """[(task name, shots, primary metric, group, suite)] from --tasks; 'perplexity' is handled apart."""
    plan = []
    for part in (p.strip() for p in cfg["tasks"].split(",") if p.strip()):
        if part in SUITES:
            plan += [(t, k if cfg["shots"] < 0 else cfg["shots"], m, g, part) for t, k, m, g in SUITES[part]]
        elif part in TASKS:
            plan.append((part, max(cfg["shots"], 0), TASKS[part].metric, part, ""))
        elif part != "perplexity":
            close = difflib.get_close_matches(part, list(SUITES) + list(TASKS) + ["perplexity"], n=1)
            raise ConfigError(f"eval.py: unknown task or suite {part!r}" + (f"; did you mean {close[0]!r}?" if close
                                                                             else ""))
    return plan


def check_settings(cfg):
    """One line for a setting that cannot work, before any checkpoint is read: counts and sizes, and the
    comma-separated lists of depths, thresholds and harness tasks."""
    for key, least in (("shots", -1), ("limit", 0), ("text_tokens", 1), ("batch_size", 1), ("batch_tokens", 1),
                       ("seed", 0), ("bench_items", 1)):
        if cfg[key] < least:
            raise ConfigError(f"config error: --{key}={cfg[key]} must be >= {least}")
    for key in ("loops", "budget"):
        parts = [v.strip() for v in cfg[key].split(",") if v.strip()]
        if not all(v.isdigit() and int(v) >= 1 for v in parts):
            raise ConfigError(f"config error: --{key}={cfg[key]!r} must be whole numbers >= 1, comma-separated")
    try:
        taus = [float(v) for v in cfg["exit_tau"].split(",") if v.strip()]
    except ValueError:
        taus = [-1.0]
    if any(not tau >= 0 for tau in taus):
        raise ConfigError(f"config error: --exit_tau={cfg['exit_tau']!r} must be thresholds >= 0, comma-separated")
    if cfg["schedule"]:
        early_exit.schedule_steps(cfg["schedule"])


def redraw_eval(path):
    """The figure of an eval.json (this script's output), drawn again beside it as .png."""
    try:
        with open(path) as f:
            saved = json.load(f)
        fig = draw(saved["results"], saved["plan"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"eval.py --redraw: {path} is not an eval.py JSON ({e})") from None
    png = os.path.splitext(path)[0] + ".png"
    fig.savefig(png, dpi=120)
    import matplotlib.pyplot as plt  # (figures only)
    plt.close(fig)
    print(f"redraw: wrote {png}")
    return png


def settings():
    """This file's keys and their defaults (hf/harness.py takes them too)."""
    return {k: v for k, v in globals().items()
            if k.islower() and not k.startswith("_") and isinstance(v, configurator.SIMPLE_TYPES)}


def choices():
    return dict(criterion=exits.decode_criteria(), exit_fill=exits.FILLS, dtype=("float32", "bfloat16"))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg, _ = configure(settings(), None, argv, doc_source=__file__,
                       choices=choices())
    if cfg["redraw"]:  # a committed evaluation's figure, from its JSON alone
        return [redraw_eval(path) for path in cfg["redraw"].split(",")]
    if cfg["harness"]:
        raise ConfigError("eval.py --harness: lm-evaluation-harness's tasks run from its adapter, with these keys: "
                          "python -m hf.harness --ckpt=out/run --tasks=hellaswag (or python -m hf.harness "
                          "config/eval_loopmoe.py --ckpt=...)")
    check_settings(cfg)
    cfg["device"] = use_device(cfg)
    torch.manual_seed(cfg["seed"])
    plan = plan_tasks(cfg)
    if not plan and "perplexity" not in cfg["tasks"].split(","):
        raise ConfigError(f"eval.py: --tasks={cfg['tasks']!r} names no task: give suites or tasks, comma-separated "
                          f"({', '.join(SUITES)}, perplexity, or task names)")
    if cfg["fetch"]:
        if not cfg["data_dir"]:
            raise ConfigError("eval.py: --fetch needs --data_dir=DIR (where the rows go)")
        download(dict.fromkeys(name for name, *_ in plan), cfg["data_dir"])
        return None
    runs = early_exit.load_runs(cfg)
    depths = {name: depth_settings(model, cfg) for name, _, model, _ in runs}  # every model's checked before any runs
    prefix = early_exit.output_prefix(cfg, runs, "bench" if cfg["bench"] else "eval")
    auto = lambda: early_exit.autocast(cfg)  # noqa: E731
    if cfg["bench"]:
        return main_bench(cfg, runs, prefix, auto)
    # every task's items once (the tokenizer is the same for every model of one data set; checked per model)
    items = {}
    for name, k, metric, _, suite in plan:
        if (name, k) not in items:
            items[(name, k)] = build_items(TASKS[name], cfg["data_dir"], k, cfg["seed"],
                                           cfg["limit"] or SUITE_CAP.get(suite, 0))
    texts = [t for t in cfg["text"].split(",") if t] if "perplexity" in cfg["tasks"].split(",") or cfg["text"] else []
    if "perplexity" in cfg["tasks"].split(",") and not texts:
        raise ConfigError("eval.py: the perplexity task needs --text=val (or files, or fineweb-edu)")
    results = {name: evaluate_run(name, path, model, state, depths[name], plan, items, texts, cfg, auto)
               for name, path, model, state in runs}
    full_plan = plan + [(f"ppl_{text_label(t)}", 0, "perplexity", f"ppl_{text_label(t)}", "") for t in texts]
    prov = run_provenance([path for _, path, _, _ in runs], "eval.py", argv)
    early_exit.write_json(prefix + ".json", dict(config=cfg, plan=full_plan, results=results, provenance=prov))
    print_table(results, full_plan)
    plot(results, full_plan, prefix + ".png")
    print(f"\nwrote {prefix}.json and {prefix}.png")
    return results


def evaluate_run(name, path, model, state, settings, plan, items, texts, cfg, auto):
    """{setting name: its task results and suite averages} of one checkpoint at each of its depth settings."""
    tok = run_tokenizer(model, state)
    docs = [text_documents(t, tok, state, cfg["text_tokens"]) for t in texts]
    out = {}
    for setting in settings:
        print(f"{name} [{setting.name}]: {path}", file=sys.stderr)
        try:
            scorer = Scorer(model, tok, setting, cfg["batch_size"], cfg["batch_tokens"], cfg["shared"], auto)
        except ValueError as e:  # e.g. hyper-connections have no parameters for more passes
            print(f"  skipped: {e}", file=sys.stderr)
            continue
        task_results = {}
        for tname, k, metric, _, _ in plan:
            if tname not in task_results:
                task_results[tname] = evaluate_task(scorer, TASKS[tname], items[(tname, k)],
                                                    pmi=any(m == "acc_pmi" for t, _, m, _, _ in plan if t == tname),
                                                    progress=cfg["progress"])
        for label, d in docs:
            task_results[f"ppl_{label}"] = evaluate_perplexity(scorer, label, d, cfg["progress"])
        out[setting.name] = dict(tasks=task_results, suites=suite_averages(task_results, plan),
                                 setting=setting._asdict())
    return out


def main_bench(cfg, runs, prefix, auto):
    out = {}
    for name, path, model, state in runs:
        tok = run_tokenizer(model, state)
        _, docs = text_documents((cfg["text"] or "val").split(",")[0], tok, state, 200_000)
        out[name] = {}
        T = model.config.block_size
        # context and choice lengths as fractions of the context window: HellaSwag's long endings (about 2:1 in
        # GPT-2 tokens) and ARC's short answers (about 7:1)
        for shape, (c, k) in dict(hellaswag_like=(0.6, 0.3), arc_like=(0.8, 0.12)).items():
            groups = bench_groups(docs, cfg["bench_items"], int(c * T), int(k * T), cfg["seed"])
            r = benchmark(model, tok, groups, autocast=auto)
            out[name][shape] = r
            print(f"{name} {shape} ({r['tokens_per_item']:.0f} tokens/item): shared {r['shared_items_per_s']:.1f} "
                  f"items/s, separate {r['separate_items_per_s']:.1f} items/s, speed-up {r['speedup']:.2f}x "
                  f"(max |d loglik| {r['max_abs_diff_loglik']:.1e}), {torch.get_num_threads()} threads")
    early_exit.write_json(prefix + ".json", dict(config=cfg, results=out))
    print(f"wrote {prefix}.json")
    return out


if __name__ == "__main__":
    run(main)
