"""One process of the two-process CPU training test (tests/train/test_multihost.py).

usage: python _multihost_worker.py PORT PROCESS_ID WORKDIR OUT.npz [STEPS [eval]]
PROCESS_ID "single": the reference, one process with all 4 devices and no coordinator.
STEPS (default 3): train to that step, resuming from WORKDIR's last checkpoint; "eval":
then run the final evaluation and write its figures to OUT.npz's name + ".json".
"""
import json
import os
import sys

SINGLE = sys.argv[2] == "single"
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={4 if SINGLE else 2}"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jformer import train as train_lib  # noqa: E402
from jformer.config import TrainConfig  # noqa: E402
from jformer.train import loop  # noqa: E402
from jformer.train.evaluation import host_params  # noqa: E402
from tests.train_helpers import tiny_config  # noqa: E402


def main():
    port, workdir, out = sys.argv[1], sys.argv[3], sys.argv[4]
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    evaluate = sys.argv[6:] == ["eval"]
    every = 2 if evaluate or steps != 3 else 3
    if SINGLE:
        cfg = tiny_config(num_steps=steps, checkpoint_every=every)
    else:
        cfg = tiny_config(num_steps=steps, checkpoint_every=every,
                          coordinator_address=f"localhost:{port}", num_processes=2,
                          process_id=int(sys.argv[2]))
    train_lib.maybe_initialize_distributed(TrainConfig(**cfg.train.to_dict()))
    assert jax.process_count() == (1 if SINGLE else 2) and jax.device_count() == 4, jax.devices()
    job, state, final = loop._train(cfg, workdir, final_eval=evaluate)
    if evaluate:
        with open(out + ".json", "w") as f:
            json.dump({k: v for k, v in final.items() if k != "samples"}, f)
    params = host_params(state.params)
    flat = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    first_batch = next(job.train_data.batches.epoch_batches(0))["inputs"]  # this host's rows
    np.savez(out, first_batch=first_batch, step=int(np.asarray(state.step.addressable_data(0))),
             local_devices=len(job.dp.local_devices), **flat)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
