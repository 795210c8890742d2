"""train.py as __main__ (the same command line, exit codes and signals), less the MFU's reference matmul timing
(distributed.cpu_matmul_rate: 0.75 s of CPU in every process, where no test reads MFU), as tests/fsdp_worker.py
does, and without importing torch._dynamo where a single process does not need it (tests/eager_dynamo.py): for the
train.py processes and torchrun ranks that tests start only to train, stop and resume.

    python tests/train_without_mfu_timing.py --key=value ...
"""
import os
import runpy
import sys

import eager_dynamo  # (from tests/, this file's folder)

eager_dynamo.install()  # torch.optim's calls into torch._dynamo answered without importing it: 1.3 s a process
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = REPO  # as `python train.py` would have it (not tests/)
import distributed  # noqa: E402

distributed.peak_flops = lambda *args: 1e12
sys.argv[0] = os.path.join(REPO, "train.py")
runpy.run_path(sys.argv[0], run_name="__main__")
