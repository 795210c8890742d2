# Looped-MoE: 8 unique MoE layers (top-2 of 8 experts with hidden d_ff/top_k) passed twice, 16 effective layers
# (Lee et al. 2026, arXiv:2605.09165). Loop-depth variants: --n_layer=4 --n_loop=4, --n_layer=2 --n_loop=8.
n_layer = 8
n_loop = 2
n_expert = 8
top_k = 2
n_embd = 512  # width d; the paper's widths are 128, 256, ..., 1024 (and 704 between them)
head_dim = 64  # heads of 64: n_head = d/64
mlp = "swiglu"
d_ff = 0  # 0 = 64*ceil(8d/3/64), the paper's d_ff
vocab_size = 50257  # GPT-2 tokenizer
tie_embeddings = False
norm_gain = False  # pre-RMSNorm without learnable gains
pos_emb = "rope"
mup = True  # muP with d_base = 128
mup_base_width = 128
block_size = 1024  # the paper does not state its context length [inferred]
