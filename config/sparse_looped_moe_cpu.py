# CPU-scale Looped-MoE of Lee et al. 2026 (arXiv:2605.09165): 2 unique MoE layers (top-2 of 8 SwiGLU experts of
# hidden d_ff/2) passed twice, the same 4 effective layers and active params as config/sparse_moe_cpu.py.
# Trains in minutes on 2 cores: python train.py config/sparse_looped_moe_cpu.py   (paper scale: sparse_looped_moe.py)
import os

# the CPU MoE's settings, then what looping changes
exec(open(os.path.join(os.path.dirname(__file__), "sparse_moe_cpu.py")).read())
n_layer = 2
n_loop = 2
