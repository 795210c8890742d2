# MoE: 16 unique layers whose FFNs are token-choice top-2 of 8 SwiGLU experts with hidden size d_ff/top_k, so the
# active FFN parameters equal the dense FFN's (Lee et al. 2026, arXiv:2605.09165, §2.2).
import os

# Base's settings, then the experts
exec(open(os.path.join(os.path.dirname(__file__), "sparse_base.py")).read())
n_expert = 8
top_k = 2
