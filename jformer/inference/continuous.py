"""Continuous batching: a decode of R slots that sources join as others finish.

A batch decoded from its start steps every row until its last source ends
(:mod:`jformer.search.shrink` drops finished ones only in halving stages). Here a device
holds R source slots of W hypotheses each, and three compiled programs act on them:

- :func:`engine_empty`: R empty slots (every one done, so stepping them changes nothing);
- :func:`engine_admit`: encodes b new sources and puts them into slots ``slots_b`` (their
  memory, and a beam search's start: only hypothesis 0 alive, nothing finished, position
  0); slot R and above are padding and are dropped;
- :func:`engine_advance`: ``spec.chunk_size`` beam steps of every slot, each row at its own
  output position (:mod:`jformer.step_index`), then each slot's results so far.

The host loop (:mod:`.continuous_launches`) reads the done flags after every advance,
takes the finished sources' results and admits waiting sources into their slots. A
source sees the steps it would see in a batch of its own: its rows read only its own
memory and its own cache positions, with its own output limit (its length bucket's, as
in a batch) and the same stopping rule, so its result is that batch's up to the float
rounding of products compiled for another row count.

Beam search only (``SearchSpec.method == "beam"``), without target prefixes, lexical
constraints or shortlists, whose per-source inputs the slots do not hold, and for models
without relative positions (a step's rows stand at different positions).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jformer import search
from jformer.config import ModelConfig
from jformer.inference.batch_decode import (DECODE_COMPILER_OPTIONS, SearchSpec,
                                            encode_and_init, make_step_fn, split_cache)
from jformer.model import DecodeCache, Ops, Transformer
from jformer.search.beam import BeamCarry, beam_init, beam_result, beam_step
from jformer.types import Array, PyTree

STATIC = ("model_cfg", "ops", "spec")


class Slots(NamedTuple):
    """A device's slots (B of them): the beam search's carry (``carry.state`` the decode
    cache's per-hypothesis part, in its layout's form), the rest of the cache
    (``memory``: each slot's cross K/V and source mask, [B, ...]) and each slot's output
    limit ``limit_B`` int32 [B]."""

    carry: BeamCarry
    memory: DecodeCache
    limit_B: Array


class View(NamedTuple):
    """What the host reads after an advance: ``done_B`` bool [B] (B slots) and each slot's
    results so far (:func:`search.beam.beam_result`: tokens [B, W, T], scores, lengths,
    finished [B, W])."""

    done_B: Array
    result: search.DecodeResult


def check_spec(spec: SearchSpec, model_cfg: ModelConfig) -> None:
    """Continuous batching decodes plain beam searches of models without relative
    positions (module docstring)."""
    if spec.method != "beam" or spec.prefix_len or spec.constraint_count or spec.min_len:
        raise ValueError(f"continuous batching runs plain beam search; got {spec}")
    if model_cfg.positional == "relative":
        raise ValueError("continuous batching takes no relative positions "
                         "(model.positional='relative')")


def _fresh(model: Transformer, params: PyTree, prepared: PyTree, inputs_bS: Array,
           spec: SearchSpec, ops: Ops, memory_len: int) -> tuple[DecodeCache, BeamCarry]:
    """The memory (``memory_len`` positions) and the beam search's start of sources
    ``inputs_bS``."""
    cache = encode_and_init(model, params, inputs_bS, spec.max_len,
                            ops.cache.beam_rows(spec.beam_size), prepared, memory_len)
    memory, state = split_cache(cache)
    cfg = model.cfg
    carry = beam_init(state, batch_size=inputs_bS.shape[0], beam_size=spec.beam_size,
                      max_len=spec.max_len, bos_id=cfg.start_id, pad_id=cfg.pad_id,
                      tile=ops.cache.reorder is None)
    return memory, carry


@functools.partial(jax.jit, static_argnames=STATIC + ("slots", "src_len"),
                   compiler_options=DECODE_COMPILER_OPTIONS)
def engine_empty(params: PyTree, prepared: PyTree, *, model_cfg: ModelConfig, ops: Ops,
                 spec: SearchSpec, slots: int, src_len: int) -> Slots:
    """``slots`` empty slots for sources of up to ``src_len`` ids and ``spec.max_len``
    output positions: every slot done, holding an empty source."""
    check_spec(spec, model_cfg)
    inputs_BS = jnp.full((slots, src_len), model_cfg.pad_id, jnp.int32)
    inputs_BS = inputs_BS.at[:, 0].set(model_cfg.eos_id)
    memory, carry = _fresh(Transformer(model_cfg, ops), params, prepared, inputs_BS, spec, ops,
                           src_len)
    return Slots(carry._replace(done_B=jnp.ones((slots,), bool)), memory,
                 jnp.ones((slots,), jnp.int32))


@functools.partial(jax.jit, static_argnames=STATIC, donate_argnames=("state",),
                   compiler_options=DECODE_COMPILER_OPTIONS)
def engine_admit(params: PyTree, prepared: PyTree, state: Slots, slots_b: Array,
                 inputs_bS: Array, limit_b: Array, *, model_cfg: ModelConfig, ops: Ops,
                 spec: SearchSpec) -> Slots:
    """``state`` with sources ``inputs_bS`` (int32 [b, S], b admitted, S at most the slots'
    source length: the newcomers are encoded together, at the widest one's bucket;
    EOS-terminated, pad-padded) in slots ``slots_b`` (int32 [b]; >= B: padding, dropped),
    each with its output limit ``limit_b`` (int32 [b], <= spec.max_len)."""
    memory, carry = _fresh(Transformer(model_cfg, ops), params, prepared, inputs_bS, spec, ops,
                           state.memory.source_valid.shape[1])

    def put(old: Array, new: Array) -> Array:  # rows of the b slots, [B*G, ...] <- [b*G, ...]
        group = new.shape[0] // slots_b.shape[0]
        old_BG = old.reshape((state.limit_B.shape[0], group) + old.shape[1:])
        new_bG = new.reshape((slots_b.shape[0], group) + new.shape[1:])
        return old_BG.at[slots_b].set(new_bG, mode="drop").reshape(old.shape)

    # The slots' cache positions need no reset: a source reads only those it wrote.
    fields = {name: put(getattr(state.carry, name), getattr(carry, name))
              for name in carry._fields if name != "state"}
    return Slots(state.carry._replace(**fields), jax.tree.map(put, state.memory, memory),
                 put(state.limit_B, limit_b))


@functools.partial(jax.jit, static_argnames=STATIC, donate_argnames=("state",),
                   compiler_options=DECODE_COMPILER_OPTIONS)
def engine_advance(params: PyTree, prepared: PyTree, state: Slots,
                   alpha: jax.typing.ArrayLike, *, model_cfg: ModelConfig, ops: Ops,
                   spec: SearchSpec) -> tuple[Slots, View]:
    """``spec.chunk_size`` beam steps of every slot (a done slot keeps its results), each
    row at its slot's own output position; then what the host reads (:class:`View`)."""
    model = Transformer(model_cfg, ops)
    cfg, (rows_B, w) = model_cfg, state.carry.prev_BW.shape
    step_fn, _ = make_step_fn(model, params, state.memory.with_search_state(state.carry.state),
                              None, prepared)
    ranks = ops.for_search(prepared, rows_B * w)

    def body(c: BeamCarry, _) -> tuple[BeamCarry, None]:
        # a done slot steps at its last position (its outputs are kept; its rows stay
        # inside the cache and the position table)
        step_B = jnp.minimum(c.steps_B, state.limit_B - 1)
        c = beam_step(c, step_B, step_fn, ops.cache.reorder, max_len=spec.max_len,
                      alpha=alpha, eos_id=cfg.eos_id, pad_id=cfg.pad_id, min_len=0,
                      n_best=spec.n_best, candidates=ranks.beam_candidates,
                      **spec.rules.search_kwargs(), normalize=ranks.log_softmax,
                      limit_B=state.limit_B)
        # a slot that has stepped to its limit is done, as a batch's loop ends at max_len
        # (whether or not the stopping rule holds: fewer than n_best finished, NaNs)
        return c._replace(done_B=c.done_B | (c.steps_B >= state.limit_B)), None

    carry = lax.scan(body, state.carry, None, length=spec.chunk_size)[0]
    result = beam_result(carry, jnp.int32(0), alpha=alpha, eos_id=cfg.eos_id,
                         pad_id=cfg.pad_id)
    return state._replace(carry=carry), View(carry.done_B, result)
