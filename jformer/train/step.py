"""The pure per-device training and evaluation steps.

``train_step(state, batch) -> (state, metrics)`` sees one device's shard of the batch:
forward (with dropout), label-smoothed cross entropy, gradients of the summed loss, an
average over the ``'data'`` axis (``lax.pmean``), then normalisation by the number of
real target tokens in the whole global batch, and the optax update. Gradient
accumulation scans over micro-batches and normalises once, so it equals the large batch.
Metrics come back as sums over the global batch; the host divides.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax

from jformer.mesh import AXIS
from jformer.model import Transformer
from jformer.model.init import run_once
from jformer.train.guided_alignment import GuidedAlignment, make_guided_loss_fn
from jformer.types import PyTree

MODEL_KEYS = ("inputs", "targets", "inputs_segmentation", "targets_segmentation",
              "inputs_position", "targets_position")


@struct.dataclass
class TrainState:
    """Everything a resumed run needs besides the data iterator's position."""

    step: jax.Array  # int32 scalar: updates applied so far
    params: PyTree
    opt_state: PyTree
    rng: jax.Array  # uint32 key data; per-step dropout keys are folded from it

    @property
    def weights(self) -> PyTree:
        """The weights the run is judged by (validation, checkpoints' readers): the
        parameters, or their moving average in an :class:`~.ema.EmaTrainState`."""
        return self.params


def create_train_state(model: Transformer, tx: optax.GradientTransformation, seed: int,
                       example_batch: dict, init_fn: Callable | None = None) -> TrainState:
    """Initialises parameters (float32) and optimizer state on the default device.

    init_fn(rng, example_batch) -> params: a task's own initialisation (default: the
    translation model's ``init`` on the batch's first row)."""
    init_rng = jax.random.split(jax.random.PRNGKey(seed))[0]
    if init_fn is not None:
        params = init_fn(init_rng, example_batch)
    else:
        inputs = jnp.asarray(example_batch["inputs"][:1])
        targets = jnp.asarray(example_batch["targets"][:1])
        params = run_once(model.init, init_rng, inputs, targets)["params"]
    return train_state_of(params, tx, seed)


def train_state_of(params: PyTree, tx: optax.GradientTransformation, seed: int) -> TrainState:
    """Step 0 of training ``params``: a fresh optimizer state, and the dropout key that
    :func:`create_train_state` derives from ``seed`` (e.g. for imported weights)."""
    dropout_rng = jax.random.split(jax.random.PRNGKey(seed))[1]
    params = jax.tree.map(jnp.asarray, params)
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      rng=jax.random.key_data(dropout_rng))


def _model_inputs(batch: dict) -> dict:
    return {k: batch[k] for k in MODEL_KEYS if k in batch}


def make_loss_fn(model: Transformer, label_smoothing: float, pad_id: int,
                 guided: GuidedAlignment | None = None) -> Callable:
    """loss_fn(params, batch, rng | None) -> (smoothed loss sum, metric sums).

    The decoder's final states and output projection (``Transformer.features``), scored
    by the model's ``ops.loss`` (the label-smoothed loss of their logits); with
    ``guided``, plus the guided alignment loss (:mod:`.guided_alignment`).
    """
    if guided is not None:
        return make_guided_loss_fn(model, label_smoothing, pad_id, guided)

    def loss_fn(params, batch, rng):
        deterministic = rng is None
        apply = dict(deterministic=deterministic, rngs=None if deterministic else {"dropout": rng})
        targets_BT = batch["targets"]
        weights_BT = targets_BT != pad_id
        states_BTD, w_VD, bias_V = model.apply({"params": params}, **_model_inputs(batch),
                                               method=Transformer.features, **apply)
        metrics = model.ops.loss(states_BTD, w_VD, bias_V, targets_BT, weights_BT,
                                 label_smoothing)
        return metrics["loss"], metrics

    return loss_fn


def make_train_step(model: Transformer, tx: optax.GradientTransformation, *,
                    label_smoothing: float, pad_id: int, accum_steps: int = 1,
                    schedule: optax.Schedule | None = None,
                    guided: GuidedAlignment | None = None) -> Callable:
    """The translation model's per-device ``train_step(state, batch) -> (state, metrics)``
    (see the module doc); ``guided``: add guided alignment's loss."""
    return make_step(make_loss_fn(model, label_smoothing, pad_id, guided), tx,
                     accum_steps=accum_steps, schedule=schedule)


def make_step(loss_fn: Callable, tx: optax.GradientTransformation, *, accum_steps: int = 1,
              schedule: optax.Schedule | None = None,
              totals_fn: Callable | None = None) -> Callable:
    """A per-device ``train_step(state, batch) -> (state, metrics)`` for any task.

    loss_fn(params, batch, rng | None) -> (objective sum, metric sums); the gradient is
    that of the objective summed over the global batch divided by the global sum of
    ``metrics["tokens"]``. With ``totals_fn(batch) -> dict`` (sums that depend on the
    data only, e.g. counts of masked positions), those sums over the whole global batch
    (every device and micro-batch) are computed first and passed as loss_fn's fourth
    argument: a task with several losses weighs each by its own global count, exactly,
    whatever the devices and accumulation.
    """
    def accumulate(params, batch, rng):
        grad_fn = jax.grad(loss_fn, has_aux=True)
        if totals_fn is not None:  # over the whole batch, before any micro-batch split
            totals = lax.psum(totals_fn(batch), AXIS)
            grad_fn = jax.grad(lambda p, b, r: loss_fn(p, b, r, totals), has_aux=True)
        if accum_steps == 1:
            return grad_fn(params, batch, rng)
        # [b, ...] -> [accum_steps, b / accum_steps, ...]
        micro = jax.tree.map(lambda x: x.reshape((accum_steps, -1) + x.shape[1:]), batch)

        def body(carry, xs):
            i, mb = xs
            g, m = grad_fn(params, mb, jax.random.fold_in(rng, i))
            return jax.tree.map(jnp.add, carry, (g, m)), None

        zeros = jax.tree.map(jnp.zeros_like, jax.eval_shape(grad_fn, params, jax.tree.map(
            lambda x: x[0], micro), rng))
        (grads, metrics), _ = lax.scan(body, zeros, (jnp.arange(accum_steps), micro))
        return grads, metrics

    def train_step(state: TrainState, batch: dict):
        rng = jax.random.wrap_key_data(state.rng)
        rng = jax.random.fold_in(jax.random.fold_in(rng, state.step), lax.axis_index(AXIS))
        grad_sums, metrics = accumulate(state.params, batch, rng)
        # Global token-normalised gradient: psum(g) / psum(n) == pmean(g) / pmean(n).
        tokens = jnp.maximum(lax.pmean(metrics["tokens"], AXIS), 1e-9)
        grads = jax.tree.map(lambda g: lax.pmean(g, AXIS) / tokens, grad_sums)
        metrics = lax.psum(metrics, AXIS)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
        # Finite loss and gradient norm are enough: every g**2 is then finite, so Adam's
        # moments and updates are (from finite params and a finite schedule). The updates'
        # norm is not checked: every new array would wait for that reduction, and XLA
        # would keep the old and new params and moments alive at once.

        def update(state, grads):
            updates, opt_state = tx.update(grads, state.opt_state, state.params)
            params = optax.apply_updates(state.params, updates)
            return state.replace(step=state.step + 1, params=params, opt_state=opt_state)

        # A non-finite step leaves the state untouched; the host sees `nonfinite` and stops.
        # As a conditional, not a select of new and old: the update runs only when finite,
        # and nothing reads both versions of every array.
        new = lax.cond(finite, update, lambda state, _: state, state, grads)
        metrics["grad_norm"] = grad_norm
        metrics["nonfinite"] = 1.0 - finite.astype(jnp.float32)
        if schedule is not None:
            metrics["learning_rate"] = schedule(state.step)
        return new, metrics

    return train_step


def make_eval_step(model: Transformer, *, label_smoothing: float, pad_id: int) -> Callable:
    """Per-device ``eval_step(params, batch) -> ((), metric sums over the global batch)``."""
    return make_evaluation_step(make_loss_fn(model, label_smoothing, pad_id))


def make_evaluation_step(loss_fn: Callable, totals_fn: Callable | None = None) -> Callable:
    """:func:`make_eval_step` for any task's loss_fn (and totals_fn, see :func:`make_step`)."""
    def eval_step(params, batch):
        if totals_fn is None:
            _, metrics = loss_fn(params, batch, None)
        else:
            _, metrics = loss_fn(params, batch, None, lax.psum(totals_fn(batch), AXIS))
        return (), lax.psum(metrics, AXIS)

    return eval_step
