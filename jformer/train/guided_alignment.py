"""Guided alignment in training (Garg et al. 2019): one cross-attention head learns the
gold word alignment while the model learns to translate.

The translation loss gains ``weight`` times :func:`~jformer.model.losses.
guided_alignment_loss` of head ``head`` of decoder layer ``layer``, whose weights the
forward pass sows (``mutable=["intermediates"]``, as the attention maps read them). The
batch carries the gold links as ``alignments``: float or bool [batch, tgt_len, src_len],
nonzero where target piece t is aligned to source piece s (``piece_links`` of
:mod:`jformer.data.alignments` makes them from Moses word pairs). With weight 0 nothing
of this is built: training is the plain loss exactly. Decode with decode.alignment_layer/alignment_head set to the
same layer and head to read the supervised head's alignments.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from jformer.model import Transformer
from jformer.model.losses import guided_alignment_loss


@dataclasses.dataclass(frozen=True)
class GuidedAlignment:
    weight: float  # lambda of Garg et al. eq. 7 (they use 0.05)
    layer: int  # the supervised decoder layer (an index; Garg et al.: the penultimate)
    head: int = 0  # the supervised head

    def __post_init__(self):
        if not self.weight > 0:
            raise ValueError(f"guided alignment weight must be > 0; got {self.weight}")


def make_guided_loss_fn(model: Transformer, label_smoothing: float, pad_id: int,
                        guided: GuidedAlignment) -> Callable:
    """loss_fn(params, batch, rng | None) -> (loss sum, metric sums), as
    :func:`jformer.train.step.make_loss_fn`, plus ``weight`` times the alignment loss
    (its sum is in the metrics as ``alignment_loss``, over ``aligned_tokens``)."""
    layers = model.cfg.num_decoder_layers
    if not -layers <= guided.layer < layers or not 0 <= guided.head < model.cfg.num_heads:
        raise ValueError(f"guided alignment layer {guided.layer} / head {guided.head} "
                         f"outside the model's {layers} decoder layers / "
                         f"{model.cfg.num_heads} heads")
    name = f"layer_{guided.layer % layers}"

    def loss_fn(params, batch, rng):
        deterministic = rng is None
        apply = dict(deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})
        targets_BT = batch["targets"]
        weights_BT = targets_BT != pad_id
        (states_BTD, w_VD, bias_V), state = model.apply(
            {"params": params}, **_model_inputs(batch), method=Transformer.features,
            mutable=["intermediates"], **apply)
        metrics = model.ops.loss(states_BTD, w_VD, bias_V, targets_BT, weights_BT,
                                 label_smoothing)
        cross = state["intermediates"]["decoder"][name]["cross_attention"]
        (w_BHTS,) = cross["attention_weights"]
        metrics.update(guided_alignment_loss(w_BHTS[:, guided.head], batch["alignments"],
                                             weights_BT))
        return metrics["loss"] + guided.weight * metrics["alignment_loss"], metrics

    return loss_fn


def _model_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "alignments"}
