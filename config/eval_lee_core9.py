# Lee et al. 2026 (arXiv:2605.09165), §5.3: AI2 OLMES's Core 9 (ARC-E, ARC-C, BoolQ, CSQA, HellaSwag, OBQA, PIQA,
# SIQA, WinoGrande) with 5 shots and OLMES's per-task normalisation, and their mean; eval.py's docstring names where
# we depart from OLMES.
#     python eval.py config/eval_lee_core9.py --ckpt=out/base,out/looped,out/looped_moe --data_dir=evaldata
#     python eval.py config/eval_lee_core9.py --ckpt=out/looped_moe --data_dir=evaldata --exit_tau=0.5,1,2
tasks = "lee_core9"
shots = -1  # the suite's own: 5
