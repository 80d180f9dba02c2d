import jax
import numpy as np
import optax
import pytest

from jformer.config import TrainConfig
from jformer.train.schedules import make_optimizer, rsqrt_schedule


@pytest.mark.parametrize("d_model, warmup, scale", [(512, 4000, 1.0), (256, 100, 2.0)])
def test_schedule_is_paper_equation_3(d_model, warmup, scale):
    sched = rsqrt_schedule(d_model, warmup, scale)
    for count in [0, 1, 10, warmup - 2, warmup - 1, warmup, 3 * warmup, 50 * warmup]:
        step = count + 1
        expected = scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert float(sched(count)) == pytest.approx(expected, rel=1e-5)


def test_peak_is_at_warmup():
    sched = rsqrt_schedule(512, 40, 1.0)
    values = np.array([float(sched(c)) for c in range(200)])
    assert values.argmax() == 39  # count 39 is step 40 = warmup


def test_optimizer_is_the_papers_adam_on_equation_3():
    """Three updates of make_optimizer's default against Adam written out with the paper's
    beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9 (section 5.3) and the rate of eq. 3 at steps
    1, 2, 3. One gradient entry is 1e-9, the size of epsilon, so epsilon's value shows."""
    d_model, warmup = 512, 4000
    cfg = TrainConfig()
    assert (cfg.adam_b1, cfg.adam_b2, cfg.adam_eps, cfg.warmup_steps) == (0.9, 0.98, 1e-9,
                                                                           warmup)
    tx, sched = make_optimizer(cfg, d_model)
    grads = [np.array([0.5, -2.0, 1e-9]), np.array([0.1, 3.0, 1e-9]),
             np.array([-1.0, 0.25, 1e-9])]
    params = {"w": np.zeros(3, np.float32)}
    state = tx.init(params)
    m = v = np.zeros(3)
    for t, g in enumerate(grads, start=1):
        rate = d_model ** -0.5 * min(t ** -0.5, t * warmup ** -1.5)  # eq. 3
        assert float(sched(t - 1)) == pytest.approx(rate, rel=1e-6)
        m, v = 0.9 * m + 0.1 * g, 0.98 * v + 0.02 * g * g
        want = -rate * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.98 ** t)) + 1e-9)
        updates, state = tx.update({"w": g.astype(np.float32)}, state, params)
        np.testing.assert_allclose(np.asarray(updates["w"]), want, rtol=2e-5)


_SETTINGS = [dict(), dict(grad_clip_norm=0.5), dict(weight_decay=0.01),
             dict(grad_clip_norm=0.5, weight_decay=0.01)]


def _params_and_grads(seed):
    rng = np.random.default_rng(seed)
    params = {"w": rng.normal(size=(4, 3)).astype(np.float32),
              "b": rng.normal(size=(3,)).astype(np.float32)}
    grads = [{k: (10 * rng.normal(size=v.shape)).astype(np.float32) for k, v in params.items()}
             for _ in range(4)]  # global norms well over 0.5: clipping acts
    return params, grads


def _reference(cfg, schedule):
    """The optax chain make_optimizer used to build: clip, then adam or adamw."""
    args = (schedule, cfg.adam_b1, cfg.adam_b2, cfg.adam_eps)
    adam = (optax.adamw(*args, weight_decay=cfg.weight_decay) if cfg.weight_decay > 0
            else optax.adam(*args))
    parts = [optax.clip_by_global_norm(cfg.grad_clip_norm)] if cfg.grad_clip_norm > 0 else []
    return optax.chain(*parts, adam)


@pytest.mark.parametrize("settings", _SETTINGS, ids=lambda s: "+".join(s) or "plain")
def test_optimizer_updates_equal_optax_clip_and_adamw(settings):
    cfg = TrainConfig(warmup_steps=2, **settings)
    tx, schedule = make_optimizer(cfg, 16)
    ref = _reference(cfg, schedule)
    params, grads = _params_and_grads(0)
    state, ref_state = tx.init(params), ref.init(params)
    ref_params = params
    for g in grads:
        updates, state = tx.update(g, state, params)
        ref_updates, ref_state = ref.update(g, ref_state, ref_params)
        params = optax.apply_updates(params, updates)
        ref_params = optax.apply_updates(ref_params, ref_updates)
        for k in params:
            np.testing.assert_array_equal(np.asarray(params[k]), np.asarray(ref_params[k]))
    if settings:  # the settings act: the result is not plain Adam's
        plain_tx, _ = make_optimizer(TrainConfig(warmup_steps=2), 16)
        plain = _params_and_grads(0)[0]
        plain_state = plain_tx.init(plain)
        for g in grads:
            updates, plain_state = plain_tx.update(g, plain_state, plain)
            plain = optax.apply_updates(plain, updates)
        assert not np.allclose(np.asarray(plain["w"]), np.asarray(params["w"]))

def test_optimizer_state_layout_is_independent_of_clipping_and_decay():
    params, _ = _params_and_grads(1)
    plain_cfg = TrainConfig()
    schedule = rsqrt_schedule(16, plain_cfg.warmup_steps)
    # the layout of checkpoints saved before clipping and decay stopped changing it
    expected = jax.tree.structure(optax.chain(optax.adam(schedule)).init(params))
    for settings in _SETTINGS:
        tx, _ = make_optimizer(TrainConfig(**settings), 16)
        assert jax.tree.structure(tx.init(params)) == expected, settings
