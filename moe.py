"""
Mixture-of-experts layers (work in progress: the MoE issue fills this file).
"""


def make_ffn(config, layer_index):
    """The FFN module for layer `layer_index`: None means the dense MLP of model.py."""
    if config.n_expert == 0:
        return None
    raise NotImplementedError("MoE layers are not implemented yet")
