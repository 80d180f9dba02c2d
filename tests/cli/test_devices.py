"""jformer/cli/common.py's --devices: its default on a CPU (one device per core, a power
of two dividing the batch size), and that a fresh process gets the devices it asked for
(jax fixes its CPU device count when its backend starts)."""
import argparse
import os
import subprocess
import sys

import jax
import pytest

from jformer.cli.common import auto_cpu_devices, claim_devices


@pytest.mark.parametrize("batch, cores, want", [(64, 2, 2), (64, 1, 1), (64, 16, 16),
                                                (64, 6, 4), (12, 8, 4), (1, 8, 1),
                                                (64, 128, 64)])
def test_the_default_is_the_largest_power_of_two_within_the_cores_dividing_the_batch(
        batch, cores, want):
    assert auto_cpu_devices(batch, cores) == want


def test_in_a_running_process_the_default_is_capped_at_its_devices(monkeypatch):
    assert len(jax.devices()) == 8  # the backend runs (tests/conftest.py's 8 devices)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(64)), raising=False)
    args = argparse.Namespace(devices=None, batch_size=64, workdir="unused")
    claim_devices(args)
    assert args.devices == len(jax.local_devices()) == 8
    given = argparse.Namespace(devices=2, batch_size=64, workdir="unused")
    claim_devices(given)
    assert given.devices == 2


@pytest.mark.slow
def test_a_fresh_process_decodes_over_the_devices_it_asked_for(tiny_run, tmp_path):
    """--devices 2 in a new process (without XLA_FLAGS' count) and the default (as many
    devices as 2 cores give) translate the same lines as --devices 1."""
    src = tmp_path / "in.txt"
    src.write_text("a small cat sat\nthe red dog ran home\nhello\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    outs = {}
    for devices in ("1", "2", None):
        out = tmp_path / f"out-{devices}.txt"
        argv = [sys.executable, "-m", "jformer", "translate", "--workdir", str(tiny_run),
                "--batch-size", "4", "--input", str(src), "--output", str(out), "--quiet"]
        if devices:
            argv += ["--devices", devices]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        outs[devices] = out.read_text()
    assert outs["2"] == outs["1"] == outs[None] and outs["1"].count("\n") == 3
