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
    """Adam(b1, b2, eps) (paper: 0.9, 0.98, 1e-9) on the rsqrt schedule; optional clipping."""
    schedule = rsqrt_schedule(d_model, cfg.warmup_steps, cfg.learning_rate_scale)
    if cfg.weight_decay > 0:
        adam = optax.adamw(schedule, cfg.adam_b1, cfg.adam_b2, cfg.adam_eps,
                           weight_decay=cfg.weight_decay)
    else:
        adam = optax.adam(schedule, cfg.adam_b1, cfg.adam_b2, cfg.adam_eps)
    parts = [optax.clip_by_global_norm(cfg.grad_clip_norm)] if cfg.grad_clip_norm > 0 else []
    return optax.chain(*parts, adam), schedule
