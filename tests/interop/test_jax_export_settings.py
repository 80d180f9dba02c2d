"""jformer/interop/jax_export_settings.py: the export's settings carry the run's beam
rule and its steering into the Translator's SearchSpec, and bad values are errors naming
the command-line option."""
import dataclasses
import os
import re

import pytest

from jformer.config import EXACT_ALL, BeamRules
from jformer.interop.jax_export_settings import ExportSettings, default_settings
from jformer.workdir import files

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")


def test_settings_carry_the_runs_beam_rules_into_the_beam_spec():
    """The export searches as the run's Translator: decode.eos_candidates and decode.stop
    reach the export's rules and the beam's SearchSpec (a workdir written before
    decode.stop existed reads as "all", "exact"); rules are a BeamRules, named, never
    defaulted."""
    config = files.load_config(LEGACY)
    assert config.decode.stop == "exact"
    decode = dataclasses.replace(config.decode, eos_candidates="top_w", stop="full")
    settings = default_settings(config.model, decode)
    assert settings.rules == settings.spec(20).rules == BeamRules("top_w", "full")
    assert default_settings(config.model, config.decode).spec(20).rules == BeamRules(
        "all", "exact")
    with pytest.raises(ValueError, match="rules must be a BeamRules"):
        dataclasses.replace(settings, rules=("top_w", "full")).check(config.model)
    with pytest.raises(TypeError, match="rules"):
        ExportSettings(buckets=(32,))  # named, never defaulted


def test_steering_reaches_the_spec_and_the_call():
    model = files.load_config(LEGACY).model
    plain = ExportSettings(buckets=(32,), method="greedy", rules=EXACT_ALL)
    assert plain.call() == "program(params, inputs_BS, alpha) -> (tokens_BT, scores_B, finished_B)"
    lean = ExportSettings(buckets=(32,), method="greedy", prefix_len=8, prefix_bias=True,
                          rules=EXACT_ALL)
    lean.check(model)
    assert (lean.spec(20).prefix_len, lean.spec(20).prefix_bias) == (8, True)
    assert lean.steering() == ["prefix_BP", "prefix_beta"]
    terms = ExportSettings(buckets=(32,), beam_size=3, constraint_count=2, constraint_len=8,
                           rules=EXACT_ALL)
    spec = terms.spec(20)
    assert (spec.method, spec.beam_size, spec.constraint_count, spec.constraint_len) == (
        "beam", 3, 2, 8)
    assert [a.shape for a in terms.steering_avals()] == [(8, 2, 8)]


def test_steering_settings_are_checked_by_option():
    base = dict(buckets=(32,), method="beam", rules=EXACT_ALL)
    for fields, message in (
            (dict(prefix_len=-1), "--prefix-len must be an int >= 0; got -1"),
            (dict(prefix_bias=True), "--prefix-bias needs --prefix-len"),
            (dict(constraint_count=2), "--constraints must be two positive ints C,L"),
            (dict(constraint_count=2, constraint_len=4, method="greedy"),
             "--constraints needs --method beam")):
        with pytest.raises(ValueError, match=re.escape(message)):
            ExportSettings(**{**base, **fields}).check(
                files.load_config(LEGACY).model)
