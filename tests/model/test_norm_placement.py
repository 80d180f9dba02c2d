"""Post-LN against pre-LN at initialisation (docs/transformer.md, "Post-LN and pre-LN").

Post-LN (the paper): x <- LayerNorm(x + F(x)); every sublayer's LayerNorm sits on the
residual path, and the gradient reaching an early layer has passed through all the
later ones. Pre-LN: x <- x + F(LayerNorm(x)); the residual path is the identity, so
every layer gets a gradient of the same order (Xiong et al., 2020).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jformer.config import ModelConfig
from jformer.ops import transformer


LAYERS = 6
SEEDS = (0, 1, 2)


@functools.cache
def decoder_layer_grad_norms(norm: str) -> np.ndarray:
    """|d loss / d params of decoder layer l| at initialisation, float [seeds, LAYERS]:
    one row per seed (its own parameters and random batch), one program per norm."""
    cfg = ModelConfig(vocab_size=64, d_model=64, num_heads=4, num_encoder_layers=1,
                      num_decoder_layers=LAYERS, d_ff=256, max_len=20, dropout_rate=0.0,
                      norm=norm)
    model = transformer(cfg)

    @jax.jit
    def layer_norms(key, inputs, targets):
        params = model.init(key, inputs, targets)["params"]

        def loss(params):
            logits = model.apply({"params": params}, inputs, targets)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        g = jax.grad(loss)(params)["decoder"]
        return jnp.stack([optax.tree.norm(g[f"layer_{i}"]) for i in range(LAYERS)])

    rows = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        inputs, targets = (jnp.asarray(rng.integers(4, 64, (8, 20)), jnp.int32) for _ in "st")
        rows.append(np.asarray(layer_norms(jax.random.PRNGKey(seed), inputs, targets)))
    return np.stack(rows)


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_post_ln_gradients_grow_layer_by_layer_toward_the_output(seed):
    norms = decoder_layer_grad_norms("post")[seed]
    assert np.all(np.diff(norms) > 0), norms
    assert norms[-1] > 2 * norms[0], norms


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_pre_ln_gradients_do_not_grow_toward_the_output(seed):
    norms = decoder_layer_grad_norms("pre")[seed]
    assert norms[-1] < norms[0], norms
    assert norms.max() < 2 * norms.min(), norms
