# Vanilla MoE: the matched non-looped reference of LoopMoE's ablation (Chen et al. 2026, arXiv:2606.04438, §3.4, Table
# 3): 6 layers of MLA + fine-grained MoE (top-6 routed + 1 shared expert, sigmoid router with bias balancing and the
# sequence-wise loss, DeepSeek-V3 style), the first layer dense, sandwich norm. CPU scale, trains in minutes: python
# train.py config/loopmoe_vanilla_cpu.py (paper scale: config/loopmoe_vanilla.py). The rungs above it match its stored
# params N* = 2.083M and per-token executed params F* = 1.161M (strict: everything a token executes; 2F* FLOPs forward)
# at the same top_k; rho* = 0.398 (tests/test_moe.py measures the matching).
import os

# the paper-scale file, then the CPU sizes
exec(open(os.path.join(os.path.dirname(__file__), "loopmoe_vanilla.py")).read())
n_layer = 6
n_embd = 128
head_dim = 32  # content (non-rotary) dims per head
n_head = 4
q_lora_rank = 64
kv_lora_rank = 32
rope_head_dim = 16
v_head_dim = 32
n_expert = 16
moe_d_ff = 48  # hidden size of one expert
d_ff = 336  # that dense layer: the FLOPs of (top_k + shared) experts
vocab_size = 257  # the byte tokenizer
block_size = 128
data_source = 'offline'  # the paper-scale file's is fineweb-edu
tokenizer = 'byte'
lr = 0.002
warmup_iters = 30
batch_size = 8
max_iters = 300
eval_interval = 100
eval_tokens = 32768
