"""Continuous batching (jformer.inference.continuous, .continuous_launches): sentences
decoded in slots that refill as others finish translate as batches do."""
import dataclasses

import jax
import numpy as np
import pytest

from jformer.config import ConfigError, DecodeConfig
from jformer.inference import continuous, continuous_launches
from jformer.inference.batch_decode import SearchSpec
from jformer.inference.translator import Translator
from tests.inference.test_translator import CHUNK, CORPUS, DECODE

# lengths from 2 to 20 pieces: sources finish at different steps, in two length buckets
SENTENCES = [en for en, _ in CORPUS[:60] if len(en.split()) < 9][:14]


def _count_admits(monkeypatch) -> list:
    """(device, sources admitted) of every admission that admits some."""
    admits = []
    real = continuous_launches.SlotDecoder._admit

    def counted(self, device):
        free = sum(o is None for o in self._occupants[device])
        if min(free, len(self.waiting)):
            admits.append((device, min(free, len(self.waiting))))
        return real(self, device)

    monkeypatch.setattr(continuous_launches.SlotDecoder, "_admit", counted)
    return admits


@pytest.mark.parametrize("devices, dtype, n_best, ahead", [
    (1, "float32", 1, 1), (2, "float32", 2, 2), (1, "int8", 1, 1), (1, "float32", 1, 3)])
def test_slots_refilled_as_sentences_finish_translate_as_batches_do(
        setup, translator, monkeypatch, devices, dtype, n_best, ahead):
    """4 slots a device (batch_size 4) for 14 sentences: slots are refilled many times,
    and every sentence gets its batch's hypotheses (ids equal, scores to rounding), with
    ``ahead`` advances in flight."""
    if len(jax.local_devices()) < devices:
        pytest.skip(f"needs {devices} local devices (tests/conftest.py asks for 8)")
    monkeypatch.setattr(continuous_launches, "AHEAD", ahead)
    cfg, params, tok = setup
    base = dataclasses.replace(DECODE, dtype=dtype)
    batches = translator if dtype == "float32" and devices == 1 else Translator(
        cfg, params, tok, base, chunk_size=CHUNK, devices=devices)
    slots = Translator(cfg, params, tok, dataclasses.replace(base, continuous=True),
                       chunk_size=CHUNK, devices=devices)
    admits = _count_admits(monkeypatch)
    got = slots.translate(SENTENCES, beam_size=3, n_best=n_best, return_scores=True)
    assert sum(n for _, n in admits) == len(SENTENCES)
    assert len(admits) > 2 * devices  # first fills, then refills
    assert {d for d, _ in admits} == set(range(devices))
    want = batches.translate(SENTENCES, beam_size=3, n_best=n_best, return_scores=True)
    if n_best == 1:
        got, want = [[h] for h in got], [[h] for h in want]
    for i, (g, w) in enumerate(zip(got, want)):
        assert [h.ids.tolist() for h in g] == [h.ids.tolist() for h in w], SENTENCES[i]
        assert [h.finished for h in g] == [h.finished for h in w]
        np.testing.assert_allclose([h.score for h in g], [h.score for h in w], rtol=1e-5,
                                   atol=1e-5)
    assert len({len(h[0].ids) for h in got}) > 3  # sentences end at many different steps


def test_other_searches_fall_back_to_batches(setup, translator, monkeypatch):
    """Greedy, prefixes and constraints decode in batches under decode.continuous."""
    slots = Translator(*setup, dataclasses.replace(DECODE, continuous=True), chunk_size=CHUNK)
    admits = _count_admits(monkeypatch)
    assert slots.translate(SENTENCES[:3], method="greedy") == translator.translate(
        SENTENCES[:3], method="greedy")
    prefix = [None, "The", None]
    assert slots.translate(SENTENCES[:3], target_prefix=prefix) == translator.translate(
        SENTENCES[:3], target_prefix=prefix)
    assert admits == []
    assert slots.translate(SENTENCES[:3]) == translator.translate(SENTENCES[:3])
    assert admits  # a plain beam search takes the slots


def test_empty_sentences_and_an_empty_call(setup):
    slots = Translator(*setup, dataclasses.replace(DECODE, continuous=True), chunk_size=CHUNK)
    assert slots.translate([]) == []
    got = slots.translate(["", SENTENCES[0], "  "])
    assert got[0] == "" and got[2] == "" and got[1] == slots.translate([SENTENCES[0]])[0]


def test_engine_rejects_what_it_cannot_decode(setup):
    cfg, _, _ = setup
    for spec in (SearchSpec("greedy", 1, 8), SearchSpec("beam", 3, 8, prefix_len=2),
                 SearchSpec("beam", 3, 8, constraint_count=1, constraint_len=2)):
        with pytest.raises(ValueError, match="plain beam search"):
            continuous.check_spec(spec, cfg)
    with pytest.raises(ValueError, match="relative positions"):
        continuous.check_spec(SearchSpec("beam", 3, 8),
                              dataclasses.replace(cfg, positional="relative"))


def test_the_setting_is_a_bool():
    with pytest.raises(ConfigError, match="continuous"):
        DecodeConfig(continuous=1)


def test_a_slot_ends_at_its_limit_whatever_the_stopping_rule(setup, translator):
    """max_len 1 with n_best 2: only one hypothesis can finish, so the stopping rule never
    holds; the slot still ends at its limit, as a batch ends at max_len."""
    slots = Translator(*setup, dataclasses.replace(DECODE, continuous=True), chunk_size=CHUNK)
    kwargs = dict(beam_size=3, n_best=2, max_len=1, return_scores=True)
    got, want = slots.translate(SENTENCES[:5], **kwargs), translator.translate(
        SENTENCES[:5], **kwargs)
    assert [[h.ids.tolist() for h in g] for g in got] == [[h.ids.tolist() for h in w]
                                                          for w in want]
    assert [[h.finished for h in g] for g in got] == [[h.finished for h in w] for w in want]


def test_a_failing_step_fails_every_call_it_holds_and_the_next_call_decodes(
        setup, translator, monkeypatch):
    slots = Translator(*setup, dataclasses.replace(DECODE, continuous=True), chunk_size=CHUNK)
    real_run, runs = continuous_launches.SlotDecoder._run, []

    def failing(self, device, jitted, *args, **extra):  # the second advance fails
        runs.append(jitted)
        if jitted is continuous.engine_advance and runs.count(jitted) == 2:
            raise RuntimeError("the device ran out of memory")
        return real_run(self, device, jitted, *args, **extra)

    monkeypatch.setattr(continuous_launches.SlotDecoder, "_run", failing)
    # 4 slots: after one advance most of the first call's sentences, and all of the
    # second's, are still held or waiting
    first = slots.translate(SENTENCES[:6], wait=False)
    second = slots.translate(SENTENCES[6:9], wait=False)
    for pending in (first, second):
        with pytest.raises(RuntimeError, match="ran out of memory"):
            pending.result()
    assert not slots.slots_busy()
    assert slots.translate(SENTENCES[:3]) == translator.translate(SENTENCES[:3])


def test_the_full_stopping_rule_in_slots_and_batches(setup, monkeypatch):
    """decode.stop="full" (with top_w) reaches both paths' searches (its rule is traced
    into each program), and slots translate as batches do under it."""
    from jformer.search import beam

    traced = []

    def counted(*args, **kwargs):
        traced.append(1)
        return beam.full_stop(*args, **kwargs)

    monkeypatch.setitem(beam.STOP_RULES, "full", counted)
    cfg, params, tok = setup
    full = dataclasses.replace(DECODE, stop="full", eos_candidates="top_w")
    out = {}
    for name, decode in (("slots", dataclasses.replace(full, continuous=True)),
                         ("batches", full)):
        before = len(traced)
        t = Translator(cfg, params, tok, decode, chunk_size=CHUNK)
        out[name] = t.translate(SENTENCES, beam_size=3, n_best=3, return_scores=True)
        assert len(traced) > before, name
    for g, w in zip(out["slots"], out["batches"]):
        assert [h.ids.tolist() for h in g] == [h.ids.tolist() for h in w]
        np.testing.assert_allclose([h.score for h in g], [h.score for h in w], rtol=1e-5,
                                   atol=1e-5)
