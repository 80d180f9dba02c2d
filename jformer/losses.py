"""Label-smoothed cross entropy (paper 5.4), returned as sums so hosts and devices can add them."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.types import Array


def smoothed_cross_entropy(logits_BTV: Array, targets_BT: Array, weights_BT: Array,
                           label_smoothing: float = 0.0) -> dict[str, Array]:
    """Cross entropy against targets smoothed with eps_ls, summed over weighted positions.

    The smoothed target puts 1 - eps on the true token and eps / (V - 1) on every other
    token; the constant entropy of that distribution is subtracted so a perfect model
    scores 0. Computed without materialising a [B, T, V] one-hot.

    Args:
      logits_BTV: float [batch, tgt_len, vocab].
      targets_BT: int [batch, tgt_len].
      weights_BT: float [batch, tgt_len], 1 at real tokens and 0 at padding.
    Returns:
      dict of float32 scalars: ``loss`` (smoothed CE sum), ``nll`` (plain negative
      log-likelihood sum, for perplexity), ``tokens`` (sum of weights), ``correct``
      (weighted count of argmax hits).
    """
    logits_BTV = logits_BTV.astype(jnp.float32)
    vocab = logits_BTV.shape[-1]
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab - 1)
    log_z_BT = jax.nn.logsumexp(logits_BTV, axis=-1)
    target_logit_BT = jnp.take_along_axis(logits_BTV, targets_BT[..., None], axis=-1)[..., 0]
    nll_BT = log_z_BT - target_logit_BT
    if label_smoothing > 0.0:
        # E_q[-log p] = log Z - (conf * l_target + low * (sum(l) - l_target))
        expected_logit_BT = (confidence - low) * target_logit_BT + low * logits_BTV.sum(-1)
        entropy = -(confidence * jnp.log(confidence) + (vocab - 1) * low * jnp.log(low))
        loss_BT = log_z_BT - expected_logit_BT - entropy
    else:
        loss_BT = nll_BT
    weights_BT = weights_BT.astype(jnp.float32)
    correct_BT = (jnp.argmax(logits_BTV, axis=-1) == targets_BT).astype(jnp.float32)
    return {"loss": (loss_BT * weights_BT).sum(), "nll": (nll_BT * weights_BT).sum(),
            "tokens": weights_BT.sum(), "correct": (correct_BT * weights_BT).sum()}
