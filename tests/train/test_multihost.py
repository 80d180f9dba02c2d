"""Two processes on localhost (CPU collectives over gloo) train together, and as one
process with all their devices would."""
import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)


# How a coordinator that lost its port to another process fails (gRPC's words).
PORT_TAKEN = re.compile(r"address already in use|failed to add port|failed to bind",
                        re.IGNORECASE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_workers(tmp_path, tries=3, phases=((3, False),), tag=""):
    """The outputs of processes 0, 1 and "single", and the pair's workdir. ``phases``:
    (steps, evaluate) per launch of the pair, each resuming the pair's workdir (the
    single process runs the last phase from scratch). Process 0's coordinator binds the
    port itself, in a child, so the port cannot be handed over: when another process
    took it in between (xdist), the phase runs again on a new port, up to ``tries``
    times (the bind fails in jax.distributed.initialize, before the workdir is touched)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}

    def worker(i, port, workdir, steps, evaluate):
        log = open(tmp_path / f"{i}-{port}.log", "w+")  # not a pipe: nobody blocks on it
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "_multihost_worker.py"),
                                 str(port), str(i), str(workdir),
                                 str(tmp_path / f"{i}{tag}.npz"), str(steps),
                                 *(["eval"] if evaluate else [])],
                                env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        return proc, log

    def output(proc, log):
        proc.wait(300)
        log.seek(0)
        return log.read()

    single = worker("single", 0, tmp_path / f"runsingle{tag}", *phases[-1])
    run = tmp_path / f"run{tag}"
    for steps, evaluate in phases:
        for attempt in range(tries):
            port = free_port()
            pair = [worker(i, port, run, steps, evaluate) for i in (0, 1)]
            first = output(*pair[0])
            if pair[0][0].returncode and PORT_TAKEN.search(first) and attempt + 1 < tries:
                pair[1][0].kill()
                output(*pair[1])
                continue
            break
        outputs = [first, output(*pair[1])]
        for (proc, _), out in zip(pair, outputs):
            assert proc.returncode == 0, out[-3000:]
    outputs.append(output(*single))
    assert single[0].returncode == 0, outputs[-1][-3000:]
    return outputs, run


@pytest.mark.slow
def test_two_processes_train_as_one_process_with_the_same_global_batch(tmp_path):
    outputs, run = run_workers(tmp_path)
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
    # Process 0 encoded the train split into the workdir; process 1 read it from there.
    assert len(list((run / "data").glob("train-*/meta.json"))) == 1
    assert "this host encodes its own" not in outputs[0] + outputs[1]


@pytest.mark.slow
def test_two_processes_resume_and_evaluate_as_one_process(tmp_path):
    """The pair trains to step 2, is launched again, resumes from its checkpoint to step
    4 and runs the final evaluation: the parameters and the final figures equal one
    process's 4 steps, and only process 0 decodes for BLEU."""
    outputs, run = run_workers(tmp_path, phases=((2, False), (4, True)), tag="r")
    a, b, one = (np.load(tmp_path / f"{i}r.npz") for i in (0, 1, "single"))
    assert int(a["step"]) == int(b["step"]) == int(one["step"]) == 4
    names = [k for k in a.files if k not in ("step", "local_devices", "first_batch")]
    for k in names:
        np.testing.assert_array_equal(a[k], b[k])
        np.testing.assert_allclose(a[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)
    finals = [json.load(open(tmp_path / f"{i}r.npz.json")) for i in (0, 1, "single")]
    assert all(f["step"] == 4 for f in finals)
    for key in ("loss", "nll", "perplexity", "accuracy"):
        assert finals[0][key] == pytest.approx(finals[2][key], rel=1e-5), key
        assert finals[1][key] == pytest.approx(finals[0][key], rel=1e-5), key
    assert finals[0]["bleu"] == pytest.approx(finals[2]["bleu"], abs=1e-9)
    assert "bleu" not in finals[1]  # process 1 computes losses only
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    assert [r["step"] for r in rows if r["kind"] == "final"] == [4]
    assert sorted(int(d) for d in os.listdir(run / "checkpoints")) == [2, 4]
