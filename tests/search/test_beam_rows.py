"""jformer.search.beam with every row at its own step and output limit (continuous
batching: jformer.inference.continuous): a row that joins late, beside rows far into
their decode, gets the result it gets decoded alone."""
import jax
import jax.numpy as jnp
import numpy as np

from jformer.search import beam_search
from jformer.search.beam import beam_init, beam_result, beam_step
from tests.search.test_shrink import B, IDS, W, source_step, table_of

MAX_LEN, ALPHA = 12, 0.6
# each source's output limit, and the step at which it joins the decode
LIMITS = np.array([12, 8, 12, 5, 12, 9, 12, 12, 7, 12, 12, 10, 12], np.int32)
STARTS = np.array([0, 3, 1, 0, 5, 2, 0, 7, 4, 1, 6, 0, 2])


def test_rows_at_their_own_steps_and_limits_give_each_row_its_own_result():
    table = jnp.asarray(table_of(5, 20))
    step_fn = source_step(table)
    settings = dict(max_len=MAX_LEN, alpha=ALPHA, eos_id=IDS["eos_id"], pad_id=IDS["pad_id"],
                    min_len=0, n_best=2, eos_candidates="top_w", limit_B=jnp.asarray(LIMITS))
    fresh = beam_init({"sum": jnp.zeros((B,), jnp.int32)}, batch_size=B, beam_size=W,
                      max_len=MAX_LEN, bos_id=IDS["bos_id"], pad_id=IDS["pad_id"])
    # every row waits (done) until it joins; then it starts as beam_init leaves it
    carry = fresh._replace(done_B=jnp.ones((B,), bool))
    step = jax.jit(lambda c: beam_step(c, c.steps_B, step_fn, None, **settings))
    for g in range(40):
        joins = STARTS == g
        if joins.any():
            fields = {name: jnp.where(jnp.asarray(joins).reshape((B,) + (1,) * (
                getattr(fresh, name).ndim - 1)), getattr(fresh, name), getattr(carry, name))
                for name in fresh._fields if name != "state"}
            rows = jnp.repeat(jnp.asarray(joins), W)
            state = {"sum": jnp.where(rows, 0, carry.state["sum"])}  # the toy's own state
            carry = carry._replace(state=state, **fields)
        carry = step(carry)
        if g > STARTS.max() and bool(carry.done_B.all()):
            break
    assert bool(carry.done_B.all())
    got = beam_result(carry, jnp.int32(0), alpha=ALPHA, eos_id=IDS["eos_id"],
                      pad_id=IDS["pad_id"])
    for limit in sorted(set(LIMITS.tolist())):  # decoded in one batch at that limit
        alone = beam_search(step_fn, {"sum": jnp.zeros((B,), jnp.int32)}, batch_size=B,
                            beam_size=W, max_len=limit, alpha=ALPHA, chunk_size=1,
                            n_best=2, eos_candidates="top_w", **IDS)
        rows = np.flatnonzero(LIMITS == limit)
        np.testing.assert_array_equal(np.asarray(got.tokens)[rows, :, :limit],
                                      np.asarray(alone.tokens)[rows], err_msg=f"{limit}")
        for name in ("scores", "lengths", "finished"):
            np.testing.assert_array_equal(np.asarray(getattr(got, name))[rows],
                                          np.asarray(getattr(alone, name))[rows],
                                          err_msg=f"{name}, limit {limit}")
    # the limits bound the outputs, and rows ended at many different steps
    assert (np.asarray(got.lengths) <= LIMITS[:, None]).all()
    assert len(set(np.asarray(got.lengths)[:, 0].tolist())) > 3
