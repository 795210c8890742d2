# Looped-MoE: 8 unique MoE layers (top-2 of 8 experts with hidden d_ff/top_k) passed twice, 16 effective layers
# (Lee et al. 2026, arXiv:2605.09165). Loop-depth variants: --n_layer=4 --n_loop=4, --n_layer=2 --n_loop=8.
import os

# MoE's settings, then what looping changes
exec(open(os.path.join(os.path.dirname(__file__), "sparse_moe.py")).read())
n_layer = 8
n_loop = 2
