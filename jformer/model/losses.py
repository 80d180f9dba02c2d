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


def guided_alignment_loss(attention_BTS: Array, links_BTS: Array,
                          weights_BT: Array) -> dict[str, Array]:
    """Guided alignment (Garg et al. 2019, "Jointly Learning to Align and Translate with
    Transformer Models", eq. 6): the cross entropy between one attention head's weights
    and the gold alignment, summed over the target positions that have a gold link.

    Args:
      attention_BTS: float [batch, tgt_len, src_len], the head's cross-attention
        weights (rows sum to 1 over the real source positions).
      links_BTS: float or bool [batch, tgt_len, src_len], nonzero where target position
        t is aligned to source position s; each row is normalised to a distribution.
      weights_BT: [batch, tgt_len], 1 at real tokens and 0 at padding.
    Returns:
      ``alignment_loss`` (-sum_t sum_s p_gold(s | t) log a(t, s)) and ``aligned_tokens``
      (the positions it covers), float32 sums.
    """
    links_BTS = links_BTS.astype(jnp.float32)
    mass_BT = links_BTS.sum(-1)
    covered_BT = (mass_BT > 0) & (weights_BT > 0)
    gold_BTS = links_BTS / jnp.maximum(mass_BT, 1e-9)[..., None]
    # 0 log 0 = 0: a source position without a link adds nothing, even at weight 0.
    logp_BTS = jnp.log(jnp.maximum(attention_BTS.astype(jnp.float32), 1e-9))
    ce_BT = -jnp.where(gold_BTS > 0, gold_BTS * logp_BTS, 0.0).sum(-1)
    return {"alignment_loss": jnp.where(covered_BT, ce_BT, 0.0).sum(),
            "aligned_tokens": covered_BT.astype(jnp.float32).sum()}
