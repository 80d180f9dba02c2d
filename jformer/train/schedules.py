"""The paper's learning-rate schedule and optimiser (paper 5.3), built from optax pieces."""
from __future__ import annotations

import jax.numpy as jnp
import optax

from jformer.config import TrainConfig


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


def make_optimizer(cfg: TrainConfig, d_model: int) -> tuple[optax.GradientTransformation,
                                                             optax.Schedule]:
    """Adam(b1, b2, eps) (paper: 0.9, 0.98, 1e-9) on the rsqrt schedule; optional clipping
    by global norm (``grad_clip_norm > 0``) and decoupled weight decay (``weight_decay >
    0``, AdamW).

    The optimizer state has one layout whatever the clipping and decay settings:
    ``((ScaleByAdamState, ScaleByScheduleState),)``, that of ``optax.chain(optax.adam(
    schedule, ...))``, which older checkpoints of unclipped, undecayed runs hold. Clipping
    and decay keep no state, so turning them on or off (say after a non-finite loss)
    resumes the same checkpoint. When off they are skipped, not computed as no-ops.
    Updates equal ``optax.chain(clip_by_global_norm, adamw)`` (or ``optax.adam``) exactly.
    """
    schedule = rsqrt_schedule(d_model, cfg.warmup_steps, cfg.learning_rate_scale)
    adam = optax.scale_by_adam(cfg.adam_b1, cfg.adam_b2, cfg.adam_eps)
    rate = optax.scale_by_learning_rate(schedule)
    clip = optax.clip_by_global_norm(cfg.grad_clip_norm) if cfg.grad_clip_norm > 0 else None
    decay = optax.add_decayed_weights(cfg.weight_decay) if cfg.weight_decay > 0 else None

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
