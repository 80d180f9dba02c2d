"""Tests for jformer.data.tokenizer: training, loading, special ids, batched encode/decode."""
import numpy as np
import pytest

from jformer.data.tokenizer import Tokenizer
from tests.data.conftest import TOK_VOCAB as VOCAB, demo_sentences as _sentences


def test_special_ids_and_size_come_from_the_model(tok):
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.vocab_size == VOCAB
    assert tok.id_to_piece(tok.eos_id) == "</s>"


def test_load_round_trip(tok):
    again = Tokenizer.load(tok.path)
    texts = _sentences(20)
    assert [a.tolist() for a in again.encode(texts)] == [b.tolist() for b in tok.encode(texts)]
    assert again.vocab_size == tok.vocab_size


def test_encode_is_batched_int32_with_eos(tok):
    texts = ["Ein großer Hund.", "Es ist halb vier.", "I see two red apples."]
    ids = tok.encode(texts)
    assert len(ids) == 3
    for row in ids:
        assert row.dtype == np.int32 and row.ndim == 1
        assert row[-1] == tok.eos_id and (row[:-1] != tok.eos_id).all()
    no_eos = tok.encode(texts, add_eos=False)
    assert [r.tolist() for r in no_eos] == [r[:-1].tolist() for r in ids]
    assert tok.encode([]) == []


def test_round_trip_with_byte_fallback_never_unknown(tok):
    texts = ["The number is three hundred and forty-five.", "Straße, Äpfel, Tür, weiß",
             "漢字 ☃ 🙂 ŋ Ω", "   spaced   out  "]
    ids = tok.encode(texts)
    assert all((row != tok.unk_id).all() for row in ids)
    decoded = tok.decode(ids)
    assert decoded[:3] == texts[:3]
    assert decoded[3] == "spaced out"  # sentencepiece normalises whitespace


def test_decode_stops_at_eos_and_skips_pad_and_bos(tok):
    a, b = tok.encode(["Es ist ein Uhr.", "Wir treffen uns um fünf nach drei."], add_eos=False)
    width = max(a.size, b.size) + 4
    ids_BL = np.full((2, width), tok.pad_id, np.int32)
    ids_BL[0, 0] = tok.bos_id
    ids_BL[0, 1:1 + a.size] = a
    ids_BL[0, 1 + a.size] = tok.eos_id
    ids_BL[0, 2 + a.size] = b[0]  # after EOS: ignored
    ids_BL[1, : b.size] = b
    assert tok.decode(ids_BL) == ["Es ist ein Uhr.", "Wir treffen uns um fünf nach drei."]
    assert tok.decode([ids_BL[0], b]) == tok.decode(ids_BL)


def test_decode_of_empty_rows_gives_empty_strings(tok):
    assert tok.decode(tok.encode([""], add_eos=False)) == [""]  # round trip
    assert tok.decode([[], [tok.eos_id]]) == ["", ""]
    assert tok.decode(np.zeros((2, 0), np.int32)) == ["", ""]
    with pytest.raises(ValueError, match="ids must be integers; got dtype float64"):
        tok.decode([[1.5]])


def test_training_is_deterministic(tmp_path):
    sents = _sentences(200)
    t1 = Tokenizer.train(sents, tmp_path / "a", 350, sample_size=300, seed=5)
    t2 = Tokenizer.train(sents, tmp_path / "b", 350, sample_size=300, seed=5)
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    assert t1.vocab_size == t2.vocab_size == 350


def test_unigram_model(tmp_path):
    t = Tokenizer.train(_sentences(200), tmp_path / "u", 350, model_type="unigram")
    text = "Die Zahl ist einundzwanzig."
    assert t.decode(t.encode([text])) == [text]
    assert t.eos_id == 3


def test_vocab_below_byte_fallback_minimum(tmp_path):
    with pytest.raises(ValueError, match=r"vocab_size must be >= 261 with byte fallback"):
        Tokenizer.train(_sentences(50), tmp_path / "s", 200)


def test_vocab_too_small_for_the_characters(tmp_path):
    with pytest.raises(ValueError, match=r"vocab_size=262 is too small for this corpus"):
        Tokenizer.train(_sentences(50), tmp_path / "s", 262)


def test_vocab_too_large_for_a_tiny_corpus(tmp_path):
    sents = ["a tiny corpus", "with few words"]
    with pytest.raises(ValueError, match=r"vocab_size=5000 is too large for this corpus "
                                         r"\(2 sentences.*at most \d+ pieces"):
        Tokenizer.train(sents, tmp_path / "s", 5000)
    soft = Tokenizer.train(sents, tmp_path / "soft", 5000, hard_vocab_limit=False)
    assert 261 < soft.vocab_size < 5000


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="empty corpus"):
        Tokenizer.train(["", ""], tmp_path / "s", 300)
    with pytest.raises(ValueError, match="model_type must be one of"):
        Tokenizer.train(["x"], tmp_path / "s", 300, model_type="word")
    with pytest.raises(FileNotFoundError, match="no_such.model"):
        Tokenizer.load(tmp_path / "no_such.model")


def test_encode_rejects_a_single_string(tok):
    with pytest.raises(ValueError, match="not one string"):
        tok.encode("a sentence")


# ---------------------------------------------------------------- character vocabularies
@pytest.fixture(scope="module")
def zh_sentences() -> list[str]:
    from tests import zh_corpus

    return [s for p in zh_corpus.pairs(0, 300) for s in p]


def test_a_char_model_has_one_piece_per_character_of_a_mixed_corpus(zh_sentences, tmp_path):
    """data.vocab_model_type="char" on English and Chinese: every piece is one character
    (or a byte), a sentence is its characters, with '▁' for the spaces."""
    from tests.zh_corpus import char_vocab_size

    size = char_vocab_size(zh_sentences)
    tok = Tokenizer.train(zh_sentences, tmp_path / "c", size, model_type="char")
    assert tok.vocab_size == size
    ordinary = [tok.id_to_piece(i) for i in tok.ordinary_ids()]
    assert sorted(ordinary) == sorted(set("".join(zh_sentences).replace(" ", "▁")))
    for text in ["她买三本红色的书。", "They want two green birds.", "我用Python写代码。"]:
        ids = tok.encode([text], add_eos=False)[0]
        assert [tok.id_to_piece(i) for i in ids] == list("▁" + text.replace(" ", "▁"))
        assert tok.decode([ids]) == [text]


def test_char_model_byte_fallback_spells_unseen_characters_in_bytes(zh_sentences, tmp_path):
    """A character the corpus never had is its UTF-8 bytes, never <unk>, and decodes back
    exactly; a vocab_size one short of the characters drops the rarest one to bytes."""
    from collections import Counter

    from tests.zh_corpus import char_vocab_size

    size = char_vocab_size(zh_sentences)
    tok = Tokenizer.train(zh_sentences, tmp_path / "c", size, model_type="char")
    text = "我想要一只鹅 🙂"  # 鹅 (goose) and the emoji are not in the corpus
    ids = tok.encode([text], add_eos=False)[0]
    pieces = [tok.id_to_piece(i) for i in ids]
    assert pieces == list("▁我想要一只") + ["<0xE9>", "<0xB9>", "<0x85>", "▁",
                                            "<0xF0>", "<0x9F>", "<0x99>", "<0x82>"]
    assert tok.unk_id not in ids and tok.decode([ids]) == [text]
    corpus = zh_sentences + ["他有一只鹿。"]  # 鹿 (deer) once: the rarest character
    counts = sorted(Counter("".join(corpus)).values())
    assert counts[:2] == [1, counts[1]] and counts[1] > 1
    full = Tokenizer.train(corpus, tmp_path / "full", size + 1, model_type="char")
    capped = Tokenizer.train(corpus, tmp_path / "capped", size, model_type="char")
    assert full.encode(["鹿"], add_eos=False)[0].size == 2  # '▁', '鹿'
    ids = capped.encode(["鹿"], add_eos=False)[0]
    assert [capped.id_to_piece(i) for i in ids] == ["▁", "<0xE9>", "<0xB9>", "<0xBF>"]
    assert capped.decode([ids]) == ["鹿"]


def test_a_char_vocab_size_beyond_the_characters_is_an_error(zh_sentences, tmp_path):
    from tests.zh_corpus import char_vocab_size

    size = char_vocab_size(zh_sentences)
    with pytest.raises(ValueError, match=rf"vocab_size={size + 1} is too large for this corpus"
                                         rf" \(.*\): sentencepiece can build at most {size} "
                                         r"pieces from it\. Use a smaller vocab_size "
                                         r"\(data.vocab_size\)"):
        Tokenizer.train(zh_sentences, tmp_path / "c", size + 1, model_type="char")
    soft = Tokenizer.train(zh_sentences, tmp_path / "s", size + 100, model_type="char",
                           hard_vocab_limit=False)
    assert soft.vocab_size == size
