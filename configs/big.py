"""Transformer big (paper, Table 3, row "big"): d_model=1024, d_ff=4096, h=16, P_drop=0.3."""
import ml_collections

from configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    c.model.d_model = 1024
    c.model.d_ff = 4096
    c.model.num_heads = 16
    c.model.dropout_rate = 0.3  # paper Table 3 (0.1 for En-Fr)
    c.train.num_steps = 300_000  # paper 5.2: big trained 300k steps
    return c
