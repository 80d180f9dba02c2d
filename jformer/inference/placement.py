"""Where a :class:`~jformer.inference.translator.Translator`'s batches run: chosen once, at
construction (``Translator(..., devices=n, parallel=...)``).

- ``"batches"`` (:class:`SideBySide`, the default): every batch runs whole on one device,
  and the devices take the batches in turn, each with its own copy of the params, as
  CTranslate2's workers do. Up to two batches a device are launched before the oldest
  is read, so that a device starts its next batch as soon as its last one ends and the
  host turns finished batches into text while the devices decode. One compiled program
  serves every device (:class:`~.programs.ProgramStore` loads it onto each). On one
  device this is the plain loop, one batch queued behind the running one.
- ``"split"`` (:class:`Split`): every batch is split over a mesh of the devices
  (:func:`~.batch_decode.decode_batch_parallel`), so that one batch finishes sooner, as a
  server's single request wants. Batch sizes must be multiples of the devices. XLA:CPU
  runs one mesh program at a time, so a second launch waits for the first, and a
  batch's devices wait for its slowest share.

On the 2-core Zen 4, the Multi30k model's test2016 at beam 4 on 2 CPU devices decoded in
about 7.5 s side by side and 8.8 s split (``bench/README.md``), with the same output.

``decode.memory_limit`` bounds one batch's cache: under it, each device holds one batch
at a time (none queued), so the bound holds per device.
"""
from __future__ import annotations

from typing import Any, Sequence

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from jformer.inference.batch_decode import decode_batch, decode_batch_parallel
from jformer.inference.programs import ProgramStore
from jformer.mesh import make_mesh
from jformer.types import PyTree

PARALLEL = ("batches", "split")


class SideBySide:
    """Each batch whole on one device, the devices in turn (module docstring)."""

    def __init__(self, devices: Sequence[jax.Device], params: PyTree, prepare, queue: bool):
        self.devices = list(devices)
        self.rows_multiple = 1  # a batch's rows: any number
        # launched batches not yet read, at most: two a device, or one under a memory limit
        self.in_flight = len(self.devices) * (2 if queue else 1)
        self.params = [jax.device_put(params, d) for d in self.devices]
        first = prepare(self.params[0])  # once; the other devices get copies
        self.prepared = [jax.device_put(first, d) for d in self.devices]

    def launch(self, store: ProgramStore, index: int, inputs: tuple, **static) -> Any:
        """Starts batch ``index`` (``inputs``: decode_batch's after params and prepared;
        the keys among them are moved to its device) and returns its unread output."""
        return store.run(decode_batch, *self._on_device(index, inputs), **static)

    def prefetch(self, store: ProgramStore, index: int, inputs: tuple, **static) -> None:
        """Starts reading the program :meth:`launch` will run batch ``index`` with
        (:meth:`ProgramStore.prefetch`)."""
        store.prefetch(decode_batch, *self._on_device(index, inputs), **static)

    def _on_device(self, index: int, inputs: tuple) -> tuple[tuple, list[jax.Device]]:
        at = index % len(self.devices)
        device = self.devices[at]
        inputs = jax.tree.map(lambda x: jax.device_put(x, device)
                              if isinstance(x, jax.Array) else x, inputs)
        return (self.params[at], self.prepared[at], *inputs), [device]


class Split:
    """Each batch split over a mesh of the devices (module docstring)."""

    def __init__(self, devices: Sequence[jax.Device], params: PyTree, prepare):
        self.devices = list(devices)
        self.mesh = make_mesh(self.devices)
        self.rows_multiple = len(self.devices)
        self.in_flight = 1  # a second mesh program would wait for the first anyway
        params = jax.device_put(params, NamedSharding(self.mesh, P()))
        self.params, self.prepared = [params], [prepare(params)]

    def launch(self, store: ProgramStore, index: int, inputs: tuple, **static) -> Any:
        return store.run(decode_batch_parallel, (self.params[0], self.prepared[0], *inputs),
                         self.devices, mesh=self.mesh, **static)

    def prefetch(self, store: ProgramStore, index: int, inputs: tuple, **static) -> None:
        store.prefetch(decode_batch_parallel, (self.params[0], self.prepared[0], *inputs),
                       self.devices, mesh=self.mesh, **static)


def place(parallel: str, devices: Sequence[jax.Device], params: PyTree, prepare,
          queue: bool) -> SideBySide | Split:
    """The placement ``parallel`` names, over ``devices``; ``prepare(params)`` gives the
    decode kernels' prepared weights for a copy of the params; ``queue``: whether a
    device may hold a second batch (module docstring). One device is side by side."""
    if parallel not in PARALLEL:
        raise ValueError(f"parallel must be one of {PARALLEL}; got {parallel!r}")
    if parallel == "split" and len(devices) > 1:
        return Split(devices, params, prepare)
    return SideBySide(devices, params, prepare, queue)
