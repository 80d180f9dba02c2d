"""Inference: a :class:`Translator` that turns sentences into translations.

    translator = Translator.from_checkpoint("runs/demo")         # latest checkpoint
    translator.translate(["The number is five."], beam_size=4)  # -> ["Die Zahl ist fünf."]
    Translator(cfg.model, params, tokenizer, cfg.decode)        # in memory (validation BLEU)

Few compiled shapes: sources are sorted by length and grouped into the length buckets of
``DecodeConfig.length_buckets`` (padded source length = the smallest bucket >= the length,
EOS included); a batch of n sentences has the smallest power-of-two number of rows
(times the device count) that holds them, up to ``batch_size`` (:func:`padded_rows`;
dummy rows, forced to emit EOS at step 0, fill it); the max output length depends on
the bucket only (:func:`output_len`). One jitted program per (bucket, rows, search)
runs the encoder once, projects the cross-attention keys/values once and runs the
search of :mod:`jformer.search.loop` over the cached decoder step. Beam search keeps the
self-attention cache slot-addressed (:mod:`jformer.model.cache`: choosing parents remaps a
small table instead of moving the buffers); cross-attention keys/values stay one copy
per source (``MultiHeadAttention.cross_attend_step`` maps a row's W hypotheses onto it).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import json
import math
import os
import warnings
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from jformer import checkpoint
from jformer.search import loop as decode
from jformer.search.beam import beam_search
from jformer.config import Config, DecodeConfig, ModelConfig, from_config_dict
from jformer.data.pipeline import tokenizer_path
from jformer.model.cache import DecodeCache, reorder_slots
from jformer.model.masks import NEG_INF
from jformer.model.transformer import Transformer
from jformer.train.sharding import AXIS, make_mesh
from jformer.data.tokenizer import Tokenizer
from jformer.types import Array, PyTree

METHODS = ("beam", "greedy", "sample")
CONFIG_FILENAME = "config.json"
_TRACES: collections.Counter = collections.Counter()  # (inputs shape, spec) -> traces


def load_config(workdir: str | os.PathLike) -> Config:
    """Reads ``<workdir>/config.json`` (written by training) back into a :class:`Config`."""
    path = os.path.join(os.fspath(workdir), CONFIG_FILENAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file not found: {path} (is {os.fspath(workdir)} a "
                                f"training workdir?)")
    with open(path, encoding="utf-8") as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"cannot parse {path}: {e}") from e
    return from_config_dict(raw)


class _Overlong(Exception):
    """A source longer than model.max_len; says where, for callers that know the line."""

    def __init__(self, message: str, index: int, detail: str):
        super().__init__(message)
        self.index = index  # position of the sentence in the call's list
        self.detail = detail  # the message without the position


class OverlongError(_Overlong, ValueError):
    """A source longer than model.max_len, with decode.overlong="error"."""


class OverlongWarning(_Overlong, UserWarning):
    """A source longer than model.max_len, truncated (decode.overlong="truncate")."""


class Hypothesis(NamedTuple):
    """One translation, its score and its token ids.

    score: beam search: log-prob sum / length penalty; greedy and sampling: log-prob
      sum (length-penalised too when greedy stands in for beam size 1).
    ids: int32 [length] output ids, EOS included when the hypothesis finished.
    finished: it ended with EOS. Greedy search and sampling: False when cut off at
      max_len. Beam search forces EOS at max_len (as fairseq does), so a hypothesis as
      long as max_len may have been cut there; False marks an abandoned prefix filling
      an n-best list (fewer than the asked number finished before the search stopped).
    """

    text: str
    score: float
    ids: np.ndarray
    finished: bool = True


@dataclasses.dataclass(frozen=True)
class SearchSpec:
    """The static (compile-time) settings of one search; part of the jit cache key.

    The length-penalty ``alpha`` and the sampling ``temperature`` are not here: they are
    traced arguments of :func:`decode_batch`, so sweeping them does not recompile.
    """

    method: str = "greedy"  # greedy | beam | sample
    beam_size: int = 1
    max_len: int = 32  # output positions (the cache length)
    min_len: int = 0  # EOS forbidden before this position (benchmarks force lengths)
    top_k: int = 0
    chunk_size: int = 8
    n_best: int = 1  # beam: stop a row once this many finished ones can't be beaten


def trace_count() -> int:
    """How many times the batch decoder has been traced (= compiled) in this process."""
    return sum(_TRACES.values())


# ------------------------------------------------------------------ the jitted core


def output_matrix(model_cfg: ModelConfig, params: PyTree) -> Array | None:
    """The tied output embedding transposed to [D, V] once (None if the output is untied).

    Tied logits are ``y [N, D] @ embedding [V, D]^T``; with the [V, D] matrix XLA's CPU
    dot transposes all of it at every decode step (8 MB at V=8192, D=256). The decode
    step's output projection reads the [D, V] copy directly, while its embedding lookup
    keeps reading rows of the [V, D] matrix (columns of [D, V] are strided reads).
    """
    if not model_cfg.tie_output:
        return None
    # In the compute dtype (as output_layer gives it): a bf16 step then reads it without
    # converting 8 MB every step.
    model = Transformer(model_cfg)
    return jax.jit(lambda p: model.apply({"params": p},
                                         method=Transformer.output_layer)[0].T)(params)


def make_step_fn(model: Transformer, params: PyTree, cache: DecodeCache,
                 valid_B: Array | None = None, output_DV: Array | None = None
                 ) -> tuple[decode.StepFn, PyTree]:
    """The cached decoder step as a :mod:`jformer.search.loop` step function.

    Returns (step_fn, state). ``state`` is the self-attention cache (self_k, self_v, slot),
    the only per-hypothesis part; cross-attention K/V and the source mask [B, ...] are
    closed over, so ``step_fn`` takes any N = B*G rows (row b*G + g belongs to source b).
    A slot-addressed cache (``init_decode_state(..., beam_size=W)``) takes N = B*W rows
    and goes to beam search with ``reorder=``:func:`reorder_beam_state`.
    PAD and BOS are never valid outputs, so their logits are set to NEG_INF (a generated
    PAD would vanish from the text and be masked as padding by teacher forcing).
    Rows whose ``valid_B`` is False (batch padding) get logits that force EOS.
    ``output_DV``: :func:`output_matrix` of the params, for faster tied logits.
    """
    cfg = model.cfg
    vocab_V = jnp.arange(cfg.vocab_size)
    banned_V = (vocab_V == cfg.pad_id) | (vocab_V == cfg.bos_id)
    forced_eos_V = jnp.where(vocab_V == cfg.eos_id, 0.0, NEG_INF).astype(jnp.float32)

    def step_fn(tokens_N: Array, step: Array, state: PyTree) -> tuple[Array, PyTree]:
        self_k, self_v, slot = state
        if slot is not None and tokens_N.shape[0] != slot.shape[0] * slot.shape[1]:
            raise ValueError(
                f"the slot-addressed cache holds {slot.shape[1]} hypotheses for each of "
                f"{slot.shape[0]} sources ({slot.shape[0] * slot.shape[1]} rows); the "
                f"search stepped {tokens_N.shape[0]}: init_decode_state's beam_size must "
                "be the search's beam_size")
        full = cache.replace(self_k=self_k, self_v=self_v, slot=slot)
        logits_NV, new = model.apply({"params": params}, tokens_N, step, full, output_DV,
                                     method=Transformer.decode_step)
        logits_NV = jnp.where(banned_V, NEG_INF, logits_NV)
        if valid_B is not None:
            # [B] -> [N]: the G hypotheses of a source share its flag.
            valid_N = jnp.repeat(valid_B, tokens_N.shape[0] // valid_B.shape[0])
            logits_NV = jnp.where(valid_N[:, None], logits_NV, forced_eos_V)
        return logits_NV, (new.self_k, new.self_v, new.slot)

    return step_fn, (cache.self_k, cache.self_v, cache.slot)


def reorder_beam_state(state: PyTree, parent_BW: Array) -> PyTree:
    """Beam search's ``reorder`` for a slot-addressed state: remaps the slot table only."""
    self_k, self_v, slot_BWT = state
    return self_k, self_v, reorder_slots(slot_BWT, parent_BW)


def encode_and_init(model: Transformer, params: PyTree, inputs_BS: Array,
                    max_len: int, beam_size: int | None = None) -> DecodeCache:
    """Runs the encoder once and builds the cache (cross K/V projected once per source);
    ``beam_size``: slot-addressed self-attention buffers for beam search."""
    variables = {"params": params}
    encoded_BSD = model.apply(variables, inputs_BS, method=Transformer.encode)
    return model.apply(variables, encoded_BSD, inputs_BS, max_len, beam_size,
                       method=Transformer.init_decode_state)


@functools.partial(jax.jit, static_argnames=("model_cfg", "spec"))
def decode_batch(params: PyTree, output_DV: Array | None, inputs_BS: Array, valid_B: Array,
                 rng: Array, alpha: jax.typing.ArrayLike = 0.0,
                 temperature: jax.typing.ArrayLike = 1.0, *, model_cfg: ModelConfig,
                 spec: SearchSpec) -> decode.DecodeResult:
    """Encode + init cache + search for one batch, as one compiled program.

    Args:
      params: the model parameters.
      output_DV: :func:`output_matrix` of the params (computed once per model).
      inputs_BS: int32 [batch, src_len] source ids (EOS-terminated, pad_id-padded).
      valid_B: bool [batch]; False rows are padding and finish at once.
      rng: PRNG keys [batch], row b's sampling key (used by sampling only; a single
        key gives row b ``fold_in(rng, b)``, see :func:`decode.row_keys`).
      alpha: beam search's length-penalty exponent (>= 0, checked by the caller).
      temperature: sampling's temperature (> 0, checked by the caller).
    Returns:
      DecodeResult with tokens int32 [batch, beam, spec.max_len] and scores, lengths,
      finished [batch, beam] (beam = 1 for greedy and sampling).
    """
    _TRACES[(inputs_BS.shape, spec)] += 1  # runs only while tracing
    model = Transformer(model_cfg)
    beam = spec.method == "beam"
    cache = encode_and_init(model, params, inputs_BS, spec.max_len,
                            spec.beam_size if beam else None)
    step_fn, state = make_step_fn(model, params, cache, valid_B, output_DV)
    ids = dict(bos_id=model_cfg.bos_id, eos_id=model_cfg.eos_id, pad_id=model_cfg.pad_id)
    common = dict(batch_size=inputs_BS.shape[0], max_len=spec.max_len,
                  chunk_size=spec.chunk_size, min_len=spec.min_len, **ids)
    if beam:
        return beam_search(step_fn, state, beam_size=spec.beam_size, alpha=alpha,
                           reorder=reorder_beam_state, n_best=spec.n_best, **common)
    if spec.method == "sample":
        out = decode.sample(step_fn, state, rng, temperature=temperature,
                            top_k=spec.top_k, **common)
    else:
        out = decode.greedy_search(step_fn, state, **common)
    # [B, ...] -> [B, 1, ...]: one hypothesis per row, like a beam of width 1.
    return out._replace(tokens=out.tokens[:, None], scores=out.scores[:, None],
                        lengths=out.lengths[:, None], finished=out.finished[:, None])


@functools.partial(jax.jit, static_argnames=("model_cfg", "spec", "mesh"))
def decode_batch_parallel(params: PyTree, output_DV: Array | None, inputs_BS: Array,
                          valid_B: Array, rng: Array, alpha: jax.typing.ArrayLike = 0.0,
                          temperature: jax.typing.ArrayLike = 1.0, *,
                          model_cfg: ModelConfig, spec: SearchSpec,
                          mesh: jax.sharding.Mesh) -> decode.DecodeResult:
    """:func:`decode_batch` data-parallel over the devices of a one-axis ``('data',)`` mesh.

    Each device decodes its contiguous share of the batch rows (B must be a multiple of
    the device count) with replicated parameters, on its own: its own early exit, no
    collectives, results identical to one device's up to float rounding (the compiled
    products may differ; each row samples with its own key of ``rng``, so sampling
    gives what one device gives, too). ``num_steps`` is the largest over the devices.
    """
    def local(p, o, x, v, r, a, t):
        out = decode_batch(p, o, x, v, r, a, t, model_cfg=model_cfg, spec=spec)
        return out._replace(num_steps=out.num_steps[None])  # [1] per device -> [devices]

    rows = P(AXIS)
    keys_B = decode.row_keys(rng, inputs_BS.shape[0])
    out = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), rows, rows, rows, P(), P()),
                        out_specs=decode.DecodeResult(rows, rows, rows, rows, rows),
                        check_vma=False)(params, output_DV, inputs_BS, valid_B, keys_B,
                                         jnp.float32(alpha), jnp.float32(temperature))
    return out._replace(num_steps=out.num_steps.max())


# ------------------------------------------------------------------ length buckets


def source_buckets(decode_cfg: DecodeConfig, model_max_len: int) -> tuple[int, ...]:
    """Padded source lengths in use: the configured buckets capped at model.max_len, plus
    model.max_len itself so every admissible source has a bucket."""
    return tuple(sorted({min(b, model_max_len) for b in decode_cfg.length_buckets}
                        | {model_max_len}))


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= length (length must fit the largest)."""
    for bucket in buckets:
        if bucket >= length:
            return bucket
    raise ValueError(f"length {length} exceeds the largest bucket {buckets[-1]}")


def output_len(bucket: int, model_cfg: ModelConfig, decode_cfg: DecodeConfig,
               chunk_size: int) -> int:
    """Max output tokens for a source bucket: min(model.max_len, ceil(a * bucket + b))
    rounded up to a multiple of chunk_size (then capped at model.max_len)."""
    raw = max(1, math.ceil(decode_cfg.max_len_a * bucket + decode_cfg.max_len_b))
    return min(model_cfg.max_len, -(-raw // chunk_size) * chunk_size)


# ------------------------------------------------------------------ the Translator


class Translator:
    """Translates sentences with a Transformer, its params and its tokenizer.

    Args:
      model_cfg: the model's config (special ids and vocab size must match the tokenizer).
      params: the model parameters (e.g. ``TrainState.params`` or a restored checkpoint).
      tokenizer: the sentencepiece :class:`Tokenizer` the model was trained with.
      decode_cfg: search defaults, batch size, length buckets, overlong policy.
      chunk_size: decode steps between early-exit checks.
      devices: decode each batch data-parallel over this many local devices
        (:func:`decode_batch_parallel`; batch sizes must be multiples of it). On a CPU,
        ``jax.config.update("jax_num_cpu_devices", n)`` before jax starts makes n devices
        of its cores, one search each (``jformer translate --devices``).
    """

    def __init__(self, model_cfg: ModelConfig, params: PyTree, tokenizer: Tokenizer,
                 decode_cfg: DecodeConfig | None = None, *, chunk_size: int = 8,
                 devices: int = 1):
        tok_ids = (tokenizer.vocab_size, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
        cfg_ids = (model_cfg.vocab_size, model_cfg.pad_id, model_cfg.bos_id, model_cfg.eos_id)
        if tok_ids != cfg_ids:
            raise ValueError(f"tokenizer (vocab_size, pad, bos, eos) = {tok_ids} does not "
                             f"match the model config's {cfg_ids}")
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int; got {chunk_size!r}")
        local = jax.local_devices()
        if not isinstance(devices, int) or not 1 <= devices <= len(local):
            raise ValueError(f"devices must be an int in [1, {len(local)}] (the local "
                             f"devices: {local[0].platform} x {len(local)}); got {devices!r}")
        self.model_cfg = model_cfg
        self.decode_cfg = decode_cfg or DecodeConfig()
        self.tokenizer = tokenizer
        self.chunk_size = chunk_size
        self.mesh = make_mesh(local[:devices]) if devices > 1 else None
        # Once, not per batch; on one device (training may hand over mesh-replicated
        # params, which would make every decode run once per device) or replicated over
        # the decode devices.
        self.params = jax.device_put(params, local[0] if self.mesh is None
                                     else NamedSharding(self.mesh, P()))
        self.output_DV = output_matrix(model_cfg, self.params)
        self.buckets = source_buckets(self.decode_cfg, model_cfg.max_len)

    @classmethod
    def from_checkpoint(cls, workdir: str | os.PathLike, checkpoint_dir: str | None = None,
                        step: int | None = None, decode_cfg: DecodeConfig | None = None,
                        **kwargs: Any) -> "Translator":
        """Loads config.json, the tokenizer and the params of a training workdir.

        Args:
          workdir: the run folder (config.json, spm.model, checkpoints/).
          checkpoint_dir: a checkpoint directory to read instead of <workdir>/checkpoints,
            e.g. the output of ``jformer average-checkpoints``.
          step: the checkpoint step; None for the latest.
          decode_cfg: overrides the run's decode section.
        """
        workdir = os.fspath(workdir)
        if not os.path.isdir(workdir):
            raise FileNotFoundError(f"workdir not found: {workdir}")
        config = load_config(workdir)
        tokenizer = Tokenizer.load(tokenizer_path(config.data, workdir))
        params = checkpoint.restore_params(checkpoint_dir or checkpoint.checkpoint_dir(workdir),
                                           step)
        check_params(config.model, params)
        return cls(config.model, params, tokenizer, decode_cfg or config.decode, **kwargs)

    # ------------------------------------------------------------------ encoding
    def encode_sources(self, sentences: Sequence[str]) -> list[np.ndarray | None]:
        """EOS-terminated int32 ids per sentence (None for an empty one, or one that
        encodes to nothing, e.g. only a zero-width space); overlong sources are
        truncated with an :class:`OverlongWarning` or rejected, by
        ``decode_cfg.overlong``."""
        if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
            raise ValueError("sentences must be a sequence of str")
        limit, eos = self.model_cfg.max_len, self.model_cfg.eos_id
        nonempty = [i for i, s in enumerate(sentences) if s.strip()]
        encoded = self.tokenizer.encode([sentences[i] for i in nonempty], add_eos=True)
        out: list[np.ndarray | None] = [None] * len(sentences)
        for i, ids in zip(nonempty, encoded):
            if len(ids) == 1:  # EOS alone: nothing the tokenizer keeps
                continue
            if len(ids) > limit:
                detail = (f"{len(ids)} tokens (EOS included), more than "
                          f"model.max_len={limit}")
                msg = f"sentence {i} has {detail}"
                if self.decode_cfg.overlong == "error":
                    raise OverlongError(msg, i, detail)
                warnings.warn(OverlongWarning(f"{msg}; truncated to {limit}", i,
                                              f"{detail}; truncated to {limit}"),
                              stacklevel=3)
                ids = np.append(ids[:limit - 1], np.int32(eos))
            out[i] = ids
        return out

    def _plan(self, sources: list[np.ndarray | None], batch_size: int
              ) -> list[tuple[int, list[int]]]:
        """(bucket, sentence indices) per batch: by bucket, sorted by length inside."""
        by_bucket: dict[int, list[int]] = collections.defaultdict(list)
        for i in sorted((i for i, s in enumerate(sources) if s is not None),
                        key=lambda i: len(sources[i])):
            by_bucket[bucket_for(len(sources[i]), self.buckets)].append(i)
        return [(bucket, idx[start:start + batch_size])
                for bucket, idx in sorted(by_bucket.items())
                for start in range(0, len(idx), batch_size)]

    def _spec(self, method: str, beam_size: int, max_len: int, top_k: int,
              n_best: int) -> SearchSpec:
        """Normalised spec: fields a method ignores keep defaults (fewer compiles)."""
        if method == "beam" and beam_size > 1:
            return SearchSpec("beam", beam_size, max_len, chunk_size=self.chunk_size,
                              n_best=n_best)
        if method == "sample":
            return SearchSpec("sample", 1, max_len, top_k=top_k, chunk_size=self.chunk_size)
        return SearchSpec("greedy", 1, max_len, chunk_size=self.chunk_size)

    # ------------------------------------------------------------------ translation
    def translate(self, sentences: Sequence[str], beam_size: int | None = None,
                  alpha: float | None = None, max_len: int | None = None, n_best: int = 1,
                  return_scores: bool = False, method: str = "beam",
                  temperature: float | None = None, top_k: int | None = None,
                  rng: Array | None = None, batch_size: int | None = None) -> list:
        """Translates ``sentences``; results come back in input order.

        Args:
          sentences: source strings; an empty (or blank) one gives "" without decoding.
          beam_size, alpha: beam width and length-penalty exponent (default: decode_cfg).
            beam_size 1 runs greedy search: a width-1 beam IS greedy, but the
            alive/finished beam formulation would keep a hypothesis alive after the best
            token was EOS and could return a longer, better-penalised one.
          max_len: max output tokens, EOS included (default: the bucket's a * len + b
            rule); more than model.max_len is capped there, with a warning.
          n_best: hypotheses per sentence (beam search: <= beam_size; else 1). Beam
            search keeps a sentence going until its n_best best finished hypotheses
            can't be beaten, so all n_best are finished unless max_len cuts them off
            (``Hypothesis.finished`` says which).
          return_scores: return :class:`Hypothesis` (text, score, ids, finished) instead
            of str.
          method: "beam" | "greedy" | "sample".
          temperature, top_k: sampling settings (default: decode_cfg).
          rng: sampling key (default: key 0): sentence i samples with
            ``fold_in(rng, i)``, so its sample depends on the key and its place in
            ``sentences`` only, not on batching, bucketing or ``devices``; or one key
            per sentence, [len(sentences)] (e.g. to continue a stream's numbering).
          batch_size: the most rows per compiled batch (default: decode_cfg.batch_size);
            a batch with fewer sentences runs on fewer rows (:func:`padded_rows`).
        Returns:
          per sentence a str (or Hypothesis); with n_best > 1 a list of them, best first
          (an empty input gives a one-element list).
        """
        cfg = self.decode_cfg
        beam_size = cfg.beam_size if beam_size is None else beam_size
        alpha = cfg.alpha if alpha is None else alpha
        batch_size = cfg.batch_size if batch_size is None else batch_size
        temperature = cfg.temperature if temperature is None else temperature
        _check_args(method, beam_size, alpha, temperature, n_best, batch_size, max_len)
        if self.mesh is not None and batch_size % self.mesh.size:
            raise ValueError(f"batch_size must be a multiple of devices={self.mesh.size} "
                             f"(each device decodes an equal share); got {batch_size}")
        top_k = cfg.top_k if top_k is None else top_k
        keys = decode.row_keys(jax.random.key(0) if rng is None else rng, len(sentences))
        if max_len is not None and max_len > self.model_cfg.max_len:
            warnings.warn(f"max_len={max_len} is more than the model's positions "
                          f"(model.max_len={self.model_cfg.max_len}); outputs are capped "
                          f"at {self.model_cfg.max_len} tokens", stacklevel=2)
        sources = self.encode_sources(sentences)
        empty = Hypothesis("", 0.0, np.zeros(0, np.int32))
        results: list[list[Hypothesis]] = [[empty] for _ in sentences]
        for bucket, idx in self._plan(sources, batch_size):
            out_len = (output_len(bucket, self.model_cfg, cfg, self.chunk_size)
                       if max_len is None else min(max_len, self.model_cfg.max_len))
            spec = self._spec(method, beam_size, out_len, top_k, n_best)
            rows = padded_rows(len(idx), batch_size,
                               1 if self.mesh is None else self.mesh.size)
            # Padding rows reuse a real row's key (their samples are discarded).
            batch_keys = keys[np.pad(np.asarray(idx), (0, rows - len(idx)), mode="edge")]
            hyps = self._decode([sources[i] for i in idx], bucket, rows, spec, batch_keys,
                                alpha if method == "beam" else 0.0, temperature, n_best)
            for i, h in zip(idx, hyps):
                results[i] = h
        if not return_scores:
            results = [[h.text for h in hyps] for hyps in results]
        return [r if n_best > 1 else r[0] for r in results]

    def _decode(self, rows: list[np.ndarray], bucket: int, batch_size: int, spec: SearchSpec,
                rng: Array, alpha: float, temperature: float,
                n_best: int) -> list[list[Hypothesis]]:
        """Decodes one batch (rows padded to [batch_size, bucket]); n_best per real row."""
        cfg = self.model_cfg
        inputs_BS = np.full((batch_size, bucket), cfg.pad_id, np.int32)
        inputs_BS[len(rows):, 0] = cfg.eos_id  # dummy rows: an empty source
        for r, ids in enumerate(rows):
            inputs_BS[r, :len(ids)] = ids
        valid_B = np.arange(batch_size) < len(rows)
        # Traced float32 scalars: another alpha or temperature reuses the compiled search.
        knobs = (np.float32(alpha), np.float32(temperature))
        if self.mesh is None:
            out = decode_batch(self.params, self.output_DV, inputs_BS, valid_B, rng, *knobs,
                               model_cfg=cfg, spec=spec)
        else:
            out = decode_batch_parallel(self.params, self.output_DV, inputs_BS, valid_B, rng,
                                        *knobs, model_cfg=cfg, spec=spec, mesh=self.mesh)
        n = len(rows)
        tokens_NWT = np.asarray(out.tokens)[:n, :n_best]
        scores_NW = np.asarray(out.scores)[:n, :n_best].astype(np.float64)
        lengths_NW = np.asarray(out.lengths)[:n, :n_best]
        finished_NW = np.asarray(out.finished)[:n, :n_best]
        if spec.method == "greedy" and alpha > 0:  # standing in for beam 1: penalise
            scores_NW = scores_NW / ((5.0 + lengths_NW) / 6.0) ** alpha
        # [N, W, T] -> [N*W, T] for one batched decode call
        texts = self.tokenizer.decode(tokens_NWT.reshape(-1, tokens_NWT.shape[-1]))
        w = tokens_NWT.shape[1]
        return [[Hypothesis(texts[r * w + j], float(scores_NW[r, j]),
                            tokens_NWT[r, j, :lengths_NW[r, j]], bool(finished_NW[r, j]))
                 for j in range(w)] for r in range(n)]

    def step_fn(self, inputs_BS: Array, max_len: int) -> tuple[decode.StepFn, PyTree]:
        """(step_fn, state) over the cache for source ids [B, S], as the searches use it."""
        model = Transformer(self.model_cfg)
        init = jax.jit(lambda p, x: encode_and_init(model, p, x, max_len))
        cache = init(self.params, jnp.asarray(inputs_BS))
        return make_step_fn(model, self.params, cache, output_DV=self.output_DV)


def padded_rows(rows: int, batch_size: int, devices: int = 1) -> int:
    """Rows a batch of ``rows`` sentences is padded to: the smallest ``devices * 2**k``
    that holds them, at most ``batch_size`` (a multiple of ``devices``). A short batch
    (one sentence typed at the CLI, a bucket's last batch) then decodes a few rows, not
    batch_size of them, while the compiled shapes stay bounded: at most
    log2(batch_size / devices) + 1 sizes per bucket."""
    padded = devices
    while padded < rows:
        padded *= 2
    return min(padded, batch_size)


def _check_args(method: str, beam_size: int, alpha: float, temperature: float,
                n_best: int, batch_size: int, max_len: int | None) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    for name, value in (("beam_size", beam_size), ("n_best", n_best),
                        ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int; got {value!r}")
    if max_len is not None and (not isinstance(max_len, int) or max_len < 1):
        raise ValueError(f"max_len must be a positive int or None; got {max_len!r}")
    decode.check_knob(alpha, "alpha", strict=False)
    decode.check_knob(temperature, "temperature", strict=True)
    widest = beam_size if method == "beam" else 1
    if n_best > widest:
        raise ValueError(f"n_best must be <= {widest} for method={method!r} with "
                         f"beam_size={beam_size}; got {n_best}")


def check_params(model_cfg: ModelConfig, params: PyTree) -> None:
    """Raises ValueError naming the paths where ``params`` does not fit the model."""
    dummy = jax.ShapeDtypeStruct((1, 2), jnp.int32)
    expected = jax.eval_shape(lambda a: Transformer(model_cfg).init(jax.random.key(0), a, a),
                              dummy)["params"]
    want, got = ({jax.tree_util.keystr(p): tuple(np.shape(x))
                  for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
                 for tree in (expected, params))
    problems = [f"{p}: missing" for p in sorted(want.keys() - got.keys())]
    problems += [f"{p}: unexpected" for p in sorted(got.keys() - want.keys())]
    problems += [f"{p}: shape {got[p]}, model expects {want[p]}"
                 for p in sorted(want.keys() & got.keys()) if want[p] != got[p]]
    if problems:
        raise ValueError(f"checkpoint params do not fit the model config ({len(problems)} "
                         f"problems): {'; '.join(problems[:8])}")
