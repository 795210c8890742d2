# Chen et al. 2026 (LoopMoE, arXiv:2606.04438), §5.1: MMLU, HellaSwag, PIQA, WinoGrande, TriviaQA, RACE, BBH, GSM8K,
# MATH through lm-evaluation-harness's own task definitions (datasets from the Hugging Face Hub, or its cache).
# Shot counts [INF]: our copy of the paper lacks its Table 6, so eval.LOOPMOE_HARNESS holds the common ones
# (MMLU 5, HellaSwag 10, WinoGrande 5, TriviaQA 5, BBH 3, GSM8K 5, MATH 4, PIQA and RACE 0).
#     python -m hf.harness config/eval_loopmoe.py --ckpt=out/loopmoe,out/vanilla_moe
tasks = "loopmoe"
