"""tests/conftest.py: the device-count flag is appended, never silently dropped, a worker
drops jax's caches past half the memory-mapping limit, and CI's no-skip switch turns a
skip into a failure."""
import os
import subprocess
import sys

import pytest

import tests.conftest as conftest
from tests.conftest import _with_device_count, map_budget, memory_maps


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
