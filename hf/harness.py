"""
lm-evaluation-harness on our checkpoints, with eval.py's keys and two of its own:

    python -m hf.harness --tasks=hellaswag,gsm8k --ckpt=out/run --loops=4
    python -m hf.harness config/eval_loopmoe.py --ckpt=out/loopmoe,out/vanilla_moe

registers the model class "looped_gpt" (loglikelihood with eval.py's shared-prefix cache, loglikelihood_rolling,
generate_until with the KV cache and stop strings, all at the requested depth) and runs lm_eval.simple_evaluate
with the harness's task definitions (or --include_path for local task YAMLs). The scoring itself is eval.py's
Scorer: this file only speaks lm_eval's interface.
"""
import difflib
import os
import sys

import torch

import early_exit
from runs import load_model
import eval as ev
from configurator import ConfigError, configure, run
from runs import use_device
from eval import LOOPMOE_HARNESS, Scorer, Setting, depth_settings, rolling_windows, run_tokenizer

_HARNESS_CLASS = []


class HarnessAdapter:
    """The lm-evaluation-harness model on a checkpoint (harness_model_class mixes it into lm_eval's TemplateLM):
    loglikelihood (one item's requests share their prefix's KV cache), loglikelihood_rolling and generate_until at
    the depth of its Scorer. lm_eval's model_args: ckpt, loops, exit_tau,
    criterion, exit_fill, device."""

    def __init__(self, scorer=None, ckpt="", loops=0, exit_tau=-1.0, criterion="entropy",
                 exit_fill="propagate", device="cpu", batch_size=256):
        super().__init__()
        if scorer is None:
            model, state = load_model(ckpt, device)
            setting = Setting("full", int(loops) or None)
            if float(exit_tau) >= 0:
                setting = Setting("exit", None, criterion, float(exit_tau), exit_fill)
            scorer = Scorer(model, run_tokenizer(model, state), setting, int(batch_size))
        self.scorer = scorer
        self.group_keys = None

    @property
    def eot_token_id(self):
        return self.scorer.tok.eot

    @property
    def max_length(self):
        return self.scorer.T

    def tok_encode(self, string, add_special_tokens=None, **kwargs):
        return list(self.scorer.tok.encode(string))

    def tok_decode(self, tokens, **kwargs):
        return self.scorer.tok.decode(tokens)

    def loglikelihood(self, requests, disable_tqdm=False):
        self.group_keys = [(r.task_name, r.doc_id) for r in requests]  # one item's requests: one group
        try:
            return super().loglikelihood(requests, disable_tqdm=True)
        finally:
            self.group_keys = None

    def _loglikelihood_tokens(self, requests, disable_tqdm=False, **kwargs):
        keys = self.group_keys or [tuple(ctx) for _, ctx, _ in requests]
        groups = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        res = self.scorer.score([[(requests[i][1], requests[i][2]) for i in idx] for idx in groups.values()])
        out = [None] * len(requests)
        for idx, r in zip(groups.values(), res):
            for i, (s, greedy, _) in zip(idx, r):
                out[i] = (s, greedy)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        windows = [rolling_windows(self.tok_encode(r.args[0]), self.eot_token_id, self.max_length)
                   for r in requests]
        res = self.scorer.score([[w] for doc in windows for w in doc])
        out, j = [], 0
        for doc in windows:
            out.append(sum(r[0][0] for r in res[j:j + len(doc)]))
            j += len(doc)
        return out

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for r in requests:
            context, kwargs = r.args
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            out.append(self.scorer.generate(self.tok_encode(context), int(kwargs.get("max_gen_toks", 256)),
                                            until))
        return out


def harness_model_class():
    """The lm-evaluation-harness model class of our checkpoints, registered as "looped_gpt": HarnessAdapter on
    lm_eval's TemplateLM (lm_eval is imported here only: it takes seconds)."""
    if _HARNESS_CLASS:
        return _HARNESS_CLASS[0]
    from lm_eval.api.model import TemplateLM  # optional, heavy: the harness only
    from lm_eval.api.registry import register_model  # optional, heavy: the harness only

    @register_model("looped_gpt")
    class LoopedLM(HarnessAdapter, TemplateLM):
        pass
    _HARNESS_CLASS.append(LoopedLM)
    return LoopedLM


def harness_tasks(text):
    """'mmlu:5,gsm8k' -> [(task, shots or None)]; 'loopmoe' is Chen et al.'s nine."""
    out = []
    for part in (p.strip() for p in text.replace("loopmoe", LOOPMOE_HARNESS).split(",") if p.strip()):
        name, _, shots = part.partition(":")
        if not name or not (shots.isdigit() or not shots):
            raise ConfigError(f"config error: --tasks={text!r}: {part!r} is not a harness task as name or name:shots "
                              "(shots a whole number >= 0)")
        out.append((name, int(shots) if shots else None))
    if not out:
        raise ConfigError("config error: python -m hf.harness needs --tasks: harness task names, comma-separated "
                          "(name:shots)")
    return out


def run_harness(scorer, tasks, cfg, task_manager):
    """lm_eval.simple_evaluate on our model for [(task, shots)]; tasks of the same shot count run together."""
    import lm_eval  # optional, heavy: the harness only
    lm = harness_model_class()(scorer=scorer)
    results = {}
    by_shots = {}
    for name, shots in tasks:
        shots = shots if cfg["shots"] < 0 else cfg["shots"]
        by_shots.setdefault(shots, []).append(name)
    for shots, names in by_shots.items():
        scorer.reset()
        r = lm_eval.simple_evaluate(model=lm, tasks=names, num_fewshot=shots, limit=cfg["limit"] or None,
                                    task_manager=task_manager, bootstrap_iters=0, log_samples=False,
                                    random_seed=cfg["seed"], numpy_random_seed=cfg["seed"],
                                    torch_random_seed=cfg["seed"], fewshot_random_seed=cfg["seed"])
        for task, metrics in r["results"].items():
            clean = {k.replace(",none", ""): v for k, v in metrics.items()  # "acc,none" -> "acc"; other filters
                     if isinstance(v, (int, float)) and "stderr" not in k}  # keep their name (GSM8K's strict-match)
            results[task] = dict(clean, shots=shots, **scorer.summary())
    return results


def task_manager(cfg):
    """lm-evaluation-harness's index of tasks (its import and indexing take seconds: after every check)."""
    from lm_eval.tasks import TaskManager  # optional, heavy: the harness only
    return TaskManager(include_path=cfg["include_path"] or None, include_defaults=cfg["harness_defaults"])


def check_harness_tasks(wanted, tm):
    """Each wanted task is one the harness knows (a task, group or tag of its index, or a YAML file): an unknown one
    is one line naming the nearest known names (lm_eval's own error is a KeyError deep in simple_evaluate)."""
    known = set(tm.all_tasks)
    for name, _ in wanted:
        if name not in known and not os.path.isfile(name):
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = (f"; nearest known: {', '.join(close)}" if close else
                    "; no task of the harness's index is close" if known else
                    "; no task is indexed (--harness_defaults=False and no --include_path)")
            raise ConfigError(f"config error: --tasks: {name!r} is not a task lm-evaluation-harness knows{hint} "
                              "(lm-eval ls tasks lists them)")


def main_harness(cfg):
    runs = early_exit.load_runs(cfg)
    depths = {name: depth_settings(model, cfg) for name, _, model, _ in runs}  # every model's checked before any runs
    prefix = early_exit.output_prefix(cfg, runs, "eval_harness")
    wanted = harness_tasks(cfg["tasks"])
    tm = task_manager(cfg)
    check_harness_tasks(wanted, tm)
    results = {}
    for name, path, model, state in runs:
        tok = run_tokenizer(model, state)
        results[name] = {}
        for setting in depths[name]:
            print(f"{name} [{setting.name}]: lm-evaluation-harness {', '.join(t for t, _ in wanted)}",
                  file=sys.stderr)
            scorer = Scorer(model, tok, setting, cfg["batch_size"], cfg["batch_tokens"], cfg["shared"],
                            lambda: early_exit.autocast(cfg))
            r = run_harness(scorer, wanted, cfg, tm)
            results[name][setting.name] = dict(tasks=r, suites={}, setting=setting._asdict())
            for task, m in r.items():
                print(f"  {task}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items() if isinstance(v, float)))
    early_exit.write_json(prefix + ".json", dict(config=cfg, results=results))
    print(f"wrote {prefix}.json")
    return results


HARNESS_KEYS = dict(
    tasks="",  # harness task names, comma-separated, name:shots for a shot count; loopmoe = Chen et al.'s nine
    include_path="",  # a folder of local task YAMLs
    harness_defaults=True,  # also index the harness's own tasks (False: only include_path, much faster)
)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg, _ = configure({**ev.settings(), **HARNESS_KEYS}, None, argv, doc_source=ev.__file__, choices=ev.choices(),
                       usage="python -m hf.harness [config/eval_loopmoe.py] --ckpt=out/run --tasks=hellaswag "
                             "[eval.py's keys]")
    ev.check_settings(cfg)
    harness_tasks(cfg["tasks"])
    if cfg["include_path"] and not os.path.isdir(cfg["include_path"]):
        raise ConfigError(f"config error: --include_path={cfg['include_path']} is not a folder (of task YAMLs)")
    cfg["device"] = use_device(cfg)
    torch.manual_seed(cfg["seed"])
    return main_harness(cfg)


if __name__ == "__main__":
    run(main)
