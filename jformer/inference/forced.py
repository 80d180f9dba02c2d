"""Forced decoding: the log-probabilities a model gives to translations it is handed.

    translator.score(["A dog runs."], ["Ein Hund rennt."])    # -> [TargetScore]
    jformer score --workdir runs/demo --src in.en --tgt in.de   # one line per pair

A target is tokenized with the target vocabulary and ended with EOS. The decoder reads it
teacher-forced (the start token, then the target shifted right: ``Transformer.__call__``),
and position t's log-softmax gives log p(y_t | y_<t, x). The softmax is the searches':
float32, over logits with PAD and BOS banned (:func:`.batch_decode.banned_outputs`). So
scoring a search's output gives back its log-probabilities and its score, the sum divided
by the GNMT length penalty ((5 + T) / 6) ** alpha with T counting EOS, as beam search
ranks finished hypotheses.

Both sides of a pair are padded to the Translator's smallest length bucket that holds the
longer one (a translation's two sides have similar lengths), and batches run on
power-of-two row counts (:func:`.buckets.padded_rows`): one compiled program per bucket
and row count.
"""
from __future__ import annotations

import collections
import functools
from typing import Iterator, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jformer import search
from jformer.config import ModelConfig
from jformer.inference.batch_decode import banned_outputs
from jformer.inference.buckets import bucket_for, padded_rows
from jformer.model import Ops, Transformer
from jformer.types import NEG_INF, Array, PyTree


class TooLong(ValueError):
    """A source or target over model.max_len tokens; ``side`` ("sources" or "targets")
    and ``index`` say which."""

    def __init__(self, message: str, side: str, index: int):
        super().__init__(message)
        self.side, self.index = side, index


class TargetScore(NamedTuple):
    """A target's forced-decoding scores."""

    ids: np.ndarray  # int32 [T]: the target's ids, EOS included
    log_probs: np.ndarray  # float32 [T]: log p(ids[t] | ids[:t], source)
    score: float  # total / ((5 + T) / 6) ** alpha: what beam search ranks it by

    @property
    def total(self) -> float:
        """log p(target | source): the sum of the token log-probabilities."""
        return float(np.sum(self.log_probs, dtype=np.float64))

    @property
    def mean(self) -> float:
        """The mean token log-probability, a confidence (higher: surer)."""
        return self.total / len(self.ids)


@functools.partial(jax.jit, static_argnames=("model_cfg", "ops"))
def token_log_probs(params: PyTree, inputs_BS: Array, targets_BT: Array, *,
                    model_cfg: ModelConfig, ops: Ops) -> Array:
    """float32 [B, T]: log p(targets[b, t] | targets[b, :t], inputs[b]) (PAD targets are
    padding: their values are meaningless)."""
    logits_BTV = Transformer(model_cfg, ops).apply({"params": params}, inputs_BS, targets_BT)
    logits_BTV = jnp.where(banned_outputs(model_cfg), NEG_INF, logits_BTV)
    logp_BTV = jax.nn.log_softmax(logits_BTV.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp_BTV, targets_BT[..., None], axis=-1)[..., 0]


def score_ids(model_cfg: ModelConfig, ops: Ops, params: PyTree,
              sources: Sequence[np.ndarray], targets: Sequence[np.ndarray],
              buckets: Sequence[int], batch_size: int, alpha: float) -> list[TargetScore]:
    """Forced-decoding scores of EOS-terminated id pairs, in input order.

    ``buckets``: the padded lengths (ascending; the last must hold every sequence);
    ``batch_size``: the most rows per compiled batch.
    """
    out: list[TargetScore | None] = [None] * len(sources)
    for batch, inputs_BS, targets_BT in pair_batches(model_cfg, sources, targets, buckets,
                                                     batch_size):
        logp_BT = np.asarray(token_log_probs(params, inputs_BS, targets_BT,
                                             model_cfg=model_cfg, ops=ops))
        for r, i in enumerate(batch):
            ids = np.asarray(targets[i], np.int32)
            logp = logp_BT[r, :len(ids)]
            total = float(np.sum(logp, dtype=np.float64))
            out[i] = TargetScore(ids, logp,
                                 total / float(search.host_length_penalty(len(ids), alpha)))
    return out


def pair_batches(model_cfg: ModelConfig, sources: Sequence[np.ndarray],
                 targets: Sequence[np.ndarray], buckets: Sequence[int], batch_size: int
                 ) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
    """(pair indices, inputs int32 [rows, n], targets int32 [rows, n]) per batch of at
    most ``batch_size`` pairs: both sides padded to the smallest bucket n that holds the
    longer one, rows a power of two (:func:`padded_rows`; extra rows hold EOS alone)."""
    groups: dict[int, list[int]] = collections.defaultdict(list)
    for i in sorted(range(len(sources)), key=lambda i: (len(sources[i]), len(targets[i]))):
        groups[bucket_for(max(len(sources[i]), len(targets[i])), buckets)].append(i)
    for length, idx in sorted(groups.items()):
        for start in range(0, len(idx), batch_size):
            batch = idx[start:start + batch_size]
            rows = padded_rows(len(batch), batch_size)
            yield (batch, _padded([sources[i] for i in batch], rows, length, model_cfg),
                   _padded([targets[i] for i in batch], rows, length, model_cfg))


def _padded(rows: list[np.ndarray], batch: int, length: int, cfg: ModelConfig) -> np.ndarray:
    """int32 [batch, length]: the rows padded with PAD; padding rows hold EOS alone."""
    out = np.full((batch, length), cfg.pad_id, np.int32)
    out[len(rows):, 0] = cfg.eos_id
    for r, ids in enumerate(rows):
        out[r, :len(ids)] = ids
    return out


def encode_pairs(tokenizer, sources: Sequence[str], targets: Sequence[str],
                 max_len: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """EOS-terminated source and target ids (a blank one: EOS alone).

    Raises ValueError for a mismatch in number or a non-str, and :class:`TooLong`
    naming the pair for a side over ``max_len`` tokens (forced decoding reads a target
    whole: it is neither split nor truncated)."""
    for name, texts in (("sources", sources), ("targets", targets)):
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{name} must be a sequence of str")
    if len(sources) != len(targets):
        raise ValueError(f"sources and targets must pair up; got {len(sources)} sources "
                         f"and {len(targets)} targets")
    encoded = []
    for name, texts, side in (("sources", sources, "source"), ("targets", targets, "target")):
        ids = tokenizer.encode(list(texts), add_eos=True, side=side) if texts else []
        for i, row in enumerate(ids):
            if len(row) > max_len:
                raise TooLong(f"{name}[{i}] has {len(row)} tokens (EOS included), more "
                              f"than model.max_len={max_len}; forced decoding reads it "
                              f"whole", name, i)
        encoded.append(ids)
    return encoded[0], encoded[1]
