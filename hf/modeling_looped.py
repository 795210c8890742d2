"""
The transformers face of our model: the remote code of every folder export.py writes, beside copies of model.py,
loop.py, moe.py and kernels.py (export.py makes their imports of each other relative; nothing else changes).

    LoopedConfig        a PretrainedConfig holding GPTConfig's fields (under "gpt") and the inference defaults
    LoopedForCausalLM   a PreTrainedModel + GenerationMixin around the one GPT class of model.py: its forward is
                        GPT.forward, so there is one implementation of the model, not two
    LoopedCache         transformers' Cache with one layer per executed (pass, layer) step of the depth plan, the
                        slots of our own model.KVCache

    model = AutoModelForCausalLM.from_pretrained("hf/run", trust_remote_code=True, loops=4)  # a default
    model.generate(ids, max_new_tokens=50, do_sample=False, loops=6, exit_tau=0.5)         # or per call

Depth at inference, as a config default at load time (what lm-evaluation-harness's model_args reach:
`--model_args pretrained=hf/run,trust_remote_code=True,loops=4`) or a keyword argument per forward/generate call (as
Huginn's num_steps):
    loops     passes of the shared block (0: the trained n_loop); for a LoopFormer model the budget M, M uniform
              steps of its time interval (Jeddi et al. 2026, arXiv:2602.11451, Algorithm 2)
    exit_tau  early exit while decoding (0: none): each new token stops at the first loop boundary (every layer of a
              plain model) where every row's next-token entropy is below exit_tau (Lee et al. 2026,
              arXiv:2605.09165, §4.3); the prompt and teacher-forced scoring run at full depth
cpu_kernels: the run's CPU fast paths (kernels.py), switched on at the first call on a CPU, as load_model does.
Padding is refused: the model attends to every token it is given, so a batch holds rows of one length.
"""
import torch.nn.functional as F
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.modeling_outputs import CausalLMOutputWithPast

from loop import is_looped
from model import GPT, GPTConfig, KVCache
from moe import MoE


class LoopedConfig(PretrainedConfig):
    """GPTConfig's fields under "gpt" (at the top level MoE's top_k would become generate's sampling top_k), the
    inference defaults, and what transformers and lm-evaluation-harness read under their own names."""
    model_type = "looped_gpt"

    def __init__(self, gpt=None, loops=0, exit_tau=0.0, cpu_kernels=True, tokenizer="byte", **kwargs):
        gpt = GPTConfig(**(gpt or {}))  # GPTConfig checks the fields
        self.gpt = gpt.to_dict()
        self.loops, self.exit_tau, self.cpu_kernels, self.tokenizer = loops, exit_tau, cpu_kernels, tokenizer
        for name in ("vocab_size", "hidden_size", "max_position_embeddings", "tie_word_embeddings"):
            kwargs.pop(name, None)  # derived from gpt, never set on their own
        self.vocab_size, self.hidden_size = gpt.vocab_size, gpt.n_embd
        self.max_position_embeddings, self.tie_word_embeddings = gpt.block_size, gpt.tie_embeddings
        super().__init__(**kwargs)


class CacheSlot(CacheLayerMixin):
    """One layer of LoopedCache: the KV-cache slot of one step of the depth plan (model.KVCache holds the tensors:
    keys and values, or MLA's latent)."""

    def __init__(self, kv, index):
        super().__init__()
        self.kv, self.index = kv, index

    def lazy_initialization(self, key_states, value_states=None):
        pass  # KVCache allocates a slot at its first write

    def update(self, key_states, value_states=None, *args, **kwargs):
        return self.kv.update(self.index, *[t for t in (key_states, value_states) if t is not None])

    def get_seq_length(self):
        return self.kv.pos

    def get_max_length(self):
        return self.kv.max_len

    def get_mask_sizes(self, query_length):
        return self.kv.pos + query_length, 0

    def reorder_cache(self, beam_idx):
        """Beam search: the rows of the slot follow their beams."""
        for part in self.kv.slots[self.index] or ():
            part.copy_(part.index_select(0, beam_idx.to(part.device)))


class LoopedCache(Cache):
    """transformers' Cache for the looped model: one layer per executed (pass, layer) step, as model.KVCache has one
    slot per step of the plan (a shared layer run in 4 passes keeps 4 sets of keys and values). GPT.forward writes
    the KVCache (`kv`); the layers are its slots, for transformers' bookkeeping."""

    def __init__(self, n_slots, batch_size, max_len):
        self.kv = KVCache(n_slots, batch_size, max_len)
        super().__init__(layers=[CacheSlot(self.kv, i) for i in range(n_slots)])

    def get_seq_length(self, layer_idx=0):
        return self.kv.pos


class LoopedForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = LoopedConfig
    base_model_prefix = "gpt"
    _no_split_modules = ["Block"]
    _tied_weights_keys = {"gpt.lm_head.weight": "gpt.wte.weight"}  # applied only if config.tie_word_embeddings

    def __init__(self, config):
        super().__init__(config)
        # the exported run's CPU fast paths (kernels.py), as runs.load_model builds it on a CPU; on another
        # device they compute the same values with more ops
        self.gpt = GPT(GPTConfig(**config.gpt), cpu_kernels=config.cpu_kernels)
        self.weights_aligned = False
        self.post_init()

    def get_input_embeddings(self):
        return self.gpt.wte

    def get_output_embeddings(self):
        return self.gpt.lm_head

    def _init_weights(self, module):
        """transformers builds the model on the meta device, loads the weights and leaves the non-persistent
        buffers empty: refill those (GPT.derived_buffers: RoPE tables and residual multipliers; MoE load counters at
        zero). Every weight comes from model.safetensors: nothing is drawn at random."""
        if isinstance(module, GPT):
            for name, tensor in module.derived_buffers().items():
                getattr(module, name).copy_(tensor)
        elif isinstance(module, MoE):
            module.expert_load.zero_()

    def schedule(self, loops=None):
        """GPT's schedule for `loops` (None: the config's default; 0: the trained depth)."""
        loops = self.config.loops if loops is None else loops
        if int(loops) < 0:
            raise ValueError(f"loops={loops} must be >= 0 (0: the trained n_loop={self.gpt.config.n_loop})")
        return int(loops) or None

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None, labels=None,
                loops=None, exit_tau=None, return_dict=None, **kwargs):
        """Logits (B, T, vocab_size) of GPT.forward at the depth `loops`; with a cache (or use_cache=True), cached
        decoding, where a single new token may exit early (exit_tau > 0). position_ids are the cache's own."""
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("padding is not supported: this model attends to every token it is given; give a "
                             "batch of rows of one length")
        if not self.weights_aligned:  # at the first call, when the weights are in place
            # transformers hands over the weights where safetensors put them, off 64-byte boundaries (40 or 56 bytes
            # past one), and a CPU kernel's vector loop then splits a row otherwise than for the run's own aligned
            # tensors, rounding some sums otherwise (up to 3e-6 on an AVX-512 EPYC): fresh, aligned copies give the
            # run's logits bit for bit
            for p in self.gpt.parameters():
                p.data = p.data.clone()
            self.weights_aligned = True
        if input_ids.dim() != 2 or input_ids.size(1) == 0:
            raise ValueError(f"input_ids of shape {tuple(input_ids.shape)}: give a batch of rows of at least one token "
                             "each, (batch, tokens)")
        schedule = self.schedule(loops)
        tau = self.config.exit_tau if exit_tau is None else exit_tau
        if not tau >= 0:
            raise ValueError(f"exit_tau={tau} must be >= 0 (an entropy in nats; 0: no early exit)")
        if cache is None and use_cache:
            cache = LoopedCache(self.gpt.n_slots(schedule), input_ids.size(0), self.gpt.config.block_size)
        kv = self.cache_of(cache, schedule)
        if kv is not None and kv.pos > 0 and input_ids.size(1) == 1 and tau > 0:
            logits = self.exit_step(input_ids, kv, schedule, tau)
        else:
            logits = self.gpt(input_ids, cache=kv, schedule=schedule)[0]
        logits = logits[..., :self.config.vocab_size]  # a padded vocabulary's extra rows are no tokens
        loss = None if labels is None else self.loss_function(logits, labels, vocab_size=self.config.vocab_size)
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache)

    def cache_of(self, cache, schedule):
        """The KVCache inside a LoopedCache made for this depth (None without a cache)."""
        if cache is None:
            return None
        if not isinstance(cache, LoopedCache):
            raise ValueError(f"this model keeps its keys and values in a LoopedCache (one slot per step of its "
                             f"depth plan), not a {type(cache).__name__}")
        if len(cache.kv.slots) != self.gpt.n_slots(schedule):
            raise ValueError(f"the cache has {len(cache.kv.slots)} slots, the depth loops={schedule} runs "
                             f"{self.gpt.n_slots(schedule)} steps: keep one depth for one cache")
        return cache.kv

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        """generate's cache: a LoopedCache for the call's depth, sized for the prompt and the new tokens
        (transformers would make a DynamicCache of one slot per layer)."""
        if model_kwargs.get("cache") is None and generation_config.use_cache is not False:
            schedule = self.schedule(model_kwargs.get("loops"))
            max_len = min(generation_config.max_length, self.gpt.config.block_size)
            model_kwargs["cache"] = LoopedCache(self.gpt.n_slots(schedule), 0, max_len)

    def exit_step(self, idx, kv, schedule, tau):
        """One new token per row, idx (B, 1), through the depth with the KV cache, stopping at the first candidate
        exit where every row's next-token entropy (in nats) is below tau; the KV slots of the steps it skipped are
        filled from the exited state (GPT.fill_cache). This is exits.decode_step with the entropy criterion and
        the propagate fill, the settings sample.py decodes with: exits.py imports the scripts' machinery, so the
        remote code holds this short loop, pinned to it by tests/test_export.py. Returns the logits (B, 1, padded
        vocab)."""
        gpt = self.gpt
        plan = gpt.plan(schedule)
        loop_steps = [i for i, label in enumerate(plan) if label.part == "loop"]
        every_layer = not is_looped(gpt.config)  # a plain model may exit after any layer
        cands = {i for i in loop_steps[:-1] if every_layer or plan[i].boundary}
        rope = gpt.rope(kv.pos, 1)
        walk = gpt.walk(gpt.embed(idx, kv.pos), rope, kv, {}, schedule)
        for i, (label, h, _) in enumerate(walk):
            if i in cands:
                logits = gpt.readout(h, label, kv)  # a coda runs on the exit state, writing its own slots
                logp = F.log_softmax(logits.float(), dim=-1)
                if bool(((-(logp.exp() * logp).sum(-1)).clamp_min(0.0) < tau).all()):
                    walk.close()
                    gpt.fill_cache([lab for lab in plan[i + 1:] if lab.part != "coda"], h, rope, kv, schedule)
                    kv.pos += 1
                    return logits
        logits = gpt.readout(h, label, kv)
        kv.pos += 1
        return logits
