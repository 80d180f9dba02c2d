"""Long inputs through Translator.translate: split into pieces that fit, translated in
shared batches, joined in order (decode.overlong="split"); and decode.memory_limit.

The model is the random tiny one of test_translator.py (model.max_len 40), so a
translation is gibberish; what is checked is that a split sentence's result is exactly
its pieces' translations, joined with the original separators.
"""
import dataclasses
import warnings

import jax
import pytest

from jformer.data import demo
from jformer.inference import OverlongError, Translator, memory, split_to_fit

from tests.inference.record import record_batches
from tests.inference.test_translator import DECODE


SPLIT = dataclasses.replace(DECODE, overlong="split", batch_size=32)
BLOB = "https://example.com/?q=" + "aGVsbG8gd29ybGQhIHRoaXMgaXMgYmFzZTY0Lg==" * 6


@pytest.fixture(scope="module")
def translator(setup):
    cfg, params, tok = setup
    return Translator(cfg, params, tok, SPLIT)


@pytest.fixture(scope="module")
def paragraph() -> tuple[str, list[str]]:
    """A paragraph of demo sentences, 2,000 words, and its sentences."""
    sentences, words = [], 0
    for en, _ in demo.generate_pairs(1, 3000, 0, 0)["train"]:
        sentences.append(en)
        words += len(en.split())
        if words >= 2000:
            return " ".join(sentences), sentences
    raise AssertionError("the demo corpus is shorter than 2,000 words")


def count_tokens(translator):
    return lambda text: len(translator.tokenizer.encode([text], add_eos=True)[0])


@pytest.mark.slow
def test_a_2000_word_paragraph_is_translated_whole_in_order_without_warning(
        translator, paragraph):
    text, sentences = paragraph
    count, limit = count_tokens(translator), translator.model_cfg.max_len
    assert count(text) > 20 * limit
    seg = split_to_fit(text, count, limit)
    # Cut at every sentence end, in order; a sentence that fits is one piece, one that
    # does not (the tiny vocabulary makes a few long) is cut into several.
    pieces = iter(seg.pieces)
    for sentence in sentences:
        group = [next(pieces)]
        while " ".join(group) != sentence:
            group.append(next(pieces))
        assert (len(group) == 1) == (count(sentence) <= limit), group
    assert next(pieces, None) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no OverlongWarning, nothing else
        (whole,) = translator.translate([text], method="greedy", max_len=8)
    alone = translator.translate(list(seg.pieces), method="greedy", max_len=8)
    assert sum(map(bool, alone)) > len(alone) / 2  # (the EOS bias empties a few)
    assert whole == " ".join(alone)  # every piece's translation, in order


def test_no_piece_exceeds_the_limit(translator, paragraph):
    count, limit = count_tokens(translator), translator.model_cfg.max_len
    numbers = " ".join(["three hundred and forty-five thousand, six hundred"] * 20)
    for text in (paragraph[0], numbers, f"Look: {BLOB} and {BLOB}, now."):
        seg = split_to_fit(text, count, limit)
        assert len(seg.pieces) > 1 and seg.text == text
        assert max(count(p) for p in seg.pieces) <= limit


def test_an_overlong_single_word_is_split_and_comes_back(translator):
    count, limit = count_tokens(translator), translator.model_cfg.max_len
    assert count(BLOB) > 2 * limit
    seg = split_to_fit(BLOB, count, limit)
    assert "".join(seg.pieces) == BLOB and set(seg.separators) == {""}
    (whole,) = translator.translate([BLOB], method="greedy")
    assert whole == "".join(translator.translate(list(seg.pieces), method="greedy"))


@pytest.mark.slow
def test_split_sentences_share_batches_with_the_others(translator, monkeypatch):
    long_text = " ".join(["It is late."] * 15 + ["We need one car."] * 10)
    seg = split_to_fit(long_text, count_tokens(translator), translator.model_cfg.max_len)
    calls = []
    record_batches(monkeypatch, translator, lambda inputs_BS: calls.append(inputs_BS.shape))
    out = translator.translate(["Five.", long_text, "Hello"], method="greedy")
    assert calls == [(32, 16)]  # 25 pieces + 2 sentences, one batch
    assert out[0] == translator.translate(["Five."], method="greedy")[0]
    assert out[1] == seg.join(translator.translate(list(seg.pieces), method="greedy"))


@pytest.mark.slow
def test_a_split_sentence_scores_and_n_best_combine_its_pieces(translator):
    text = "It is late, we need one car. " * 8 + "The number is three."
    seg = split_to_fit(text, count_tokens(translator), translator.model_cfg.max_len)
    pieces = translator.translate(list(seg.pieces), n_best=3, return_scores=True)
    (joined,) = translator.translate([text], n_best=3, return_scores=True)
    best = [hyps[0] for hyps in pieces]
    assert joined[0].text == seg.join([h.text for h in best])
    assert joined[0].score == pytest.approx(sum(h.score for h in best))
    eos = translator.model_cfg.eos_id
    assert list(joined[0].ids) == [i for h in best for i in h.ids if i != eos] + [eos]
    # n best: the highest sums of one hypothesis per piece, best first, all distinct.
    sums = sorted((sum(h.score for h in combo) for combo in _products(pieces)), reverse=True)
    assert [h.score for h in joined] == pytest.approx(sums[:3])
    assert len({tuple(h.ids) for h in joined}) == 3


def _products(lists):
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for rest in _products(lists[1:]):
            yield (head,) + rest


@pytest.mark.slow
def test_pieces_sample_with_keys_folded_from_their_sentences(translator):
    text = " ".join(["We need one car."] * 9)
    seg = split_to_fit(text, count_tokens(translator), translator.model_cfg.max_len)
    assert len(seg.pieces) == 9
    rng = jax.random.key(7)
    kwargs = dict(method="sample", temperature=2.0, max_len=8)
    together = translator.translate(["Five.", text], rng=rng, **kwargs)
    key_1 = jax.random.fold_in(rng, 1)
    pieces = [translator.translate([p], rng=jax.random.fold_in(key_1, j)[None], **kwargs)[0]
              for j, p in enumerate(seg.pieces)]
    assert together[1] == seg.join(pieces)


def test_truncate_and_error_policies_still_hold(setup):
    cfg, params, tok = setup
    text = " ".join(["We need one car."] * 12)
    truncating = Translator(cfg, params, tok, dataclasses.replace(SPLIT, overlong="truncate"))
    with pytest.warns(UserWarning, match=r"sentence 0 has \d+ tokens .* truncated to 40"):
        truncating.translate([text], method="greedy")
    strict = Translator(cfg, params, tok, dataclasses.replace(SPLIT, overlong="error"))
    with pytest.raises(OverlongError, match=r"sentence 0 has \d+ tokens"):
        strict.translate([text], method="greedy")


def test_sentences_policy_translates_each_sentence_of_a_line_that_fits(setup):
    cfg, params, tok = setup
    by_sentence = Translator(cfg, params, tok, dataclasses.replace(SPLIT,
                                                                   overlong="sentences"))
    line, one = "It is late.  We need one car!", "Five."
    assert count_tokens(by_sentence)(line) <= cfg.max_len
    out = by_sentence.translate([one, line], method="greedy", return_scores=True)
    alone = by_sentence.translate([one, "It is late.", "We need one car!"], method="greedy",
                                  return_scores=True)
    assert (out[0].text, out[0].score, list(out[0].ids)) == (  # one sentence: as given
        alone[0].text, alone[0].score, list(alone[0].ids))
    assert out[1].text == f"{alone[1].text}  {alone[2].text}"  # the separator kept
    assert out[1].score == pytest.approx(alone[1].score + alone[2].score, rel=1e-5)
    whole = Translator(cfg, params, tok, SPLIT).translate([line], method="greedy",
                                                          return_scores=True)[0]
    assert list(whole.ids) != list(out[1].ids)  # under "split" the line is one source
    import sys
    with pytest.MonkeyPatch.context() as m:  # needs the splitter even for a short line
        m.setitem(sys.modules, "sentencex", None)
        with pytest.raises(OverlongError, match=r"sentence 0 has \d+ tokens .*"
                                                r"decode.overlong='sentences'.*sentencex"):
            by_sentence.translate([line])


def test_a_missing_splitter_is_a_clear_error_naming_the_sentence(translator, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "sentencex", None)
    assert translator.translate(["Five."], method="greedy")  # fits: no splitter needed
    with pytest.raises(OverlongError, match=r"sentence 1 has \d+ tokens .*pip install "
                                            r"sentencex"):
        translator.translate(["Five.", " ".join(["We need one car."] * 12)])


# ------------------------------------------------------------------ memory limit


@pytest.mark.slow
@pytest.mark.parametrize("method, beam", [("greedy", 1), ("beam", 3)])
def test_a_memory_limit_shrinks_batches_to_fit_and_changes_no_result(setup, monkeypatch,
                                                                     method, beam):
    cfg, params, tok = setup
    sentences = [en for en, _ in demo.generate_pairs(2, 2000, 0, 0)["train"]
                 if len(tok.encode([en])[0]) <= 16][:12]  # all in the 16-token bucket
    kwargs = dict(method=method, beam_size=beam, max_len=8)
    free = Translator(cfg, params, tok, SPLIT)
    expected = free.translate(sentences, **kwargs)
    one = memory.cache_bytes(cfg, 1, beam, 8, src_len=16)  # room for 5 rows
    limited = Translator(cfg, params, tok, dataclasses.replace(SPLIT, memory_limit=5 * one))
    rows = []
    record_batches(monkeypatch, limited, lambda inputs_BS: rows.append(inputs_BS.shape))
    assert limited.translate(sentences, **kwargs) == expected
    assert rows == [(5, 16), (5, 16), (2, 16)]
    assert memory.cache_bytes(cfg, 5, beam, 8, src_len=16) <= 5 * one


def test_a_memory_limit_below_one_row_is_a_clear_error(setup):
    cfg, params, tok = setup
    tiny = Translator(cfg, params, tok, dataclasses.replace(SPLIT, memory_limit="10KB"))
    with pytest.raises(ValueError, match=r"decode.memory_limit='10KB' \(10000 bytes\) "
                                         r"cannot hold the cache of one row: \d+ bytes"):
        tiny.translate(["Five."], beam_size=3)
    assert tiny.translate([""]) == [""]  # nothing to decode, nothing refused


def test_attention_maps_of_an_overlong_sentence_show_its_truncated_source(translator):
    from jformer.inference import OverlongWarning
    from jformer.inference.attention_maps import attention_weights

    with pytest.warns(OverlongWarning, match="truncated to 40"):
        weights, labels = attention_weights(translator, " ".join(["We need one car."] * 9))
    assert len(labels["source"]) == translator.model_cfg.max_len
    assert weights[("encoder", 0, "self_attention")].shape[-1] == translator.model_cfg.max_len
    assert translator.decode_cfg.overlong == "split"  # the caller's translator is unchanged
