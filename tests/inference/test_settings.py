"""jformer.inference.settings: defaults, checks, normalisation and the compiled spec."""
import dataclasses

import pytest

from jformer.config import EXACT_ALL, BeamRules, DecodeConfig
from jformer.inference.batch_decode import SearchSpec
from jformer.inference.settings import SearchSettings

CFG = DecodeConfig(beam_size=5, alpha=0.7, temperature=0.9, top_k=12)


def test_defaults_come_from_the_decode_config():
    assert SearchSettings.of(CFG) == SearchSettings("beam", 5, 0.7, 1, None)
    assert SearchSettings.of(CFG, method="sample") == SearchSettings(
        "sample", temperature=0.9, top_k=12)
    assert SearchSettings.of(CFG, beam_size=2, alpha=0.0, n_best=2, max_len=30) == \
        SearchSettings("beam", 2, 0.0, 2, 30)


def test_fields_a_method_ignores_are_fixed_so_equal_searches_compare_equal():
    greedy = [SearchSettings.of(CFG, method="greedy", alpha=a, temperature=t, top_k=k)
              for a, t, k in ((0.0, 1.0, 0), (2.0, 0.5, 40))]
    assert greedy[0] == greedy[1] == SearchSettings("greedy")
    beams = {SearchSettings.of(CFG, temperature=t, top_k=k) for t, k in ((1.0, 0), (3.0, 9))}
    assert len(beams) == 1


def test_spec_and_penalty_per_method():
    beam = SearchSettings.of(CFG, n_best=2)
    top_exact, top_full = BeamRules("top_w", "exact"), BeamRules("top_w", "full")
    assert beam.spec(40, 8, top_exact) == SearchSpec("beam", 5, 40, chunk_size=8, n_best=2,
                                                     rules=top_exact)
    assert beam.spec(40, 8, top_exact, 8) == SearchSpec(
        "beam", 5, 40, chunk_size=8, n_best=2, rules=top_exact, shrink_floor=8)
    assert beam.spec(40, 8, top_full) == SearchSpec("beam", 5, 40, chunk_size=8, n_best=2,
                                                    rules=top_full)
    assert beam.spec(40, 8, top_full) != beam.spec(40, 8, top_exact)  # another program
    assert beam.penalty_alpha == 0.7
    # Beam 1 is greedy search, still scored with the length penalty; greedy and sampling
    # keep the spec's fixed rules whatever the run's (fewer compiled programs).
    one = SearchSettings.of(CFG, beam_size=1)
    assert one.spec(40, 8, top_full, 4) == SearchSpec("greedy", 1, 40, chunk_size=8,
                                                      shrink_floor=4)
    assert one.penalty_alpha == 0.7
    sample = SearchSettings.of(CFG, method="sample")
    assert sample.spec(40, 8, top_full) == SearchSpec("sample", 1, 40, top_k=12, chunk_size=8)
    assert sample.penalty_alpha == 0.0
    assert SearchSettings.of(CFG, method="greedy").spec(40, 4, EXACT_ALL) == SearchSpec(
        "greedy", 1, 40, chunk_size=4)
    assert sample.spec(40, 8, EXACT_ALL, 8) == sample.spec(40, 8, EXACT_ALL)  # no stages


def test_spec_takes_the_rules_by_name_never_by_default():
    """``spec`` has no default rules, and the config's are its two fields, checked: a
    caller cannot search with rules its run did not choose."""
    beam = SearchSettings.of(CFG)
    with pytest.raises(TypeError, match="rules"):
        beam.spec(40, 8)  # type: ignore[call-arg]
    assert DecodeConfig().rules == BeamRules("top_w", "full")  # today's defaults
    assert beam.spec(40, 8, DecodeConfig(stop="exact").rules).rules == BeamRules("top_w",
                                                                                "exact")
    for bad, field in ((("best", "full"), "decode.eos_candidates"),
                       (("all", "patience"), "decode.stop")):
        with pytest.raises(ValueError, match=f"{field} must be one of"):
            BeamRules(*bad)
    assert BeamRules("top_w", "full").search_kwargs() == dict(eos_candidates="top_w",
                                                             stop="full")


def test_stages_halve_down_to_the_floor_for_greedy_and_beam_only():
    beam = SearchSpec("beam", 4, 40, shrink_floor=8)
    assert beam.stage_sizes(32) == (16, 8) and beam.stage_sizes(64) == (32, 16, 8)
    assert beam.stage_sizes(15) == () and SearchSpec("beam", 4, 40).stage_sizes(32) == ()
    assert SearchSpec("greedy", shrink_floor=3).stage_sizes(13) == (6, 3)
    # Their per-source keys, prefixes and phrases are closed over: no stages.
    for other in (dict(method="sample"), dict(prefix_len=5), dict(constraint_count=2)):
        assert dataclasses.replace(beam, **other).stage_sizes(32) == ()


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="nucleus"), "method must be one of"),
    (dict(beam_size=0), "beam_size must be a positive int; got 0"),
    (dict(beam_size=2.0), "beam_size must be a positive int; got 2.0"),
    (dict(n_best=True), "n_best must be a positive int; got True"),
    (dict(max_len=0), "max_len must be a positive int or None; got 0"),
    (dict(alpha=-0.5), "alpha"),
    (dict(method="sample", temperature=0.0), "temperature"),
    (dict(n_best=6), "n_best must be <= 5 for method='beam' with beam_size=5; got 6"),
    (dict(method="greedy", n_best=2), "n_best must be <= 1 for method='greedy'"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SearchSettings.of(CFG, **kwargs)


def test_translate_kwargs_round_trip():
    for settings in (SearchSettings.of(CFG, n_best=3, max_len=20),
                     SearchSettings.of(CFG, method="sample", max_len=7),
                     SearchSettings.of(CFG, method="greedy")):
        assert SearchSettings.of(CFG, **settings.translate_kwargs()) == settings
