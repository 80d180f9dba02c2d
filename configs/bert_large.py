"""BERT-large (Devlin et al., 2019, section 3): L=24, H=1024, A=16, ~340M parameters.

The recipe of configs/bert_base.py; the paper trains both on the same data and steps.
"""
import ml_collections

from configs import bert_base


def get_config() -> ml_collections.ConfigDict:
    c = bert_base.get_config()
    m = c.model
    m.d_model = 1024
    m.num_heads = 16
    m.num_encoder_layers = 24
    m.d_ff = 4096
    return c
