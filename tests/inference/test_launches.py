"""A call's batches in flight: launch order, the in-flight bound, and
``translate(..., wait=False)`` giving what ``translate`` gives."""
import pytest

from jformer.inference.launches import Launches, Pending
from tests.inference.record import record_batches
from tests.inference.test_translator import SHORT


@pytest.mark.parametrize("in_flight,order", [
    (2, ["start 0", "start 1", "read 0", "start 2", "read 1", "read 2"]),
    (1, ["start 0", "read 0", "start 1", "read 1", "start 2", "read 2"]),
    (5, ["start 0", "start 1", "start 2", "read 0", "read 1", "read 2"])])
def test_batches_launch_in_order_with_at_most_in_flight_unread(in_flight, order):
    events, hyps = [], [None] * 3

    def start(i):
        events.append(f"start {i}")
        return f"output {i}"

    def read(i, out):
        events.append(f"read {i}")
        hyps[i] = out

    launches = Launches(3, start, read, in_flight, hyps)
    assert events == order[:min(in_flight, 3)]  # launched before anything is read
    assert launches.finish() == ["output 0", "output 1", "output 2"]
    assert events == order


def test_a_pending_result_is_computed_once():
    calls = []
    pending = Pending(lambda: calls.append(1) or ["x"])
    assert calls == []
    assert pending.result() == ["x"] and pending.result() == ["x"]
    assert calls == [1]
    assert Pending.done(["y"]).result() == ["y"]


def test_translate_without_waiting_has_launched_its_first_batches(translator, monkeypatch):
    sentences = SHORT * 2  # 12 non-empty sentences: 3 batches of 4
    want = translator.translate(sentences, method="greedy")
    launched = []
    record_batches(monkeypatch, translator, lambda inputs_BS: launched.append(len(inputs_BS)))
    pending = translator.translate(sentences, method="greedy", wait=False)
    assert launched == [4] * translator.in_flight  # under way before result() is asked
    assert pending.result() == want
    assert launched == [4, 4, 4]


def test_html_without_waiting_is_translated_at_once(translator):
    texts = ["<p>It is <b>late</b>.</p>"]
    pending = translator.translate(texts, format="html", method="greedy", wait=False)
    assert isinstance(pending, Pending)
    assert pending.result() == translator.translate(texts, format="html", method="greedy")
