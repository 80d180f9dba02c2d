"""BERT-small (Turc et al., 2019, "Well-Read Students Learn Better"): L=4, H=512, A=8,
~29M parameters at BERT's 30,522-piece vocabulary. A size to pretrain on one machine.
"""
import ml_collections

from configs import bert_base


def get_config() -> ml_collections.ConfigDict:
    c = bert_base.get_config()
    m = c.model
    m.d_model = 512
    m.num_heads = 8
    m.num_encoder_layers = 4
    m.d_ff = 2048
    c.train.learning_rate = 5e-4  # small models take larger rates (Turc et al. sweep 1e-4..1e-3)
    return c
