# CPU-scale learning-rate transfer across loop counts after Wang et al. 2026 (arXiv:2606.18524, §5.2-5.3, Fig. 5):
# AdamW base-LR sweeps for loop counts N in {1, 2, 4} with no residual scaling and with linear (1/N) scaling at L=2
# unique blocks, and factorized at L=4 with L_ref=2 (so that factorized equals linear at L=2, as it does at the
# paper's L_ref=12); config/residual_cpu.py at d=64, context 128, 500 steps of 2,048 tokens (1M tokens, about 10
# per parameter), WSD. The LR grid has steps of sqrt(2); two training seeds. records/wang2026.md holds the power
# estimate, the measured time and the verdict. Parts: --only=s1337 then --only=s7 (about 45 minutes each on one
# core of a 2-core AMD EPYC).
#     python scaling.py sweep config/sweeps/lr_transfer_cpu.py --only=s1337
#     python scaling.py figures records/   # redraws records/wang2026/lr_transfer_cpu_lr.png from the committed rows
name = "lr_transfer_cpu"
record = "records/wang2026"  # each finished row is also appended to records/wang2026/lr_transfer_cpu.jsonl
RULES = {"none": 2, "linear": 2, "factorized": 4}  # residual_scaling -> unique blocks L
LOOPS = (1, 2, 4)
LRS = [1e-3 * 2 ** (k / 2) for k in range(11)]  # 1e-3 ... 3.2e-2 in steps of sqrt(2)
SEEDS = (1337, 7)
common = dict(data_source="offline", tokenizer="byte", n_embd=64, block_size=128, batch_size=16, max_iters=500,
              warmup_iters=50, decay_frac=0.2, residual_ref_layers=2, eval_interval=100000, eval_tokens=131072,
              sample_tokens=0)
figures = {"lr": ["--law=lr", "--panel=arch", '--group=("n_layer","n_loop")', "--max_loss=4"]}  # scaling.py figures
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 4e10  # one core at d=64: 4.1e10 achieved over the 89 runs of records/wang2026 (start-up included)


# factorized's N=4 optimum was left undetermined by two disagreeing seeds: a third seed for that rule
# (--only='^factorized_.*_s42$'; issue: 3 seeds where the effect is within 2x the spread)
EXTRA_SEEDS = {"factorized": (42,)}


def points(lrs=LRS, seeds=SEEDS):
    return [dict(name=f"{rule}_L{L}_N{N}_lr{lr:.3g}_s{seed}", arch=rule, configs=["config/residual_cpu.py"],
                 overrides=dict(residual_scaling=rule, n_layer=L, n_loop=N, lr=lr, seed=seed), fields=dict(rule=rule))
            for rule, L in RULES.items() for seed in seeds + EXTRA_SEEDS.get(rule, ())
            for N in LOOPS for lr in lrs]
