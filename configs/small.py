"""A small Transformer: d_model=256, 3+3 layers, 4 heads, d_ff=1024 (~8M params at 8k vocab).

The size most CPU benchmarks in bench/ use, and a good start for small corpora.
"""
import ml_collections

from configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    c.model.d_model = 256
    c.model.num_heads = 4
    c.model.num_encoder_layers = 3
    c.model.num_decoder_layers = 3
    c.model.d_ff = 1024
    c.data.vocab_size = 8000
    c.model.vocab_size = 8000
    c.data.max_tokens = 4096
    c.train.warmup_steps = 4000
    return c
