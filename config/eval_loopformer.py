# Jeddi et al. 2026 (LoopFormer, arXiv:2602.11451), §4.1: zero-shot COPA, HellaSwag, LAMBADA, OBQA, PIQA, RACE, SciQ,
# SIQA, WinoGrande and ARC (mean of Easy and Challenge), acc_norm where defined, at every elastic budget, and
# perplexity on held-out text (theirs: The Pile, FineWeb-Edu, OpenWebText; here --text: val, local files or
# fineweb-edu).
#     python eval.py config/eval_loopformer.py --ckpt=out/loopformer --data_dir=evaldata --budget=2,4,8
#     python eval.py config/eval_loopformer.py --ckpt=out/loopformer --data_dir=evaldata --schedule=4,2,1,1
tasks = "loopformer,perplexity"
shots = -1  # the suite's own: zero-shot
text = "val"  # the checkpoint's validation split; e.g. --text=/data/pile/*.parquet,fineweb-edu
