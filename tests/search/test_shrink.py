"""jformer.search.shrink: a batch that drops its finished sources gives the fixed batch's
results, on toy Markov step functions whose table rows are per-source inputs."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.search import SourceStep, beam_search, greedy_search, stage_sizes
from jformer.search.prefix import prefix_constraint

B, V, W = 13, 7, 4
BOS, EOS, PAD = 4, 1, 6
IDS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


def table_of(seed: int, steps: int) -> np.ndarray:
    """Logits [B, steps, V, V]; EOS grows likelier with the step at a per-source rate,
    so sources finish at spread-out steps and some never (max_len cuts them off)."""
    rng = np.random.default_rng(seed)
    table = rng.normal(scale=2.0, size=(B, steps, V, V))
    rate_B = rng.uniform(-0.1, 1.2, B)
    table[..., EOS] += rate_B[:, None, None] * np.arange(steps)[None, :, None] - 3.0
    return table.astype(np.float32)


def source_step(table_BTPV: jax.Array, calls: list | None = None) -> SourceStep:
    """Row n of a batch of B' sources reads table row n // (N / B'); the state, a running
    token sum per row, shifts its logits, so a state moved with the wrong source fails."""
    def of(sources):
        def step_fn(tokens_N, step, state):
            if calls is not None:
                jax.debug.callback(lambda n: calls.append(int(n)), tokens_N.shape[0])
            table = sources["table"]
            source_N = jnp.arange(tokens_N.shape[0]) // (tokens_N.shape[0] // table.shape[0])
            shift_NV = 0.3 * jnp.cos(state["sum"][:, None] + jnp.arange(V))
            return (table[source_N, step, tokens_N] + shift_NV,
                    {"sum": state["sum"] + tokens_N})
        return step_fn
    return SourceStep(of, {"table": table_BTPV})


@functools.partial(jax.jit, static_argnames=("method", "shrink", "max_len", "kw"))
def decode(table, *, method, shrink, max_len, kw=()):
    step_fn, state = source_step(table), {"sum": jnp.zeros((B,), jnp.int32)}
    if method == "greedy":
        return greedy_search(step_fn, state, batch_size=B, max_len=max_len, chunk_size=3,
                             shrink=shrink, **IDS, **dict(kw))
    return beam_search(step_fn, state, batch_size=B, beam_size=W, max_len=max_len,
                       alpha=0.6, chunk_size=3, shrink=shrink, **IDS, **dict(kw))


def test_stage_sizes_halve_down_to_the_floor():
    assert stage_sizes(32, 8) == (16, 8)
    assert stage_sizes(13, 3) == (6, 3)
    assert stage_sizes(32, 0) == () and stage_sizes(5, 4) == ()


BEAM_TOP_W = (("eos_candidates", "top_w"), ("n_best", 2), ("min_len", 2))
SLOW = pytest.mark.slow


@pytest.mark.parametrize("method, kw, max_len, shrink", [
    ("beam", BEAM_TOP_W, 11, (6, 3)),  # 11: a short last chunk; some rows hit max_len
    pytest.param("greedy", (), 11, (6, 3), marks=SLOW),  # default: the test below
    pytest.param("beam", (), 11, (6, 3), marks=SLOW),
    pytest.param("greedy", (), 20, (12,), marks=SLOW),
    pytest.param("beam", (), 20, (4,), marks=SLOW),
    pytest.param("beam", BEAM_TOP_W, 20, (12, 6, 3), marks=SLOW)])
def test_shrinking_gives_the_fixed_batch_results(method, kw, max_len, shrink):
    table = jnp.asarray(table_of(max_len, 20))
    fixed = decode(table, method=method, shrink=(), max_len=max_len, kw=kw)
    shrunk = decode(table, method=method, shrink=shrink, max_len=max_len, kw=kw)
    for name, want in fixed._asdict().items():
        np.testing.assert_array_equal(getattr(shrunk, name), want, err_msg=name)
    lengths_B = np.asarray(fixed.lengths).reshape(B, -1)[:, 0]
    assert lengths_B.min() <= 5 and len(set(lengths_B.tolist())) > 4  # spread-out ends
    if max_len == 11:  # max_len ends some rows (greedy) or hypotheses (beam)
        assert (np.asarray(fixed.lengths) == max_len).any()


def stage_row_steps(finish_B, sizes, *, chunk_size, max_len):
    """Rows stepped by a schedule of stage ``sizes``, given the step each row is done
    after: between chunks the batch moves down to each next size that holds every
    unfinished row."""
    total, t, stage = 0, 0, 0
    while t < max_len and (finish_B > t).any():
        while stage + 1 < len(sizes) and (finish_B > t).sum() <= sizes[stage + 1]:
            stage += 1
        n = min(chunk_size, max_len - t)
        total, t = total + sizes[stage] * n, t + n
    return total


def test_finished_sources_are_no_longer_stepped():
    table, max_len = jnp.asarray(table_of(11, 20)), 11
    state = {"sum": jnp.zeros((B,), jnp.int32)}
    rows, outs = {}, {}
    for shrink in ((), (6, 3)):
        calls = []
        outs[shrink] = jax.device_get(jax.jit(lambda t, s=shrink, c=calls: greedy_search(
            source_step(t, c), state, batch_size=B, max_len=max_len, chunk_size=3,
            shrink=s, **IDS))(table))
        rows[shrink] = sum(calls)
    fixed = outs[()]
    for name, want in fixed._asdict().items():
        np.testing.assert_array_equal(getattr(outs[(6, 3)], name), want, err_msg=name)
    finish_B = np.where(fixed.finished, fixed.lengths, max_len)
    assert max_len in finish_B and finish_B.min() <= 5
    assert rows[()] == B * int(fixed.num_steps) == B * max_len
    want = stage_row_steps(finish_B, (B, 6, 3), chunk_size=3, max_len=max_len)
    assert rows[(6, 3)] == want < rows[()]


def test_bad_shrinks_raise_value_error():
    table = jnp.asarray(table_of(0, 8))
    step_fn, state = source_step(table), {"sum": jnp.zeros((B,), jnp.int32)}
    run = functools.partial(greedy_search, state=state, batch_size=B, max_len=8, **IDS)
    with pytest.raises(ValueError, match="shrink must be decreasing ints"):
        run(step_fn, shrink=(3, 6))
    with pytest.raises(ValueError, match="shrink must be decreasing ints"):
        run(step_fn, shrink=(B,))
    with pytest.raises(ValueError, match="must be a SourceStep"):
        run(step_fn.of(step_fn.sources), shrink=(6,))
    with pytest.raises(ValueError, match="constrain of a shrinking search must be None"):
        run(step_fn, shrink=(6,),
            constrain=prefix_constraint(jnp.full((B, 2), -1, jnp.int32)))
    with pytest.raises(ValueError, match=r"sources leaf .* leading batch axis 13"):
        run(SourceStep(step_fn.of, {"table": table[:5]}), shrink=(4,))
