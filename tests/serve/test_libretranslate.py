"""LibreTranslate's API (POST /translate, /detect, GET /languages) in process.

Every translation is compared with a direct Translator.translate call; every error is
LibreTranslate's {"error": message} with its status, and a good request still succeeds
after each one. The real clients, on a live server, are in test_libretranslate_clients.
"""
import html
import time

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

import warnings  # noqa: E402

with warnings.catch_warnings():  # starlette >= 1.10 would rather have httpx2
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient  # noqa: E402

from jformer.serve import ServeLimits, create_app  # noqa: E402
from jformer.serve.api_keys import ApiKeys  # noqa: E402
from jformer.serve.errors import ApiError  # noqa: E402
from jformer.serve.libretranslate import error_response, others  # noqa: E402
from jformer.serve.loading import describe  # noqa: E402
from tests.serve.conftest import SENTENCES  # noqa: E402

LIMITS = ServeLimits(max_sentences=8, max_chars=300, max_beam=4, max_wait_ms=2,
                     max_queue=16, timeout_s=60, warmup_buckets=0)
EN_DE = {"source": "en", "target": "de"}
NO_KEY = "Please contact the server operator to get an API key"


def app_for(translator, languages=("en", "de"), **kwargs):
    info = {} if languages is None else dict(zip(("source_lang", "target_lang"), languages))
    return create_app(lambda: (translator, describe(translator, **info)), LIMITS, **kwargs)


def ready(client):
    deadline = time.monotonic() + 120
    while client.get("/v1/ready").status_code != 200:
        assert time.monotonic() < deadline, "the server did not become ready"
        time.sleep(0.05)
    return client


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(app_for(translator)) as c:
        yield ready(c)


@pytest.fixture(scope="module")
def want(translator):
    """The Translator's own translations of SENTENCES (default settings: beam 2)."""
    return translator.translate(SENTENCES)


# ---------------------------------------------------------------------------- answers
def test_a_text_and_a_list_as_json_form_and_query_string(client, want):
    assert client.post("/translate", json={"q": SENTENCES[0], **EN_DE}).json() == {
        "translatedText": want[0]}
    got = client.post("/translate", json={"q": SENTENCES, "source": "EN", "target": "De",
                                          "secret": "ignored", "apiKey": "ignored"})
    assert got.status_code == 200 and got.json() == {"translatedText": want}
    # libretranslatepy sends a form body, deep-translator the query string.
    assert client.post("/translate", data={"q": SENTENCES[1], **EN_DE}).json() == {
        "translatedText": want[1]}
    assert client.post("/translate", params={"q": SENTENCES[2], **EN_DE}).json() == {
        "translatedText": want[2]}
    two = client.post("/translate", data={"q": f"{SENTENCES[0]}\n{SENTENCES[3]}", **EN_DE})
    assert two.json() == {"translatedText": f"{want[0]}\n{want[3]}"}


def test_source_auto_is_the_models_source_marked_not_detected(client, want):
    detected = {"confidence": 0.0, "language": "en"}
    got = client.post("/translate", json={"q": SENTENCES[0], "source": "auto",
                                          "target": "de"}).json()
    assert got == {"translatedText": want[0], "detectedLanguage": detected}
    got = client.post("/translate", json={"q": SENTENCES[:2], "source": "auto",
                                          "target": "de"}).json()
    assert got == {"translatedText": want[:2], "detectedLanguage": [detected, detected]}
    for body in ({"q": "Ceci est du français."}, {"q": ["a", "b"], "api_key": "x"}):
        assert client.post("/detect", json=body).json() == [detected]
    assert client.post("/detect", data={"q": "Hallo"}).json() == [detected]


def test_languages_lists_the_pair_and_the_routes_share_the_metrics(client):
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []}]
    registry = client.app.state.jformer.metrics.registry
    before = registry.get_sample_value("jformer_sentences_total")
    client.post("/translate", json={"q": SENTENCES[:3], **EN_DE})
    assert registry.get_sample_value("jformer_sentences_total") == before + 3  # the batcher
    assert registry.get_sample_value("jformer_requests_total",
                                     {"route": "/translate", "status": "200"}) >= 1
    assert registry.get_sample_value("jformer_requests_total",
                                     {"route": "/languages", "status": "200"}) >= 1


def test_alternatives_are_the_other_hypotheses_of_a_wide_enough_beam(client, translator):
    n_best = translator.translate(SENTENCES[:2], beam_size=2, n_best=2)  # the default beam
    got = client.post("/translate", json={"q": SENTENCES[:2], "alternatives": 1, **EN_DE})
    assert got.json() == {"translatedText": [h[0] for h in n_best],
                          "alternatives": [others(h) for h in n_best]}
    # Three alternatives need 4 hypotheses: the beam of 2 is widened to 4.
    (wide,) = translator.translate(SENTENCES[:1], beam_size=4, n_best=4)
    got = client.post("/translate", data={"q": SENTENCES[0], "alternatives": "3", **EN_DE})
    assert got.json() == {"translatedText": wide[0], "alternatives": others(wide)}
    got = client.post("/translate", json={"q": SENTENCES[0], "alternatives": 0, **EN_DE})
    assert "alternatives" not in got.json()


def test_html_translates_sentences_and_carries_their_inline_tags(client, translator):
    (dog,) = (html.escape(t, quote=False) for t in translator.translate(["I see a big dog."]))
    # LibreTranslate's documented example, and one with inline tags, an entity and a
    # placeholder: one sentence, its tags put back by word alignment (jformer's /v1 html).
    pages = ['<p class="green">I see a big dog.</p>',
             '<b>It is late.</b> <i>Five</i> {n}<br/>\n<span title="x>y">Tom &amp; Jerry</span>']
    want = translator.translate(pages, format="html")
    assert want[0] == f'<p class="green">{dog}</p>'
    got = client.post("/translate", json={"q": pages, "format": "html", **EN_DE})
    assert got.json() == {"translatedText": want}
    got = client.post("/translate", json={"q": pages[0], "format": "html", "alternatives": 2,
                                          **EN_DE})  # as LibreTranslate: none for html
    assert got.json() == {"translatedText": f'<p class="green">{dog}</p>', "alternatives": []}
    assert client.post("/translate", json={"q": "<br/>", "format": "html", **EN_DE}
                       ).json() == {"translatedText": "<br/>"}


# ----------------------------------------------------------------------------- errors
BAD = [  # (body as JSON, or (content type, raw body)), LibreTranslate's message
    ({"q": "x", "source": "fr", "target": "de"}, "fr is not supported"),
    ({"q": "x", "source": "en", "target": "es"}, "es is not supported"),
    ({"q": "x", "source": "de", "target": "en"},
     "English (en) is not available as a target language from German (de)"),
    ({"q": "x", "source": "auto", "target": "en"},
     "English (en) is not available as a target language from English (en)"),
    ({"q": "", **EN_DE}, "Invalid request: missing q parameter"),
    ({"q": [], **EN_DE}, "Invalid request: missing q parameter"),
    ({"q": "x", "target": "de"}, "Invalid request: missing source parameter"),
    ({"q": "x", "source": "en", "target": ""}, "Invalid request: missing target parameter"),
    ({"q": 5, **EN_DE}, "Invalid request: q must be a text or a list of texts"),
    ({"q": ["a", None], **EN_DE}, "Invalid request: q must be a text or a list of texts"),
    ({"q": "x", "source": 1, "target": "de"},
     "Invalid request: source must be a language code; got a number"),
    ({"q": "x", "format": "xml", **EN_DE}, "xml format is not supported"),
    ({"q": "x", "alternatives": "many", **EN_DE},
     "Invalid request: alternatives parameter is not a number"),
    ({"q": "x", "alternatives": True, **EN_DE},
     "Invalid request: alternatives parameter is not a number"),
    ({"q": "x", "alternatives": 4, **EN_DE},
     "Invalid request: alternatives parameter must be <= 3 (--max-beam less one)"),
    ({"q": "a" * 301, **EN_DE}, "q: text has 301 characters, more than the limit of 300 "
                                "(--max-chars)"),
    ({"q": ["x"] * 9, **EN_DE}, "q: 9 lines in 9 text(s), more than the limit of 8 "
                                "(--max-sentences)"),
    ({"q": ["ok", "a\x00b"], **EN_DE}, "q[1]: control character U+0000 at character 1: "
                                       "only text, tabs and line breaks are accepted"),
    (["x"], "Invalid JSON format: the body must be a JSON object"),
    (("application/json", b'{"q": '), "the body is not valid JSON: Expecting value at "
                                      "line 1 column 7"),
    (("text/plain", b"q=x&source=en&target=de"), "Content-Type must be application/json "
                                                 "or application/x-www-form-urlencoded; "
                                                 "got text/plain"),
    (("application/x-www-form-urlencoded", b"q=a&q=b&source=en&target=de"),
     "Invalid request: q parameter given twice (for several texts send a JSON list)"),
    (("application/x-www-form-urlencoded", b"q=%ff&source=en&target=de"),
     "Invalid request: a form field is not UTF-8 once its %-escapes are decoded"),
]


@pytest.mark.parametrize("body, message", BAD, ids=[m[:40] for _, m in BAD])
def test_a_bad_request_is_a_400_in_libretranslates_shape(client, want, body, message):
    if isinstance(body, tuple):
        got = client.post("/translate", content=body[1], headers={"Content-Type": body[0]})
    else:
        got = client.post("/translate", json=body)
    assert (got.status_code, got.json()) == (400, {"error": message})
    assert got.headers["content-type"] == "application/json"
    ok = client.post("/translate", json={"q": SENTENCES[4], **EN_DE})  # still serving
    assert ok.json() == {"translatedText": want[4]}


def test_detect_without_q_is_a_400(client):
    got = client.post("/detect", json={"api_key": "x"})
    assert (got.status_code, got.json()) == (400, {"error": "Invalid request: missing q "
                                                            "parameter"})


def test_api_keys_are_asked_for_on_translate_and_detect(translator, want):
    with TestClient(app_for(translator, api_keys=ApiKeys(["k-1", "k-2"]))) as c:
        ready(c)
        asks = [("json", {"q": SENTENCES[0], **EN_DE}, NO_KEY),
                ("json", {"q": SENTENCES[0], "api_key": "", **EN_DE}, NO_KEY),
                ("json", {"q": SENTENCES[0], "api_key": "k-3", **EN_DE}, "Invalid API key"),
                ("json", {"q": SENTENCES[0], "api_key": ["k-1"], **EN_DE}, "Invalid API key"),
                ("data", {"q": SENTENCES[0], "api_key": "K-1", **EN_DE}, "Invalid API key"),
                ("params", {"q": SENTENCES[0], **EN_DE}, NO_KEY)]
        for kind, body, message in asks:
            got = c.post("/translate", **{kind: body})
            assert (got.status_code, got.json()) == (403, {"error": message}), body
            good = c.post("/translate", **{kind: dict(body, api_key="k-2")})
            assert good.json() == {"translatedText": want[0]}
        got = c.post("/detect", data={"q": "x", "api_key": "nope"})
        assert (got.status_code, got.json()) == (403, {"error": "Invalid API key"})
        assert c.post("/detect", data={"q": "x", "api_key": "k-1"}).status_code == 200
        assert c.get("/languages").status_code == 200  # no key, as LibreTranslate
        # The keys guard LibreTranslate's routes only (docs/serving.md): /v1 is as before.
        assert c.post("/v1/translate", json={"q": SENTENCES[0]}).json() == {
            "translations": [want[0]]}


def test_without_a_language_pair_the_routes_answer_501_naming_the_flag(translator):
    with TestClient(app_for(translator, languages=None)) as c:
        ready(c)
        for got in (c.get("/languages"), c.post("/translate", json={"q": "x", **EN_DE})):
            assert got.status_code == 501
            assert "start jformer serve with --languages SOURCE:TARGET" in got.json()["error"]


def test_alternatives_leave_out_repeats_empty_texts_and_the_best():
    assert others(["a", "b", "a", "", "c", "b", "d"]) == ["b", "c", "d"]
    assert others(["a"]) == [] and others(["a", "a"]) == []


def test_statuses_are_mapped_to_libretranslates():
    full = error_response(ApiError(503, "the queue is full", reason="queue_full",
                                   headers={"Retry-After": "3"}))
    assert (full.status_code, full.body, full.headers["retry-after"]) == (
        429, b'{"error":"Slowdown: the queue is full"}', "3")
    assert error_response(ApiError(503, "loading", reason="not_ready")).status_code == 503
    assert error_response(ApiError(413, "too big", field="body")).status_code == 413
    assert error_response(ApiError(413, "too many", field="q")).status_code == 400
    assert error_response(ApiError(422, "bad", field="q")).status_code == 400
    assert error_response(ApiError(504, "late")).status_code == 504
