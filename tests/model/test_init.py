"""jformer.model.init.run_once: model.init compiled for a single run."""
import jax
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.model import init
from jformer.model.init import run_once
from jformer.ops import transformer

CFG = ModelConfig(vocab_size=31, d_model=16, num_heads=2, num_encoder_layers=1,
                  num_decoder_layers=1, d_ff=24, max_len=16, dropout_rate=0.0,
                  positional="relative", relative_clip=3, tie_output=False)


def test_parameters_equal_jits_bit_for_bit():
    """The same parameters as jax.jit(model.init) at XLA's default optimization level
    (3; pinned, as the suite compiles at level 0: tests/conftest.py), every leaf bit for
    bit, while a different seed gives different ones (the comparison can fail)."""
    model = transformer(CFG)
    x = np.ones((1, 6), np.int32)
    key = jax.random.PRNGKey(3)
    want = jax.jit(model.init).lower(key, x, x).compile(
        compiler_options={"xla_backend_optimization_level": 3})(key, x, x)
    got = run_once(model.init, jax.random.PRNGKey(3), x, x)
    other = run_once(model.init, jax.random.PRNGKey(4), x, x)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for (path, w), g, o in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got),
                               jax.tree.leaves(other)):
        np.testing.assert_array_equal(g, w, err_msg=jax.tree_util.keystr(path))
        assert g.dtype == w.dtype
    assert any(not np.array_equal(g, o) for g, o in zip(jax.tree.leaves(got),
                                                        jax.tree.leaves(other)))


def test_the_backends_options_reach_xla(monkeypatch):
    """run_once compiles with the current backend's entry (on a CPU, XLA backend
    optimization level 1), and XLA reads it: a misspelt option name fails the compile."""
    assert init._RUN_ONCE_OPTIONS["cpu"] == {"xla_backend_optimization_level": 1}
    backend = jax.default_backend()
    seen, real = [], jax.stages.Lowered.compile

    def spy(self, compiler_options=None):
        seen.append(compiler_options)
        return real(self, compiler_options=compiler_options)

    monkeypatch.setattr(jax.stages.Lowered, "compile", spy)
    np.testing.assert_array_equal(run_once(lambda a: a * 2, np.arange(3.0)), [0, 2, 4])
    assert seen == [init._RUN_ONCE_OPTIONS.get(backend, {})]
    monkeypatch.setitem(init._RUN_ONCE_OPTIONS, backend, {"xla_backend_optimisation_level": 1})
    with pytest.raises(Exception, match="No such compile option"):
        run_once(lambda a: a * 3, np.arange(3.0))
