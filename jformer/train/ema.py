"""An exponential moving average of the parameters (``train.ema_decay``): the weights a
run is judged by when it keeps one, as Marian's ``--exponential-smoothing`` and
fairseq's ``--ema-decay`` do.

After every applied update, with ``t`` the updates applied so far (1 after the first)::

    d_t = min(decay, (1 + t) / (10 + t))        # a short memory while t is small
    ema = d_t * ema + (1 - d_t) * params

The ramp of ``d_t`` is TensorFlow's ``ExponentialMovingAverage(num_updates=t)``: the
average does not drag the random initialisation along for ~1 / (1 - decay) steps. A step
that the non-finite guard skipped leaves the average as it is.

Chosen once, at construction: a run with ``train.ema_decay > 0`` trains an
:class:`EmaTrainState` (the train state with an ``ema`` tree beside ``params``) with
:func:`averaging_step` around its task's step; a run without one keeps the plain
:class:`~jformer.train.step.TrainState`, saved exactly as before. Validation (and so the
checkpoints kept by validation), the final figures and
:func:`jformer.workdir.checkpoint.restore_params` (translation, averaging, exports) use
``state.weights``: the average where there is one.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

from jformer.train.step import TrainState
from jformer.types import PyTree


@struct.dataclass
class EmaTrainState(TrainState):
    """A :class:`TrainState` that also keeps the moving average of its parameters."""

    ema: PyTree  # like params: float32, the same tree (checkpoint.EMA_KEY names it)

    @property
    def weights(self) -> PyTree:
        return self.ema


def _train_fields(state: TrainState) -> dict:
    """The fields ``state`` has as a plain :class:`TrainState`."""
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(TrainState)}


def with_ema(state: TrainState) -> EmaTrainState:
    """``state`` with a moving average that starts at its parameters (a copy: the step
    donates the state, and one buffer cannot be donated twice)."""
    return EmaTrainState(**_train_fields(state), ema=jax.tree.map(jnp.copy, state.params))


def without_ema(state: EmaTrainState) -> TrainState:
    """``state`` without its average (a run resumed with ``train.ema_decay=0``)."""
    return TrainState(**_train_fields(state))


def decay_at(decay: float, step: jax.Array) -> jax.Array:
    """d_t of the module docstring; ``step``: the updates applied, this one included."""
    t = jnp.asarray(step, jnp.float32)
    return jnp.minimum(decay, (1.0 + t) / (10.0 + t))


def averaging_step(train_step: Callable, decay: float) -> Callable:
    """A per-device ``train_step(state, batch) -> (state, metrics)`` on an
    :class:`EmaTrainState`: ``train_step``'s update, then the average's (module
    docstring). ``decay`` in (0, 1)."""
    if not 0.0 < decay < 1.0:
        raise ValueError(f"decay must be in (0, 1); got {decay!r}")

    def step(state: EmaTrainState, batch: dict):
        new, metrics = train_step(state, batch)
        applied = new.step != state.step  # the non-finite guard leaves step and params
        d = jnp.where(applied, decay_at(decay, new.step), 1.0)
        ema = jax.tree.map(lambda e, p: e + (1.0 - d) * (p - e), state.ema, new.params)
        return new.replace(ema=ema), metrics

    return step
