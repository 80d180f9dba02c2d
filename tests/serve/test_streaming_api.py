"""POST /v1/translate/stream: server-sent events whose text joins to /v1/translate's
answer for the same body (greedy, sampling with a seed, beam), errors before the
stream as JSON 4xx naming the field, and the server answering after them."""
import json

import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

from tests.serve.conftest import SENTENCES  # noqa: E402
from tests.serve.test_app import assert_error, post, serve, wait_ready  # noqa: E402

STREAM = "/v1/translate/stream"


def parse_events(body: str) -> list[tuple[str, dict]]:
    """(event name, data) per server-sent event; the name is "message" when unnamed."""
    events = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        name, data = "message", None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = json.loads(value)
            else:
                raise AssertionError(f"not a server-sent event line: {line!r}")
        events.append((name, data))
    return events


def streamed(client, body: dict) -> tuple[list[dict], dict]:
    r = client.post(STREAM, json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = parse_events(r.text)
    names = [name for name, _ in events]
    assert names == ["message"] * (len(events) - 1) + ["done"], names
    return [data for _, data in events[:-1]], events[-1][1]


@pytest.mark.parametrize("method", ["greedy", pytest.param("sample", marks=pytest.mark.slow)])
def test_increments_join_to_the_translate_answer(client, method):
    for q in SENTENCES[:3]:
        body = {"q": q, "method": method}
        if method == "sample":
            body.update(seed=11, temperature=1.5)
        increments, done = streamed(client, body)
        (want,) = post(client, body).json()["translations"]
        assert all(set(d) == {"text"} and d["text"] for d in increments)
        assert "".join(d["text"] for d in increments) == done["translation"] == want
        assert done.get("seed") == body.get("seed") and done["steps"] >= 1
    assert len(increments) >= 2  # the last sentence streamed in pieces


@pytest.mark.slow  # compiles beam search's stream; its exactness: tests/inference
def test_beam_streams_the_best_so_far_and_ends_with_the_answer(client, translator):
    body = {"q": SENTENCES[0], "method": "beam", "beam_size": 3, "alpha": 0.6}
    bests, done = streamed(client, body)
    assert bests and all(set(d) == {"best"} for d in bests)
    assert done["translation"] == post(client, body).json()["translations"][0]
    assert done["translation"] == translator.translate([SENTENCES[0]], beam_size=3,
                                                        alpha=0.6)[0]


def test_a_blank_line_is_done_at_once(client):
    assert streamed(client, {"q": "  ", "method": "greedy"}) == (
        [], {"translation": "", "steps": 0})


def test_errors_before_the_stream_are_json_naming_the_field(client):
    assert_error(post(client, {"q": ["a", "b"]}, STREAM), 422, "invalid_request", "q",
                 "one line")
    assert_error(post(client, {"q": "a\nb"}, STREAM), 422, "invalid_request", "q",
                 "one line")
    assert_error(post(client, {"q": "a", "n_best": 2, "beam_size": 2}, STREAM), 422,
                 "invalid_request", "n_best")
    assert_error(post(client, {"q": "a", "target_prefix": "Ich"}, STREAM), 422,
                 "invalid_request", "target_prefix")
    for field, value in (("prefix_bias_beta", 0.5), ("alignments", True),
                         ("constraints", ["Hund"]), ("format", "html")):
        assert_error(post(client, {"q": "a", field: value}, STREAM), 422, "invalid_request",
                     field, "not supported by /v1/translate/stream")
    assert_error(post(client, {"q": "a", "beam_size": 99}, STREAM), 422,
                 "invalid_request", "beam_size", "--max-beam")
    assert_error(post(client, {"q": "a", "method": "nucleus"}, STREAM), 422,
                 "invalid_request", "method")
    assert_error(post(client, {"q": "x" * 301}, STREAM), 413, "too_large", "q")
    increments, done = streamed(client, {"q": SENTENCES[2], "method": "greedy"})
    assert done["translation"] == "".join(d["text"] for d in increments)


class FailingDecode:
    """The tokenizer, but decoding output ids fails from the ``after``-th call on."""

    def __init__(self, inner, after):
        self._inner, self.calls, self.after = inner, 0, after

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def decode(self, rows, *args, **kwargs):
        self.calls += 1
        if self.calls >= self.after:
            raise RuntimeError("the decoder ran out of memory")
        return self._inner.decode(rows, *args, **kwargs)


def test_an_error_during_the_stream_is_an_error_event_and_the_server_goes_on(translator):
    from tests.serve.test_app import Proxy

    proxy = Proxy(translator)
    with serve(proxy) as c:
        wait_ready(c)
        proxy.tokenizer = FailingDecode(translator.tokenizer, after=2)
        r = c.post(STREAM, json={"q": SENTENCES[0], "method": "greedy"})
        assert r.status_code == 200  # the first update came before the failure
        events = parse_events(r.text)
        assert [name for name, _ in events] == ["message", "error"]
        error = events[-1][1]["error"]
        assert (error["code"], error["reason"]) == (500, "internal")
        assert "out of memory" in error["message"]
        proxy.tokenizer.after = 10 ** 9
        increments, done = streamed(c, {"q": SENTENCES[2], "method": "greedy"})
        assert done["translation"] == "".join(d["text"] for d in increments)
