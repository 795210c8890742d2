"""
GPTConfig's refusals: a model setting that no model here can build stops when the config is made, with one line
that says what to do, before any work (a typo in a choice, a negative size, keys that contradict each other).
GPTConfig (model.py) calls check_keys before it derives n_head and d_ff, and check_combinations after (train.py's
own keys: checkpoint.check_training). The choices of the looping and MoE keys are the registries of loop.py and
moe.py themselves, so a row registered there (also by a test) is a valid value here, and its own check(cfg) runs
with the rest.
"""
from loop import BETWEEN_PASSES, CONDITIONING, ELASTIC, RESIDUAL_RULES, TRAJECTORY_SAMPLERS, between_passes_kind
from moe import ROUTERS

# the allowed values of GPTConfig's enum keys
CHOICES = dict(
    mlp=("swiglu", "gelu", "relu2"), pos_emb=("rope", "learned"), attn=("mha", "mla"), init=("normal", "uniform"),
    proj_init=("default", "gpt2"), injection=BETWEEN_PASSES, hc_pool=("mean", "sum"), residual_scaling=RESIDUAL_RULES,
    loop_cond=CONDITIONING, cond_init=("zero", "normal"), elastic=ELASTIC, consistency_on=("hidden", "logits"),
    trajectory_sampler=TRAJECTORY_SAMPLERS, moe_router=ROUTERS,
    moe_dispatch=("auto", "grouped", "batched", "loop"),
)
POSITIVE = ("block_size", "vocab_size", "vocab_pad_multiple", "n_layer", "n_embd", "head_dim", "n_loop",
            "mup_base_width")
NON_NEGATIVE = ("n_head", "d_ff", "n_prelude", "n_coda", "n_expert", "n_shared_expert", "moe_d_ff", "moe_first_dense",
                "q_lora_rank", "v_head_dim", "hc_lanes", "bptt_loops")
# sizes beyond any model (--n_layer=1e9 is an int): one line here, not a build that overflows or never ends
MOST = dict(n_layer=10_000, n_prelude=10_000, n_coda=10_000, **{k: 2**20 for k in (
    "n_embd", "head_dim", "n_head", "d_ff", "q_lora_rank", "kv_lora_rank", "rope_head_dim", "v_head_dim", "n_loop",
    "hc_lanes", "n_expert", "n_shared_expert", "moe_d_ff")})


def need(cond, msg):
    if not cond:
        raise ValueError(f"GPTConfig: {msg}")


def check_keys(c):
    """Each key alone: a choice among its allowed values, a size in its range."""
    for key, allowed in CHOICES.items():
        value = getattr(c, key)
        need(value in allowed, f"{key} must be one of {' | '.join(allowed)}, got {value!r}")
    for key in POSITIVE:
        need(getattr(c, key) >= 1, f"{key} must be >= 1, got {getattr(c, key)}")
    for key in NON_NEGATIVE:
        need(getattr(c, key) >= 0, f"{key} must be >= 0, got {getattr(c, key)}")
    for key, most in MOST.items():
        need(getattr(c, key) <= most, f"{key}={getattr(c, key)} is more than any model here builds (at most {most:,})")
    need(c.n_head or c.n_embd % c.head_dim == 0, f"n_embd={c.n_embd} is not a multiple of head_dim={c.head_dim}; "
         "set n_head or head_dim")


def check_combinations(c):
    """Keys that constrain each other (after n_head and d_ff are derived), and the checks of the registry rows the
    config picks (loop.py)."""
    need(c.proj_init == "default" or c.init == "normal",
         "proj_init='gpt2' scales the normal init: it needs init='normal'")
    need(c.head_init_std >= 0, f"head_init_std must be >= 0, got {c.head_init_std}")
    need(c.head_init_std == 0 or not c.tie_embeddings,
         "head_init_std needs an untied head: with tie_embeddings=True the head is the token embedding")
    need(c.rope_dim % 2 == 0 or c.pos_emb != "rope", "RoPE needs an even head_dim (rope_head_dim for MLA)")
    need(c.attn == "mha" or (c.kv_lora_rank > 0 and c.rope_head_dim > 0 and not c.qk_norm),
         "attn='mla' needs kv_lora_rank > 0, rope_head_dim > 0 and qk_norm=False")
    need(c.n_expert == 0 or 1 <= c.top_k <= c.n_expert, f"top_k={c.top_k} must be between 1 and n_expert={c.n_expert}")
    need(c.n_expert == 0 or c.moe_d_ff or c.d_ff % (c.top_k + c.n_shared_expert) == 0,
         f"d_ff={c.d_ff} is not divisible by top_k + n_shared_expert = {c.top_k + c.n_shared_expert}; "
         "set moe_d_ff (the hidden size of one expert) explicitly")
    need(0 <= c.bptt_loops <= c.n_loop, f"bptt_loops={c.bptt_loops} must be in 0..n_loop={c.n_loop} (0 = all)")
    need(c.cond_lr_scale > 0, f"cond_lr_scale must be > 0 (1 = the model's LR), got {c.cond_lr_scale}")
    need(c.elastic == "none" or c.n_loop >= 2, f"elastic={c.elastic!r} needs n_loop >= 2")
    elastic = ELASTIC[c.elastic]
    for problem in (between_passes_kind(c).check(c), elastic.check(c) if elastic else None):
        need(problem is None, problem)
