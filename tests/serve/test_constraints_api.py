"""/v1/translate's constraints: the answers are Translator.translate's with the same
constraints, and bad values are 422s naming the field, after which the server still
answers."""
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

from tests.serve.conftest import SENTENCES  # noqa: E402
from tests.serve.test_app import assert_error, post  # noqa: E402

PHRASES = [["Hund"], None, [], ["spät", "ist"], None, None]


@pytest.mark.slow
def test_constraints_give_the_translators_answers(client, translator):
    r = post(client, {"q": SENTENCES, "constraints": PHRASES})
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == translator.translate(SENTENCES, constraints=PHRASES)
    r = post(client, {"q": SENTENCES[0], "constraints": PHRASES[0]})
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == translator.translate(SENTENCES[:1],
                                                            constraints=PHRASES[:1])


def test_bad_values_are_422s_naming_the_field(client):
    assert_error(post(client, {"q": ["a", "b"], "constraints": [["x"]]}), 422,
                 "invalid_request", "constraints", "one list of phrases per text")
    assert_error(post(client, {"q": "a", "constraints": [["x"]]}), 422,
                 "invalid_request", "constraints", "one list of phrases per text")
    assert_error(post(client, {"q": ["a", "b"], "constraints": [None, ["x", " "]]}), 422,
                 "invalid_request", "constraints[1][1]", "non-empty")
    assert_error(post(client, {"q": ["a\nb"], "constraints": [["x"]]}), 422,
                 "invalid_request", "constraints[0]", "2 lines to translate")
    assert_error(post(client, {"q": ["a"], "constraints": [["x"] * 9]}), 422,
                 "invalid_request", "constraints[0]", "has 9 phrases")
    assert_error(post(client, {"q": ["a"], "constraints": [["sieben " * 30]]}), 422,
                 "invalid_request", "constraints[0][0]", "at most 16")
    assert_error(post(client, {"q": ["a"], "constraints": [["Hund"] * 6], "max_len": 4}),
                 422, "invalid_request", "constraints[0]", "output holds 4")
    assert_error(post(client, {"q": "a", "constraints": ["x"], "method": "greedy"}), 422,
                 "invalid_request", "constraints", "method='beam'")
    assert post(client, {"q": "Hello", "constraints": ["Hallo"]}).status_code == 200
