# CPU-scale iso-depth grid after Schwethelm et al. 2026 (arXiv:2604.21106, §4): 1 prelude + 4/r recur (looped r
# times) + 1 coda layers = 6 effective layers for r in {1, 2, 4}, heads of 8, their recipe at CPU scale
# (config/recur_cpu.py: MuonH, HyperP LR 0.014 (D/D_ref)^-0.32 with D_ref = that preset's 614,400 tokens), byte
# tokenizer. The widths come from the pilot (isodepth_pilot_cpu.py, records/schwethelm2026.md): at 1e12 FLOPs the
# optimum is d=24 (r=1) to 24-32 (r=4), about 40 tokens per parameter, so each budget spans d from about half to
# twice its d* ~ 24 (C/1e12)^(1/4). Budgets 3e11-1e13 (30x; the paper's span is 50x): about 1.3 core-hours per seed
# up to 3e12 and 2.5 more for 1e13 (the dry run at the pilot's speed; the smallest runs take longer than it says).
# At 1e13, r=2 and r=4 were still falling at d=64 (seed 1337), so that budget reaches d=96 (r=1 too: one grid).
# (The first design, 2e11-2e12 at d=64-192, gave every run under one token per parameter.) The probes and the
# injection ablation (isodepth_probes_cpu.py, injection_ablation_cpu.py) add to the same results.jsonl.
# Two training seeds, 1337 (train.py's default: names without a suffix) and 7 (names ending _s7): the power simulation
# (`python scaling.py power`, records/schwethelm2026.md) gives one seed a 95% interval on phi 0.40 wide, two 0.26.
# A third, fourth and fifth seed, 42 (_s42), 3 (_s3) and 5 (_s5), at the two lower budgets only: the plain loop that
# the probes' delta phi is measured against (isodepth_probes_cpu.py says which designs ran them).
# Parts, per seed (seed 7: add _s7$ to the pattern; seed 1337: add \d$):
#     python scaling.py sweep config/sweeps/isodepth_cpu.py --only='_C(3e11|1e12)_'   # part 1, about 25 core-minutes
#     python scaling.py sweep config/sweeps/isodepth_cpu.py --only='_C3e12_'          # part 2, about an hour
#     python scaling.py sweep config/sweeps/isodepth_cpu.py --only='^r[12]_C1e13_d(24|32|48|64)'  # part 3, ~1.7 hours
#     python scaling.py sweep config/sweeps/isodepth_cpu.py --only='^r4_C1e13_d(24|32|48|64)'     # part 4, ~50 minutes
#     python scaling.py sweep config/sweeps/isodepth_cpu.py --only='^r[124]_C1e13_d96'            # part 5, ~20 minutes
#     python scaling.py fit out/sweeps/isodepth_cpu/results.jsonl --law=chinchilla --archs='("r1","r2","r4")'
#     python scaling.py fit out/sweeps/isodepth_cpu/results.jsonl --law=joint --archs='("r1","r2","r4")'
import itertools

name = "isodepth_cpu"
record = "records/schwethelm2026"
# the joint fit over every budget that has run; delta phi as the probes (isodepth_probes_cpu.py) arrive
# 400 paired resamples: ten beyond each end of a 95% interval (100 left its ends on two or three)
PROBES = ["--law=delta_phi", "--budgets=(3e11,1e12)", "--bootstrap=400", "--restarts=200"]
SHARED_R1, OWN_R1 = '--designs=("trunc_r","hc_r","tdt_r","rscale_r")', '--designs=("iteradaln_r","moe_r")'
figures = {"isoflop": ["--law=isoflop", "--bootstrap=0", '--archs=("r1","r2","r4")'],
           "joint": ["--law=joint", '--archs=("r1","r2","r4")', "--workers=1"],
           "delta_phi": PROBES + [SHARED_R1, '--hold=("a","alpha","b","beta","e")'],
           "delta_phi_own_r1": PROBES + [OWN_R1, '--hold=("alpha","beta")']}
WIDTHS = {3e11: (16, 24, 32, 48), 1e12: (16, 24, 32, 48, 64), 3e12: (16, 24, 32, 48, 64), 1e13: (24, 32, 48, 64, 96)}
common = dict(data_source="offline", tokenizer="byte", head_dim=32, n_prelude=1, n_coda=1, eval_interval=100000,
              eval_tokens=65536, sample_tokens=0)
env = dict(OMP_NUM_THREADS="1")  # tiny models: a second thread only spins (use --parallel=2 on a quiet machine)
flops_per_second = 1.4e10  # one core: the median of the pilot's 10 runs at d=16-64 (start-up and evaluation included)


def lr_for(tokens, model, train):
    return 0.014 * (tokens / 614400) ** -0.32  # HyperP data correction (Schwethelm et al. §4.2)


# None: train.py's default seed 1337; 42, 3 and 5, delta phi's third to fifth seeds, at 3e11-1e12 only
SEEDS = (None, 7, 42, 3, 5)


def grid(loops=(1, 2, 4), budgets=tuple(WIDTHS), prefix="r", extra=None, seeds=SEEDS):
    points = []
    for seed, r, C in itertools.product(seeds, loops, budgets):
        for d in WIDTHS[C]:
            over = dict(n_embd=d, head_dim=8, n_loop=r, n_layer=4 // r, **(extra(r) if extra else {}))
            over.update({} if seed is None else {"seed": seed})
            name = f"{prefix}{r}_C{C:.3g}_d{d}".replace("+", "") + ("" if seed is None else f"_s{seed}")
            points.append(dict(name=name, arch=f"{prefix}{r}", configs=["config/recur_cpu.py"], overrides=over,
                               flops_budget=C))
    return points


def points():
    return grid(seeds=SEEDS[:2]) + grid(budgets=(3e11, 1e12), seeds=SEEDS[2:])
