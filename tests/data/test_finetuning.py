"""Fine-tuning examples: files, bitext pairs, encoding (jformer.data.finetuning)."""
import numpy as np
import pytest

from jformer.data import demo
from jformer.data import finetuning as ft
from jformer.data import pretraining as pt
from jformer.data.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    docs = demo.generate_documents(0, 150, 0, 0)["train"]
    path = tmp_path_factory.mktemp("vocab") / "spm"
    return Tokenizer.train([s for d in docs for s in d.lines()], path, 400,
                           user_defined_symbols=pt.SPECIAL_PIECES)


def test_bitext_pairs_are_balanced_length_matched_and_deterministic():
    pairs = [(f"source {i}", " ".join(["w"] * (i % 9 + 1)) + f" t{i}") for i in range(300)]
    examples = ft.bitext_examples(pairs, seed=0)
    assert len(examples) == 600 and examples == ft.bitext_examples(pairs, seed=0)
    assert examples != ft.bitext_examples(pairs, seed=1)
    true, false = examples[0::2], examples[1::2]
    assert [(e.text, e.text_b) for e in true] == pairs
    assert {e.label for e in true} == {"translation"}
    assert {e.label for e in false} == {"not_translation"}
    gaps = []
    for (src, tgt), e in zip(pairs, false):
        assert e.text == src and e.text_b != tgt
        gaps.append(abs(len(e.text_b.split()) - len(tgt.split())))
    assert np.mean(gaps) < 0.3 and max(gaps) <= 1  # as long as the true one
    with pytest.raises(ValueError, match="at least 2 pairs"):
        ft.bitext_examples(pairs[:1], seed=0)


def test_read_examples_of_each_kind(tmp_path):
    p = tmp_path / "c.tsv"
    p.write_text("pos\tA good film.\nneg\tFirst.\tSecond.\n\n", encoding="utf-8")
    assert ft.read_examples("classify", str(p)) == [
        ft.Example("A good film.", "", "pos"), ft.Example("First.", "Second.", "neg")]
    p.write_text("Anna lives here\tB-PER O O\n", encoding="utf-8")
    assert ft.read_examples("tag", str(p))[0].tags == ("B-PER", "O", "O")
    p.write_text("Anna lives\tB-PER\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"c.tsv:1: 2 words but 1 tags"):
        ft.read_examples("tag", str(p))
    p.write_text("Where?\tShe lives in Bonn. Bonn is nice.\tBonn\n", encoding="utf-8")
    e = ft.read_examples("span", str(p))[0]
    assert e.text_b[e.answer[0]:e.answer[1]] == "Bonn" and e.answer[0] == 13
    p.write_text("Where?\tShe lives in Bonn.\tKiel\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"c.tsv:1: the answer 'Kiel' is not in the context"):
        ft.read_examples("span", str(p))
    p.write_text("a\tb\tc\td\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"c.tsv:1: expected 2 or 3 TAB-separated fields; "
                                         r"got 4"):
        ft.read_examples("classify", str(p))
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        ft.read_examples("tag", str(tmp_path / "nope.tsv"))


def test_classification_rows_pack_pairs_and_cut_the_longer_segment(tok):
    sp = pt.Specials.from_tokenizer(tok)
    long = "Anna buys a red lamp for 1,234.56 euros and counts nine hundred birds."
    examples = [ft.Example("Anna lives in Bonn.", "", "b"),
                ft.Example("Tom has two cats.", "He gets up at six.", "a"),
                ft.Example(long, "Tom.", "zzz")]
    arrays, meta = ft.encode("classify", tok, sp, examples, ("a", "b"), 32)
    assert arrays["labels"].tolist() == [1, 0, -1] and arrays["weights"].tolist() == [1, 1, 0]
    x, t = arrays["inputs"], arrays["token_types"]
    single = x[0][x[0] != sp.pad]
    assert single[0] == sp.cls and single[-1] == sp.sep and (single == sp.sep).sum() == 1
    assert not t[0].any()
    seps = np.flatnonzero(x[1] == sp.sep)
    assert len(seps) == 2 and (t[1, seps[0] + 1:seps[1] + 1] == 1).all()
    assert (t[1, :seps[0] + 1] == 0).all()
    # the long A is cut (from its end) so the pair fits; B keeps its pieces
    assert meta["cut"] == 1 and (x[2] != sp.pad).sum() == 32
    b = tok.encode_lists(["Tom."], add_eos=False)[0]
    seps = np.flatnonzero(x[2] == sp.sep)
    assert x[2, seps[0] + 1:seps[1]].tolist() == b


def test_tags_sit_on_the_first_piece_of_each_word(tok):
    sp = pt.Specials.from_tokenizer(tok)
    words, tags = demo.tagging_examples(demo.generate_documents(0, 0, 10, 0)["eval"])[3]
    labels = demo.TAGS
    arrays, meta = ft.encode("tag", tok, sp, [ft.Example(" ".join(words), tags=tags)],
                             labels, 48)
    w = arrays["tag_weights"][0] > 0
    assert w.sum() == len(words)
    assert [labels[k] for k in arrays["tags"][0][w]] == list(tags)
    positions = np.flatnonzero(w)
    assert meta["words"][0][positions].tolist() == list(range(len(words)))
    # the tagged piece is the first to carry characters of its word
    text = " ".join(words)
    ids, begin, end = tok.encode_with_offsets([text])[0]
    starts = np.cumsum([0] + [len(x) + 1 for x in words[:-1]])
    for word_start, k in zip(starts, positions - 1):
        assert begin[k] <= word_start < end[k]
        assert all(end[j] <= word_start for j in range(k))
    cut, meta = ft.encode("tag", tok, sp, [ft.Example(" ".join(words), tags=tags)], labels, 6)
    assert cut["tag_weights"].sum() < len(words) and meta["cut"] == 1


def test_span_positions_cover_the_answer_and_cut_answers_are_dropped(tok):
    sp = pt.Specials.from_tokenizer(tok)
    examples = [ft.Example(q, c, answer=(a, b))
                for q, c, a, b in demo.span_examples(
                    demo.generate_documents(0, 0, 10, 0)["eval"], 0)]
    arrays, meta = ft.encode("span", tok, sp, examples, (), 192)
    assert meta["dropped"] == 0
    for r, e in enumerate(examples):
        first, begin, end = meta["offsets"][r]
        s, t = arrays["starts"][r], arrays["ends"][r]
        assert first <= s <= t and arrays["token_types"][r, s] == 1
        text = e.text_b[begin[s - first]:end[t - first]].strip()
        assert text == e.text_b[e.answer[0]:e.answer[1]]
    short, meta = ft.encode("span", tok, sp, examples, (), 40)
    assert meta["dropped"] > 0 and (short["weights"] == 0).sum() == meta["dropped"]


def test_array_source_pads_with_zero_weights():
    arrays = {"inputs": np.arange(12, dtype=np.int32).reshape(3, 4) + 1,
              "labels": np.array([0, 1, 1], np.int32), "weights": np.ones(3, np.float32)}
    src = ft.ArraySource(arrays, pad_id=0, name="x")
    rows = src.rows(0, np.array([2, -1, 0]))
    np.testing.assert_array_equal(rows["inputs"][0], arrays["inputs"][2])
    assert (rows["inputs"][1] == 0).all() and rows["labels"][1] == -1
    assert rows["weights"].tolist() == [1, 0, 1]
    assert src.describe() != ft.ArraySource(dict(arrays, labels=arrays["labels"][::-1]
                                                 .copy()), 0, "x").describe()
