"""The numbers behind the figures of docs/transformer.md (jformer.inference.figures)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from jformer.data.demo import generate_pairs
from jformer.data.tokenizer import Tokenizer
from jformer.inference import embedding_space, figures

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.load(os.path.join(FIXTURE, "spm.model"))


def test_pe_dot_product_curves_coincide_and_are_even_only_with_cosines():
    both = figures.pe_dot_products(64, (30, 47, 90), 30)
    np.testing.assert_allclose(both, both[0][None].repeat(3, 0), atol=1e-4)
    np.testing.assert_allclose(both, both[:, ::-1], atol=1e-4)
    assert both[0, 30] == pytest.approx(32.0, abs=1e-4)  # k = 0: |PE(p)|^2 = d/2
    sines = figures.pe_dot_products(64, (30, 47, 90), 30, sin_only=True)
    assert np.abs(sines - sines[0]).max() > 1.0
    assert np.abs(sines - sines[:, ::-1]).max() > 1.0
    with pytest.raises(ValueError, match="max_offset"):
        figures.pe_dot_products(64, (10,), 30)


def test_packed_example_is_a_real_packed_row_with_its_masks(tokenizer):
    pairs = generate_pairs(0, 0, 60, 0)["eval"]
    ex = figures.packed_example(tokenizer, pairs, num_pairs=3, pad=3)
    batch, masks = ex["batch"], ex["masks"]
    seg_src, seg_tgt = batch["inputs_segmentation"][0], batch["targets_segmentation"][0]
    assert set(seg_src) == set(seg_tgt) == {0, 1, 2, 3}
    assert seg_src[-1] == seg_tgt[-1] == 0  # both sides end in padding
    assert (seg_src[-3:] == 0).all() or (seg_tgt[-3:] == 0).all()  # the longer side by 3
    same_src = (seg_src[:, None] == seg_src[None]) & (seg_src[:, None] > 0)
    same_tgt = (seg_tgt[:, None] == seg_tgt[None]) & (seg_tgt[:, None] > 0)
    np.testing.assert_array_equal(masks["encoder"], same_src)
    np.testing.assert_array_equal(masks["decoder"], same_tgt & np.tril(np.ones_like(same_tgt)))
    np.testing.assert_array_equal(masks["cross"],
                                  (seg_tgt[:, None] == seg_src[None]) & (seg_tgt[:, None] > 0))
    assert masks["padding"][seg_src > 0][:, seg_src > 0].all()
    # the pieces spell the pairs; the decoder reads BOS at every pair's start
    bos = tokenizer.id_to_piece(tokenizer.bos_id)
    starts = np.flatnonzero(batch["targets_position"][0] == 0)[:3]
    assert [ex["decoder_input_pieces"][i] for i in starts] == [bos] * 3
    assert ex["decoder_input_pieces"][1] == ex["target_pieces"][0]
    texts = tokenizer.decode(batch["inputs"][:, :int((seg_src == 1).sum())])
    assert texts[0] in [s for s, _ in pairs]


def test_pca_2d_projects_on_the_top_two_eigenvectors_of_the_covariance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)) * np.array([5.0, 0.1, 3.0, 0.1, 0.1, 0.1]) + 7.0
    coords, explained = embedding_space.pca_2d(x)
    centred = x - x.mean(0)
    eigenvalues, eigenvectors = np.linalg.eigh(centred.T @ centred)  # ascending
    top = eigenvectors[:, ::-1][:, :2]
    assert coords.shape == (200, 2)
    np.testing.assert_allclose(np.abs(coords), np.abs(centred @ top), atol=1e-9)
    np.testing.assert_allclose(explained, eigenvalues[::-1][:2] / eigenvalues.sum())
    assert explained[0] > explained[1] > 0.2


def test_neighbour_agreement_counts_same_category_nearest_words():
    degrees = np.array([0, 5, 11, 80, 86, 30])  # directions; lengths must not matter
    vectors = np.stack([np.cos(np.radians(degrees)), np.sin(np.radians(degrees))], 1)
    vectors *= np.array([1, 3, 0.5, 2, 1, 7])[:, None]
    labels = ["a", "a", "a", "b", "b", "b"]
    # the last "b" (30 degrees) is nearer the "a" at 11 than any "b"
    assert embedding_space.neighbour_agreement(vectors, labels) == {"a": (3, 3), "b": (2, 3)}


def test_word_vectors_are_means_of_pieces(tokenizer):
    embedding = np.arange(tokenizer.vocab_size * 4, dtype=np.float64).reshape(-1, 4)
    words, labels, vectors, pieces = embedding_space.word_vectors(
        tokenizer, embedding, {"number": ("seventy", "three"), "colour": ("red",)})
    assert words == ["seventy", "three", "red"] and labels == ["number", "number", "colour"]
    for word, vector, n in zip(words, vectors, pieces):
        ids = [i for i in tokenizer.encode([word], add_eos=False)[0]
               if tokenizer.id_to_piece(int(i)) != "▁"]
        assert n == len(ids)
        np.testing.assert_allclose(vector, embedding[ids].mean(0))


TRAIN = """
import sys
from jformer.train import loop
from tests.train_helpers import tiny_config

c = tiny_config(num_steps=600, warmup_steps=100, checkpoint_every=10_000, log_every=100)
c.model.d_model, c.model.num_heads, c.model.d_ff = 64, 2, 128
c.data.demo_num_train, c.data.vocab_size, c.data.vocab_sample_size = 10_000, 1000, 20_000
c.data.max_tokens = 512
loop.train(c, sys.argv[1])
"""


@pytest.mark.slow
def test_trained_embeddings_put_number_words_next_to_number_words(tmp_path):
    """Train a small model on the demo corpus (600 steps, one device, in a subprocess):
    at least 80% of the German number words that are one piece then have another number
    word as nearest neighbour (cosine, among the German category words); random vectors,
    i.e. untrained embeddings, at most 40%."""
    from jformer.workdir import checkpoint

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, JFORMER_MALLOC="default",
               XLA_FLAGS="--xla_force_host_platform_device_count=1")
    subprocess.run([sys.executable, "-c", TRAIN, str(tmp_path)], cwd=root, env=env,
                   check=True, capture_output=True, timeout=1200)
    tok = Tokenizer.load(tmp_path / "spm.model")
    trained = np.asarray(checkpoint.restore_params(str(tmp_path / "checkpoints"))
                         ["shared_embedding"]["embedding"])
    random = np.random.default_rng(0).normal(size=trained.shape)
    found = {}
    for name, embedding in (("trained", trained), ("random", random)):
        _, labels, vectors, pieces = embedding_space.word_vectors(
            tok, embedding, embedding_space.CATEGORIES["German"])
        keep = pieces == 1
        found[name] = embedding_space.neighbour_agreement(vectors[keep],
                                                          np.asarray(labels)[keep])
    agree, total = found["trained"]["number"]
    before, _ = found["random"]["number"]
    assert total >= 8, found
    assert agree >= 0.8 * total and before <= 0.4 * total, found


def test_a_rotation_commuting_projection_gives_one_curve_that_is_not_even():
    projection = figures.rotation_commuting_projection(64, seed=0)
    scores = figures.pe_dot_products(64, (30, 47, 90), 30, projection=projection)
    np.testing.assert_allclose(scores, scores[0][None].repeat(3, 0), atol=1e-4)
    assert np.abs(scores - scores[:, ::-1]).max() > 1.0
    # its symmetric part (the a_i) alone is even again
    symmetric = (projection + projection.T) / 2
    even = figures.pe_dot_products(64, (30, 47), 30, projection=symmetric)
    np.testing.assert_allclose(even, even[:, ::-1], atol=1e-4)
