"""
The tasks eval.py scores: what each one is (dataset, split, how a row becomes a doc, its metric; the harness's
definitions, lm-evaluation-harness 0.4.13), the generated probes (seeded, offline), the papers' suites, how a doc
with its few-shot examples becomes the (context, continuation) requests the harness builds, and where the rows come
from (the local copy `eval.py --fetch` writes, else the Hugging Face Hub). A new task is one row in TASKS (a new
probe: one generator in PROBES).
"""
import ast
import json
import os
import random
import re
import string
from collections import namedtuple

from configurator import ConfigError
from data import json_lines
from prepare import hub_unreachable

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
