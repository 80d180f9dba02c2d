"""Label-smoothed cross entropy (paper 5.4), returned as sums so hosts and devices can add them.

With eps_ls = ``label_smoothing`` the target distribution q puts 1 - eps on the true token
and eps / (V - 1) on every other one. The loss is KL(q || p) = H(q, p) - H(q): the cross
entropy against q minus q's own (constant) entropy, so a perfect model scores 0.
:func:`projected_cross_entropy` is the same loss of the output projection's logits: the
stock form of ``Ops.loss`` (:mod:`jformer.model.ops`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy

from jformer.types import Array


def smoothed_cross_entropy(logits_BTV: Array, targets_BT: Array, weights_BT: Array,
                           label_smoothing: float = 0.0) -> dict[str, Array]:
    """KL(q || softmax(logits)) and the plain negative log-likelihood, summed over positions.

    Args:
      logits_BTV: float [batch, tgt_len, vocab].
      targets_BT: int [batch, tgt_len].
      weights_BT: float [batch, tgt_len], 1 at real tokens and 0 at padding.
      label_smoothing: eps_ls in [0, 1).
    Returns:
      dict of float32 scalars: ``loss`` (the smoothed loss), ``nll`` (for perplexity; a
      metric, its gradient stopped as in the fused kernel's),
      ``tokens`` (sum of weights), ``correct`` (positions whose target has the highest
      logit), each summed over the weighted positions.
    """
    vocab = logits_BTV.shape[-1]
    logp_BTV = jax.nn.log_softmax(logits_BTV.astype(jnp.float32), axis=-1)
    onehot_BTV = jax.nn.one_hot(targets_BT, vocab, dtype=jnp.float32)
    low = label_smoothing / (vocab - 1)
    q_BTV = onehot_BTV * (1.0 - label_smoothing - low) + low  # the smoothed target
    loss_BT = (xlogy(q_BTV, q_BTV) - q_BTV * logp_BTV).sum(-1)
    nll_BT = -(onehot_BTV * logp_BTV).sum(-1)
    target_logit_BT = (onehot_BTV * logits_BTV).sum(-1)
    correct_BT = target_logit_BT >= logits_BTV.max(-1)  # ties count as correct
    w_BT = weights_BT.astype(jnp.float32)
    return {"loss": (loss_BT * w_BT).sum(), "nll": jax.lax.stop_gradient((nll_BT * w_BT).sum()),
            "tokens": w_BT.sum(), "correct": (correct_BT * w_BT).sum()}


def projected_cross_entropy(x_BTD: Array, w_VD: Array, bias_V: Array | None,
                            targets_BT: Array, weights_BT: Array,
                            label_smoothing: float = 0.0) -> dict[str, Array]:
    """:func:`smoothed_cross_entropy` of the logits x . w^T + bias.

    x_BTD: final states [batch, len, d_model] in the compute dtype; w_VD: output weights
    [vocab, d_model] in that dtype; bias_V: float32 [vocab] or None. The logits are
    float32 [batch, len, vocab], all of them in memory at once.
    """
    logits_BTV = jnp.einsum("BTD,VD->BTV", x_BTD, w_VD, preferred_element_type=jnp.float32)
    if bias_V is not None:
        logits_BTV = logits_BTV + bias_V
    return smoothed_cross_entropy(logits_BTV, targets_BT, weights_BT, label_smoothing)
