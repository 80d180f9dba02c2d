"""Word alignments read from cross-attention, in Moses ``i-j`` format.

    translator.translate(["The red car."], return_alignments=True)[0].alignment
    # -> ((0, 0), (1, 2), (2, 1), (3, 3)): source word i - output word j
    translator.align(["The red car."], ["Das rote Auto."])  # given translations
    jformer translate --alignments ...   # "translation ||| 0-0 2-1 1-2 3-3"

Alignments come after decoding, not from the searches: the teacher-forced model reads
(source, output) (forced decoding, :mod:`.forced`) with ``mutable=["intermediates"]``,
where every attention sows its weights, and one decoder layer's cross-attention is kept:
decode.alignment_layer (default the last, as fairseq and Marian; it aligns far better
than the penultimate in jformer's two-layer demo models, docs/decoding.md), averaged over
heads as fairseq does, or one head (decode.alignment_head, e.g. the head trained with
guided alignment, :func:`jformer.model.losses.guided_alignment_loss`). Row t of those weights [T, S] is the query that predicts output
piece t.

Pieces to words: a word is a piece that starts with sentencepiece's U+2581 marker and the
pieces after it that do not (the first piece always starts one), so word indices are
those of the text split at whitespace. A word pair's weight is the attention mass the
output word's pieces give the source word's pieces: summed over the source word's pieces
(mass on the word), averaged over the output word's pieces. Each output word is then
aligned to its highest-weight source word (fairseq's "hard" alignment: every output word
gets exactly one link; no threshold to tune). EOS is no word: its row and column are
dropped before the argmax. Pairs come in output order.

One forced pass reads a whole source: one over model.max_len tokens, which translation
splits or truncates, is a ValueError here, not aligned piecewise.
"""
from __future__ import annotations

import functools
from typing import Iterable, Sequence

import jax
import numpy as np

from jformer.config import DecodeConfig, ModelConfig
from jformer.data.alignments import Alignment, word_index
from jformer.inference.forced import pair_batches
from jformer.model import Ops, Transformer
from jformer.types import Array, PyTree

def word_attention(attention_TS: np.ndarray, source_words_S: np.ndarray,
                   target_words_T: np.ndarray) -> np.ndarray:
    """float32 [target words, source words]: a word pair's weight, from piece-level
    weights [T, S] (T output pieces, S source pieces, EOS excluded) and each piece's word
    (:func:`word_index`): summed over the source word's pieces, averaged over the target
    word's pieces."""
    attention_TS = np.asarray(attention_TS, np.float32)
    if attention_TS.shape != (len(target_words_T), len(source_words_S)):
        raise ValueError(f"attention must be [target pieces, source pieces] = "
                         f"{(len(target_words_T), len(source_words_S))}; got "
                         f"{attention_TS.shape}")
    src_SI = np.eye(int(source_words_S.max()) + 1, dtype=np.float32)[source_words_S]
    tgt_TJ = np.eye(int(target_words_T.max()) + 1, dtype=np.float32)[target_words_T]
    return (tgt_TJ.T @ attention_TS @ src_SI) / tgt_TJ.sum(0)[:, None]


def hard_alignment(word_JI: np.ndarray) -> Alignment:
    """Each target word j linked to its highest-weight source word i (the first of
    ties): ((i, j), ...) in target order."""
    return tuple((int(i), j) for j, i in enumerate(np.argmax(word_JI, axis=1)))


def piece_alignment(attention_TS: np.ndarray, source_pieces: Sequence[str],
                    target_pieces: Sequence[str]) -> Alignment:
    """The word alignment of piece-level weights [T, S] over the given pieces (no EOS);
    empty when either side has no piece."""
    if not len(source_pieces) or not len(target_pieces):
        return ()
    return hard_alignment(word_attention(attention_TS, word_index(source_pieces),
                                         word_index(target_pieces)))


def alignment_error_rate(predicted: Sequence[Iterable[tuple[int, int]]],
                         gold: Sequence[Iterable[tuple[int, int]]]) -> float:
    """AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) over a corpus (Och and Ney 2003),
    with the gold links both sure (S) and possible (P)."""
    if len(predicted) != len(gold):
        raise ValueError(f"predicted and gold must pair up; got {len(predicted)} and "
                         f"{len(gold)}")
    hits = links = 0
    for a, s in zip(predicted, gold):
        a, s = set(a), set(s)
        hits += 2 * len(a & s)
        links += len(a) + len(s)
    return 1.0 - hits / links if links else 0.0


def alignment_source(model_cfg: ModelConfig, decode_cfg: DecodeConfig) -> tuple[int, int | None]:
    """(decoder layer, head or None for all) that decode.alignment_layer and
    decode.alignment_head name, checked against the model."""
    layers, heads = model_cfg.num_decoder_layers, model_cfg.num_heads
    layer, head = decode_cfg.alignment_layer, decode_cfg.alignment_head
    if layer is None:
        layer = layers - 1
    if not -layers <= layer < layers:
        raise ValueError(f"decode.alignment_layer must be in [{-layers}, {layers}) for a "
                         f"{layers}-layer decoder; got {layer}")
    if head is not None and not 0 <= head < heads:
        raise ValueError(f"decode.alignment_head must be None or in [0, {heads}); got {head}")
    return layer % layers, head


@functools.partial(jax.jit, static_argnames=("model_cfg", "ops", "layer", "head"))
def cross_attention(params: PyTree, inputs_BS: Array, targets_BT: Array, *,
                    model_cfg: ModelConfig, ops: Ops, layer: int,
                    head: int | None) -> Array:
    """float32 [B, T, S]: decoder layer ``layer``'s cross-attention weights of the
    teacher-forced targets, head ``head`` or the mean over heads."""
    _, state = Transformer(model_cfg, ops).apply({"params": params}, inputs_BS, targets_BT,
                                                 mutable=["intermediates"])
    attention = state["intermediates"]["decoder"][f"layer_{layer}"]["cross_attention"]
    (w_BHTS,) = attention["attention_weights"]
    return w_BHTS.mean(axis=1) if head is None else w_BHTS[:, head]


def align_ids(translator, sources: Sequence[np.ndarray | None],
              targets: Sequence[np.ndarray], batch_size: int) -> list[Alignment]:
    """The word alignment of each (source ids, target ids) pair, in input order; either
    side may end with EOS (it is no word). An empty or None side aligns nothing. Each
    side must fit model.max_len (EOS included)."""
    cfg, tok = translator.model_cfg, translator.tokenizer
    layer, head = alignment_source(cfg, translator.decode_cfg)
    strip = [(np.zeros(0, np.int32) if ids is None else _without_eos(ids, cfg.eos_id))
             for ids in sources]
    tgt = [_without_eos(ids, cfg.eos_id) for ids in targets]
    # The encoder reads a source with its EOS; the decoder needs none after the target.
    for name, side, extra in (("source", strip, 1), ("target", tgt, 0)):
        for i, ids in enumerate(side):
            if len(ids) + extra > cfg.max_len:
                raise ValueError(f"{name} {i} has {len(ids) + extra} tokens"
                                 f"{' (EOS included)' * extra}, more than model.max_len="
                                 f"{cfg.max_len}; alignments read it whole")
    out: list[Alignment] = [()] * len(strip)
    todo = [i for i in range(len(strip)) if len(strip[i]) and len(tgt[i])]
    eos = np.array([cfg.eos_id], np.int32)
    batches = pair_batches(cfg, [np.concatenate([strip[i], eos]) for i in todo],
                           [tgt[i] for i in todo],
                           translator.buckets, batch_size)
    for batch, inputs_BS, targets_BT in batches:
        w_BTS = np.asarray(cross_attention(translator.params, inputs_BS, targets_BT,
                                           model_cfg=cfg, ops=translator.ops, layer=layer,
                                           head=head))
        for r, k in enumerate(batch):
            i = todo[k]
            s, t = len(strip[i]), len(tgt[i])
            out[i] = piece_alignment(w_BTS[r, :t, :s],
                                     [tok.id_to_piece(p) for p in strip[i]],
                                     [tok.id_to_piece(p) for p in tgt[i]])
    return out


def _without_eos(ids: np.ndarray, eos_id: int) -> np.ndarray:
    ids = np.asarray(ids, np.int32)
    return ids[:-1] if len(ids) and ids[-1] == eos_id else ids


def attach(translator, sentences: Sequence[str], results: list) -> list:
    """``results`` of ``translator.translate(sentences, return_scores=True)`` (a
    Hypothesis, or an n-best list of them, per sentence) with their ``alignment``."""
    nested = [r if isinstance(r, list) else [r] for r in results]
    flat = [h for hyps in nested for h in hyps]
    src = [s for s, hyps in zip(translator.tokenizer.encode(list(sentences)), nested)
           for _ in hyps]
    pairs = align_ids(translator, src, [h.ids for h in flat],
                      translator.decode_cfg.batch_size)
    it = iter(h._replace(alignment=a) for h, a in zip(flat, pairs))
    aligned = [[next(it) for _ in hyps] for hyps in nested]
    return [a if isinstance(r, list) else a[0] for r, a in zip(results, aligned)]
