"""The HTTP API in process (Starlette's TestClient runs the app and its lifespan).

Every answer is compared with a direct Translator.translate call; every error is the
JSON form with its status, reason and the field at fault; after the bad inputs, a
normal request still succeeds.
"""
import concurrent.futures
import dataclasses
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

import warnings  # noqa: E402

import jax  # noqa: E402

with warnings.catch_warnings():  # starlette >= 1.10 would rather have httpx2
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient  # noqa: E402

from jformer.serve import ServeLimits, create_app  # noqa: E402
from jformer.serve.loading import describe, warm_up  # noqa: E402
from tests.serve.conftest import LONG, SENTENCES  # noqa: E402

LIMITS = ServeLimits(max_body_bytes=4096, max_sentences=8, max_chars=300, max_beam=4,
                     max_wait_ms=2, max_queue=16, timeout_s=60, warmup_buckets=0)
JSON = {"Content-Type": "application/json"}


class Proxy:
    """The translator with some attributes replaced and a translate that can fail or
    block: ``gate`` must be set for translate to go on."""

    def __init__(self, inner, **replaced):
        self._inner, self.gate = inner, threading.Event()
        self.gate.set()
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def translate(self, sentences, **kwargs):
        self.gate.wait(60)
        if any("EXPLODE" in s for s in sentences):
            raise RuntimeError("the decoder ran out of memory")
        return self._inner.translate(sentences, **kwargs)


def wait_ready(client, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if client.get("/v1/ready").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("the server did not become ready")


def serve(translator, limits=LIMITS, **kwargs):
    """A TestClient for an app over ``translator`` (a Proxy or the real one)."""
    app = create_app(lambda: (translator, describe(translator, step=400, source_lang="en",
                                                   target_lang="de")), limits, **kwargs)
    return TestClient(app)


@pytest.fixture(scope="module")
def proxy(translator):
    return Proxy(translator)


@pytest.fixture(scope="module")
def client(proxy):
    with serve(proxy) as c:
        wait_ready(c)
        yield c


def post(client, body, path="/v1/translate"):
    return client.post(path, json=body)


def assert_error(response, status, reason, field, *words):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert (error["code"], error["reason"], error["field"]) == (status, reason, field), error
    for word in words:
        assert word in error["message"], error["message"]
    return error


# ---------------------------------------------------------------------------- answers
def test_health_ready_model_docs_page_and_metrics(client, translator):
    assert client.get("/v1/health").json() == {"status": "ok", "phase": "ready"}
    assert client.get("/v1/ready").json() == {"status": "ready"}
    model = client.get("/v1/model").json()
    assert (model["source_lang"], model["target_lang"], model["step"]) == ("en", "de", 400)
    assert model["vocab_size"] == translator.tokenizer.vocab_size == 400
    assert model["model"]["d_model"] == 32 and model["buckets"] == [16, 32, 64]
    assert model["limits"]["max_batch"] == translator.decode_cfg.batch_size == 4
    assert model["limits"]["max_sentences"] == 8
    page = client.get("/docs").text
    assert "Swagger UI" in page and "cdn" not in page.lower()  # works offline
    for asset in ("/docs-static/swagger-ui-bundle.js", "/docs-static/swagger-ui.css"):
        assert asset in page and client.get(asset).status_code == 200
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/translate"]["post"]["requestBody"]["content"]
    assert "beam_size" in body["application/json"]["schema"]["properties"]
    page = client.get("/")
    assert page.status_code == 200 and 'id="translate"' in page.text
    assert "https://" not in page.text and "http://" not in page.text.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched from elsewhere
    assert "drawHeatmap" in client.get("/static/app.js").text
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "jformer_ready 1.0" in metrics.text


def test_translate_a_string_and_a_list_in_input_order(client, translator):
    want = translator.translate(SENTENCES)  # the decode defaults: beam 2, alpha 0.6
    assert post(client, {"q": SENTENCES[0]}).json() == {"translations": want[:1]}
    got = post(client, {"q": SENTENCES[::-1]}).json()["translations"]
    assert got == want[::-1]
    assert post(client, {"q": []}).json() == {"translations": []}


def test_lines_are_translated_one_by_one_and_keep_their_breaks(client, translator):
    a, b, c = (translator.translate(SENTENCES[:3], method="greedy"))
    text = f"{SENTENCES[0]}\r\n\n{SENTENCES[1]}\r  \n{SENTENCES[2]}\n"
    got = post(client, {"q": [text, "", "   "], "method": "greedy"}).json()
    assert got["translations"] == [f"{a}\r\n\n{b}\r\n{c}\n", "", ""]


def test_n_best_and_scores(client, translator):
    want = translator.translate(SENTENCES[:2], n_best=2, beam_size=2, return_scores=True)
    got = post(client, {"q": SENTENCES[:2], "n_best": 2, "beam_size": 2}).json()
    for hyps, want_hyps in zip(got["translations"], want):
        assert [h["text"] for h in hyps] == [h.text for h in want_hyps]
        np.testing.assert_allclose([h["score"] for h in hyps],
                                   [h.score for h in want_hyps], rtol=1e-5, atol=1e-5)
        assert [h["finished"] for h in hyps] == [h.finished for h in want_hyps]
    # Two lines: hypothesis k joins each line's k-th, scores add up.
    two = post(client, {"q": "\n".join(SENTENCES[:2]), "n_best": 2, "beam_size": 2}).json()
    for k, hyp in enumerate(two["translations"][0]):
        assert hyp["text"] == f"{want[0][k].text}\n{want[1][k].text}"
        assert hyp["score"] == pytest.approx(want[0][k].score + want[1][k].score, rel=1e-5)
    (greedy,) = translator.translate(SENTENCES[:1], method="greedy", return_scores=True)
    scored = post(client, {"q": SENTENCES[0], "method": "greedy", "scores": True}).json()
    assert scored["translations"][0][0]["text"] == greedy.text
    assert scored["translations"][0][0]["score"] == pytest.approx(greedy.score, rel=1e-5)


def test_a_seed_gives_the_direct_sample_and_no_seed_returns_the_one_used(client, translator):
    lines = [SENTENCES[0], "", SENTENCES[1]]
    want = translator.translate(lines, method="sample", temperature=2.0,
                                rng=jax.random.key(11))
    body = {"q": ["\n".join(lines[:2]), lines[2]], "method": "sample", "temperature": 2.0}
    got = post(client, dict(body, seed=11)).json()
    assert got == {"translations": [f"{want[0]}\n", want[2]], "seed": 11}
    drawn = post(client, body).json()
    assert 0 <= drawn["seed"] < 2 ** 32
    assert post(client, dict(body, seed=drawn["seed"])).json() == drawn


def test_concurrent_http_requests_share_decoder_batches(translator):
    # Ten minutes of max wait: the batch goes when its fourth sentence (max_batch) comes,
    # however late each thread arrives.
    limits = dataclasses.replace(LIMITS, max_wait_ms=600_000)
    with serve(translator, limits) as c:
        wait_ready(c)
        registry = c.app.state.jformer.metrics.registry
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda s: post(c, {"q": s, "method": "greedy"}),
                                    SENTENCES[:4]))
        batches = registry.get_sample_value("jformer_batch_sentences_count")
    assert [a.json()["translations"][0] for a in answers] == translator.translate(
        SENTENCES[:4], method="greedy")
    assert batches == 1
    assert registry.get_sample_value("jformer_batch_sentences_sum") == 4


# ---------------------------------------------------------------------------- bad input
BAD = [  # (body or raw bytes, headers, status, reason, field, words in the message)
    (b'{"q": "x",}', JSON, 400, "invalid_json", "body", "not valid JSON", "line 1"),
    (b'{"q": "caf\xe9"}', JSON, 400, "invalid_json", "body", "not valid UTF-8", "byte 10"),
    (b'{"q": "x"}', {"Content-Type": "text/plain"}, 415, "unsupported_media", "Content-Type",
     "application/json; got text/plain"),
    (b'{"q": "x"}', {}, 415, "unsupported_media", "Content-Type", "no Content-Type"),
    (b'{"q": "x"}', {"Content-Type": "application/json; charset=latin-1"}, 415,
     "unsupported_media", "Content-Type", "UTF-8"),
    (b'["x"]', JSON, 422, "invalid_request", "body", "JSON object", "an array"),
    ({"q": 3}, None, 422, "invalid_request", "q", "valid string"),
    ({"q": ["a", 5]}, None, 422, "invalid_request", "q[1]", "valid string", "got 5"),
    ({"q": "a", "beam": 4}, None, 422, "invalid_request", "beam", "unknown field"),
    ({"q": "a", "beam_size": "4"}, None, 422, "invalid_request", "beam_size", "integer"),
    ({"q": "a", "beam_size": True}, None, 422, "invalid_request", "beam_size", "integer"),
    ({"q": "a", "beam_size": 0}, None, 422, "invalid_request", "beam_size", "greater than"),
    ({"q": "a", "beam_size": 5}, None, 422, "invalid_request", "beam_size", "--max-beam"),
    ({"q": "a", "n_best": 3, "beam_size": 2}, None, 422, "invalid_request", "n_best",
     "at most 2"),
    ({"q": "a", "n_best": 2, "method": "greedy"}, None, 422, "invalid_request", "n_best",
     "at most 1"),
    ({"q": "a", "method": "topk"}, None, 422, "invalid_request", "method", "'beam'"),
    ({"q": "a", "alpha": -1}, None, 422, "invalid_request", "alpha", "greater than"),
    ({"q": "a", "temperature": 0}, None, 422, "invalid_request", "temperature", "greater"),
    ({"q": "a", "max_len": 65}, None, 422, "invalid_request", "max_len", "64"),
    ({"q": "a", "top_k": 401}, None, 422, "invalid_request", "top_k", "400"),
    ({"q": "a", "seed": 2 ** 32}, None, 422, "invalid_request", "seed", "less than"),
    ({"beam_size": 2}, None, 422, "invalid_request", "q", "required"),
    (b'{"q": "a", "alpha": NaN}', JSON, 422, "invalid_request", "alpha", "finite"),
    ({"q": ["a"] * 9}, None, 413, "too_large", "q", "9 lines", "--max-sentences"),
    ({"q": "a\nb\nc\nd\ne\nf\ng\nh\ni"}, None, 413, "too_large", "q", "9 lines"),
    ({"q": ["ok", "x" * 301]}, None, 413, "too_large", "q[1]", "301 characters",
     "--max-chars"),
    ({"q": "x" * 5000}, None, 413, "too_large", "body", "--max-body-bytes"),
    ({"q": "bad\x00"}, None, 422, "invalid_request", "q", "U+0000"),
    ({"q": ["fine", "bell\x07"]}, None, 422, "invalid_request", "q[1]", "U+0007"),
    (b'{"q": "half \\ud800 pair"}', JSON, 422, "invalid_request", "q", "lone surrogate"),
    # Each of these four got a 500 before: json.loads' RecursionError, and a lone
    # surrogate quoted in the message that the JSON response could not encode.
    (b'{"q": ' + b"[" * 2000 + b"]" * 2000 + b"}", JSON, 400, "invalid_json", "body",
     "more than 32 deep"),
    (b'{"q": "a", "x": ' + b"[" * 32 + b"]" * 32 + b"}", JSON, 400, "invalid_json", "body",
     "more than 32 deep"),
    (b'{"q": "a", "\\udc00": 1}', JSON, 422, "invalid_request", "body", "unicode string",
     '"\\udc00"'),
    (b'{"q": "a", "method": "\\ud800"}', JSON, 422, "invalid_request", "method",
     'got "\\ud800"'),
    (b'{"q": "a", "q": ["b"]}', JSON, 400, "invalid_json", "q", '"q" appears twice'),
    ({"q": "a", "k" * 3000: 1}, None, 422, "invalid_request", "k" * 57 + "...",
     "unknown field"),
]


@pytest.mark.parametrize("body, headers, status, reason, field, words", [
    (case[0], case[1], *case[2:5], case[5:]) for case in BAD])
def test_bad_input_gets_a_json_error_naming_the_field(client, body, headers, status, reason,
                                                      field, words):
    if isinstance(body, bytes):
        response = client.post("/v1/translate", content=body, headers=headers)
    else:
        response = client.post("/v1/translate", json=body)
    assert_error(response, status, reason, field, *words)


def test_after_every_kind_of_bad_input_the_server_still_translates(client, translator):
    for body, headers, *_ in BAD:
        if isinstance(body, bytes):
            client.post("/v1/translate", content=body, headers=headers)
        else:
            client.post("/v1/translate", json=body)
    assert_error(client.get("/nowhere"), 404, "not_found", None, "GET /nowhere")
    assert_error(client.get("/v1/translate"), 405, "method_not_allowed", None, "GET")
    assert_error(client.get("/v1/health", headers={"X-Pad": "a" * (16 << 10)}), 431,
                 "headers_too_large", "headers", "over 16384 bytes")
    other_params = {"Content-Type": 'application/json; foo=bar; charset="UTF-8"'}
    assert client.post("/v1/translate", content=b'{"q": "a", "method": "greedy"}',
                       headers=other_params).status_code == 200
    chunked = client.post("/v1/translate", headers=JSON,
                          content=iter([b'{"q": "', b"x" * 3000, b"y" * 3000, b'"}']))
    assert_error(chunked, 413, "too_large", "body", "--max-body-bytes")
    assert post(client, {"q": SENTENCES[0]}).json() == {
        "translations": translator.translate(SENTENCES[:1])}


@pytest.mark.filterwarnings("ignore::jformer.inference.OverlongWarning")  # the server's
def test_odd_texts_are_translated_cleanly(client, translator):
    word = "Donaudampfschifffahrtsgesellschaftskapitänsmütze" * 5  # > 64 tokens: truncated
    odd = ["", "   ", "\t", "\u200b", word, "emoji \U0001F600 and ümlauts", "I see\ta dog."]
    got = post(client, {"q": odd, "method": "greedy"}).json()["translations"]
    assert got[:4] == ["", "", "", ""]  # nothing to translate (a zero-width space: no tokens)
    with pytest.warns(UserWarning, match="truncated"):  # what the Translator does with it
        want = translator.translate(odd[4:], method="greedy")
    assert got[4:] == want
    assert post(client, {"q": SENTENCES[2]}).json() == {
        "translations": translator.translate(SENTENCES[2:3])}


def test_overlong_lines_are_refused_when_decode_overlong_is_error(translator):
    strict = Proxy(translator, decode_cfg=dataclasses.replace(translator.decode_cfg,
                                                              overlong="error"))
    with serve(strict) as c:
        wait_ready(c)
        response = post(c, {"q": ["fine", "ok\n" + "x " * 80]})
        assert_error(response, 413, "too_large", "q[1]", "q[1] line 2", "max_len=64")


# ---------------------------------------------------------------------------- overload
def test_a_full_queue_answers_503_with_retry_after_at_once(translator):
    limits = dataclasses.replace(LIMITS, max_queue=8, max_sentences=8)
    with serve(translator, limits) as c:
        wait_ready(c)
        state = c.app.state.jformer
        gate = threading.Event()
        state.batcher.call(lambda: gate.wait(60))  # the decoder is busy
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(post, c, {"q": SENTENCES[:1] * 8, "method": "greedy"})
            deadline = time.monotonic() + 30
            while state.batcher.queued < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            refused = post(c, {"q": "one more", "method": "greedy"})
            assert state.batcher.queued == 8  # answered while the queue had not moved
            gate.set()
            assert first.result(60).status_code == 200
        assert_error(refused, 503, "queue_full", None, "queue is full", "limit 8")
        assert int(refused.headers["Retry-After"]) >= 1
        assert post(c, {"q": "five", "method": "greedy"}).status_code == 200
        rejected = state.metrics.registry.get_sample_value(
            "jformer_rejected_requests_total", {"reason": "queue_full"})
        assert rejected == 1


def test_a_request_past_its_deadline_gets_504_and_the_next_one_works(translator):
    with serve(translator, dataclasses.replace(LIMITS, timeout_s=0.5)) as c:
        wait_ready(c)
        gate = threading.Event()
        c.app.state.jformer.batcher.call(lambda: gate.wait(60))
        assert_error(post(c, {"q": SENTENCES[0], "method": "greedy"}), 504, "timeout", None,
                     "0.5 s", "--timeout-s")
        gate.set()
        assert post(c, {"q": SENTENCES[0], "method": "greedy"}).json() == {
            "translations": translator.translate(SENTENCES[:1], method="greedy")}


def test_a_failed_batch_answers_500_and_the_server_goes_on(proxy, client, translator):
    assert_error(post(client, {"q": ["EXPLODE", "fine"], "method": "greedy"}), 500,
                 "batch_failed", None, "RuntimeError", "ran out of memory")
    assert client.get("/v1/health").status_code == 200
    assert post(client, {"q": SENTENCES[1], "method": "greedy"}).json() == {
        "translations": translator.translate(SENTENCES[1:2], method="greedy")}


# ---------------------------------------------------------------------------- life cycle
def test_not_ready_until_loaded_while_health_answers(translator):
    loaded = threading.Event()

    def load():
        loaded.wait(60)
        return translator, describe(translator)

    with TestClient(create_app(load, LIMITS)) as c:
        assert c.get("/v1/health").json() == {"status": "ok", "phase": "loading"}
        assert_error(c.get("/v1/ready"), 503, "not_ready", None, "loading")
        response = post(c, {"q": "x"})
        assert_error(response, 503, "not_ready", None)
        assert response.headers["Retry-After"] == "2"
        assert c.get("/metrics").status_code == 200
        loaded.set()
        wait_ready(c)
        assert post(c, {"q": SENTENCES[0], "method": "greedy"}).status_code == 200


def test_a_failed_load_is_reported_and_handed_to_on_failure():
    failures = []

    def load():
        raise FileNotFoundError("no checkpoint in /nowhere")

    with TestClient(create_app(load, LIMITS, on_failure=failures.append)) as c:
        deadline = time.monotonic() + 30
        while not failures and time.monotonic() < deadline:
            time.sleep(0.01)
        assert_error(c.get("/v1/ready"), 503, "failed", None, "no checkpoint in /nowhere")
    assert [type(e) for e in failures] == [FileNotFoundError]


def test_warm_up_runs_every_row_count_of_the_smallest_buckets(translator):
    calls = []

    class Counting(Proxy):
        def translate(self, sentences, **kwargs):
            calls.append((len(sentences), kwargs))
            return [""] * len(sentences)

    from jformer.serve.loading import default_settings

    shapes = warm_up(Counting(translator), default_settings(translator), 4, 2)
    assert shapes == [(16, 1), (16, 2), (16, 4), (32, 1), (32, 2), (32, 4)]
    assert [n for n, _ in calls] == [1, 2, 4, 1, 2, 4]
    assert all(kw == dict(method="beam", beam_size=2, alpha=0.6, n_best=1, max_len=None,
                          batch_size=4) for _, kw in calls)


# ---------------------------------------------------------------------------- attention
def test_attention_gives_pieces_and_weights_per_layer_and_head(client, translator):
    from jformer.inference.attention_maps import attention_weights

    got = post(client, {"q": SENTENCES[0]}, "/v1/attention").json()
    weights, labels = attention_weights(translator, SENTENCES[0])
    assert got["source"] == labels["source"] and got["target"] == labels["output"]
    assert got["translation"] == translator.translate(SENTENCES[:1], method="greedy")[0]
    cross = np.asarray(got["cross_attention"])
    cfg = translator.model_cfg
    assert cross.shape == (cfg.num_decoder_layers, cfg.num_heads, len(labels["output"]),
                           len(labels["source"]))
    np.testing.assert_allclose(cross[0], weights[("decoder", 0, "cross_attention")],
                               atol=1e-5)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-3)
    assert_error(post(client, {"q": "two\nlines"}, "/v1/attention"), 422, "invalid_request",
                 "q", "one non-empty line")
    assert_error(post(client, {"q": " "}, "/v1/attention"), 422, "invalid_request", "q")
    assert_error(post(client, {"q": "\u200b"}, "/v1/attention"), 422, "invalid_request", "q",
                 "no tokens")


def test_metrics_count_requests_sentences_tokens_and_batches(translator):
    with serve(translator) as c:
        wait_ready(c)
        post(c, {"q": [SENTENCES[0], LONG], "method": "greedy"})
        post(c, {"q": 5})
        text = c.get("/metrics").text
    registry = c.app.state.jformer.metrics.registry
    value = registry.get_sample_value
    assert value("jformer_requests_total", {"route": "/v1/translate", "status": "200"}) == 1
    assert value("jformer_requests_total", {"route": "/v1/translate", "status": "422"}) == 1
    assert value("jformer_sentences_total") == 2
    assert value("jformer_batch_sentences_count") == 2  # two buckets: two batches
    ids = translator.tokenizer.encode([SENTENCES[0], LONG])
    assert value("jformer_source_tokens_total") == sum(len(i) for i in ids)
    hyps = translator.translate([SENTENCES[0], LONG], method="greedy", return_scores=True)
    assert value("jformer_target_tokens_total") == sum(len(h.ids) for h in hyps)
    assert value("jformer_queue_sentences") == 0
    assert value("jformer_request_duration_seconds_count", {"route": "/v1/translate"}) == 2
    for name in ("jformer_queue_wait_seconds_bucket", "jformer_batch_duration_seconds_sum",
                 "process_resident_memory_bytes", "jformer_model_info{", 'source_lang="en"'):
        assert name in text
