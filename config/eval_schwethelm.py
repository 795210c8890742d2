# Schwethelm et al. 2026 (arXiv:2604.21106), App. H, Table 7: the 20 tasks of the five axes (parametric knowledge,
# reading comprehension, math word problems, reasoning primitives, compositional symbolic) with their shots,
# per-token continuation loss of the gold continuation as the primary signal, at most 10,000 items per task. They
# compare models trained at r = 1, 2, 4, 8: pass every run, one line each.
#     python eval.py config/eval_schwethelm.py --ckpt=out/r1,out/r2,out/r4,out/r8 --data_dir=evaldata
tasks = "schwethelm"
shots = -1  # the suite's own (Table 7)
