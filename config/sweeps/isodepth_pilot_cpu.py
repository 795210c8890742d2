# Pilot of the CPU iso-depth grid (Schwethelm et al. 2026, arXiv:2604.21106, §4). The first design of
# config/sweeps/isodepth_cpu.py (budgets 2e11-2e12 FLOPs, d = 64-192, heads of 32) planned 11-194 optimizer steps and
# 0.02-0.6 tokens per parameter per run: every width far above the compute-optimal one, where the loss hardly
# depends on N, so phi (which acts through N_eff) cannot be identified. Lee et al.'s isoFLOP pilots
# (records/lee2026.md) put the optimum above 80 tokens per parameter at this size. This pilot trains r=1 and r=4 at
# 1e12 FLOPs over d = 16 ... 64 (heads of 8), the recipe of config/recur_cpu.py (MuonH, HyperP LR), to find where
# the optimum falls before the grid is redrawn, and with a second seed the noise a power estimate needs. About 15
# minutes of one core per seed.
#     python scaling.py sweep config/sweeps/isodepth_pilot_cpu.py --only='_s7$'   # the second seed
import os
import runpy

name = "isodepth_pilot_cpu"
record = "records/schwethelm2026"
figures = {"isoflop": ["--law=isoflop", "--bootstrap=0"]}
archs = {f"r{r}": dict(configs=["config/recur_cpu.py"], overrides=dict(n_loop=r, n_layer=4 // r)) for r in (1, 4)}
budgets = [1e12]
widths = [16, 24, 32, 48, 64]
seeds = [None, 7]  # None: train.py's default seed 1337 (the first part's point names); 7 measures the seed noise
common = dict(data_source="offline", tokenizer="byte", head_dim=8, n_prelude=1, n_coda=1, eval_interval=100000,
              eval_tokens=65536, sample_tokens=0)
env = dict(OMP_NUM_THREADS="1")
flops_per_second = 1e10  # tiny models: start-up and evaluation weigh as much as training (records/lee2026.md)
lr_for = runpy.run_path(os.path.join(os.path.dirname(__file__), "isodepth_cpu.py"))["lr_for"]  # HyperP
