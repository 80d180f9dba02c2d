import numpy as np

from jformer.model import masks


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


def test_combine_masks_skips_none():
    a = np.array([True, False, True])
    b = np.array([True, True, False])
    np.testing.assert_array_equal(masks.combine_masks(a, None, b), [True, False, False])
    assert masks.combine_masks(None, None) is None
