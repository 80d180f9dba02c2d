"""Metrics of fine-tuned encoders (jformer.inference.encoder)."""
import numpy as np
import pytest

from jformer.inference.encoder import answer_scores, entities, entity_f1, word_tags


def test_bio_entities_follow_conlleval():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "I-DATE", "I-DATE", "B-NUM", "B-NUM", "I-NUM"]
    assert entities(tags) == {("PER", 0, 1), ("LOC", 3, 3), ("DATE", 4, 5), ("NUM", 6, 6),
                              ("NUM", 7, 8)}
    assert entities(["O", "O"]) == set()


def test_entity_f1_counts_exact_spans_and_kinds():
    gold = [["B-PER", "O", "B-LOC"], ["B-TIME", "I-TIME", "O"]]
    assert entity_f1(gold, gold)["entity_f1"] == 1.0
    pred = [["B-PER", "O", "B-PER"], ["B-TIME", "O", "O"]]  # wrong kind, short span
    scores = entity_f1(gold, pred)
    assert scores["entity_precision"] == pytest.approx(1 / 3)
    assert scores["entity_recall"] == pytest.approx(1 / 3)
    assert scores["entity_f1"] == pytest.approx(1 / 3)
    assert scores["word_accuracy"] == pytest.approx(4 / 6)
    with pytest.raises(ValueError):
        entity_f1(gold, pred[:1])


def test_answer_scores_are_squad_exact_match_and_token_f1():
    scores = answer_scores(["the twelfth of May", "Vienna", "half past three"],
                           ["The twelfth of May.", "Bonn", "past three"])
    assert scores["exact_match"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx((1 + 0 + 0.8) / 3)


def test_word_tags_read_the_first_piece_of_each_word():
    predicted = np.array([[0, 3, 5, 7, 9, 0]])
    words = [np.array([-1, 0, -1, 1, 2, -1])]
    assert word_tags(predicted, words, [4]) == [[3, 7, 9, 0]]  # word 3 was cut off
