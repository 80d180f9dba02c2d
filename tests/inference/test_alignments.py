"""Tests for jformer/inference/alignment.py: piece weights to word weights, the argmax,
AER, and alignments of translations on the tiny model (batching changes
nothing; they are the attention maps' weights; bad settings are refused by name)."""
import copy
import dataclasses

import numpy as np
import pytest

from jformer.config import DecodeConfig
from jformer.data.alignments import word_index
from jformer.inference import alignment
from jformer.inference.attention_maps import attention_weights
from tests.inference.test_translator import DECODE, SHORT

SENTENCES = [s for s in SHORT if s] + ["We see five red cars and two green apples today."]


def test_word_attention_sums_over_source_pieces_and_averages_over_target_pieces():
    # 3 target pieces (words 0, 1, 1), 4 source pieces (words 0, 0, 1, 2).
    attn_TS = np.array([[0.1, 0.2, 0.3, 0.4],
                        [0.5, 0.1, 0.4, 0.0],
                        [0.1, 0.1, 0.2, 0.6]], np.float32)
    got = alignment.word_attention(attn_TS, np.array([0, 0, 1, 2]), np.array([0, 1, 1]))
    want = np.array([[0.3, 0.3, 0.4],
                     [(0.6 + 0.2) / 2, (0.4 + 0.2) / 2, (0.0 + 0.6) / 2]])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # Source word 0's two pieces together outweigh word 2 for target word 1.
    assert alignment.hard_alignment(got) == ((2, 0), (0, 1))


def test_piece_alignment_of_a_hand_made_matrix():
    src = ["\u2581the", "\u2581red", "\u2581car", "."]  # words 0 1 2 (the "." joins car)
    tgt = ["\u2581das", "\u2581Au", "to", "\u2581rot", "e"]  # words 0 1 2
    attn_TS = np.zeros((5, 4), np.float32)
    attn_TS[0, 0] = attn_TS[1, 2] = attn_TS[2, 3] = attn_TS[3, 1] = attn_TS[4, 1] = 1.0
    assert alignment.piece_alignment(attn_TS, src, tgt) == ((0, 0), (2, 1), (1, 2))
    assert alignment.piece_alignment(attn_TS[:0], src, []) == ()
    with pytest.raises(ValueError, match=r"\[target pieces, source pieces\] = \(5, 3\)"):
        alignment.word_attention(attn_TS, np.array([0, 1, 2]), np.zeros(5, np.int32))


def test_alignment_error_rate():
    gold = [{(0, 0), (1, 1)}, {(0, 1)}]
    assert alignment.alignment_error_rate(gold, gold) == 0.0
    # |A & S| = 1 + 0, |A| = 2 + 1, |S| = 3: 1 - 2 * 1 / 6
    got = alignment.alignment_error_rate([{(0, 0), (0, 1)}, {(0, 0)}], gold)
    assert got == pytest.approx(1 - 2 / 6)
    with pytest.raises(ValueError, match="pair up"):
        alignment.alignment_error_rate([()], gold)


@pytest.mark.slow  # two beam searches with n-best lists: ~30 s on 2 busy cores
def test_translations_carry_word_level_alignments(translator):
    n_best = translator.translate(SENTENCES, beam_size=2, n_best=2, return_alignments=True)
    texts = translator.translate(SENTENCES, beam_size=2, n_best=2)
    assert [[h.text for h in hyps] for hyps in n_best] == texts
    tok, eos = translator.tokenizer, translator.model_cfg.eos_id
    multi_piece = 0
    for sentence, hyps in zip(SENTENCES, n_best):
        for h in hyps:
            out_pieces = [tok.id_to_piece(i) for i in h.ids if i != eos]
            out_words = int(word_index(out_pieces).max()) + 1 if out_pieces else 0
            multi_piece += len(out_pieces) > out_words
            # One link per output word, in output order, to a source word.
            assert [j for _, j in h.alignment] == list(range(out_words))
            assert all(0 <= i < len(sentence.split()) for i, _ in h.alignment)
            assert out_words == len(h.text.split())
    assert multi_piece  # some output word has several pieces yet one index


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_a_batch_aligns_as_one_by_one(translator):
    targets = ["Fünf.", "Ich sehe zwei Äpfel.", "Die Zahl ist drei.", "Es ist spät.",
               "Wir brauchen ein Auto.", "Hallo", "Wir sehen heute fünf rote Autos."]
    # Layer 0: the random model's last layer gives nearly every word one source word.
    translator = copy.copy(translator)
    translator.decode_cfg = dataclasses.replace(DECODE, alignment_layer=0)
    batch = translator.align(SENTENCES, targets, batch_size=4)
    for sentence, target, links in zip(SENTENCES, targets, batch):
        assert [j for _, j in links] == list(range(len(target.split())))
        assert translator.align([sentence], [target]) == [links]
    assert len({i for i, _ in batch[-1]}) > 1  # not all to one source word
    assert translator.translate(["", "Five."], return_alignments=True)[0].alignment == ()
    with pytest.raises(ValueError, match="pair up"):
        translator.align(SENTENCES, targets[:2])


def test_alignments_are_the_argmax_of_the_attention_maps_layer(translator):
    sentence = "We need one car."
    weights, labels = attention_weights(translator, sentence)
    (greedy,) = translator.translate([sentence], method="greedy", return_scores=True)
    layer = translator.model_cfg.num_decoder_layers - 1  # the default: the last
    w_TS = weights[("decoder", layer, "cross_attention")].mean(0)[:-1, :-1]  # no EOS
    want = alignment.piece_alignment(w_TS, labels["source"][:-1], labels["output"][:-1])
    assert translator.align([sentence], [greedy.text]) == [want]


def test_alignment_layer_and_head_are_checked_by_name(translator):
    for field, value, match in (("alignment_layer", 2, r"alignment_layer must be in "
                                 r"\[-2, 2\)"), ("alignment_head", 4, "alignment_head")):
        cfg = dataclasses.replace(DECODE, **{field: value})
        with pytest.raises(ValueError, match=match):
            alignment.alignment_source(translator.model_cfg, cfg)
    with pytest.raises(ValueError, match="decode.alignment_head"):
        DecodeConfig(alignment_head="first")
    head0 = dataclasses.replace(DECODE, alignment_layer=-1, alignment_head=0)
    assert alignment.alignment_source(translator.model_cfg, head0) == (1, 0)
