"""
Devices and processes: which device a script runs on.
"""
import torch


def pick_device(name):
    """The torch device for a script's device key: auto = cuda if there is one, else cpu."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name
