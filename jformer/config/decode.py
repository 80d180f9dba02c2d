"""Search settings used by evaluation, ``jformer translate`` and the server."""
from __future__ import annotations

import dataclasses
import math

from jformer.config.fields import (ConfigError, check, check_choice, check_number,
                                   check_positive, is_int)
from jformer.config.model import DTYPES
from jformer.config.units import parse_bytes

OVERLONG_POLICIES = ("split", "truncate", "error", "sentences")
# Beam search: which of a step's 2W candidates may finish with EOS (jformer.search.beam)
EOS_CANDIDATES = ("all", "top_w")
# Beam search: when a sentence is done (jformer.search.beam.STOP_RULES)
STOP_RULE_NAMES = ("exact", "full")
BEAM_RULE_CHOICES = {"eos_candidates": EOS_CANDIDATES, "stop": STOP_RULE_NAMES}
DECODE_DTYPES = ("auto", "model") + DTYPES + ("int8",)  # decode.dtype (jformer.inference.precision)


def check_beam_rules(prefix: str = "", **rules: str) -> None:
    """ValueError ``"{prefix}{name} must be one of {choices}; got {value!r}"`` for the
    first of ``rules`` (``eos_candidates``, ``stop``) outside its choices."""
    for name, value in rules.items():
        choices = BEAM_RULE_CHOICES[name]
        if value not in choices:
            raise ValueError(f"{prefix}{name} must be one of {choices}; got {value!r}")


@dataclasses.dataclass(frozen=True)
class BeamRules:
    """Beam search's two rules, which travel together from the run's decode config
    (:attr:`DecodeConfig.rules`) to the compiled search: ``eos_candidates``, which of a
    step's 2W candidates may finish with EOS (:data:`EOS_CANDIDATES`), and ``stop``, when
    a sentence is done (:data:`STOP_RULE_NAMES`). Neither has a default, so a search
    built from a config never falls back to rules the run did not choose; a value
    outside its choices is a ValueError naming the decode field."""

    eos_candidates: str
    stop: str

    def __post_init__(self) -> None:
        check_beam_rules("decode.", **self.search_kwargs())

    def search_kwargs(self) -> dict[str, str]:
        """The keyword arguments of :func:`jformer.search.beam_search` (and beam_step,
        constrained_beam_search) that these rules set."""
        return dict(eos_candidates=self.eos_candidates, stop=self.stop)


# The rules of the Flax WMT example and T5X: jformer.search.beam_search's defaults, the
# decode config's before 2026-12-01 (config.root.FORMER_DEFAULTS), and a SearchSpec's
# when built by hand without rules (benchmarks, tests).
EXACT_ALL = BeamRules("all", "exact")


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """Search settings used by evaluation and ``jformer translate``."""

    beam_size: int = 4  # paper 6.1
    alpha: float = 0.6  # length penalty ((5 + len) / 6)^alpha (paper 6.1)
    max_len_a: float = 1.0  # max output length = a * source length + b (fairseq)
    max_len_b: int = 50  # paper 6.1: input length + 50
    temperature: float = 1.0  # for sampling
    top_k: int = 0  # for sampling; 0: full distribution
    batch_size: int = 64  # sentences per decode batch
    length_buckets: tuple[int, ...] = (16, 32, 64, 128, 256)  # padded source lengths
    # Sources over model.max_len: split (at sentences, clauses, whitespace; translated
    # whole, jformer.inference.segment) | truncate (with a warning) | error. Or sentences:
    # every source cut at its sentences, whatever its length, and a sentence still over
    # model.max_len as under split (a sentence-level model given several sentences in
    # one source translates the first ones and stops: docs/long_inputs.md)
    overlong: str = "split"
    # Most bytes one decode batch's KV cache may take on one device (an int, or a string
    # such as "2GB" or "512MiB"; 0: no limit): batches are cut to fewer rows to fit it
    # (jformer.inference.memory.cache_bytes).
    memory_limit: int | str = 0
    # Beam search: which EOS candidates finish. all: any of the step's 2W best (Flax WMT,
    # T5X) | top_w: only those among the W best (fairseq, Hugging Face, CTranslate2,
    # Marian; gives their outputs exactly). jformer.search.beam says more.
    eos_candidates: str = "top_w"
    # Beam search: when a sentence is done. full: once beam_size hypotheses have finished
    # (fairseq, Marian, CTranslate2; meant with top_w), or sooner where exact holds |
    # exact: once no alive hypothesis can beat its best finished one within the output
    # limit (Flax WMT, T5X; steps on under a length penalty). The defaults' speed and
    # BLEU against exact, all (the defaults before 2026-12-01, which a workdir written
    # then keeps): bench/README.md.
    stop: str = "full"
    # Greedy and beam batches drop their finished sentences in halving stages down to
    # this many sentences (0: never; jformer.search.shrink): fewer rows stepped, at the
    # cost of one more compiled step per stage, paid on a first run only now that
    # programs are kept whole (jformer.inference.programs; bench/README.md measures it)
    shrink_floor: int = 8
    # beam search decodes a call's sentences in slots that each device refills as its
    # sentences finish (continuous batching: jformer.inference.continuous), instead of
    # batches that run until their longest sentence ends; False: batches
    continuous: bool = False
    # auto: float32 on a CPU, model.dtype on an accelerator | model: decode in model.dtype |
    # float32 | bfloat16: bf16 weight matrices, activations and KV cache | int8: the
    # encoder's and the decoder step's weight products int8 (weights per column, rows per
    # product; float32 activations and cache) (jformer.inference.precision; BLEU cost and
    # speed: docs/results.md)
    dtype: str = "auto"
    # Word alignments (jformer.inference.alignment): the decoder layer whose
    # cross-attention is read (an index; negative counts from the end; None: the last,
    # as fairseq and Marian) and its head (None: the mean over heads, as fairseq; a
    # guided head's index)
    alignment_layer: int | None = None
    alignment_head: int | None = None
    # A vocabulary shortlist file (jformer shortlist; jformer.inference.shortlist): each
    # batch's output layer restricted to its sources' likely target pieces ("": none)
    shortlist: str = ""

    def __post_init__(self) -> None:
        s = "decode"
        check_choice(s, "dtype", self.dtype, DECODE_DTYPES)
        check(isinstance(self.shortlist, str), f"{s}.shortlist", "a file path, or \"\" for "
              "none", self.shortlist)
        check_positive(s, "beam_size", self.beam_size)
        check_positive(s, "batch_size", self.batch_size)
        check_number(s, "alpha", self.alpha, 0)
        check_number(s, "temperature", self.temperature, 0, strict=True)
        check(is_int(self.top_k) and self.top_k >= 0, f"{s}.top_k", "an int >= 0 (0: full "
              "distribution)", self.top_k)
        buckets = self.length_buckets
        check(isinstance(buckets, (tuple, list)) and len(buckets) > 0
              and all(is_int(b) and b > 0 for b in buckets) and list(buckets) == sorted(buckets),
              f"{s}.length_buckets", "a non-empty increasing tuple of positive ints", buckets)
        check_choice(s, "overlong", self.overlong, OVERLONG_POLICIES)
        for name, choices in BEAM_RULE_CHOICES.items():
            check_choice(s, name, getattr(self, name), choices)
        check(is_int(self.shrink_floor) and self.shrink_floor >= 0, f"{s}.shrink_floor",
              "an int >= 0 (0: batches keep every row)", self.shrink_floor)
        check(isinstance(self.continuous, bool), f"{s}.continuous", "a bool",
              self.continuous)
        for name in ("alignment_layer", "alignment_head"):
            value = getattr(self, name)
            check(value is None or is_int(value), f"{s}.{name}", "an int or None", value)
        try:
            parse_bytes(self.memory_limit)
        except ValueError as e:
            raise ConfigError(f"config field '{s}.memory_limit': {e}") from None
        # Max output tokens of a source bucket: max(1, ceil(a * bucket + b)) (translate.
        # output_len). Sources shorter than the smallest bucket are padded to it, so the
        # rule must give that bucket a token: below, the max(1, ...) would silently cut
        # every short sentence to one token.
        check_number(s, "max_len_a", self.max_len_a, 0)
        check(is_int(self.max_len_b), f"{s}.max_len_b", "an int", self.max_len_b)
        shortest = buckets[0]
        check(math.ceil(self.max_len_a * shortest + self.max_len_b) >= 1, f"{s}.max_len_b",
              f"ceil(decode.max_len_a * {shortest} + decode.max_len_b) >= 1, at least one "
              f"output token for the shortest source bucket (decode.length_buckets[0]="
              f"{shortest}, decode.max_len_a={self.max_len_a})", self.max_len_b)

    @property
    def rules(self) -> BeamRules:
        """Beam search's rules of this config: ``eos_candidates`` and ``stop``."""
        return BeamRules(self.eos_candidates, self.stop)

    @property
    def memory_limit_bytes(self) -> int:
        """decode.memory_limit in bytes (0: no limit)."""
        return parse_bytes(self.memory_limit)

