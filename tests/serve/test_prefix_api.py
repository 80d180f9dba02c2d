"""/v1/translate's target_prefix and prefix_bias_beta: the answers are
Translator.translate's with the same prefixes (a text's goes to its first line), and
bad values are 422s naming the field, after which the server still answers."""
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

from tests.serve.conftest import SENTENCES  # noqa: E402
from tests.serve.test_app import assert_error, post  # noqa: E402

PREFIXES = ["Ich sehe", None, "", "Wir", "Fünf", "Hallo"]


@pytest.mark.parametrize("beta", [None, 0.5])
def test_prefixes_give_the_translators_answers(client, translator, beta):
    body = {"q": SENTENCES, "target_prefix": PREFIXES, "prefix_bias_beta": beta}
    r = post(client, body)
    assert r.status_code == 200, r.text
    want = translator.translate(SENTENCES, target_prefix=PREFIXES, prefix_bias_beta=beta)
    assert r.json()["translations"] == want
    if beta is None:
        assert all(t.startswith(p or "") for t, p in zip(want, PREFIXES))


def test_a_texts_prefix_goes_to_its_first_line(client, translator):
    r = post(client, {"q": "\nI see a big dog.\nIt is late.", "target_prefix": "Wir"})
    assert r.status_code == 200, r.text
    first, second = translator.translate(["I see a big dog.", "It is late."],
                                         target_prefix=["Wir", None])
    assert r.json()["translations"] == [f"\n{first}\n{second}"]


def test_bad_values_are_422s_naming_the_field(client):
    assert_error(post(client, {"q": ["a", "b"], "target_prefix": ["x"]}), 422,
                 "invalid_request", "target_prefix", "one per text")
    assert_error(post(client, {"q": "a", "target_prefix": ["x"]}), 422,
                 "invalid_request", "target_prefix", "one per text")
    assert_error(post(client, {"q": ["a", " "], "target_prefix": [None, "x"]}), 422,
                 "invalid_request", "target_prefix[1]", "nothing to translate")
    assert_error(post(client, {"q": ["a"], "target_prefix": ["sieben " * 30],
                               "max_len": 8}), 422, "invalid_request", "target_prefix[0]",
                 "output holds 8")
    assert_error(post(client, {"q": "a", "prefix_bias_beta": 0.5}), 422,
                 "invalid_request", "prefix_bias_beta", "needs target_prefix")
    r = post(client, {"q": "a", "target_prefix": "x", "prefix_bias_beta": 1.0})
    assert r.status_code == 422 and r.json()["error"]["field"] == "prefix_bias_beta"
    assert post(client, {"q": "Hello", "target_prefix": "Hallo"}).status_code == 200
