"""What a jax export holds (:class:`ExportSettings`): source buckets, rows per batch, the
search, its steering arguments and the platforms; checked naming the command-line option
of a value that cannot hold, and turned into the Translator's SearchSpec per bucket."""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jformer.config import BeamRules, DecodeConfig, ModelConfig
# CHUNK_SIZE: the Translator's default, which also rounds the output-length rule
# (output_len), so it is the same here for equal outputs.
from jformer.inference.batch_decode import CHUNK_SIZE, SearchSpec
from jformer.inference.buckets import output_len, source_buckets

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # jax.export's lowering platforms
METHODS = ("greedy", "beam")


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """What the export holds: source buckets, rows per batch, search and platforms.

    ``max_len``: every bucket's output length (None: ``decode.max_len_a * S +
    max_len_b``, rounded up to CHUNK_SIZE and capped at model.max_len, as the Translator
    does). ``method="beam"`` with ``beam_size=1`` is greedy search with the beam's
    length-penalised score, as in the Translator.
    """

    buckets: tuple[int, ...]
    batch_rows: int = 8
    method: str = "beam"
    beam_size: int = 4
    alpha: float = 0.6
    max_len: int | None = None
    platforms: tuple[str, ...] = ("cpu",)
    prefix_len: int = 0  # target prefixes of up to this many tokens (0: no prefix argument)
    prefix_bias: bool = False  # the prefixes bias (prefix_beta) instead of being forced
    constraint_count: int = 0  # lexical constraints: phrases per row (0: no argument)
    constraint_len: int = 0  # and tokens per phrase
    int8: bool = False  # int8 decode steps (decode.dtype "int8"; jformer.model.int8)
    # a vocabulary shortlist: a second program set takes shortlist_C int32 [C] (0: none)
    shortlist_size: int = 0
    # beam search's rules: the run's decode.rules (default_settings); named, never defaulted
    rules: BeamRules = dataclasses.field(kw_only=True)

    def check(self, model_cfg: ModelConfig) -> None:
        """Raises ValueError naming the command-line option of a value that cannot hold."""
        b = self.buckets
        if not (b and all(_positive(x) for x in b) and list(b) == sorted(set(b))):
            raise ValueError(f"--buckets must be increasing positive ints; got {list(b)}")
        if b[-1] > model_cfg.max_len:
            raise ValueError(f"--buckets: {b[-1]} is more than the model's positions "
                             f"(model.max_len={model_cfg.max_len})")
        for option, value in (("--batch", self.batch_rows), ("--beam", self.beam_size)):
            if not _positive(value):
                raise ValueError(f"{option} must be a positive int; got {value!r}")
        if self.method not in METHODS:
            raise ValueError(f"--method must be one of {METHODS}; got {self.method!r}")
        if not (isinstance(self.alpha, (int, float)) and np.isfinite(self.alpha)
                and self.alpha >= 0):
            raise ValueError(f"--alpha must be a finite number >= 0; got {self.alpha!r}")
        if self.max_len is not None and not (_positive(self.max_len)
                                             and self.max_len <= model_cfg.max_len):
            raise ValueError(f"--max-len must be an int in [1, model.max_len="
                             f"{model_cfg.max_len}]; got {self.max_len!r}")
        if not isinstance(self.rules, BeamRules):
            raise ValueError(f"rules must be a BeamRules; got {self.rules!r}")
        self._check_steering()
        if self.shortlist_size >= model_cfg.vocab_size:
            raise ValueError(f"--shortlist-size {self.shortlist_size} is not below the "
                             f"vocabulary's {model_cfg.vocab_size} pieces")
        unknown = [p for p in self.platforms if p not in PLATFORMS]
        if not self.platforms or unknown or len(set(self.platforms)) < len(self.platforms):
            raise ValueError(f"--platforms must name distinct platforms of {PLATFORMS}; "
                             f"got {list(self.platforms)}")

    def _check_steering(self) -> None:
        if not (isinstance(self.prefix_len, int) and self.prefix_len >= 0):
            raise ValueError(f"--prefix-len must be an int >= 0; got {self.prefix_len!r}")
        if self.prefix_bias and not self.prefix_len:
            raise ValueError("--prefix-bias needs --prefix-len (the prefixes it biases towards)")
        c, n = self.constraint_count, self.constraint_len
        if not (isinstance(c, int) and isinstance(n, int) and c >= 0 and n >= 0
                and (c == 0) == (n == 0)):
            raise ValueError(f"--constraints must be two positive ints C,L (phrases per "
                             f"sentence, tokens per phrase); got {c!r},{n!r}")
        if c and self.method != "beam":
            raise ValueError("--constraints needs --method beam (dynamic beam allocation)")
        if not (isinstance(self.shortlist_size, int) and self.shortlist_size >= 0):
            raise ValueError(f"--shortlist-size must be an int >= 0; got "
                             f"{self.shortlist_size!r}")

    def spec(self, out_len: int) -> SearchSpec:
        """The Translator's SearchSpec for these settings (``Translator._spec``, and the
        steering it adds for a batch with prefixes or constraints)."""
        steer = dict(prefix_len=self.prefix_len, prefix_bias=self.prefix_bias)
        if self.constraint_count:  # as inference.constraints.batch_constraints
            return SearchSpec("beam", self.beam_size, out_len, chunk_size=CHUNK_SIZE,
                              rules=self.rules, constraint_count=self.constraint_count,
                              constraint_len=self.constraint_len, **steer)
        if self.method == "beam" and self.beam_size > 1:
            return SearchSpec("beam", self.beam_size, out_len, chunk_size=CHUNK_SIZE,
                              rules=self.rules, **steer)
        return SearchSpec("greedy", 1, out_len, chunk_size=CHUNK_SIZE, **steer)

    def steering_args(self) -> list[tuple[str, jax.ShapeDtypeStruct]]:
        """The steering arguments after ``alpha``, in call order: (decode_program's name,
        shape) of each; none without a prefix, constraints or a shortlist."""
        args = []
        if self.prefix_len:
            args.append(("prefix_BP", jax.ShapeDtypeStruct((self.batch_rows, self.prefix_len),
                                                           jnp.int32)))
            if self.prefix_bias:
                args.append(("prefix_beta", jax.ShapeDtypeStruct((), jnp.float32)))
        if self.constraint_count:
            args.append(("constraints_BCL", jax.ShapeDtypeStruct(
                (self.batch_rows, self.constraint_count, self.constraint_len), jnp.int32)))
        if self.shortlist_size:
            args.append(("shortlist_C", jax.ShapeDtypeStruct((self.shortlist_size,),
                                                             jnp.int32)))
        return args

    def steering(self) -> list[str]:
        """The steering arguments' names (:meth:`steering_args`)."""
        return [name for name, _ in self.steering_args()]

    def call(self) -> str:
        """The programs' signature, as manifest.json's ``call`` names it."""
        args = ", ".join(["params", "inputs_BS", "alpha"] + self.steering())
        return f"program({args}) -> (tokens_BT, scores_B, finished_B)"

    def steering_avals(self) -> tuple[jax.ShapeDtypeStruct, ...]:
        """The steering arguments' shapes (:meth:`steering_args`)."""
        return tuple(aval for _, aval in self.steering_args())

    def full_vocabulary(self) -> "ExportSettings":
        """These settings without the shortlist argument: the program set every export
        holds (a batch whose shortlist does not fit ``shortlist_size`` runs there)."""
        return dataclasses.replace(self, shortlist_size=0)

    def output_lengths(self, model_cfg: ModelConfig,
                       decode_cfg: DecodeConfig) -> dict[int, int]:
        """Output positions per bucket (EOS included): the Translator's rule."""
        if self.max_len is not None:
            return {b: self.max_len for b in self.buckets}
        return {b: output_len(b, model_cfg, decode_cfg, CHUNK_SIZE) for b in self.buckets}


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def default_settings(model_cfg: ModelConfig, decode_cfg: DecodeConfig,
                     **overrides: Any) -> ExportSettings:
    """Settings from the run's decode config (buckets as the Translator's, beam size,
    alpha, beam rules), with the ``overrides`` that are not None; checked."""
    base = dict(buckets=source_buckets(decode_cfg, model_cfg.max_len),
                beam_size=decode_cfg.beam_size, alpha=decode_cfg.alpha,
                rules=decode_cfg.rules, int8=decode_cfg.dtype == "int8")
    base.update({k: v for k, v in overrides.items() if v is not None})
    base["buckets"], base["platforms"] = tuple(base["buckets"]), tuple(base.get(
        "platforms", ("cpu",)))
    settings = ExportSettings(**base)
    settings.check(model_cfg)
    return settings
