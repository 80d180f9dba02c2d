"""How BPE merges work in jformer's tokenizer (docs/transformer.md, "A BPE merge").

A merge joins two adjacent symbols of the current segmentation of a word, the most
frequent pair first; the word boundary is a symbol ("▁", U+2581, at the word's start),
so no merge crosses a word, and a piece at a word's start differs from the same
letters inside a word.
"""
import pytest

from jformer.data.tokenizer import Tokenizer

# Sennrich et al. (2016)'s example dictionary: low x5, lower x2, newest x6, widest x3.
CORPUS = ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3
BASE = 256 + 4 + 11  # byte pieces, <pad> <unk> <s> </s>, the 11 symbols "▁lowernstid"


def learned_pieces(tok: Tokenizer) -> list[str]:
    """The merged pieces in the order BPE learned them: the order of the .vocab file that
    Tokenizer.train writes, past the special and byte pieces."""
    with open(tok.path.removesuffix(".model") + ".vocab", encoding="utf-8") as f:
        pieces = [line.split("\t")[0] for line in f]
    return [p for p in pieces[BASE - 11:] if len(p) > 1]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("bpe") / "toy"
    return Tokenizer.train(CORPUS, prefix, BASE + 8, hard_vocab_limit=False)


def pieces_of(tok: Tokenizer, text: str) -> list[str]:
    return [tok.id_to_piece(int(i)) for i in tok.encode([text], add_eos=False)[0]]


def test_merges_follow_adjacent_pair_counts(toy):
    """e+s (9: newest 6, widest 3) first, then es+t (9), then l+o (7) and lo+w (7): each
    merge joins two symbols that are adjacent in the current segmentation."""
    assert learned_pieces(toy)[:4] == ["es", "est", "lo", "low"]


def test_the_word_boundary_is_a_symbol(toy):
    """'lowest' and 'low est' segment differently; the word-initial piece '▁low' is not
    the word-internal 'low' of 'slow'."""
    assert pieces_of(toy, "lowest") == ["▁low", "est"]
    assert pieces_of(toy, "low est") == ["▁low", "▁", "est"]
    assert pieces_of(toy, "slow") == ["▁", "s", "low"]


def test_no_piece_spans_a_word_boundary(tmp_path):
    """On demo sentences: '▁' only ever starts a piece, so no merge joined two words."""
    from jformer.data.demo import generate_pairs

    pairs = generate_pairs(0, 600, 0, 0)["train"]
    tok = Tokenizer.train([s for p in pairs for s in p], tmp_path / "demo", 500)
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    assert sum(p.startswith("▁") and len(p) > 1 for p in pieces) > 50
    assert not [p for p in pieces if "▁" in p[1:]]
