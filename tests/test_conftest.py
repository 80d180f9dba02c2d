"""tests/conftest.py: the device-count flag is appended, never silently dropped, XLA's
optimization level is appended unless one is set (and reaches XLA), a worker
drops jax's caches past half the memory-mapping limit, and CI's no-skip switch turns a
skip into a failure."""
import os
import subprocess
import sys

import pytest

import tests.conftest as conftest
from tests.conftest import _with_device_count, _with_level, map_budget, memory_maps


def test_the_device_count_is_appended_to_other_xla_flags():
    assert _with_device_count("") == "--xla_force_host_platform_device_count=8"
    assert _with_device_count("--xla_cpu_use_thunk_runtime=false") == (
        "--xla_cpu_use_thunk_runtime=false --xla_force_host_platform_device_count=8")
    same = "--xla_force_host_platform_device_count=8"
    assert _with_device_count(same) == same


def test_another_device_count_is_an_error_naming_the_variable():
    with pytest.raises(pytest.UsageError, match="XLA_FLAGS sets "
                       "--xla_force_host_platform_device_count=1; the tests need 8"):
        _with_device_count("--xla_force_host_platform_device_count=1")


def test_the_optimization_level_is_appended_unless_one_is_set():
    flag = "--xla_backend_optimization_level"
    assert _with_level("--a=1", "0") == f"--a=1 {flag}=0"
    assert _with_level("", "2") == f"{flag}=2"
    assert _with_level(f"--a=1 {flag}=3", "0") == f"--a=1 {flag}=3"  # the caller's wins
    assert _with_level("--a=1", "default") == "--a=1"
    with pytest.raises(pytest.UsageError, match="JFORMER_TEST_XLA_LEVEL must be 0, 1, 2, "
                       "3 or default; got 'fast'"):
        _with_level("", "fast")


def test_the_suites_level_reaches_xla():
    """Level 0 compiles a * b + c without multiply-add contraction, so about a quarter of
    the sums round differently from the default level's: the environment's level is the
    one XLA compiles at, and a per-program option still overrides it."""
    import jax
    import numpy as np
    if "--xla_backend_optimization_level=0" not in os.environ["XLA_FLAGS"].split():
        pytest.skip("this run compiles at another optimization level")
    a, b, c = np.random.default_rng(0).normal(size=(3, 4096)).astype(np.float32)
    fn = jax.jit(lambda a, b, c: a * b + c)
    here = np.asarray(fn(a, b, c))
    np.testing.assert_array_equal(here, a * b + c)  # numpy rounds the product first
    pinned = fn.lower(a, b, c).compile(compiler_options={"xla_backend_optimization_level": 0})
    np.testing.assert_array_equal(np.asarray(pinned(a, b, c)), here)
    default = fn.lower(a, b, c).compile(compiler_options={"xla_backend_optimization_level": 3})
    assert (np.asarray(default(a, b, c)) != here).sum() > 400


def test_the_map_budget_is_half_the_kernel_limit(tmp_path):
    (tmp_path / "max_map_count").write_text("65530\n")
    assert map_budget(str(tmp_path / "max_map_count")) == 32765
    assert map_budget(str(tmp_path / "missing")) is None
    (tmp_path / "maps").write_text("a\nb\nc\n")
    assert memory_maps(str(tmp_path / "maps")) == 3


def test_past_the_budget_the_fixture_drops_compiled_programs(monkeypatch):
    import jax
    import jax.numpy as jnp
    f = jax.jit(lambda x: x * 2 + 1)
    f(jnp.ones(3))
    assert f._cache_size() == 1
    fixture = conftest._bounded_memory_maps.__wrapped__
    monkeypatch.setattr(conftest, "_MAP_BUDGET", memory_maps() + 10_000)
    run = fixture(); next(run); next(run, None)
    assert f._cache_size() == 1  # under the budget: kept
    monkeypatch.setattr(conftest, "_MAP_BUDGET", 0)
    run = fixture(); next(run); next(run, None)
    assert f._cache_size() == 0


def test_the_flag_reached_jax():
    import jax
    assert jax.device_count("cpu") == 8


def test_a_skip_fails_under_jformer_no_skips(tmp_path):
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\ndef test_skips():\n    pytest.skip('needs the serve extra')\n")
    conftest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conftest.py")
    (tmp_path / "conftest.py").write_text(open(conftest).read())
    run = lambda env: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, **env})
    plain = run({"JFORMER_NO_SKIPS": "0"})
    assert plain.returncode == 0 and "1 skipped" in plain.stdout, plain.stdout
    strict = run({"JFORMER_NO_SKIPS": "1"})
    assert strict.returncode == 1 and "1 failed" in strict.stdout, strict.stdout
    assert "CI must satisfy it" in strict.stdout and "needs the serve extra" in strict.stdout
