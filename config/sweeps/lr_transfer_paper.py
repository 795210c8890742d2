# Learning-rate transfer of Wang et al. 2026 ("On the Residual Scaling of Looped Transformers", arXiv:2606.18524,
# §5.3, Fig. 5): base-LR sweeps {5, 7.5, 10, 12.5, 15, 20, 30, 40}e-4 for loop counts N in {1, 2, 4, 8} under the
# residual multipliers sqrt (N^-1/2) and linear (1/N) at L=12 unique blocks, and factorized (lambda/N (L/12)^-1/2
# with the depth LR rule) at L in {24, 48}; their recipe (config/residual_scaling.py: d=768, 20,000 steps of 0.5M
# tokens, WSD). Runs ending above 4 nats count as diverged (--max_loss=4).
#     python scaling.py fit out/sweeps/lr_transfer_paper/results.jsonl --law=lr --panel=arch \
#         --group='("n_layer","n_loop")' --max_loss=4
name = "lr_transfer_paper"
LRS = [5e-4, 7.5e-4, 1e-3, 1.25e-3, 1.5e-3, 2e-3, 3e-3, 4e-3]
RULES = {"sqrt": (12,), "linear": (12,), "factorized": (24, 48)}  # residual_scaling -> unique depths L
common = dict(data_source="fineweb-edu", tokenizer="gpt2", vocab_pad_multiple=64, eval_interval=2000,
              eval_tokens=4194304, sample_tokens=0, compile=True)
runner = ["torchrun", "--standalone", "--nproc_per_node=8", "train.py"]
flops_per_second = 8 * 300e12
CONFIG = "config/residual_scaling.py"


def points(rules=RULES, loops=(1, 2, 4, 8), lrs=LRS, config=CONFIG):
    return [dict(name=f"{rule}_L{L}_N{N}_lr{lr:.3g}", arch=rule, configs=[config],
                 overrides=dict(residual_scaling=rule, n_layer=L, n_loop=N, lr=lr), fields=dict(rule=rule))
            for rule, depths in rules.items() for L in depths for N in loops for lr in lrs]
