"""Subprocess helper for tests/workdir/test_checkpoint.py (not a test module).

Usage (XLA_FLAGS in the environment sets the device count):
  python tests/workdir/_checkpoint_worker.py save-then-hang DIR   # saves step 1, then a large step
      2; prints "saving 2" and sleeps so that the test can SIGKILL it mid-save.
  python tests/workdir/_checkpoint_worker.py save DIR STEP        # saves train_state(STEP) at STEP
  python tests/workdir/_checkpoint_worker.py restore-params DIR OUT.npz
"""
import os
import signal
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

# Repo root on the path when run as a script, so that the package imports without install.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from jformer.workdir import checkpoint  # noqa: E402

BIG_ARRAY_BYTES = 4_000_000  # x4 = 16 MB of step-2 arrays


def train_state(seed: int) -> dict:
    """A small train state with distinct shapes, shaped like optax.adam's, on device.

    Built in numpy and moved with one device_put: compiling jax ops costs seconds of the
    subprocesses' time on a busy machine.
    """
    rng = np.random.default_rng(seed)

    def tree(scale=1.0):
        return {"embed": (scale * rng.normal(size=(8, 4))).astype(np.float32),
                "dense": {"kernel": (scale * rng.normal(size=(4, 3))).astype(np.float32),
                          "bias": (scale * rng.normal(size=(3,))).astype(jnp.bfloat16)}}

    params = tree()
    adam_state = optax.ScaleByAdamState(count=np.int32(seed), mu=tree(0.1),
                                        nu=jax.tree.map(np.abs, tree(0.01)))
    return jax.device_put({"params": params, "opt_state": (adam_state, optax.EmptyState()),
                           "step": np.int32(seed),
                           "rng": rng.integers(0, 2**32, (2,), dtype=np.uint32)})


def flat_params(params) -> dict[str, np.ndarray]:
    """{'dense/kernel': array, ...} for np.savez and comparisons."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(k.key for k in path): np.asarray(leaf, np.float32) for path, leaf in leaves}


def _save_then_die(directory: str) -> None:
    """Saves step 1, then dies by SIGKILL while saving step 2: every array of step 2 is
    written, and the process is killed at the rename that would commit it (the last
    moment a crash can hit a save). Deterministic: no timing race with the test."""
    ckpt = checkpoint.Checkpointer(directory, keep=1, save_every=1, async_save=True)
    ckpt.save(1, train_state(1), {"epoch": 0, "position": 1})
    ckpt.wait()
    print("saved 1", flush=True)

    def die_at_commit(rename):
        def wrapped(src, dst, *args, **kwargs):
            if os.path.basename(os.fspath(src)).startswith("2.orbax-checkpoint-tmp"):
                print("killed before committing 2", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return rename(src, dst, *args, **kwargs)
        return wrapped

    os.rename, os.replace = die_at_commit(os.rename), die_at_commit(os.replace)
    rng = np.random.default_rng(0)  # random bits: orbax compresses constant arrays away
    big = {f"w{i}": rng.integers(0, 2**32, (BIG_ARRAY_BYTES // 4000, 1000), dtype=np.uint32)
           for i in range(4)}
    ckpt.save(2, {"params": big}, {"epoch": 0, "position": 2})
    ckpt.wait()
    print("save 2 committed", flush=True)  # never reached in a passing test


def main(argv: list[str]) -> None:
    command, directory = argv[1], argv[2]
    if command == "save-then-die":
        _save_then_die(directory)
    elif command == "save":
        step = int(argv[3])
        with checkpoint.Checkpointer(directory, keep=3, save_every=1) as ckpt:
            ckpt.save(step, train_state(step), {"step": step})
    elif command == "restore-params":
        params = checkpoint.restore_params(directory)
        kinds = {type(leaf).__name__ for leaf in jax.tree.leaves(params)}
        np.savez(argv[3], __kinds__=np.array(sorted(kinds)),
                 __devices__=np.array(jax.device_count()), **flat_params(params))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv)
