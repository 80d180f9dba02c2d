"""The output projection fused with the label-smoothed loss, in chunks that stay in cache.

The same sums as :func:`jformer.model.losses.smoothed_cross_entropy` of the logits
x . w^T + bias, never materialising the [B*T, V] float32 logits: chunks of rows are
projected, scored and turned into their gradient while they are in cache (the unfused
form writes the logits and reads them back three times). Gradients are written out:
softmax minus the smoothed target, fused into one pass, and the weight gradient as a
plain [D, c] x [c, V] product. Equality with the plain loss: tests/kernels/
test_fused_loss.py; speed: kernels/README.md.
"""
from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jformer.kernels.matmul import NN, NT, transposed_copy
from jformer.kernels.scope import cpu_kernel
from jformer.types import Array


def _smoothing(label_smoothing: float, vocab: int) -> tuple[float, float, float]:
    """(weight of the true token, of every other token, entropy of that distribution)."""
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab - 1)
    entropy = 0.0
    if label_smoothing > 0.0:
        entropy = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low))
    return confidence, low, float(entropy)


def _token_stats(logits_NV: Array, targets_N: Array, label_smoothing: float):
    """Per-row (smoothed loss, nll, correct, log Z) of float32 logits [..., V]."""
    confidence, low, entropy = _smoothing(label_smoothing, logits_NV.shape[-1])
    max_N = logits_NV.max(-1)
    log_z_N = max_N + jnp.log(jnp.exp(logits_NV - max_N[..., None]).sum(-1))
    target_logit_N = jnp.take_along_axis(logits_NV, targets_N[..., None], axis=-1)[..., 0]
    nll_N = log_z_N - target_logit_N
    loss_N = nll_N
    if label_smoothing > 0.0:
        # E_q[-log p] = log Z - (conf * l_target + low * (sum(l) - l_target))
        expected_logit_N = (confidence - low) * target_logit_N + low * logits_NV.sum(-1)
        loss_N = log_z_N - expected_logit_N - entropy
    # The target scores the row maximum; unlike argmax == target this needs no second
    # pass over the vocabulary, and differs only when several tokens tie for the maximum.
    correct_N = (target_logit_N >= max_N).astype(jnp.float32)
    return loss_N, nll_N, correct_N, log_z_N


def _logits_grad(logits_NV: Array, targets_N: Array, log_z_N: Array, g_loss_N: Array,
                 g_nll_N: Array, label_smoothing: float) -> Array:
    """d (g_loss . loss + g_nll . nll) / d logits, float32 [..., V], in one fused pass.

    The softmax is recomputed from log Z instead of being stored, and the target's one-hot
    is a compare against an iota instead of a scatter.
    """
    confidence, low, _ = _smoothing(label_smoothing, logits_NV.shape[-1])
    probs_NV = jnp.exp(logits_NV - log_z_N[..., None])
    vocab_NV = lax.broadcasted_iota(jnp.int32, logits_NV.shape, logits_NV.ndim - 1)
    is_target_NV = targets_N[..., None] == vocab_NV
    # d loss / d logits = p - q (q: smoothed target), d nll / d logits = p - onehot
    target_weight_N = g_loss_N * (confidence - low) + g_nll_N
    return ((g_loss_N + g_nll_N)[..., None] * probs_NV - (g_loss_N * low)[..., None]
            - jnp.where(is_target_NV, target_weight_N[..., None], 0.0))


def _add_weighted(sums: tuple, stats: Sequence[Array], weights_c: Array) -> tuple:
    """Running sums + each per-row statistic summed over the chunk with its row weights."""
    return tuple(s + (v * weights_c).sum() for s, v in zip(sums, stats))


def _chunk_logits(x_ND: Array, w_VD: Array, bias_V: Array | None) -> Array:
    """float32 logits x . w^T (+ bias) [N, V], from compute-dtype operands."""
    logits_NV = lax.dot_general(x_ND, w_VD, NT, preferred_element_type=jnp.float32)
    return logits_NV if bias_V is None else logits_NV + bias_V.astype(jnp.float32)


def _row_chunks(rows: int, x_ND: Array, targets_N: Array, weights_N: Array):
    """[N, ...] -> [N' / rows, rows, ...], N' = N rounded up; added rows weigh 0."""
    pad = -x_ND.shape[0] % rows
    if pad:
        x_ND = jnp.pad(x_ND, ((0, pad), (0, 0)))
        targets_N = jnp.pad(targets_N, (0, pad))
        weights_N = jnp.pad(weights_N, (0, pad))
    return tuple(a.reshape((-1, rows) + a.shape[1:]) for a in (x_ND, targets_N, weights_N))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _projected_sums(x_ND: Array, w_VD: Array, bias_V: Array | None, targets_N: Array,
                    weights_N: Array, label_smoothing: float, rows: int):
    """(smoothed loss, nll, correct) sums over weighted rows of logits x . w^T + bias.

    Differentiable in the loss sum only: callers stop the gradient of the other two.
    """
    def body(sums, chunk):
        x_cD, targets_c, weights_c = chunk
        logits_cV = _chunk_logits(x_cD, w_VD, bias_V)
        stats = _token_stats(logits_cV, targets_c, label_smoothing)[:3]
        return _add_weighted(sums, stats, weights_c), None

    zero = jnp.zeros((), jnp.float32)
    return lax.scan(body, (zero,) * 3, _row_chunks(rows, x_ND, targets_N, weights_N))[0]


def _projected_sums_fwd(x_ND, w_VD, bias_V, targets_N, weights_N, label_smoothing, rows):
    # The gradient of the loss sum is built chunk by chunk in the forward pass, while the
    # chunk's logits are still in cache; bwd only scales it by the incoming cotangent.
    num_rows, (vocab, dim) = x_ND.shape[0], w_VD.shape

    def body(carry, chunk):
        sums, d_w_DV, d_bias_V = carry
        x_cD, targets_c, weights_c = chunk
        logits_cV = _chunk_logits(x_cD, w_VD, bias_V)
        *stats, log_z_c = _token_stats(logits_cV, targets_c, label_smoothing)
        sums = _add_weighted(sums, stats, weights_c)
        g_cV = _logits_grad(logits_cV, targets_c, log_z_c, weights_c,
                            jnp.zeros_like(weights_c), label_smoothing)
        if bias_V is not None:
            d_bias_V = d_bias_V + g_cV.sum(0)
        g_cV = g_cV.astype(x_cD.dtype)
        d_x_cD = lax.dot_general(g_cV, w_VD, NN, preferred_element_type=jnp.float32)
        # d w^T = x^T g as a plain [D, c] x [c, V] product: x (the narrow operand) is
        # copied into transposed order in a form XLA does not fold back (a folded
        # transpose would also upcast a bf16 product to float32; kernels/matmul.py).
        d_w_DV = d_w_DV + lax.dot_general(transposed_copy(x_cD), g_cV, NN,
                                          preferred_element_type=jnp.float32)
        return (sums, d_w_DV, d_bias_V), d_x_cD.astype(x_cD.dtype)

    zero = jnp.zeros((), jnp.float32)
    init = ((zero,) * 3, jnp.zeros((dim, vocab), jnp.float32),
            None if bias_V is None else jnp.zeros((vocab,), jnp.float32))
    (sums, d_w_DV, d_bias_V), d_x = lax.scan(body, init,
                                            _row_chunks(rows, x_ND, targets_N, weights_N))
    d_x_ND = d_x.reshape(-1, dim)[:num_rows]
    return sums, (d_x_ND, d_w_DV.T.astype(w_VD.dtype),
                  None if bias_V is None else d_bias_V.astype(bias_V.dtype))


def _projected_sums_bwd(label_smoothing, rows, residuals, cotangents):
    d_x_ND, d_w_VD, d_bias_V = residuals
    g = cotangents[0]  # the loss sum's; nll and correct carry no gradient
    scale = lambda d: None if d is None else (g * d).astype(d.dtype)
    return scale(d_x_ND), scale(d_w_VD), scale(d_bias_V), None, None


_projected_sums.defvjp(_projected_sums_fwd, _projected_sums_bwd)

PROJECTION_CHUNK_ROWS = 512  # rows of logits alive at once in projected_cross_entropy


@cpu_kernel
def projected_cross_entropy(x_BTD: Array, w_VD: Array, bias_V: Array | None,
                            targets_BT: Array, weights_BT: Array,
                            label_smoothing: float = 0.0, *,
                            chunk_rows: int = PROJECTION_CHUNK_ROWS) -> dict[str, Array]:
    """``jformer.model.losses.smoothed_cross_entropy`` of logits x . w^T + bias, never materialising them.

    The output projection and the loss run together over chunks of ``chunk_rows`` rows
    (of batch x length): a chunk's float32 logits [chunk_rows, V] are made, scored and
    turned into the gradient while they are in cache.

    Only ``loss`` is differentiable, in reverse mode (``jax.grad``), with respect to x,
    w and bias; ``nll`` and ``correct`` have their gradient stopped and ``weights_BT``
    is a constant. The gradient is built in the forward pass, so evaluation (no
    gradient) skips that work while a gradient pass costs no second projection.

    Args:
      x_BTD: final decoder states [batch, tgt_len, d_model] in the compute dtype.
      w_VD: output weights [vocab, d_model] (the tied embedding, or an untied kernel
        transposed); cast to x's dtype.
      bias_V: float [vocab] (added to the float32 logits) or None.
      targets_BT, weights_BT, label_smoothing: as in ``jformer.model.losses.smoothed_cross_entropy``.
      chunk_rows: the most rows per chunk; the rows are split into equal chunks, the
        last padded with zero-weight rows.
    Returns:
      the dict ``jformer.model.losses.smoothed_cross_entropy`` returns, for those logits.
    """
    if x_BTD.ndim != 3 or w_VD.ndim != 2 or x_BTD.shape[-1] != w_VD.shape[1]:
        raise ValueError(f"projected_cross_entropy: x [batch, len, D] and w [V, D] must "
                         f"share D; got x {x_BTD.shape}, w {w_VD.shape}")
    if x_BTD.shape[:2] != targets_BT.shape or targets_BT.shape != weights_BT.shape:
        raise ValueError(f"projected_cross_entropy: x {x_BTD.shape[:2]}, targets "
                         f"{targets_BT.shape} and weights {weights_BT.shape} must share "
                         f"[batch, len]")
    if bias_V is not None and bias_V.shape != w_VD.shape[:1]:
        raise ValueError(f"projected_cross_entropy: bias must be [{w_VD.shape[0]}]; got "
                         f"{bias_V.shape}")
    if int(chunk_rows) < 1:
        raise ValueError(f"projected_cross_entropy: chunk_rows must be >= 1; got {chunk_rows}")
    num_rows = targets_BT.size
    # As many chunks as chunk_rows needs, evened out so padding stays below one per chunk.
    num_chunks = max(1, -(-num_rows // int(chunk_rows)))
    rows = max(1, -(-num_rows // num_chunks))
    weights_N = weights_BT.reshape(-1).astype(jnp.float32)
    loss, nll, correct = _projected_sums(
        x_BTD.reshape(num_rows, x_BTD.shape[-1]), w_VD.astype(x_BTD.dtype), bias_V,
        jnp.asarray(targets_BT, jnp.int32).reshape(-1), weights_N, float(label_smoothing), rows)
    return {"loss": loss, "nll": lax.stop_gradient(nll), "tokens": weights_N.sum(),
            "correct": lax.stop_gradient(correct)}
