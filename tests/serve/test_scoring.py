"""POST /v1/score: Translator.score's numbers as JSON; bad pairs are 4xx naming the
field, and the server answers after them."""
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

from tests.serve.conftest import SENTENCES  # noqa: E402
from tests.serve.test_app import assert_error, post  # noqa: E402

TARGETS = ["Ich sehe einen großen Hund.", "Es ist sieben Uhr.", "", "Wir brauchen ein Auto.",
           "Fünf.", "Hallo"]


def test_scores_are_the_translators(client, translator):
    r = post(client, {"q": SENTENCES, "targets": TARGETS, "alpha": 0.6, "tokens": True},
             "/v1/score")
    assert r.status_code == 200, r.text
    want = translator.score(SENTENCES, TARGETS, alpha=0.6)
    got = r.json()["scores"]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["score"] == pytest.approx(w.score, abs=1e-5)
        assert g["log_prob"] == pytest.approx(w.total, abs=1e-5)
        assert g["mean"] == pytest.approx(w.mean, abs=1e-5)
        assert [t["piece"] for t in g["tokens"]] == [
            translator.tokenizer.id_to_piece(int(i)) for i in w.ids]
        assert g["tokens"][-1]["piece"] == "</s>"
    r = post(client, {"q": SENTENCES[:1], "targets": TARGETS[:1]}, "/v1/score")
    assert "tokens" not in r.json()["scores"][0]


def test_bad_pairs_are_4xx_naming_the_field(client):
    assert_error(post(client, {"q": ["a", "b"], "targets": ["x"]}, "/v1/score"), 422,
                 "invalid_request", "targets", "one per line of q")
    assert_error(post(client, {"q": ["a"], "targets": ["sieben " * 42]}, "/v1/score"), 422,
                 "invalid_request", "targets[0]", "model.max_len")
    assert_error(post(client, {"q": ["a\x00"], "targets": ["x"]}, "/v1/score"), 422,
                 "invalid_request", "q[0]", "control character")
    assert_error(post(client, {"q": ["a"] * 9, "targets": ["x"] * 9}, "/v1/score"), 413,
                 "too_large", "q", "--max-sentences")
    assert post(client, {"q": ["Hello"], "targets": ["Hallo"]}, "/v1/score").status_code == 200
