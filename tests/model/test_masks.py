import numpy as np

from jformer.ops import transformer
from jformer.model import masks
from jformer.model.init import run_once


def test_padding_mask_truth_table():
    q = np.array([[True, True, False]])
    k = np.array([[True, False, True, True]])
    m = np.asarray(masks.padding_mask(q, k))
    assert m.shape == (1, 1, 3, 4)
    np.testing.assert_array_equal(m[0, 0], np.outer(q[0], k[0]))


def test_causal_mask_truth_table():
    m = np.asarray(masks.causal_mask(4))[0, 0]
    np.testing.assert_array_equal(m, np.tril(np.ones((4, 4), bool)))


def test_segment_mask():
    seg = np.array([[1, 1, 2, 2, 0]])
    m = np.asarray(masks.segment_mask(seg, seg))[0, 0]
    assert m[0, 1] and m[2, 3] and not m[1, 2] and not m[0, 4] and m[4, 4]


def test_encoder_mask_combines_padding_and_segments():
    tokens = np.array([[5, 6, 7, 8, 0]])
    seg = np.array([[1, 1, 2, 2, 0]])
    m = np.asarray(masks.encoder_mask(tokens, 0, seg))[0, 0]
    expected = np.zeros((5, 5), bool)
    expected[:2, :2] = True
    expected[2:4, 2:4] = True
    np.testing.assert_array_equal(m, expected)


def test_decoder_mask_is_causal_and_ignores_padding():
    targets = np.array([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    m = np.asarray(masks.decoder_mask(targets, 0))
    assert m.shape == (2, 1, 5, 5)
    valid0 = targets[0] != 0
    np.testing.assert_array_equal(m[0, 0], np.tril(np.outer(valid0, valid0)))
    np.testing.assert_array_equal(m[1, 0], np.tril(np.ones((5, 5), bool)))


def test_cross_mask():
    targets = np.array([[5, 6, 0]])
    inputs = np.array([[7, 0, 0, 0], [7, 8, 9, 0]])[:1]
    m = np.asarray(masks.cross_mask(targets, inputs, 0))
    assert m.shape == (1, 1, 3, 4)
    np.testing.assert_array_equal(m[0, 0], np.outer([1, 1, 0], [1, 0, 0, 0]).astype(bool))


def test_cross_mask_with_segments():
    targets, inputs = np.array([[5, 6, 7]]), np.array([[8, 9, 10, 0]])
    tseg, iseg = np.array([[1, 2, 2]]), np.array([[1, 1, 2, 0]])
    m = np.asarray(masks.cross_mask(targets, inputs, 0, tseg, iseg))[0, 0]
    np.testing.assert_array_equal(m, [[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]])


def test_window_mask_truth_table():
    queries, keys = np.array([0, 3, 7]), np.arange(9)  # a decode step's query: any position
    m = np.asarray(masks.window_mask(queries, keys, 2))
    assert m.shape == (1, 1, 3, 9)
    np.testing.assert_array_equal(m[0, 0], np.abs(keys[None, :] - queries[:, None]) <= 2)
    np.testing.assert_array_equal(m[0, 0, 1], [0, 1, 1, 1, 1, 1, 0, 0, 0])
    assert masks.window_mask(queries, keys, None) is None
    # with the causal mask: the position itself and w = 1 before it
    idx = np.arange(5)
    both = masks.combine_masks(masks.causal_mask(5), masks.window_mask(idx, idx, 1))
    np.testing.assert_array_equal(np.asarray(both)[0, 0], (idx[None, :] <= idx[:, None])
                                  & (idx[None, :] >= idx[:, None] - 1))


def test_a_window_limits_what_reaches_each_position_to_layers_times_w():
    """Two encoder layers with a window of 1: a token reaches the outputs at most 2
    positions away, and no other; the decoder's logit t reads decoder inputs t-2..t."""
    import dataclasses

    import jax.numpy as jnp

    from jformer.config import ModelConfig
    from jformer.model.transformer import Transformer
    from tests.model.test_relative import drawn_params

    cfg = ModelConfig(vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=2,
                      num_decoder_layers=2, d_ff=32, max_len=12, dropout_rate=0.0,
                      attention_window=1, ops="plain")
    model, v = transformer(cfg), drawn_params(cfg)
    inputs = jnp.array([[5, 6, 7, 8, 9, 10, 11, 12, 3]], jnp.int32)
    changed = inputs.at[0, 4].set(15)
    encode = lambda x: model.apply(v, x, method=Transformer.encode)  # noqa: E731
    moved = np.abs(np.asarray(encode(changed) - encode(inputs))).max(-1)[0]
    np.testing.assert_array_equal(moved > 1e-6, np.abs(np.arange(9) - 4) <= 2)
    # decoder input t + 1 is target t: target 4 reaches logits 5..7
    logits = np.asarray(model.apply(v, inputs, changed) - model.apply(v, inputs, inputs))
    np.testing.assert_array_equal(np.abs(logits).max(-1)[0] > 1e-6,
                                  (np.arange(9) >= 5) & (np.arange(9) <= 7))
    assert dataclasses.replace(cfg, attention_window=None).attention_window is None


def test_combine_masks_skips_none():
    a = np.array([True, False, True])
    b = np.array([True, True, False])
    np.testing.assert_array_equal(masks.combine_masks(a, None, b), [True, False, False])
    assert masks.combine_masks(None, None) is None


def test_masks_of_a_packed_row_are_block_diagonal_per_pair():
    """Three pairs packed by jformer.data into one row: each pair's queries see exactly its
    own keys (its source for the encoder and cross-attention, its target prefix for the
    decoder); padding sees nothing and is seen by nothing."""
    from jformer.data.packing import first_fit, packed_batch
    from jformer.data.ragged import RaggedArray

    src_lens, tgt_lens, pack_len = [4, 2, 3], [3, 5, 2], 12
    rng = np.random.default_rng(0)
    src = RaggedArray.from_rows([rng.integers(4, 50, n).tolist() for n in src_lens])
    tgt = RaggedArray.from_rows([rng.integers(4, 50, n).tolist() for n in tgt_lens])
    order = np.arange(3)
    row = first_fit(src.lengths, tgt.lengths, order, pack_len)
    assert row.tolist() == [0, 0, 0]
    b = packed_batch(src, tgt, order, row, 1, pack_len, pad_id=0)
    enc = np.asarray(masks.encoder_mask(b["inputs"], 0, b["inputs_segmentation"]))[0, 0]
    dec = np.asarray(masks.decoder_mask(b["targets"], 0, b["targets_segmentation"]))[0, 0]
    cross = np.asarray(masks.cross_mask(b["targets"], b["inputs"], 0, b["targets_segmentation"],
                                        b["inputs_segmentation"]))[0, 0]

    def spans(lengths):  # slot ranges of the pairs, placed one after another
        ends = np.cumsum(lengths)
        return [range(e - n, e) for n, e in zip(lengths, ends)]

    want_enc, want_dec, want_cross = (np.zeros((pack_len, pack_len), bool) for _ in range(3))
    for s, t in zip(spans(src_lens), spans(tgt_lens)):
        want_enc[s.start:s.stop, s.start:s.stop] = True
        want_dec[t.start:t.stop, t.start:t.stop] = np.tril(np.ones((len(t), len(t)), bool))
        want_cross[t.start:t.stop, s.start:s.stop] = True
    np.testing.assert_array_equal(enc, want_enc)
    np.testing.assert_array_equal(dec, want_dec)
    np.testing.assert_array_equal(cross, want_cross)
    # the padding mask alone would let every real slot of the row see every other one
    valid = b["inputs"] != 0
    assert np.asarray(masks.padding_mask(valid, valid))[0, 0, :9, :9].all()


def test_a_query_with_nothing_to_attend_stays_finite():
    """Padding queries see no key at all; NEG_INF is finite, so their softmax is uniform
    instead of 0/0 = NaN, and nothing non-finite reaches any output."""
    import jax
    import jax.numpy as jnp

    from jformer.config import ModelConfig

    cfg = ModelConfig(vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=1,
                      num_decoder_layers=1, d_ff=32, max_len=8, dropout_rate=0.0)
    model = transformer(cfg)
    inputs = jnp.array([[5, 6, 0, 0, 0], [0, 0, 0, 0, 0]], jnp.int32)  # row 1: all padding
    targets = jnp.array([[7, 3, 0, 0], [0, 0, 0, 0]], jnp.int32)
    variables = run_once(model.init, jax.random.PRNGKey(0), inputs, targets)
    logits = jax.jit(model.apply)(variables, inputs, targets)
    assert np.isfinite(np.asarray(logits)).all()
