# The depth axis on CPU checkpoints, offline: the generated reasoning probes (zero-shot: a 128-byte context holds no
# few-shot examples) and held-out perplexity at 1, 2 and 4 passes and at entropy-exit thresholds, scored against the
# forward FLOPs executed per token.
#     python eval.py config/eval_depth_cpu.py --ckpt=out/looped_moe_cpu,out/moe_cpu
tasks = "probes,perplexity"
shots = 0
text = "val"
text_tokens = 32768
limit = 300  # items per probe
loops = "1,2,4"
exit_tau = "0.5,1,2"
