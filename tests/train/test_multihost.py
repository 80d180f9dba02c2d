"""Two processes on localhost (CPU collectives over gloo) train together, and as one
process with all their devices would."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_as_one_process_with_the_same_global_batch(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "_multihost_worker.py"),
                               str(port), str(i), str(tmp_path / f"run{i if i == 'single' else ''}"),
                               str(tmp_path / f"{i}.npz")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in (0, 1, "single")]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    a, b, one = (np.load(tmp_path / f"{i}.npz") for i in (0, 1, "single"))
    assert int(a["step"]) == int(b["step"]) == 3
    assert int(a["local_devices"]) == 2
    # each host reads its own rows of every global batch
    assert a["first_batch"].shape == b["first_batch"].shape
    assert not np.array_equal(a["first_batch"], b["first_batch"])
    names = [k for k in a.files if k not in ("step", "local_devices", "first_batch")]
    assert len(names) > 10
    for k in names:
        np.testing.assert_array_equal(a[k], b[k])
        # the one-process run of the same global batches ends with the same parameters
        np.testing.assert_allclose(a[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # its first batch is the two hosts' rows together
    rows = lambda x: sorted(map(tuple, x.tolist()))  # noqa: E731
    assert rows(one["first_batch"]) == rows(np.concatenate([a["first_batch"],
                                                            b["first_batch"]]))
    # Only process 0 writes TensorBoard summaries, metrics rows, the run config and the
    # progress bar (both processes share the workdir here, so a second writer would show).
    run = tmp_path / "run"
    events = [f for _, _, files in os.walk(run / "tensorboard") for f in files
              if "tfevents" in f]
    assert len(events) == 1, events
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    keys = [json.dumps(r, sort_keys=True) for r in rows]
    assert rows and len(keys) == len(set(keys))  # no row written twice
    assert os.path.isfile(run / "config.json")
    assert os.path.isdir(run / "checkpoints" / "3")
    bar = "train: 100%"  # the progress bar, on process 0's stderr only
    assert bar in outputs[0] and bar not in outputs[1]
