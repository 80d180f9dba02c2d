"""A translation's search settings, resolved once: defaults from the decode config,
checked, and normalised so that equal settings decode alike.

    SearchSettings.of(decode_cfg, method="beam", beam_size=4)   # what translate() runs
    settings.spec(max_len, chunk_size, decode_cfg.rules)        # its compiled search

The Translator resolves every call's arguments here, and the server's batcher groups
requests by the same value: fields a method does not use get fixed values, so two
requests that differ only there share a batch and a compiled program.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from jformer import search
from jformer.config import BeamRules, DecodeConfig
from jformer.inference.batch_decode import SearchSpec

METHODS = ("beam", "greedy", "sample")


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """Resolved search settings (build with :meth:`of` or :meth:`normalized`).

    ``method`` "beam" with ``beam_size`` 1 runs greedy search and scores its output with
    the length penalty ``alpha`` (a width-1 beam is greedy search, but the alive/finished
    beam formulation would keep a hypothesis alive after the best token was EOS and could
    return a longer, better-penalised one). ``max_len`` None: each length bucket's
    ``a * len + b`` rule.
    """

    method: str
    beam_size: int = 1
    alpha: float = 0.0
    n_best: int = 1
    max_len: int | None = None
    temperature: float = 1.0
    top_k: int = 0
    prefix_bias_beta: float | None = None  # target prefixes: None forces them

    @classmethod
    def normalized(cls, method: str, *, beam_size: int, alpha: float, n_best: int,
                   max_len: int | None, temperature: float, top_k: int) -> SearchSettings:
        """The settings with the fields ``method`` ignores at their fixed values."""
        if method == "beam":
            return cls("beam", beam_size, float(alpha), n_best, max_len)
        if method == "greedy":
            return cls("greedy", max_len=max_len)
        if method == "sample":
            return cls("sample", max_len=max_len, temperature=float(temperature),
                       top_k=top_k)
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")

    @classmethod
    def of(cls, cfg: DecodeConfig, *, method: str = "beam", beam_size: int | None = None,
           alpha: float | None = None, n_best: int = 1, max_len: int | None = None,
           temperature: float | None = None, top_k: int | None = None) -> SearchSettings:
        """``translate``'s arguments with ``cfg``'s defaults for the None ones, checked
        (a ValueError names the argument) and :meth:`normalized`."""
        beam_size = cfg.beam_size if beam_size is None else beam_size
        alpha = cfg.alpha if alpha is None else alpha
        temperature = cfg.temperature if temperature is None else temperature
        top_k = cfg.top_k if top_k is None else top_k
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {method!r}")
        for name, value in (("beam_size", beam_size), ("n_best", n_best)):
            check_positive_int(name, value)
        if max_len is not None:
            check_positive_int("max_len", max_len, "a positive int or None")
        search.check_knob(alpha, "alpha", strict=False)
        search.check_knob(temperature, "temperature", strict=True)
        widest = beam_size if method == "beam" else 1
        if n_best > widest:
            raise ValueError(f"n_best must be <= {widest} for method={method!r} with "
                             f"beam_size={beam_size}; got {n_best}")
        return cls.normalized(method, beam_size=beam_size, alpha=alpha, n_best=n_best,
                              max_len=max_len, temperature=temperature, top_k=top_k)

    @property
    def penalty_alpha(self) -> float:
        """The length-penalty exponent the search is scored with (0 but for beam)."""
        return self.alpha if self.method == "beam" else 0.0

    def spec(self, max_len: int, chunk_size: int, rules: BeamRules,
             shrink_floor: int = 0) -> SearchSpec:
        """The compiled search for ``max_len`` output positions; fields the search does
        not read keep their defaults (fewer compiles). ``shrink_floor`` (greedy and beam;
        ``decode.shrink_floor``): batches drop finished sentences in halving stages down
        to that many (0: never). ``rules``: beam search's (``decode_cfg.rules``; no
        default, so every caller searches with the rules its run chose)."""
        if self.method == "beam" and self.beam_size > 1:
            return SearchSpec("beam", self.beam_size, max_len, chunk_size=chunk_size,
                              n_best=self.n_best, rules=rules, shrink_floor=shrink_floor)
        if self.method == "sample":
            return SearchSpec("sample", 1, max_len, top_k=self.top_k, chunk_size=chunk_size)
        return SearchSpec("greedy", 1, max_len, chunk_size=chunk_size,
                          shrink_floor=shrink_floor)

    def translate_kwargs(self) -> dict[str, Any]:
        """The ``Translator.translate`` arguments of these settings."""
        kwargs: dict[str, Any] = dict(method=self.method, max_len=self.max_len)
        if self.method == "beam":
            kwargs.update(beam_size=self.beam_size, alpha=self.alpha, n_best=self.n_best)
        elif self.method == "sample":
            kwargs.update(temperature=self.temperature, top_k=self.top_k)
        if self.prefix_bias_beta is not None:
            kwargs.update(prefix_bias_beta=self.prefix_bias_beta)
        return kwargs


def check_positive_int(name: str, value: Any, expected: str = "a positive int") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be {expected}; got {value!r}")
