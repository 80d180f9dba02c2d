"""jformer/inference/keys.py: keys hashed on the host equal JAX's own, bit for bit
(fold_in over any data, a seed's key, a call's rows, a batch's sources), and a translate
call compiles no key program."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.inference import keys
from jformer.search import row_keys


def data(k):
    return np.asarray(jax.random.key_data(k))


def test_fold_in_equals_jax_bit_for_bit():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2**32, size=(257, 2), dtype=np.uint32)
    d = np.concatenate([[0, 1, 2**31, 2**32 - 1], rng.integers(0, 2**32, 253)]).astype(np.uint32)
    want = data(jax.vmap(jax.random.fold_in)(jax.random.wrap_key_data(base), d))
    np.testing.assert_array_equal(keys.fold_in_data(base, d), want)
    # int32 sentence indices, as the sources hold them
    idx = np.arange(-3, 5, dtype=np.int32)
    want = data(jax.vmap(jax.random.fold_in)(jax.random.wrap_key_data(base[:8]), idx))
    np.testing.assert_array_equal(keys.fold_in_data(base[:8], idx), want)


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31 - 1, 2**32 - 1])
def test_a_seed_key_equals_jax_random_key(seed):
    np.testing.assert_array_equal(data(keys.seed_key(seed)), data(jax.random.key(seed)))


def test_row_key_data_equals_row_keys_and_keeps_given_keys():
    rng = jax.random.key(5)
    np.testing.assert_array_equal(keys.row_key_data(rng, 6, first=3),
                                  data(row_keys(rng, 6, first=3)))
    own = jax.random.split(jax.random.key(1), 4)
    np.testing.assert_array_equal(keys.row_key_data(own, 4), data(own))


def test_source_keys_equal_the_jitted_form():
    base = data(jax.random.split(jax.random.key(3), 5))
    sentence = np.array([0, 1, 1, 2, 4], np.int32)
    piece = np.array([0, 0, 1, 0, 2], np.int32)
    split = np.array([False, True, True, False, True])
    for fold_first, source in ((True, base[:1].repeat(5, 0)), (False, base)):
        got = keys.source_keys(source, sentence, piece, split, fold_first=fold_first)
        want = keys._source_keys(jnp.asarray(source), sentence, piece, split,
                                 fold_first=fold_first)
        np.testing.assert_array_equal(data(got), data(want))
        assert jax.random.key_impl(got) == jax.random.key_impl(want)


def test_another_default_prng_takes_jaxs_path(monkeypatch):
    monkeypatch.setattr(keys, "on_host", lambda: False)
    np.testing.assert_array_equal(data(keys.seed_key(9)), data(jax.random.key(9)))
    rng = jax.random.key(2)
    np.testing.assert_array_equal(np.asarray(keys.row_key_data(rng, 3)),
                                  data(row_keys(rng, 3)))


def test_a_translate_call_compiles_no_key_program(setup, caplog):
    from jformer.inference import Translator
    from tests.inference.test_translator import DECODE

    translator = Translator(*setup, DECODE)
    sentences = ["the number is five .", "a b c", "x " * 10]  # two buckets
    with jax.log_compiles(), caplog.at_level("WARNING"):
        translator.translate(sentences, beam_size=2)  # default key 0
        translator.translate(sentences, method="sample", top_k=3,
                             rng=keys.row_key_data(keys.seed_key(4), 3, first=7))
    compiled = [r.getMessage().split()[1] for r in caplog.records
                if r.getMessage().startswith("Compiling ")]
    assert compiled and any("decode" in name for name in compiled)  # it does log them
    assert not [name for name in compiled
                if any(k in name for k in ("threefry", "fold_in", "key", "stage", "iota"))]
