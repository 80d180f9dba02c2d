"""Test setup: 8 simulated CPU devices for data-parallel tests (set before jax is
imported), no persistent compilation cache, and, under JFORMER_NO_SKIPS=1 (CI), every
skip turned into a failure."""
import os
import re

import pytest

DEVICE_COUNT = 8
_FLAG = "--xla_force_host_platform_device_count"


def _with_device_count(xla_flags: str) -> str:
    """``xla_flags`` with the device-count flag appended; a different count already set
    is an error naming the variable (it would shrink the 4- and 8-device meshes)."""
    have = re.findall(rf"{_FLAG}=(\d+)", xla_flags)
    if have and have != [str(DEVICE_COUNT)]:
        raise pytest.UsageError(
            f"XLA_FLAGS sets {_FLAG}={','.join(have)}; the tests need {DEVICE_COUNT} CPU "
            f"devices: unset it or drop that flag from XLA_FLAGS")
    return xla_flags if have else " ".join(filter(None, [xla_flags, f"{_FLAG}={DEVICE_COUNT}"]))


os.environ["XLA_FLAGS"] = _with_device_count(os.environ.get("XLA_FLAGS", ""))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# No persistent compilation cache unless a test asks for one (tests/inference/
# test_compile_cache.py): the suite neither writes into ~/.cache nor reads programs
# another version of the code compiled.
os.environ.setdefault("JFORMER_COMPILE_CACHE", "off")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under JFORMER_NO_SKIPS=1 a skip fails: CI installs every extra, Chromium, g++ and
    TensorFlow and has 8 devices, so any skip there is something it failed to provide."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("JFORMER_NO_SKIPS") == "1" and not hasattr(
            report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under JFORMER_NO_SKIPS=1 (CI must satisfy it): {reason}"
