"""Data parallelism: one per-device step function, compiled two ways.

``shard_map`` (default): ``jax.jit`` over a one-axis ``('data',)`` mesh, the state
replicated and the batch split along its first axis; the modern form of pmap.
``pmap``: the same function under ``jax.pmap`` with per-device copies of the state.
Both run collectives named ``'data'`` inside the step (``lax.pmean``).
"""
from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jformer.mesh import AXIS
from jformer.types import PyTree

class DataParallel:
    """Places states and batches and runs a per-device function across a mesh.

    ``fn(state, batch, *extra) -> (state, metrics)`` is written for one device's shard of
    the batch and must reduce its metrics over ``AXIS`` itself (psum / pmean), so they come
    back identical on every device.
    """

    def __init__(self, mesh: Mesh, parallelism: str = "shard_map"):
        if parallelism not in ("shard_map", "pmap"):
            raise ValueError(f"parallelism must be 'shard_map' or 'pmap'; got {parallelism!r}")
        self.mesh, self.parallelism = mesh, parallelism
        self.num_devices = mesh.devices.size
        self.local_devices = [d for d in mesh.devices.flat
                              if d.process_index == jax.process_index()]
        # pmap layout: a leading axis of one entry per local device
        self._local_stacked = NamedSharding(Mesh(np.asarray(self.local_devices), (AXIS,)), P(AXIS))

    # --- compilation -------------------------------------------------------------
    def compile(self, fn: Callable, *, donate_state: bool = True, num_extra: int = 0) -> Callable:
        """Compiles fn(state, batch, *extra); extra arguments (e.g. an rng) are replicated."""
        donate = (0,) if donate_state else ()
        if self.parallelism == "pmap":
            return jax.pmap(fn, axis_name=AXIS, donate_argnums=donate,
                            in_axes=(0, 0) + (None,) * num_extra,
                            devices=self.local_devices if jax.process_count() == 1 else None)
        in_specs = (P(), P(AXIS)) + (P(),) * num_extra
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs, out_specs=(P(), P()),
                               check_vma=False)
        return jax.jit(mapped, donate_argnums=donate)

    # --- placement ---------------------------------------------------------------
    def put_state(self, state: PyTree) -> PyTree:
        """Replicates a host/single-device pytree (a train state, or the parameters the
        eval step takes) onto every device, laid out as the compiled steps expect."""
        if self.parallelism == "pmap":
            # one stacked copy per local device: [...] -> [devices, ...]
            n = len(self.local_devices)
            return jax.device_put(jax.tree.map(lambda x: np.stack([np.asarray(x)] * n), state),
                                  self._local_stacked)
        return jax.device_put(state, NamedSharding(self.mesh, P()))

    def restore_target(self, state: PyTree) -> PyTree:
        """The layout to restore a checkpoint of ``state`` into, so that :meth:`put_state`
        moves nothing between hosts: under shard_map the replicated layout itself (orbax
        reads each host's copy into place; a restored array committed to one device
        would need a cross-host transfer, which the CPU backend refuses), under pmap
        ``state`` as it is (put_state stacks host copies)."""
        return state if self.parallelism == "pmap" else self.put_state(state)

    def get_state(self, state: PyTree) -> PyTree:
        """The replicated state as one copy (for checkpoints and evaluation)."""
        if self.parallelism == "pmap":
            return jax.tree.map(lambda x: x[0], state)
        return state

    def put_batch(self, batch: dict[str, np.ndarray]) -> dict:
        """This process's rows of the global batch -> arrays laid out for the step.

        Each process passes its own shard (rows a multiple of its local device count).
        """
        n_local = len(self.local_devices)
        for name, x in batch.items():
            if x.shape[0] % n_local:
                raise ValueError(f"batch[{name!r}] has {x.shape[0]} rows; expected a multiple "
                                 f"of the {n_local} local devices")
        if self.parallelism == "pmap":
            # [B, ...] -> [devices, B / devices, ...]
            return jax.device_put({k: v.reshape((n_local, -1) + v.shape[1:])
                                   for k, v in batch.items()}, self._local_stacked)
        sharding = NamedSharding(self.mesh, P(AXIS))
        return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}

    def get_metrics(self, metrics: PyTree) -> dict[str, float]:
        """Reduced metrics (identical on every device) as host floats."""
        if self.parallelism == "pmap":
            metrics = jax.tree.map(lambda x: x[0], metrics)
        return {k: float(v) for k, v in jax.device_get(metrics).items()}
