"""A bf16-trained translation workdir and a fine-tuned BERT workdir, written by the code
before the model restructuring (tests/fixtures/make_fixture_workdirs.py), restore and
give the same outputs: translations (greedy and beam 4: ids, texts and scores) and
teacher-forced logits; the classifier's labels, probabilities and logits."""
import json
import os

import numpy as np
import pytest

from jformer.data.finetuning import Example
from jformer.inference import Translator
from jformer.inference.encoder import EncoderPredictor

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
BF16 = os.path.join(FIXTURES, "bf16_workdir")
BERT = os.path.join(FIXTURES, "bert_workdir")


def load_expected(workdir):
    with open(os.path.join(workdir, "expected.json")) as f:
        return json.load(f)


def teacher_forced_logits(tr: Translator, inputs, targets):
    # The one place that builds the model itself (as tests/test_legacy_workdir.py does):
    # the restructuring of jformer.model updates this line.
    from jformer.model import Transformer

    return Transformer(tr.model_cfg, tr.ops).apply({"params": tr.params}, inputs, targets)


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_bf16_workdir_translates_to_the_same_output():
    expected = load_expected(BF16)
    tr = Translator.from_checkpoint(BF16)
    assert tr.model_cfg.dtype == "bfloat16"
    for method, beam in (("greedy", 1), ("beam", 4)):
        hyps = tr.translate(expected["sources"], beam_size=beam, return_scores=True)
        assert [h.ids.tolist() for h in hyps] == [e["ids"] for e in expected[method]]
        assert [h.text for h in hyps] == [e["text"] for e in expected[method]]
        np.testing.assert_allclose([h.score for h in hyps],
                                   [e["score"] for e in expected[method]], rtol=1e-5)


def test_bf16_workdir_gives_the_same_logits():
    expected = load_expected(BF16)
    tr = Translator.from_checkpoint(BF16)
    logits = teacher_forced_logits(tr, np.asarray(expected["logits_inputs"], np.int32),
                                   np.asarray(expected["logits_targets"], np.int32))
    np.testing.assert_allclose(np.asarray(logits, np.float32),
                               np.load(os.path.join(BF16, "expected_logits.npy")),
                               rtol=1e-5, atol=1e-5)


def test_bert_workdir_classifies_with_the_same_labels_and_logits():
    expected = load_expected(BERT)
    predictor = EncoderPredictor.from_checkpoint(BERT)
    assert predictor.kind == "classify"
    sentences = expected["sentences"]
    got = predictor.classify(sentences)
    assert [label for label, _ in got] == [label for label, _ in expected["classify"]]
    np.testing.assert_allclose([p for _, p in got], [p for _, p in expected["classify"]],
                               rtol=1e-5)
    arrays, _ = predictor.encode([Example(s, "") for s in sentences])
    np.testing.assert_allclose(predictor.outputs(arrays),
                               np.load(os.path.join(BERT, "expected_logits.npy")),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("workdir, step", [(BF16, "400"), (BERT, "200")])
def test_fixture_is_small_and_has_one_checkpoint(workdir, step):
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(workdir)
               for f in fs)
    assert size < 1_500_000, size
    assert os.listdir(os.path.join(workdir, "checkpoints")) == [step]
