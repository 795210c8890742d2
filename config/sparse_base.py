# Base: 16 unique dense layers (Lee, Biloki, Hu, May 2026, "Sparse Layers are Critical to Scaling Looped Language
# Models", arXiv:2605.09165). Width from n_embd; everything else follows the paper. Budgets use C = 6*N_active*D
# (train.py's default flops_convention "lee"): python train.py config/sparse_base.py --flops_budget=1e18.
# Check the counts: python scaling.py count config/sparse_base.py --n_embd=512
n_layer = 16
n_embd = 512  # width d; the paper's widths are 128, 256, ..., 1024 (and 704 between them)
head_dim = 64  # heads of 64: n_head = d/64
mlp = "swiglu"
d_ff = 0  # 0 = 64*ceil(8d/3/64), the paper's d_ff
vocab_size = 50257  # GPT-2 tokenizer
# Data (Lee et al. §3): the 10B-token sample of FineWeb-Edu in GPT-2 tokens. train.py streams as many tokens as the run
# needs into data/fineweb-edu_gpt2 (from the Hugging Face Hub; without network: a local copy of its parquet files with
# --hf_dataset=/path/to/folder, or bytes of the offline corpus with --data_source=offline --tokenizer=byte)
data_source = "fineweb-edu"
tokenizer = "gpt2"
hf_config = "sample-10BT"
tie_embeddings = False
norm_gain = False  # pre-RMSNorm without learnable gains
pos_emb = "rope"
mup = True  # muP with d_base = 128
mup_base_width = 128
block_size = 1024  # the paper does not state its context length [inferred]
