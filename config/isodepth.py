# Iso-depth looped models of Schwethelm, Rückert, Kaissis 2026 ("How Much Is One Recurrence Worth?",
# arXiv:2604.21106): 20 effective layers = n_prelude 2 + n_loop * n_layer + n_coda 2 with n_layer = 16 / n_loop,
# so set both: --n_loop=4 --n_layer=4 (r=1: --n_loop=1 --n_layer=16, twenty unshared layers). Width d = 64*s
# (s=10: --n_embd=640). Head size 128, squared-ReLU MLP 4d, QK-norm, RMSNorm gains, untied, logit softcap 15,
# linear input injection, Llama-2 vocabulary 32,008 padded to 32,064, context 2048. Init (App. C.1): embedding
# N(0, 1), head N(0, 1e-3) (a standard deviation, as in nanochat's code), attention/MLP U(-a, a), a = sqrt(3/fan_in).
# Budgets use their FLOP convention, 6*(executed params + head) + 12*d*T per layer (--flops_convention=lee for
# Lee et al.'s). Table 6's s=34 cell at 2.15e19 FLOPs (2.52B tokens; that column holds r=4's counts, see scaling.py):
#     python scaling.py count config/isodepth.py --n_embd=2176 --flops_budget=2.15e19
# config/recur_r4.py adds their training recipe.
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
init = "uniform"  # attention/MLP U(-a, a), a = sqrt(3/fan_in); mlp.c_proj then gets sqrt(3/(4d))
init_std = 1.0  # the embedding is N(0, 1)
head_init_std = 1e-3  # the head is N(0, 1e-3): initial loss ln V
mup = False
vocab_size = 32008  # Llama-2's, for accounting (scaling.py count); training uses the tokenizer below
vocab_pad_multiple = 64  # 32,008 -> 32,064 rows, as in the paper
block_size = 2048
flops_convention = "schwethelm"  # Schwethelm et al. §3.2 + App. G (scaling.py), a train.py key
# Data: Schwethelm et al. train on a subset of FineWeb-Edu in Llama-2 tokens. The Llama-2 tokenizer cannot be had here,
# so the substitution is GPT-2's: runs train on FineWeb-Edu's 10BT sample in GPT-2 tokens, with vocab_size 50,257
# (50,304 rows after padding; train.py says so when it replaces the 32,008 above)
data_source = "fineweb-edu"
tokenizer = "gpt2"  # substitution for Llama-2's
hf_config = "sample-10BT"
