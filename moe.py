"""
Mixture-of-experts layers (work in progress: the MoE issue fills this file).
"""


def make_ffn(config, layer_index):
    """The FFN module for layer `layer_index`: None means the dense MLP of model.py."""
    if config.n_expert == 0:
        return None
    raise NotImplementedError("MoE layers are not implemented yet")


def update_biases(model, world_size=1):
    """After each optimizer step: bias-balancing update of every MoE router (none yet)."""
    return None
