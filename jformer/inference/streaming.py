"""Streaming translation: one sentence decoded a few steps at a time, its text as it grows.

    for update in stream(translator, "The number is five.", method="greedy"):
        print(update.new, end="", flush=True)        # greedy / sample: the text added
    # beam search: update.text is the best hypothesis so far (it may change)

:func:`stream` runs the search of :meth:`Translator.translate` split into compiled
pieces: ``_start`` (encoder, cache, the search's initial carry) and ``_advance`` (a
``lax.scan`` of ``steps`` search steps over the carry, then the best hypothesis so far),
with the host reading the tokens between them. The step bodies are the searches' own
(:func:`search.token_step`, :func:`search.beam_step`) over the step function of
:func:`make_step_fn` with the Translator's params, ops and prepared weights, and the
sampling keys are translate's (:class:`Sources`), so the last update's text is exactly
``translator.translate([sentence], ...)[0]`` for the same settings. One pair of programs
serves every sentence of a (length bucket, settings) shape; a ``steps`` that does not
divide the output length adds one shorter ``_advance`` for the last steps.

Text: greedy search and sampling only ever append tokens, but the decoding of a prefix
is not always a prefix of the final text (an unfinished UTF-8 sequence of byte-fallback
pieces decodes to U+FFFD; a trailing space may belong to the next word), so an update
holds back trailing U+FFFD and whitespace until later tokens settle them: the ``new``
parts of all updates, joined, are the final text. A sentence over model.max_len tokens
is handled as translate handles it (decode.overlong): split pieces stream one after the
other, joined with their separators. Target prefixes are not supported here.
"""
from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jformer import search
from jformer.config import ModelConfig
from jformer.inference.batch_decode import (DECODE_COMPILER_OPTIONS, SearchSpec,
                                            encode_and_init, make_step_fn, padded_sources)
from jformer.inference.buckets import bucket_for
from jformer.inference.keys import key_source
from jformer.inference.settings import SearchSettings, check_positive_int
from jformer.inference.sources import Sources
from jformer.model import Ops, Transformer
from jformer.types import Array, PyTree

if TYPE_CHECKING:  # an argument only: streaming is not a part of the Translator
    from jformer.inference.translator import Translator


_UNSETTLED = re.compile(r"[\s\ufffd]+\Z")


class StreamUpdate(NamedTuple):
    """What :func:`stream` yields as decoding advances.

    text: the translation so far. Greedy search and sampling: a prefix of the final
      text that only grows. Beam search: the best hypothesis so far (the best finished
      one, else the best alive one), which may change entirely.
    new: greedy search and sampling: the text added since the last update (joined
      over the updates: ``text``); beam search: "".
    done: the last update; ``text`` is then translate's result.
    steps: decode steps run so far (all pieces of a split sentence together).
    """

    text: str
    new: str
    done: bool
    steps: int


class _Search(NamedTuple):
    """One search as pieces: carry before step 0, one step, the best tokens so far."""

    init: Callable[[PyTree], PyTree]  # step_fn state -> carry
    step: Callable[[PyTree, Array, search.StepFn], PyTree]  # (carry, step, step_fn) -> carry
    best: Callable[[PyTree], tuple[Array, Array]]  # carry -> (tokens int32 [T], done)


def _search(cfg: ModelConfig, ops: Ops, spec: SearchSpec, keys_B: Array, alpha: Array,
            temperature: Array) -> _Search:
    """The search :func:`decode_program` runs for ``spec``, on one source row, with the
    search pieces of ``ops`` (:meth:`Ops.for_search`)."""
    ids = dict(eos_id=cfg.eos_id, pad_id=cfg.pad_id)
    if spec.method == "beam":
        settings = dict(max_len=spec.max_len, alpha=alpha, min_len=spec.min_len,
                        n_best=spec.n_best, candidates=ops.beam_candidates,
                        **spec.rules.search_kwargs(), normalize=ops.log_softmax, **ids)
        return _Search(
            lambda state: search.beam_init(state, batch_size=1, beam_size=spec.beam_size,
                                           max_len=spec.max_len, bos_id=cfg.start_id,
                                           pad_id=cfg.pad_id,
                                           tile=ops.cache.reorder is None),
            lambda c, step, step_fn: search.beam_step(c, step, step_fn, ops.cache.reorder,
                                                      **settings),
            lambda c: (search.beam_result(c, jnp.int32(0), alpha=alpha, **ids).tokens[0, 0],
                       c.done_B[0]))
    if spec.method == "sample":
        choose = search.sample_chooser(keys_B, batch_size=1, temperature=temperature,
                                       top_k=spec.top_k, best_k=ops.top_k)
    else:
        choose = search.greedy_chooser(ops.argmax)
    return _Search(
        lambda state: search.token_init(state, batch_size=1, max_len=spec.max_len,
                                        bos_id=cfg.start_id, pad_id=cfg.pad_id),
        lambda c, step, step_fn: search.token_step(c, step, step_fn, choose,
                                                   min_len=spec.min_len,
                                                   normalize=ops.log_softmax, **ids),
        lambda c: (c.tokens_BT[0], c.done_B[0]))


_STATIC = ("model_cfg", "ops", "spec")


@functools.partial(jax.jit, static_argnames=_STATIC, compiler_options=DECODE_COMPILER_OPTIONS)
def _start(params: PyTree, prepared: PyTree, inputs_BS: Array, valid_B: Array, keys_B: Array,
           alpha: Array, temperature: Array, *, model_cfg: ModelConfig, ops: Ops,
           spec: SearchSpec) -> tuple[PyTree, PyTree]:
    """Encoder and cache for one source row [1, S]; returns (cache, search carry)."""
    model = Transformer(model_cfg, ops)
    beam = spec.method == "beam"
    cache = encode_and_init(model, params, inputs_BS, spec.max_len,
                            ops.cache.beam_rows(spec.beam_size) if beam else None, prepared)
    _, state = make_step_fn(model, params, cache, valid_B, prepared)
    ranks = ops.for_search(prepared, spec.hypotheses)
    return cache, _search(model_cfg, ranks, spec, keys_B, alpha, temperature).init(state)


@functools.partial(jax.jit, static_argnames=_STATIC + ("steps",), donate_argnames="carry",
                   compiler_options=DECODE_COMPILER_OPTIONS)
def _advance(params: PyTree, prepared: PyTree, cache: PyTree, carry: PyTree, start: Array,
             valid_B: Array, keys_B: Array, alpha: Array, temperature: Array, *,
             model_cfg: ModelConfig, ops: Ops, spec: SearchSpec,
             steps: int) -> tuple[PyTree, Array, Array]:
    """Steps ``start .. start + steps - 1``; returns (carry, best tokens int32 [T], done)."""
    model = Transformer(model_cfg, ops)
    step_fn, _ = make_step_fn(model, params, cache, valid_B, prepared)
    ranks = ops.for_search(prepared, spec.hypotheses)
    run = _search(model_cfg, ranks, spec, keys_B, alpha, temperature)
    steps_K = start + jnp.arange(steps, dtype=jnp.int32)
    carry = lax.scan(lambda c, step: (run.step(c, step, step_fn), None), carry, steps_K)[0]
    return (carry, *run.best(carry))


def stream(translator: Translator, sentence: str, *, method: str = "beam",
           beam_size: int | None = None, alpha: float | None = None,
           max_len: int | None = None, temperature: float | None = None,
           top_k: int | None = None, rng: Array | None = None,
           steps: int = 2) -> Iterator[StreamUpdate]:
    """Translates one sentence, yielding :class:`StreamUpdate`\\ s as decoding advances.

    Settings as in :meth:`Translator.translate` (one sentence, n_best 1; ``rng``: the
    sampling key, sentence 0 of it, default key 0), checked here, before the first
    update; ``steps``: decode steps between updates. An update comes when the shown
    text changed; the last one has ``done`` and translate's text.
    """
    if not isinstance(sentence, str):
        raise ValueError(f"sentence must be a str; got {type(sentence).__name__}")
    check_positive_int("steps", steps)
    settings = SearchSettings.of(translator.decode_cfg, method=method, beam_size=beam_size,
                                 alpha=alpha, max_len=max_len, temperature=temperature,
                                 top_k=top_k)
    key_data, fold_first = key_source(rng, 1)
    ((pieces, seg),) = translator._encode([sentence], translator.decode_cfg.overlong)
    sources = Sources.of([(pieces, seg)])
    keys = [sources.batch_keys([j], 1, key_data, fold_first) for j in range(len(pieces))]
    return _updates(translator, settings, pieces, keys, seg, steps)


def _updates(translator: Translator, settings: SearchSettings, pieces: list, keys: list,
             seg, steps: int) -> Iterator[StreamUpdate]:
    """The updates of :func:`stream`: the pieces decoded in turn, their texts joined with
    the separators they were cut at."""
    beam = settings.method == "beam" and settings.beam_size > 1  # as settings.spec
    before, shown, total = "", "", 0  # before: the finished pieces' text
    for j, (ids, keys_B) in enumerate(zip(pieces, keys)):
        before += seg.separators[j] if j else ""
        text = ""
        for tokens_T, finished, total in _piece_tokens(translator, settings, ids, keys_B,
                                                       steps, total):
            (text,) = translator.tokenizer.decode(tokens_T[None])
            if beam:
                if before + text != shown:
                    shown = before + text
                    yield StreamUpdate(shown, "", False, total)
                continue
            # Held back: what later tokens may still change (see the module docstring).
            view = before + (text if finished else settled(text))
            if len(view) > len(shown) and view.startswith(shown):
                new, shown = view[len(shown):], view
                yield StreamUpdate(shown, new, False, total)
        before += text
    new = "" if beam or not before.startswith(shown) else before[len(shown):]
    yield StreamUpdate(before, new, True, total)


def settled(text: str) -> str:
    """``text``, the decoding of an unfinished output, without the end later tokens may
    still change: trailing U+FFFD (an unfinished UTF-8 sequence of byte pieces) and
    whitespace (a space may belong to the next piece)."""
    return _UNSETTLED.sub("", text)


def _piece_tokens(translator: Translator, settings: SearchSettings, ids: np.ndarray | None,
                  keys_B: Array, steps: int, total: int
                  ) -> Iterator[tuple[np.ndarray, bool, int]]:
    """One source's best tokens so far [T] after every ``steps`` decode steps, with
    whether they are final and the steps run (counting from ``total``); none for a
    source with nothing to decode (``ids`` None)."""
    if ids is None:
        return
    cfg = translator.model_cfg
    bucket = bucket_for(len(ids), translator.buckets)
    spec = settings.spec(translator.output_positions(bucket, settings.max_len),
                         translator.chunk_size, translator.decode_cfg.rules)
    inputs_BS = padded_sources(cfg, [ids], bucket, 1)
    valid_B = np.ones(1, bool)
    knobs = (keys_B, np.float32(settings.penalty_alpha), np.float32(settings.temperature))
    static = dict(model_cfg=cfg, ops=translator.ops, spec=spec)
    params, prepared = translator.params, translator.prepared
    cache, carry = _start(params, prepared, inputs_BS, valid_B, *knobs, **static)
    for start in range(0, spec.max_len, steps):
        k = min(steps, spec.max_len - start)
        carry, tokens_T, done = _advance(params, prepared, cache, carry, np.int32(start),
                                         valid_B, *knobs, steps=k, **static)
        total += k
        finished = bool(done) or start + k == spec.max_len
        yield np.asarray(tokens_T), finished, total
        if finished:
            return
