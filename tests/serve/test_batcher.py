"""The dynamic batcher: sharing, settings kept apart, seeds, flushing, queue bound, failures.

Sharing and results use the real Translator of the committed tiny workdir; the
scheduling tests use a fake translator that upper-cases (no compiles).
"""
import asyncio
import threading
import time

import numpy as np
import pytest

pytest.importorskip("prometheus_client", reason="needs the serve extra: pip install -e '.[serve]'")

import jax  # noqa: E402

from jformer.inference import Hypothesis, bucket_for  # noqa: E402
from jformer.inference.launches import Pending  # noqa: E402
from jformer.serve.batcher import (  # noqa: E402
    Batcher, PendingRequest, QueueFull, Stopped)
from jformer.inference.settings import SearchSettings  # noqa: E402
from tests.serve.conftest import LONG, SENTENCES  # noqa: E402

GREEDY = SearchSettings.normalized("greedy", beam_size=4, alpha=0.6, n_best=1, max_len=None,
                                   temperature=1.0, top_k=0)


def settings(method, beam_size=2, alpha=0.6, n_best=1, temperature=1.0):
    return SearchSettings.normalized(method, beam_size=beam_size, alpha=alpha, n_best=n_best,
                                     max_len=None, temperature=temperature, top_k=0)


class NoSlots:
    """A fake translator's continuous-batching side: none (every search in batches)."""

    def continuous_for(self, settings):
        return False

    def slots_busy(self):
        return False


class Recording:
    """Passes translate() through and records each call's sentences and settings."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.in_flight = inner.in_flight
        self.continuous_for, self.slots_busy = inner.continuous_for, inner.slots_busy
        self.step_slots = inner.step_slots

    def translate(self, sentences, **kwargs):
        self.calls.append((list(sentences), {k: v for k, v in kwargs.items() if k != "rng"}))
        return self.inner.translate(sentences, **kwargs)


class Upper(NoSlots):
    """A fake translator: upper-cases; waits on ``gate``; raises on a sentence "BAD"."""
    in_flight = 2

    def __init__(self):
        self.calls, self.gate = [], threading.Event()
        self.gate.set()

    def translate(self, sentences, wait=True, **kwargs):
        self.gate.wait(30)
        self.calls.append(list(sentences))
        if "BAD" in sentences:
            raise RuntimeError("the decoder blew up")
        out = self.upper(sentences)
        return out if wait else Pending.done(out)

    def upper(self, sentences):
        return [Hypothesis(s.upper(), -1.0, np.zeros(2, np.int32), True) for s in sentences]


class Unread(Upper):
    """Upper whose launched batches are read later: ``events`` records each launch and
    each read (``on_launch(batch)`` runs inside each launch)."""

    def __init__(self, in_flight, on_launch=lambda batch: None):
        super().__init__()
        self.in_flight, self.on_launch, self.events = in_flight, on_launch, []

    def translate(self, sentences, wait=True, **kwargs):
        batch = sentences[0]
        self.events.append(("launch", batch))
        self.on_launch(batch)

        def read():
            self.events.append(("read", batch))
            return self.upper(sentences)
        return Pending(read)


def job_for(translator, sentences, setting, loop, seed=None, positions=None):
    lengths = [len(ids) for ids in translator.tokenizer.encode(sentences)]
    if seed is not None and positions is None:
        positions = list(range(len(sentences)))
    return PendingRequest(sentences, lengths,
                          [bucket_for(n, translator.buckets) for n in lengths],
                          setting, loop, seed=seed, positions=positions)


def fake_job(sentences, loop, setting=GREEDY, bucket=16):
    return PendingRequest(sentences, [3] * len(sentences), [bucket] * len(sentences), setting,
                          loop)


def run(batcher, make_jobs):
    """Submits the jobs make_jobs(loop) gives, at once, then starts the batcher; their
    results or exceptions."""
    async def main():
        jobs = make_jobs(asyncio.get_running_loop())
        for job in jobs:
            batcher.submit(job)
        batcher.start()
        return await asyncio.wait_for(
            asyncio.gather(*(j.future for j in jobs), return_exceptions=True), 120)
    try:
        return asyncio.run(main())
    finally:
        batcher.stop(10)


def texts(result):
    return [hyps[0].text for hyps in result]


def test_concurrent_requests_share_one_batch_and_each_gets_its_own_results(translator):
    recording = Recording(translator)
    batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=0.5, max_queue=64)
    batcher.translator = recording
    requests = [SENTENCES[:1], SENTENCES[1:3], SENTENCES[3:4]]
    results = run(batcher, lambda loop: [job_for(translator, r, GREEDY, loop)
                                         for r in requests])
    assert len(recording.calls) == 1 < len(requests)  # one decoder batch for three requests
    assert sorted(recording.calls[0][0]) == sorted(SENTENCES[:4])
    for request, result in zip(requests, results):
        want = translator.translate(request, method="greedy", return_scores=True)
        assert texts(result) == [h.text for h in want]
        np.testing.assert_allclose([r[0].score for r in result], [h.score for h in want],
                                   rtol=1e-5, atol=1e-5)


def test_beam_requests_join_running_slots_under_decode_continuous(translator):
    """decode.continuous: a beam request joins the translator's slots at once (an hour of
    max wait holds nothing back), requests submitted while others decode join the same
    slots, and each gets its own translation."""
    import dataclasses

    from jformer.inference import continuous_launches
    from jformer.inference.translator import Translator

    slots = Translator(translator.model_cfg, translator.params, translator.tokenizer,
                       dataclasses.replace(translator.decode_cfg, continuous=True))
    beam = settings("beam")
    batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=3600.0, max_queue=64)
    batcher.translator = slots
    held = []  # at each step: the translate calls whose sources are in the slots
    real_step = continuous_launches.SlotDecoder.step

    def step(self):
        held.append({id(o.fail.__self__) for occ in self._occupants for o in occ if o})
        return real_step(self)

    first, late = [[s] for s in SENTENCES[:4]], [[s] for s in SENTENCES[4:7]]

    async def main():
        loop = asyncio.get_running_loop()
        jobs = [job_for(slots, r, beam, loop) for r in first]
        for job in jobs:
            batcher.submit(job)
        batcher.start()
        while not held:  # the first ones decode: now the late ones come
            await asyncio.sleep(0.001)
        late_jobs = [job_for(slots, r, beam, loop) for r in late]
        for job in late_jobs:
            batcher.submit(job)
        return await asyncio.wait_for(asyncio.gather(*(j.future for j in jobs + late_jobs)),
                                      120)

    mp = pytest.MonkeyPatch()
    mp.setattr(continuous_launches.SlotDecoder, "step", step)
    try:
        results = asyncio.run(main())
    finally:
        batcher.stop(10)
        mp.undo()
    # calls (a first group, the late requests' groups) decoded side by side in the slots
    assert max(len(calls) for calls in held) > 1
    for request, result in zip(first + late, results):
        (want,) = translator.translate(request, beam_size=2, alpha=0.6, return_scores=True)
        assert result[0][0].text == want.text
        assert result[0][0].score == pytest.approx(want.score, rel=1e-5, abs=1e-5)


class BusySlots(Upper):
    """Slots that stay busy (a steady beam load), and batches that decode until read."""

    def __init__(self):
        super().__init__()
        self.busy, self.steps = True, 0

    def slots_busy(self):
        return self.busy

    def step_slots(self):
        self.steps += 1
        time.sleep(0.001)

    def translate(self, sentences, wait=True, **kwargs):
        out = self.upper(sentences)
        return out if wait else Pending(lambda: out)


def test_a_batch_is_read_while_the_slots_stay_busy():
    """A greedy request decodes in a batch beside busy slots: it is read between slot
    rounds, not only once the slots go idle (which a steady load never lets happen)."""
    busy = BusySlots()
    batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=0.0, max_queue=64)
    batcher.translator = busy

    async def main():
        job = fake_job(["a"], asyncio.get_running_loop())
        batcher.submit(job)
        batcher.start()
        return await asyncio.wait_for(job.future, 30)

    try:
        assert texts(asyncio.run(main())) == ["A"]
        assert busy.steps >= 1  # the slots were stepped meanwhile
    finally:
        busy.busy = False
        batcher.stop(10)


def test_different_settings_never_share_a_batch(translator):
    recording = Recording(translator)
    batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=0.3, max_queue=64)
    batcher.translator = recording
    cases = [(SENTENCES[0], settings("greedy"), None),
             (SENTENCES[1], settings("beam", alpha=0.6), None),
             (SENTENCES[2], settings("beam", alpha=1.5), None),
             (SENTENCES[3], settings("sample", temperature=2.0), 5)]
    results = run(batcher, lambda loop: [job_for(translator, [s], st, loop, seed=seed)
                                         for s, st, seed in cases])
    assert sorted(len(sentences) for sentences, _ in recording.calls) == [1, 1, 1, 1]
    for (sentence, setting, seed), result in zip(cases, results):
        (call,) = [kw for sentences, kw in recording.calls if sentences == [sentence]]
        assert call["method"] == setting.method
        kwargs = setting.translate_kwargs()
        if seed is not None:
            kwargs["rng"] = jax.random.key(seed)
        (want,) = translator.translate([sentence], return_scores=True, **kwargs)
        assert result[0][0].text == want.text
        assert result[0][0].score == pytest.approx(want.score, rel=1e-5, abs=1e-5)


def test_equivalent_settings_share_greedy_ignores_beam_and_sampling_knobs():
    assert settings("greedy", beam_size=2, alpha=0.1) == settings("greedy", beam_size=9,
                                                                  alpha=2.0, temperature=3.0)
    assert settings("beam", alpha=0.6) != settings("beam", alpha=0.7)
    assert settings("beam", n_best=1) != settings("beam", n_best=2)
    assert settings("sample", temperature=1.0) != settings("sample", temperature=2.0)


def test_samples_in_a_shared_batch_follow_each_request_seed_and_line_number(translator):
    recording = Recording(translator)
    batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=0.5, max_queue=64)
    batcher.translator = recording
    hot = settings("sample", temperature=2.0)
    # Request B's sentence is its line 1 (its line 0 was blank and not decoded).
    results = run(batcher, lambda loop: [
        job_for(translator, SENTENCES[:2], hot, loop, seed=7),
        job_for(translator, [SENTENCES[2]], hot, loop, seed=8, positions=[1])])
    assert len(recording.calls) == 1
    sample = lambda lines, seed: translator.translate(  # noqa: E731
        lines, method="sample", temperature=2.0, rng=jax.random.key(seed))
    assert texts(results[0]) == sample(SENTENCES[:2], 7)
    assert texts(results[1]) == sample(["", SENTENCES[2]], 8)[1:]


def test_a_full_group_is_decoded_without_waiting_and_tokens_cap_a_batch():
    upper = Upper()
    # An hour of max wait: only a full group is decoded before run()'s 120 s deadline.
    batcher = Batcher(max_batch=8, max_batch_tokens=32, max_wait_s=3600.0, max_queue=64)
    batcher.translator = upper
    (result,) = run(batcher, lambda loop: [fake_job(list("abcd"), loop)])
    assert texts(result) == list("ABCD")
    # 32 padded tokens at bucket 16: two sentences a batch.
    assert upper.calls == [["a", "b"], ["c", "d"]]


def test_a_full_queue_refuses_at_once_and_queues_nothing():
    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=0.0, max_queue=4)
    batcher.translator = Upper()

    async def main():
        loop = asyncio.get_running_loop()
        batcher.submit(fake_job(["a", "b", "c"], loop))
        with pytest.raises(QueueFull, match=r"3 sentences waiting, limit 4") as caught:
            batcher.submit(fake_job(["d", "e"], loop))
        assert caught.value.retry_after >= 1
        assert batcher.queued == 3
        last = fake_job(["f"], loop)
        batcher.submit(last)  # still fits
        assert batcher.queued == 4
        batcher.start()
        return await asyncio.wait_for(last.future, 30)

    try:
        assert texts(asyncio.run(main())) == ["F"]
    finally:
        batcher.stop(10)


def test_a_failed_batch_answers_its_requests_with_the_error_and_the_next_one_works():
    upper = Upper()
    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=0.2, max_queue=64)
    batcher.translator = upper

    async def main():
        loop = asyncio.get_running_loop()
        bad, neighbour = fake_job(["BAD", "x"], loop), fake_job(["y"], loop)
        # A job split over two groups: one fails, so the job fails once.
        split = PendingRequest(["BAD", "z"], [3, 3], [16, 32], GREEDY, loop)
        for job in (bad, neighbour, split):  # all queued before the decoder looks
            batcher.submit(job)
        batcher.start()
        failed = await asyncio.gather(bad.future, neighbour.future, split.future,
                                      return_exceptions=True)
        later = fake_job(["later"], loop)
        batcher.submit(later)
        return failed, await asyncio.wait_for(later.future, 30)

    try:
        failed, later = asyncio.run(main())
    finally:
        batcher.stop(10)
    assert all(isinstance(e, RuntimeError) and "blew up" in str(e) for e in failed)
    assert texts(later) == ["LATER"]
    assert batcher.metrics.registry.get_sample_value("jformer_batch_failures_total") == 1
    assert batcher.alive() is False  # stopped by stop(), not by the failure


def test_an_abandoned_job_is_not_decoded():
    upper = Upper()
    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=0.1, max_queue=64)
    batcher.translator = upper

    async def main():
        loop = asyncio.get_running_loop()
        gone, kept = fake_job(["gone"], loop), fake_job(["kept"], loop)
        batcher.submit(gone)
        gone.abandon()  # e.g. its client timed out while it waited
        batcher.submit(kept)
        batcher.start()
        return await asyncio.wait_for(kept.future, 30)

    try:
        assert texts(asyncio.run(main())) == ["KEPT"]
    finally:
        batcher.stop(10)
    assert upper.calls == [["kept"]]


def test_stop_decodes_what_is_queued_then_refuses_work():
    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=60.0, max_queue=64)
    batcher.translator = Upper()

    async def main():
        loop = asyncio.get_running_loop()
        job = fake_job(["queued"], loop)
        batcher.submit(job)
        batcher.start()
        assert await asyncio.to_thread(batcher.stop, 30)  # no 60 s wait: stopping flushes
        with pytest.raises(Stopped):
            batcher.submit(fake_job(["late"], loop))
        return await asyncio.wait_for(job.future, 5)

    assert texts(asyncio.run(main())) == ["QUEUED"]


@pytest.mark.parametrize("in_flight,order", [
    (2, [("launch", "a"), ("launch", "b"), ("read", "a"), ("read", "b")]),
    (1, [("launch", "a"), ("read", "a"), ("launch", "b"), ("read", "b")])])
def test_a_due_batch_is_launched_before_the_one_under_way_is_read(in_flight, order):
    unread = Unread(in_flight)
    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=0.0, max_queue=64)
    batcher.translator = unread
    results = run(batcher, lambda loop: [fake_job(["a"], loop, bucket=16),
                                         fake_job(["b"], loop, bucket=32)])
    assert unread.events == order  # at most in_flight launched and unread
    assert [texts(r) for r in results] == [["A"], ["B"]]
    assert batcher.metrics.registry.get_sample_value("jformer_sentences_total") == 2


def test_a_call_waits_until_the_launched_batches_are_read():
    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=0.0, max_queue=64)
    unread = Unread(2, on_launch=lambda batch: batcher.call(
        lambda: unread.events.append(("call", batch))))
    batcher.translator = unread
    (result,) = run(batcher, lambda loop: [fake_job(["a"], loop)])
    assert texts(result) == ["A"]
    # the call was queued while "a" was launched: "a" is read before it runs
    assert unread.events == [("launch", "a"), ("read", "a"), ("call", "a")]


def test_calls_run_on_the_decoder_thread_between_batches():
    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=0.0, max_queue=64)
    batcher.start()
    try:
        assert batcher.call(lambda: threading.current_thread().name).result(30) == \
            "jformer-decoder"
        with pytest.raises(ZeroDivisionError):
            batcher.call(lambda: 1 / 0).result(30)
        assert batcher.alive()
    finally:
        batcher.stop(10)


def test_sentences_of_two_buckets_form_two_batches(translator):
    recording = Recording(translator)
    batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=0.3, max_queue=64)
    batcher.translator = recording
    (result,) = run(batcher, lambda loop: [job_for(translator, [SENTENCES[0], LONG],
                                                   GREEDY, loop)])
    assert sorted(c[0] for c in recording.calls) == [[LONG], [SENTENCES[0]]]
    assert texts(result) == translator.translate([SENTENCES[0], LONG], method="greedy")


def test_batches_reach_the_translator_as_they_are_and_compile_nothing_per_count(translator):
    recording = Recording(translator)
    batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=0.05, max_queue=64)
    batcher.translator = recording
    four = SENTENCES[:4]
    run(batcher, lambda loop: [job_for(translator, four, GREEDY, loop)])  # compiles 4 rows
    compiles = []

    def count(event, seconds, **kwargs):
        if event in ("/jax/core/compile/jaxpr_trace_duration",
                     "/jax/core/compile/backend_compile_duration"):
            compiles.append(event)
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        batcher = Batcher(max_batch=4, max_batch_tokens=8192, max_wait_s=0.05, max_queue=64)
        batcher.translator = recording
        results = run(batcher, lambda loop: [job_for(translator, four[:2], GREEDY, loop),
                                             job_for(translator, four[2:3], GREEDY, loop)])
        seen = list(compiles)
        jax.jit(lambda x: x * 3 + 1)(np.zeros(7))  # a new program: the listener hears it
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert len(compiles) > len(seen)
    # Three sentences, no copies of the last one: translate() pads the batch to its 4
    # compiled rows itself, with rows that finish at once, and nothing traces or compiles
    assert sorted(recording.calls[-1][0]) == sorted(four[:3])
    assert seen == []
    want = translator.translate(four[:3], method="greedy")
    assert [texts(r) for r in results] == [want[:2], want[2:]]
    assert batcher.metrics.registry.get_sample_value("jformer_sentences_total") == 3


def test_a_malformed_result_fails_its_batch_not_the_decoder_thread():
    class Short(Upper):
        def translate(self, sentences, wait=True, **kwargs):
            return Pending.done(super().translate(sentences)[:-1])

    batcher = Batcher(max_batch=8, max_batch_tokens=8192, max_wait_s=0.0, max_queue=64)
    batcher.translator = Short()
    (error,) = _run_and_check_alive(batcher)
    assert isinstance(error, RuntimeError) and "gave 0 results for 1 sentences" in str(error)


def _run_and_check_alive(batcher):
    async def main():
        job = fake_job(["x"], asyncio.get_running_loop())
        batcher.submit(job)
        batcher.start()
        results = await asyncio.gather(job.future, return_exceptions=True)
        assert batcher.alive() and batcher.call(lambda: "still here").result(30) == \
            "still here"
        return results

    try:
        return asyncio.run(main())
    finally:
        batcher.stop(10)
