"""Learning-rate schedules (the paper's, 5.3; BERT's) and the optimiser, from optax pieces."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jformer.config import TrainConfig
from jformer.types import PyTree


def rsqrt_schedule(d_model: int, warmup_steps: int, scale: float = 1.0) -> optax.Schedule:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  (paper eq. 3).

    ``step`` is 1-based (optax's count + 1), so the first update already has a non-zero
    rate. Linear warm-up to the peak at ``warmup_steps``, then inverse square root.
    """
    if warmup_steps <= 0:
        return lambda count: scale * d_model ** -0.5 * jnp.sqrt(1.0 / (count + 1.0))
    peak = scale * d_model ** -0.5 * warmup_steps ** -0.5
    warmup = lambda step: peak * step / warmup_steps  # linear in the 1-based step
    decay = lambda s: peak * jnp.sqrt(warmup_steps / (s + warmup_steps))  # s = step - warmup
    joined = optax.join_schedules([warmup, decay], boundaries=[warmup_steps])
    return lambda count: joined(count + 1)


def linear_schedule(peak: float, warmup_steps: int, num_steps: int) -> optax.Schedule:
    """BERT's shape: a linear warm-up to ``peak`` over ``warmup_steps`` updates, then a
    linear decay that reaches 0 after ``num_steps`` updates.

    rate(count) = peak * min((count + 1) / warmup, (num_steps - count) / (num_steps -
    warmup)), count = updates applied so far: the first update has a non-zero rate, the
    peak is reached at the end of the warm-up (BERT's code decays from the first step,
    so its rate after warm-up starts at peak * (1 - warmup / num_steps)) and the last
    update's rate is peak / (num_steps - warmup).
    """
    warmup = max(int(warmup_steps), 0)
    decay_steps = max(int(num_steps) - warmup, 1)

    def schedule(count):
        count = jnp.asarray(count, jnp.float32)
        rate = (num_steps - count) / decay_steps
        if warmup:
            rate = jnp.minimum((count + 1.0) / warmup, rate)
        return peak * jnp.clip(rate, 0.0, 1.0)

    return schedule


def decay_mask(params: PyTree) -> PyTree:
    """True for the parameters BERT decays: all but biases and LayerNorm scales."""
    def decayed(path, _):
        name = str(getattr(path[-1], "key", path[-1]))
        return not (name == "scale" or name.endswith("bias"))

    return jax.tree_util.tree_map_with_path(decayed, params)


def make_schedule(cfg: TrainConfig, d_model: int) -> optax.Schedule:
    """``train.schedule``: rsqrt (paper eq. 3) or linear (BERT)."""
    if cfg.schedule == "linear":
        return linear_schedule(cfg.learning_rate, cfg.warmup_steps, cfg.num_steps)
    return rsqrt_schedule(d_model, cfg.warmup_steps, cfg.learning_rate_scale)


def make_optimizer(cfg: TrainConfig, d_model: int) -> tuple[optax.GradientTransformation,
                                                             optax.Schedule]:
    """Adam(b1, b2, eps) (paper: 0.9, 0.98, 1e-9) on ``train.schedule``; optional clipping
    by global norm (``grad_clip_norm > 0``) and decoupled weight decay (``weight_decay >
    0``, AdamW) of every parameter, or with ``weight_decay_mask="matrices"`` of all but
    biases and LayerNorm scales (BERT).

    The optimizer state has one layout whatever the clipping and decay settings:
    ``((ScaleByAdamState, ScaleByScheduleState),)``, that of ``optax.chain(optax.adam(
    schedule, ...))``, which older checkpoints of unclipped, undecayed runs hold. Clipping
    and decay keep no state, so turning them on or off (say after a non-finite loss)
    resumes the same checkpoint. When off they are skipped, not computed as no-ops.
    Updates equal ``optax.chain(clip_by_global_norm, adamw)`` (or ``optax.adam``) exactly.
    """
    schedule = make_schedule(cfg, d_model)
    adam = optax.scale_by_adam(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps)
    rate = optax.scale_by_learning_rate(schedule)
    clip = optax.clip_by_global_norm(cfg.grad_clip_norm) if cfg.grad_clip_norm > 0 else None
    mask = decay_mask if cfg.weight_decay_mask == "matrices" else None
    decay = (optax.add_decayed_weights(cfg.weight_decay, mask=mask) if cfg.weight_decay > 0
             else None)

    def init(params):
        return ((adam.init(params), rate.init(params)),)  # optax.chain(optax.adam(...))

    def update(grads, state, params=None):
        (adam_state, lr_state), = state
        if clip is not None:
            grads, _ = clip.update(grads, clip.init(grads))
        updates, adam_state = adam.update(grads, adam_state, params)
        if decay is not None:  # adamw: decay after the Adam scaling, before the rate
            updates, _ = decay.update(updates, decay.init(params), params)
        updates, lr_state = rate.update(updates, lr_state, params)
        return updates, ((adam_state, lr_state),)

    return optax.GradientTransformation(init, update), schedule
