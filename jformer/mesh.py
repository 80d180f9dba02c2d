"""The one-axis device mesh that training and batch decoding split batches over."""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

AXIS = "data"  # the mesh axis name; collectives in the train step reduce over it


def make_mesh(devices=None) -> Mesh:
    """A one-axis ``('data',)`` mesh over all devices of all processes (or the given ones)."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (AXIS,))
