"""Attention cost, counted in the model's own program (docs/transformer.md, "Attention cost").

The matrix-product FLOPs of one encoder layer over n tokens of width d are
8 n d^2 (Q, K, V and output projections) + 4 n^2 d (Q K^T and weights . V) +
4 n d d_ff (the FFN), whatever the number of heads. Relative positions (Shaw et al.)
double the n^2 term; a window, as a mask, leaves it, and the pairs it keeps are those of
the banded formula of docs/transformer.md ("Local (windowed) self-attention").
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jcore

from jformer.config import ModelConfig
from jformer.ops import transformer
from jformer.model import Transformer


def matmul_flops(jaxpr) -> int:
    """2 x (output elements) x (contracted length), summed over every dot_general of the
    program, sub-programs included (a scan body counts once per iteration)."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs, out = eqn.invars[0].aval.shape, eqn.outvars[0].aval.shape
            total += 2 * int(np.prod(out)) * int(np.prod([lhs[i] for i in contract]))
        if eqn.primitive.name in ("while", "cond"):
            raise NotImplementedError(f"cannot count FLOPs through {eqn.primitive.name}")
        repeat = eqn.params["length"] if eqn.primitive.name == "scan" else 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jcore.ClosedJaxpr):
                    total += repeat * matmul_flops(sub.jaxpr)
                elif isinstance(sub, jcore.Jaxpr):
                    total += repeat * matmul_flops(sub)
    return total


def encoder_flops(n: int, d: int, heads: int, d_ff: int, batch: int = 1, **options) -> int:
    cfg = ModelConfig(vocab_size=32, d_model=d, num_heads=heads, num_encoder_layers=1,
                      num_decoder_layers=1, d_ff=d_ff, max_len=max(n, 8), dropout_rate=0.0,
                      **options)
    model = transformer(cfg)
    inputs = jnp.full((batch, n), 5, jnp.int32)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), inputs, inputs)
    jaxpr = jax.make_jaxpr(lambda p, x: model.apply(p, x, method=Transformer.encode))(
        params, inputs)
    return matmul_flops(jaxpr.jaxpr)


@pytest.mark.parametrize("n,d,heads,d_ff", [(10, 32, 4, 64), (48, 32, 2, 128), (7, 48, 3, 96)])
def test_encoder_layer_flops_match_the_formula(n, d, heads, d_ff):
    assert encoder_flops(n, d, heads, d_ff) == 8 * n * d * d + 4 * n * n * d + 4 * n * d * d_ff


def test_flops_scale_with_the_batch():
    assert encoder_flops(10, 32, 4, 64, batch=3) == 3 * encoder_flops(10, 32, 4, 64)


def test_multi_head_attention_costs_the_same_as_single_head():
    """h heads of width d/h: h times the products, each 1/h as wide."""
    counts = {h: encoder_flops(20, 48, h, 96) for h in (1, 2, 3, 4, 6, 8)}
    assert len(set(counts.values())) == 1, counts


def test_the_quadratic_term_overtakes_the_projections_at_n_equal_2d():
    """The n^2 part (4 n^2 d) equals the projections' 8 n d^2 at n = 2d: read off the
    model's counts as a quadratic in n (its n^2 coefficient is 4d)."""
    d, d_ff = 16, 32
    ns = [8, 16, 32]
    flops = [encoder_flops(n, d, 2, d_ff) for n in ns]
    coefficients = np.linalg.solve(np.vander(ns, 3).astype(float), np.array(flops, float))
    quadratic, linear, constant = (round(c) for c in coefficients)
    np.testing.assert_allclose(coefficients, [quadratic, linear, constant], atol=1e-6)
    assert (quadratic, linear, constant) == (4 * d, 8 * d * d + 4 * d * d_ff, 0)
    n = 2 * d
    assert quadratic * n * n == 8 * n * d * d


def test_relative_positions_double_the_quadratic_term():
    """Shaw et al.'s q . a^K and weights . a^V are two more n x n x d products: 8 n^2 d."""
    n, d, d_ff = 12, 32, 64
    plain = 8 * n * d * d + 4 * n * n * d + 4 * n * d * d_ff
    assert encoder_flops(n, d, 4, d_ff, positional="relative") == plain + 4 * n * n * d


def test_a_window_as_a_mask_computes_every_score():
    """model.attention_window is a mask: the program still forms all n^2 scores (the
    saving of a banded form is counted below, not taken)."""
    assert encoder_flops(12, 32, 4, 64, attention_window=2) == encoder_flops(12, 32, 4, 64)


@pytest.mark.parametrize("n, w", [(12, 2), (9, 1), (16, 5), (5, 4)])
def test_a_window_keeps_the_pairs_of_the_banded_formula(n, w):
    """The (query, key) pairs a window allows, which a banded form would score (each
    costs 4d FLOPs in Q K^T and weights . V): n (2w + 1) - w (w + 1) in the encoder,
    n (w + 1) - w (w + 1) / 2 causal, against n^2 (n > w)."""
    from jformer.model import masks

    idx = np.arange(n)
    band = np.asarray(masks.window_mask(idx, idx, w))[0, 0]
    causal = band & np.asarray(masks.causal_mask(n))[0, 0]
    assert band.sum() == n * (2 * w + 1) - w * (w + 1)
    assert causal.sum() == n * (w + 1) - w * (w + 1) // 2
