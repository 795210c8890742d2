# Iso-depth looped models of Schwethelm, Rückert, Kaissis 2026 ("How Much Is One Recurrence Worth?",
# arXiv:2604.21106): 20 effective layers = n_prelude 2 + n_loop * n_layer + n_coda 2 with n_layer = 16 / n_loop,
# so set both: --n_loop=4 --n_layer=4 (r=1: --n_loop=1 --n_layer=16, twenty unshared layers). Width d = 64*s
# (s=10: --n_embd=640). Head size 128, squared-ReLU MLP 4d, QK-norm, RMSNorm gains, untied, logit softcap 15,
# uniform init, linear input injection, Llama-2 vocabulary 32,008 padded to 32,064, context 2048.
# Budgets use 6*(executed params + head) + 12*d*T per layer: train with --flops_convention=schwethelm.
# Check Table 6: python scaling.py count config/isodepth.py --n_embd=640 --flops_convention=schwethelm
n_embd = 640
n_loop = 4
n_layer = 4
n_prelude = 2
n_coda = 2
injection = "linear"  # u = W[e || h] before every pass (none at n_loop=1)
loop_norm = True  # RMSNorms after the embedding and at the end of every pass (with norm_f: the paper's three)
head_dim = 128
mlp = "relu2"
d_ff = 0  # 0 = 4d for relu2
qk_norm = True
norm_gain = True
tie_embeddings = False
logit_softcap = 15.0
init = "uniform"
vocab_size = 32008  # Llama-2 tokenizer (train.py replaces it by the data's tokenizer vocabulary)
vocab_pad_multiple = 64  # 32,008 -> 32,064 rows, as in the paper
block_size = 2048
