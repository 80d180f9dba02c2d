"""jformer.model.losses: label-smoothed cross entropy (paper 5.4) against an explicit KL."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.model.losses import smoothed_cross_entropy


def reference(logits, targets, weights, eps):
    V = logits.shape[-1]
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    q = np.full(logits.shape, eps / (V - 1))
    np.put_along_axis(q, targets[..., None], 1 - eps, axis=-1)
    ent = -(q * np.log(np.where(q > 0, q, 1))).sum(-1)
    kl = (-(q * logp).sum(-1) - ent) * weights
    nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0] * weights
    return kl.sum(), nll.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_explicit_kl_to_smoothed_distribution(eps):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 7)).astype(np.float64)
    targets = rng.integers(0, 7, (2, 3))
    weights = np.array([[1, 1, 0], [1, 1, 1]], np.float64)
    out = smoothed_cross_entropy(jnp.asarray(logits, jnp.float32), jnp.asarray(targets),
                                 jnp.asarray(weights), eps)
    loss, nll = reference(logits, targets, weights, eps)
    assert float(out["loss"]) == pytest.approx(loss, rel=1e-5)
    assert float(out["nll"]) == pytest.approx(nll, rel=1e-5)
    assert float(out["tokens"]) == 5.0


def test_perfect_prediction_scores_zero_smoothed_loss():
    V, eps = 5, 0.1
    targets = jnp.array([[1, 3]])
    # logits whose softmax is exactly the smoothed target distribution
    q = np.full((1, 2, V), eps / (V - 1))
    np.put_along_axis(q, np.asarray(targets)[..., None], 1 - eps, axis=-1)
    out = smoothed_cross_entropy(jnp.log(jnp.asarray(q, jnp.float32)), targets, jnp.ones((1, 2)), eps)
    assert abs(float(out["loss"])) < 1e-5


def test_gradient_flows_only_from_weighted_positions():
    logits = jnp.zeros((1, 2, 4))
    g = jax.grad(lambda l: smoothed_cross_entropy(l, jnp.array([[1, 2]]),
                                                  jnp.array([[1.0, 0.0]]), 0.1)["loss"])(logits)
    assert np.abs(np.asarray(g[0, 1])).max() == 0.0 and np.abs(np.asarray(g[0, 0])).max() > 0


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradients_match_autodiff_of_log_softmax(eps):
    """Gradients equal those of an independent autodiff formulation."""
    logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 7)) * 3
    targets = jnp.array([[1, 6, 0], [2, 2, 5]])
    weights = jnp.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.5]])

    def reference(l):
        logp = jax.nn.log_softmax(l)
        q = jnp.where(jax.nn.one_hot(targets, 7) > 0, 1 - eps, eps / 6)
        ent = -jnp.sum(jnp.where(q > 0, q * jnp.log(jnp.where(q > 0, q, 1)), 0), -1)
        nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]
        return ((-(q * logp).sum(-1) - ent) * weights).sum(), (nll * weights).sum()

    ours = jax.grad(lambda l: smoothed_cross_entropy(l, targets, weights, eps)["loss"])(logits)
    want = jax.grad(lambda l: reference(l)[0])(logits)
    assert np.abs(np.asarray(want)).max() > 0.1
    np.testing.assert_allclose(ours, want, atol=1e-6)


def test_nll_is_a_metric_with_its_gradient_stopped():
    """nll (perplexity) carries no gradient, in the plain form as in kernels.fused_loss."""
    logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 7))
    g = jax.grad(lambda l: smoothed_cross_entropy(l, jnp.array([[1, 6, 0], [2, 2, 5]]),
                                                  jnp.ones((2, 3)), 0.1)["nll"])(logits)
    assert np.abs(np.asarray(g)).max() == 0.0


def test_correct_counts_targets_with_the_highest_logit():
    logits = jnp.array([[[0.0, 2.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 5.0]]])
    out = smoothed_cross_entropy(logits, jnp.array([[1, 2, 2]]), jnp.array([[1.0, 1.0, 0.0]]))
    assert float(out["correct"]) == 1.0  # row 0 right, row 1 wrong, row 2 weight 0
