"""The decode cache's size against the formula of docs/transformer.md ("The KV cache").

    self-attention K and V:  2 * layers * (batch * beam) * max_len * d_model * bytes
    cross-attention K and V: 2 * layers * batch * src_len * d_model * bytes

Shapes only (jax.eval_shape): nothing is allocated, so the paper's base and big sizes
are checked as they are.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import base, big
from jformer.config import from_config_dict
from jformer.model import Transformer


def cache_float_bytes(model_cfg, batch: int, beam: int | None, src_len: int,
                      max_len: int) -> int:
    """Bytes of the floating-point arrays of ``init_decode_state`` (K and V buffers)."""
    model = Transformer(model_cfg)
    inputs = jax.ShapeDtypeStruct((batch, src_len), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), inputs, inputs)
    encoded = jax.eval_shape(functools.partial(model.apply, method=Transformer.encode),
                             params, inputs)
    init = functools.partial(model.apply, max_decode_len=max_len, beam_size=beam,
                             method=Transformer.init_decode_state)
    cache = jax.eval_shape(init, params, encoded, inputs)
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(cache)
               if jnp.issubdtype(x.dtype, jnp.floating))


def formula(layers: int, batch: int, beam: int, src_len: int, max_len: int, d_model: int,
            bytes_per_value: int = 4) -> int:
    self_kv = 2 * layers * batch * beam * max_len * d_model * bytes_per_value
    cross_kv = 2 * layers * batch * src_len * d_model * bytes_per_value
    return self_kv + cross_kv


@pytest.mark.parametrize("config_module", [base, big], ids=["base", "big"])
@pytest.mark.parametrize("beam", [None, 4])
def test_cache_size_is_self_plus_cross_attention_keys_and_values(config_module, beam):
    cfg = from_config_dict(config_module.get_config()).model
    batch, src_len, max_len = 8, 40, 50
    got = cache_float_bytes(cfg, batch, beam, src_len, max_len)
    want = formula(cfg.num_decoder_layers, batch, beam or 1, src_len, max_len, cfg.d_model)
    assert got == want


def test_worked_example_of_the_docs():
    """Base model, 32 sentences, beam 4, 256 source and output positions, float32:
    768 MiB of self-attention K/V and 192 MiB of cross-attention K/V."""
    cfg = from_config_dict(base.get_config()).model
    got = cache_float_bytes(cfg, 32, 4, 256, 256)
    assert got == (768 + 192) * 2 ** 20
