"""Devices for data-parallel tests on any platform."""
import jax
import pytest


def first_devices(n: int) -> list:
    """The first ``n`` devices, or a skip that names the shortfall: tests/conftest.py gives
    the CPU 8, while one GPU (bench/accelerator_check.py runs these tests there) is one."""
    have = jax.devices()
    if len(have) < n:
        pytest.skip(f"needs {n} devices; {jax.default_backend()} has {len(have)}")
    return have[:n]
