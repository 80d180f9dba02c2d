"""jformer.inference.scoring: corpus sacreBLEU and chrF with their signatures."""
import pytest

from jformer.inference.scoring import corpus_scores

REFS = ["Die Katze sitzt auf der Matte.", "Es ist fünf Uhr.", "Wir kaufen zwei rote Äpfel."]


def test_hypotheses_equal_to_their_references_score_100():
    scores = corpus_scores(REFS, REFS)
    assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0)
    assert "case:mixed" in scores["bleu_signature"] and "tok:13a" in scores["bleu_signature"]


def test_a_known_partial_match():
    """Of two 5-token sentences one is exactly right and the other shares no word: the
    n-gram precisions are 5/10, 4/8, 3/6 and 2/4, so BLEU = 100 * (1/2) = 50, with no
    brevity penalty (equal lengths)."""
    hyps = ["Es ist fünf Uhr .", "a b c d e"]
    refs = ["Es ist fünf Uhr .", "v w x y z"]
    assert corpus_scores(hyps, refs)["bleu"] == pytest.approx(50.0, abs=1e-6)


def test_case_and_length_checks():
    lower = [r.lower() for r in REFS]
    assert corpus_scores(lower, REFS)["bleu"] < 100.0
    assert corpus_scores(lower, REFS, lowercase=True)["bleu"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="same length; got 2 and 3"):
        corpus_scores(REFS[:2], REFS)
