"""A stand-in for torch._dynamo in the train.py processes that tests start only to train, stop and resume
(tests/train_without_mfu_timing.py). Eager training meets torch._dynamo in two calls
only: torch.optim's step calls torch._dynamo.graph_break() and its optimizers' helpers go through
torch._disable_dynamo (torch._dynamo.disable), both of which do nothing outside torch.compile; importing the real
module for them costs 1.3 s of a 4.4 s tiny run (python -X importtime). install() puts this stand-in in its place: it
answers those two calls, and anything else asked of it (torch.compile, a config read) imports the real module, which
answers from then on. A rank of a distributed run (DDP and FSDP read torch._dynamo's state) and a run that asks for
--compile=True get the real module from the start."""
import importlib
import os
import sys
import types


def _disable(fn=None, recursive=True, *, reason=None, wrapping=True):
    """torch._dynamo.disable outside torch.compile: the function itself (no frame is ever compiled here)."""
    return fn if fn is not None else (lambda f: f)


class EagerDynamo(types.ModuleType):
    def __getattr__(self, name):  # anything but graph_break and disable: the real module
        if name.startswith("__"):  # (a module's dunders, asked by inspect and the import system)
            raise AttributeError(name)
        if sys.modules.get("torch._dynamo") is self:
            del sys.modules["torch._dynamo"]
        return getattr(importlib.import_module("torch._dynamo"), name)  # (which also sets torch._dynamo)


def install():
    import torch
    if "torch._dynamo" in sys.modules or any("compile=True" in arg for arg in sys.argv) or "RANK" in os.environ:
        return  # (a rank: init_process_group and DDP read torch._dynamo's own state, so a rank imports it anyway)
    stub = EagerDynamo("torch._dynamo")
    stub.graph_break = lambda msg="": None
    stub.disable = _disable
    sys.modules["torch._dynamo"] = torch._dynamo = stub
