"""Label-smoothed cross entropy (paper 5.4), returned as sums so hosts and devices can add them."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jformer.types import Array


def _smoothing(label_smoothing: float, vocab: int) -> tuple[float, float, float]:
    """(weight of the true token, of every other token, entropy of that distribution)."""
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab - 1)
    entropy = 0.0
    if label_smoothing > 0.0:
        entropy = -(confidence * np.log(confidence) + (vocab - 1) * low * np.log(low))
    return confidence, low, float(entropy)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _token_losses(logits_BTV: Array, targets_BT: Array, label_smoothing: float):
    """Per-token (smoothed loss, nll, correct), each float32 [B, T]."""
    return _token_losses_fwd(logits_BTV, targets_BT, label_smoothing)[0]


def _token_losses_fwd(logits_BTV, targets_BT, label_smoothing):
    confidence, low, entropy = _smoothing(label_smoothing, logits_BTV.shape[-1])
    max_BT = logits_BTV.max(-1)
    log_z_BT = max_BT + jnp.log(jnp.exp(logits_BTV - max_BT[..., None]).sum(-1))
    target_logit_BT = jnp.take_along_axis(logits_BTV, targets_BT[..., None], axis=-1)[..., 0]
    nll_BT = log_z_BT - target_logit_BT
    loss_BT = nll_BT
    if label_smoothing > 0.0:
        # E_q[-log p] = log Z - (conf * l_target + low * (sum(l) - l_target))
        expected_logit_BT = (confidence - low) * target_logit_BT + low * logits_BTV.sum(-1)
        loss_BT = log_z_BT - expected_logit_BT - entropy
    # The target scores the row maximum; unlike argmax == target this needs no second
    # pass over the vocabulary, and differs only when several tokens tie for the maximum.
    correct_BT = (target_logit_BT >= max_BT).astype(jnp.float32)
    return (loss_BT, nll_BT, correct_BT), (logits_BTV, targets_BT, log_z_BT)


def _token_losses_bwd(label_smoothing, residuals, cotangents):
    # One fused pass over [B, T, V]: the softmax is recomputed from the saved log Z
    # instead of being stored by the forward pass, and the target's one-hot is a compare
    # against an iota instead of a scatter.
    logits_BTV, targets_BT, log_z_BT = residuals
    g_loss_BT, g_nll_BT, _ = cotangents
    confidence, low, _ = _smoothing(label_smoothing, logits_BTV.shape[-1])
    probs_BTV = jnp.exp(logits_BTV - log_z_BT[..., None])
    vocab_BTV = lax.broadcasted_iota(jnp.int32, logits_BTV.shape, logits_BTV.ndim - 1)
    is_target_BTV = targets_BT[..., None] == vocab_BTV
    # d loss / d logits = p - q (q: smoothed target), d nll / d logits = p - onehot
    target_weight_BT = g_loss_BT * (confidence - low) + g_nll_BT
    d_logits_BTV = ((g_loss_BT + g_nll_BT)[..., None] * probs_BTV - (g_loss_BT * low)[..., None]
                    - jnp.where(is_target_BTV, target_weight_BT[..., None], 0.0))
    return d_logits_BTV, None


_token_losses.defvjp(_token_losses_fwd, _token_losses_bwd)


def smoothed_cross_entropy(logits_BTV: Array, targets_BT: Array, weights_BT: Array,
                           label_smoothing: float = 0.0) -> dict[str, Array]:
    """Cross entropy against targets smoothed with eps_ls, summed over weighted positions.

    The smoothed target puts 1 - eps on the true token and eps / (V - 1) on every other
    token; the constant entropy of that distribution is subtracted so a perfect model
    scores 0. Computed without materialising a [B, T, V] one-hot, with a hand-written
    gradient (softmax minus the smoothed target) that XLA fuses into one pass.

    Args:
      logits_BTV: float [batch, tgt_len, vocab].
      targets_BT: int [batch, tgt_len].
      weights_BT: float [batch, tgt_len], 1 at real tokens and 0 at padding.
    Returns:
      dict of float32 scalars: ``loss`` (smoothed CE sum), ``nll`` (plain negative
      log-likelihood sum, for perplexity), ``tokens`` (sum of weights), ``correct``
      (weighted count of positions whose target has the highest logit).
    """
    loss_BT, nll_BT, correct_BT = _token_losses(logits_BTV.astype(jnp.float32),
                                                jnp.asarray(targets_BT, jnp.int32),
                                                float(label_smoothing))
    weights_BT = weights_BT.astype(jnp.float32)
    return {"loss": (loss_BT * weights_BT).sum(), "nll": (nll_BT * weights_BT).sum(),
            "tokens": weights_BT.sum(), "correct": (correct_BT * weights_BT).sum()}
