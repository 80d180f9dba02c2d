"""/v1/translate with ``format: "html"``: each text's sentences are translated with
their inline tags and placeholders put back, as Translator.translate(format="html")
does; a bad value, or an option that steers plain sentences, is a 422 naming the field,
after which the server still answers."""
import pytest

# The option's wiring through the server; the option itself is tested in the default run
# (tests/inference/test_html_format.py, test_inline_markup.py). Slow: CI's second run.
pytestmark = pytest.mark.slow

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

from tests.serve.test_app import assert_error, post, serve, wait_ready  # noqa: E402

PAGES = ['<p>I see <b>a big</b> dog.</p>', "It is <i>seven</i> o'clock, {name}.<br/>",
         "<ul><li>It is late.</li><li>We need <a href=\"/car\">one car</a>.</li></ul>"]


@pytest.fixture(scope="module")
def client(translator):
    with serve(translator) as c:
        wait_ready(c)
        yield c


def test_html_texts_are_the_translators(client, translator):
    r = post(client, {"q": PAGES, "format": "html"})
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == translator.translate(PAGES, format="html")
    r = post(client, {"q": PAGES[1], "format": "html", "n_best": 2})
    assert r.status_code == 200, r.text
    (want,) = translator.translate(PAGES[1:2], format="html", n_best=2, return_scores=True)
    got = r.json()["translations"][0]
    assert [h["text"] for h in got] == [h.text for h in want]
    assert [h["score"] for h in got] == pytest.approx([h.score for h in want], abs=1e-4)


def test_bad_format_and_steering_with_html_are_422s_naming_the_field(client):
    assert_error(post(client, {"q": "x", "format": "xml"}), 422, "invalid_request",
                 "format")
    for field, value in (("alignments", True), ("target_prefix", "Die"),
                         ("constraints", ["Zahl"])):
        assert_error(post(client, {"q": "<b>Five.</b>", "format": "html", field: value}),
                     422, "invalid_request", field, "not with format")
    long = " ".join(["five"] * 20)  # 99 characters, 81 tokens: over max_len 64
    assert_error(post(client, {"q": ["Five.", f"<p>{long}</p>"], "format": "html"}), 413,
                 "too_large", "q[1]", "aligns each sentence whole")
    assert post(client, {"q": "Five.", "format": "text"}).status_code == 200
