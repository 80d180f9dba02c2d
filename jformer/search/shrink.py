"""A decode whose batch shrinks as its sources finish: stages of static, halving sizes.

Each source's rows read only their own state and their own source's inputs, and a done
source's outputs are frozen (:mod:`jformer.search.loop`). So a done source can leave the
batch without changing any output, and the steps it would have been run for are saved.
With static shapes that is done in stages of sizes ``B > B_1 > ... > B_n``
(:func:`stage_sizes`: B/2, B/4, ... down to a floor):

- stage s runs whole chunks over its ``B_s`` sources until at most ``B_{s+1}`` of them are
  unfinished (or max_len ends them all);
- then every leaf of the carry (the step function's state among them) and of the step
  function's per-source inputs (:class:`SourceStep`) is gathered to the ``B_{s+1}``
  sources that go on: every unfinished one, in batch order, and done ones where fewer
  are unfinished (those stay frozen); the done ones' results are kept aside;
- the last stage runs to the end as :func:`chunked_decode_loop` does, and every source's
  results are scattered back to its place in the batch.

A leaf holds G rows per source ([B*G, ...]: G = 1 for per-source values, G = W for the
hypotheses of a tiled beam cache); its rows move with their source. Every stage traces
the step function at its own batch size, so each stage adds compile time: keep few.
Every source sees the same steps in the same order as in the fixed batch, so the results
are the fixed batch's wherever a row's step output does not depend on the batch size.
A model's step nearly meets that: its products, compiled for fewer rows, may round
differently in the last float32 places, so scores agree to rounding (as a sentence
decoded alone agrees with its batch) and tokens agree unless two candidates tie to
that rounding.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from jformer.search.loop import StepFn, chunked_decode_loop, require
from jformer.types import PyTree

Body = Callable[[PyTree, jax.Array], PyTree]  # (carry, step) -> carry


@dataclasses.dataclass(frozen=True, eq=False)
class SourceStep:
    """A step function made from per-source inputs, so a search can drop sources.

    ``of(sources)`` is the :data:`StepFn` of the rows of ``sources`` (pytree leaves
    [B', ...], any number B' of sources, in their order); ``sources`` is the whole
    batch's. Called, it is ``of(sources)``, an ordinary step function.
    """

    of: Callable[[PyTree], StepFn]
    sources: PyTree

    def __call__(self, tokens_N: jax.Array, step: jax.Array,
                 state: PyTree) -> tuple[jax.Array, PyTree]:
        return self.of(self.sources)(tokens_N, step, state)


def stage_sizes(batch: int, floor: int) -> tuple[int, ...]:
    """The sizes of the stages after the first: batch // 2, batch // 4, ... while at least
    ``floor`` (0: none, a fixed batch)."""
    sizes, size = [], batch // 2
    while floor and size >= floor:
        sizes.append(size)
        size //= 2
    return tuple(sizes)


def check_shrink(shrink: tuple[int, ...], batch_size: int, step_fn: StepFn,
                 constrain: Callable | None = None) -> None:
    """Stage sizes strictly decreasing below batch_size, over a :class:`SourceStep`, and
    no ``constrain`` (it closes over per-source inputs that would not be gathered)."""
    require(all(isinstance(s, int) and s >= 1 for s in shrink)
            and list(shrink) == sorted(set(shrink), reverse=True)
            and (not shrink or shrink[0] < batch_size),
            "shrink", f"decreasing ints in [1, batch_size={batch_size})", shrink)
    require(not shrink or isinstance(step_fn, SourceStep), "step_fn of a shrinking search",
            "a SourceStep (its per-source inputs are gathered)", type(step_fn).__name__)
    require(not shrink or constrain is None, "constrain of a shrinking search", "None",
            constrain)
    if shrink:
        for path, leaf in jax.tree_util.tree_leaves_with_path(step_fn.sources):
            require(jnp.ndim(leaf) >= 1 and jnp.shape(leaf)[0] == batch_size,
                    f"SourceStep.sources leaf {jax.tree_util.keystr(path)}",
                    f"an array with leading batch axis {batch_size}", jnp.shape(leaf))


def staged_decode_loop(body_of: Callable[[StepFn], Body], carry: PyTree, step_fn: StepFn,
                       *, shrink: tuple[int, ...], max_len: int,
                       chunk_size: int) -> tuple[PyTree, jax.Array]:
    """:func:`chunked_decode_loop` of ``body_of(step_fn)``, in stages of the batch sizes
    ``shrink`` after the first (module docstring; () runs the batch whole).

    ``carry``: a NamedTuple with ``done_B`` (bool [B]) and ``state`` (the step
    function's); every leaf leads with [B*G, ...]. ``body_of(fn)``: the search's body
    stepping with ``fn``, a step function of the current stage's sources. Returns (the
    carry of all B sources, in order, ``state`` None when shrunk; steps run in all).
    """
    def all_done(c: PyTree) -> jax.Array:
        return jnp.all(c.done_B)

    if not shrink:
        return chunked_decode_loop(body_of(step_fn), carry, all_done, max_len=max_len,
                                   chunk_size=chunk_size)
    batch = carry.done_B.shape[0]
    sources, steps = step_fn.sources, jnp.int32(0)
    kept = carry._replace(state=None)  # every source's results, in batch order
    place_b = jnp.arange(batch, dtype=jnp.int32)  # the batch place of each stage row
    for size in shrink:
        carry, steps = chunked_decode_loop(
            body_of(step_fn.of(sources)), carry, all_done, max_len=max_len,
            chunk_size=chunk_size, stop=lambda c, size=size: jnp.sum(~c.done_B) <= size,
            steps_done=steps)
        kept = put_sources(kept, place_b, carry._replace(state=None))
        # The unfinished first, each group in batch order; the first `size` go on (all
        # the unfinished ones, unless max_len ended the stage: then every row is final).
        go_on_b = jnp.argsort(carry.done_B, stable=True)[:size]
        carry, sources, place_b = take_sources((carry, sources, place_b), go_on_b,
                                               place_b.shape[0])
    carry, steps = chunked_decode_loop(body_of(step_fn.of(sources)), carry, all_done,
                                       max_len=max_len, chunk_size=chunk_size,
                                       steps_done=steps)
    return put_sources(kept, place_b, carry._replace(state=None)), steps


def take_sources(tree: PyTree, pick_b: jax.Array, batch: int) -> PyTree:
    """The rows of sources ``pick_b`` (of ``batch``) from every leaf [batch*G, ...]."""
    def take(x: jax.Array) -> jax.Array:
        # [B*G, ...] -> [B, G, ...] -> [b, G, ...] -> [b*G, ...]
        x_BG = x.reshape((batch, x.shape[0] // batch) + x.shape[1:])
        return jnp.take(x_BG, pick_b, axis=0).reshape((-1,) + x.shape[1:])
    return jax.tree.map(take, tree)


def put_sources(whole: PyTree, place_b: jax.Array, part: PyTree) -> PyTree:
    """``whole`` (leaves [B*G, ...]) with the rows of sources ``place_b`` set to ``part``'s
    (leaves [b*G, ...], source i at place_b[i])."""
    def put(x: jax.Array, y: jax.Array) -> jax.Array:
        batch, rows = x.shape[0] // (y.shape[0] // place_b.shape[0]), place_b.shape[0]
        # [B*G, ...] -> [B, G, ...], rows of [b*G, ...] -> [b, G, ...]
        x_BG = x.reshape((batch, -1) + x.shape[1:])
        y_bG = y.reshape((rows, -1) + y.shape[1:])
        return x_BG.at[place_b].set(y_bG).reshape(x.shape)
    return jax.tree.map(put, whole, part)
