# Looped: 8 unique dense layers passed twice, 16 effective layers (Lee et al. 2026, arXiv:2605.09165): Base with
# its stack halved and looped; no input injection, prelude or coda. N_active, and so the tokens a budget buys,
# equal Base's at the same width; stored parameters are halved.
# Loop-depth variants: --n_layer=4 --n_loop=4 and --n_layer=2 --n_loop=8 (the paper runs them at d=704).
import os

# Base's settings, then what looping changes
exec(open(os.path.join(os.path.dirname(__file__), "sparse_base.py")).read())
n_layer = 8
n_loop = 2
