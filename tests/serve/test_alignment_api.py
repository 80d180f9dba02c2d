"""/v1/translate with ``alignments: true``: each hypothesis carries the word alignment
Translator.translate(return_alignments=True) gives (a text's lines counted on), and a
bad value is a 422 naming the field, after which the server still answers."""
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

from jformer.data.alignments import to_moses  # noqa: E402
from tests.serve.conftest import SENTENCES  # noqa: E402
from tests.serve.test_app import assert_error, post  # noqa: E402


def test_alignments_are_the_translators(client, translator):
    r = post(client, {"q": SENTENCES, "alignments": True})
    assert r.status_code == 200, r.text
    want = translator.translate(SENTENCES, return_alignments=True)
    got = r.json()["translations"]
    assert [[h["text"], h["alignment"]] for (h,) in got] == [
        [h.text, to_moses(h.alignment)] for h in want]
    # Two lines of one text: the second line's words are counted after the first's.
    lines = ["I see a big dog.", "It is late."]
    r = post(client, {"q": "\n".join(lines), "alignments": True})
    assert r.status_code == 200, r.text
    first, second = translator.translate(lines, return_alignments=True)
    shift = (len(lines[0].split()), len(first.text.split()))
    links = first.alignment + tuple((i + shift[0], j + shift[1]) for i, j in second.alignment)
    assert r.json()["translations"][0][0]["alignment"] == to_moses(links)


def test_a_bad_value_is_a_422_naming_the_field(client):
    assert_error(post(client, {"q": "a", "alignments": "yes"}), 422, "invalid_request",
                 "alignments")
    assert post(client, {"q": "Hello"}).status_code == 200
