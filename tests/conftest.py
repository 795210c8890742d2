"""Test-wide settings. The models here are tiny: a second thread only adds synchronisation, and on a busy machine
OpenMP's spinning threads can slow them a hundredfold, so tests (and the scripts they start) use one thread."""
import os
import sys

import torch

os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the train.py / torchrun processes the tests start
torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
