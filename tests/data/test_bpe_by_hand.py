"""BPE by hand (jformer.data.bpe_by_hand) against the papers and against sentencepiece.

What holds (docs/transformer.md, "BPE by hand"): the hand version reproduces Sennrich et
al.'s worked example; run with sentencepiece's tie order it learns sentencepiece's BPE
pieces merge for merge ('</w>' written as sentencepiece's '▁', at the word's end with
treat_whitespace_as_suffix, at its start by default as jformer's tokenizer); with the
papers' tie order the two part at a tie. sentencepiece also refuses merges across
scripts and digits, and fills its vocabulary with pairs of count 0 when the corpus has
no more merges.
"""
import io
import re

import pytest
import sentencepiece as spm

from jformer.data import bpe_by_hand as bpe
from jformer.data.tokenizer import NUM_BYTE_PIECES, NUM_SPECIAL, WORD_START, Tokenizer

SENNRICH_WORDS = ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3


@pytest.fixture(scope="module")
def demo_words() -> list[str]:
    """The words of 300 demo pairs, English and German, lowercased letters only."""
    from jformer.data import demo

    pairs = demo.generate_pairs(0, 300, 0, 0)["train"]
    return [word for pair in pairs for side in pair
            for word in re.findall(r"[^\W\d_]+", side.lower())]


def marked(words, suffix) -> dict[str, int]:
    """The word vocabulary with '▁' ending (suffix) or starting each word."""
    return (bpe.word_vocab(words, end=WORD_START) if suffix
            else bpe.word_vocab(words, end="", start=WORD_START))


def hand(words, num_merges, suffix, order=bpe.sentencepiece_order) -> list[bpe.Merge]:
    return bpe.learn_bpe(marked(words, suffix), num_merges, order)


def pieces(merges: list[bpe.Merge]) -> list[str]:
    return ["".join(m.pair) for m in merges]


def sentencepiece_merges(words, num_merges, suffix, folder) -> list[str]:
    """The pieces sentencepiece's BPE learns, in order, from ``words`` (one a line). With
    suffix, straight from sentencepiece (treat_whitespace_as_suffix, no normalization);
    without, from jformer's Tokenizer.train. vocab_size counts the special pieces, the
    byte pieces (jformer's) and the characters too, so it is that plus num_merges."""
    chars = len(set("".join(words))) + 1  # and '▁'
    if not suffix:
        first = NUM_SPECIAL + NUM_BYTE_PIECES
        tok = Tokenizer.train(words, folder / f"bpe{num_merges}", first + chars + num_merges)
        return [tok.id_to_piece(i) for i in range(first, first + num_merges)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(words), model_writer=model, model_type="bpe",
        vocab_size=3 + chars + num_merges, treat_whitespace_as_suffix=True,
        normalization_rule_name="identity", input_sentence_size=0,
        shuffle_input_sentence=False, num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [sp.IdToPiece(i) for i in range(3, 3 + num_merges)]  # after <unk> <s> </s>


def test_the_worked_example_of_sennrich_et_al():
    """Algorithm 1's dictionary and ten merges, each with its count; 'lowest', never
    seen, then segments into 'low' and 'est</w>'."""
    merges = bpe.learn_bpe(bpe.SENNRICH_VOCAB, 10)
    assert [(m.pair, m.count) for m in merges] == [
        (("e", "s"), 9), (("es", "t"), 9), (("est", "</w>"), 9), (("l", "o"), 7),
        (("lo", "w"), 7), (("n", "e"), 6), (("ne", "w"), 6), (("new", "est</w>"), 6),
        (("low", "</w>"), 5), (("w", "i"), 3)]
    assert merges[-1].vocab == {"low</w>": 5, "low e r </w>": 2, "newest</w>": 6,
                                "wi d est</w>": 3}
    assert bpe.segment("lowest", merges) == ["low", "est</w>"]
    assert bpe.word_vocab(SENNRICH_WORDS) == bpe.SENNRICH_VOCAB


def test_the_docs_show_the_worked_example():
    """docs/transformer.md's table is this module's output, step by step."""
    import pathlib

    docs = pathlib.Path(__file__).resolve().parents[2] / "docs" / "transformer.md"
    assert bpe.worked_example() in docs.read_text(encoding="utf-8")
    assert "| 6 | `n` + `e` | 6 | `e` + `w`, `w` + `est</w>` |" in bpe.worked_example()


def test_pairs_are_counted_and_merged_as_whole_symbols():
    vocab = {"e st </w>": 2, "a a a": 3, "e s e s": 1}
    assert bpe.get_pair_stats(vocab) == {("e", "st"): 2, ("st", "</w>"): 2, ("a", "a"): 6,
                                         ("e", "s"): 2, ("s", "e"): 1}
    assert bpe.merge_vocab(("e", "s"), vocab) == {"e st </w>": 2, "a a a": 3, "es es": 1}
    assert bpe.merge_vocab(("a", "a"), vocab)["aa a"] == 3  # left to right
    assert bpe.learn_bpe({"a": 1}, 5) == []  # nothing left to merge


@pytest.mark.parametrize("suffix", [True, False], ids=["end_of_word", "start_of_word"])
def test_with_sentencepiece_order_the_merges_are_sentencepiece_pieces(suffix, demo_words,
                                                                        tmp_path):
    """Merge for merge, on Sennrich's words (10 merges) and on the demo words (200); the
    papers' tie order gives other lists, so the order is what makes them equal."""
    for words, n in ((SENNRICH_WORDS, 10), (demo_words, 200)):
        want = sentencepiece_merges(words, n, suffix, tmp_path)
        assert pieces(hand(words, n, suffix)) == want
        assert pieces(hand(words, n, suffix, bpe.by_count)) != want


@pytest.mark.parametrize("suffix", [True, False], ids=["end_of_word", "start_of_word"])
def test_the_papers_order_parts_from_sentencepiece_at_a_tie(suffix, demo_words):
    """Up to their first difference the two orders learn the same merges; there, both
    pairs had the same count and sentencepiece took the shorter or alphabetically
    first piece."""
    parted = []
    for words in (SENNRICH_WORDS, demo_words):
        theirs, papers = hand(words, 40, suffix), hand(words, 40, suffix, bpe.by_count)
        first = next(i for i, (a, b) in enumerate(zip(theirs, papers)) if a.pair != b.pair)
        assert pieces(theirs[:first]) == pieces(papers[:first])
        a, b = "".join(theirs[first].pair), "".join(papers[first].pair)
        assert theirs[first].count == papers[first].count
        assert (len(a), a) < (len(b), b)
        parted.append((first + 1, a, b))
    # Sennrich's words. '▁' at the end: at step 2, es + t and t + ▁ both occur 9 times.
    # At the start: at step 3, ▁ + l, l + o and o + w all occur 7 times.
    assert parted[0] == ((2, "t▁", "est") if suffix else (3, "lo", "▁l"))
    if suffix:  # seven of the papers' ten pieces, by other paths
        theirs = pieces(hand(SENNRICH_WORDS, 10, suffix))
        assert theirs == "es t▁ est▁ lo low ew new newest▁ low▁ id".split()
        papers = pieces(bpe.learn_bpe(bpe.SENNRICH_VOCAB, 10))
        papers = [p.replace("</w>", "▁") for p in papers]
        assert len(set(theirs) & set(papers)) == 7


def test_sentencepiece_never_merges_across_scripts_or_digits(tmp_path):
    """split_by_unicode_script and split_by_number: no piece of sentencepiece's joins a
    letter to '.' or to a digit; the papers' algorithm does, for frequent pairs."""
    words = ["no."] * 5 + ["go."] * 3 + ["a1"] * 4 + ["b1"] * 2 + ["ab"]
    mixed = re.compile(r"[a-z][.\d]|[.\d][a-z]")
    papers = pieces(bpe.learn_bpe(bpe.word_vocab(words), 5))
    assert [p for p in papers if mixed.search(p)] == ["o.", "o.</w>", "no.</w>", "a1</w>"]
    for suffix in (True, False):
        learned = sentencepiece_merges(words, 5, suffix, tmp_path)
        assert not [p for p in learned if mixed.search(p)]


@pytest.mark.parametrize("suffix", [True, False], ids=["end_of_word", "start_of_word"])
def test_sentencepiece_fills_its_vocabulary_past_the_last_merge(suffix, tmp_path):
    """Sennrich's words allow 15 merges, then every word is one piece and the hand
    version stops; sentencepiece, held to vocab_size, goes on with pairs of the original
    words that no segmentation holds any more (count 0), shortest and first
    alphabetically."""
    merges = hand(SENNRICH_WORDS, 100, suffix)
    assert len(merges) == 15 and all(len(w.split()) == 1 for w in merges[-1].vocab)
    got = sentencepiece_merges(SENNRICH_WORDS, 19, suffix, tmp_path)
    assert got[:15] == pieces(merges)
    pairs = bpe.get_pair_stats(marked(SENNRICH_WORDS, suffix))  # of the characters
    assert got[15:] == sorted({"".join(p) for p in pairs} - set(got[:15]))[:4]
