"""Tests for jformer/data/demo/aligned.py: every gold link joins a word to its
translation, each word has exactly one link, and the verb really moves."""
from jformer.data.demo import aligned


def test_gold_links_are_a_permutation_of_translated_words():
    examples = aligned.generate(3, 200)
    assert examples == aligned.generate(3, 200)  # repeatable
    moved = 0
    for source, target, links in examples:
        src, tgt = source.rstrip(".").split(), target.rstrip(".").split()
        assert len(src) == len(tgt) == len(links)
        assert sorted(i for i, _ in links) == list(range(len(src)))
        assert sorted(j for _, j in links) == list(range(len(tgt)))
        assert all(aligned.LEXICON[src[i]] == tgt[j] for i, j in links)
        moved += any(i != j for i, j in links)
    assert moved == len(examples)  # the object always comes before the verb
