"""A name on the ops of every CPU kernel, so that a lowering can be checked for them.

Each kernel's entry point runs under ``jax.named_scope("cpu_kernel.<name>")``; the name
lands in the locations of the lowered module (``jax.export(...).mlir_module()``), the
backward ops of a custom VJP included as ``transpose(jvp(cpu_kernel.<name>))``.
tests/test_accelerator_lowering.py checks that model.ops="auto" lowered for CUDA
and TPU holds no such name, and that the CPU lowering does.
"""
from __future__ import annotations

import functools
from typing import Callable, TypeVar

import jax

SCOPE = "cpu_kernel"
F = TypeVar("F", bound=Callable)


def cpu_kernel(fn: F) -> F:
    """Runs fn under the named scope ``cpu_kernel.<fn's name>`` (same signature).

    Put it outside ``jax.custom_vjp`` so that the forward and backward rules run under
    the scope too; the result keeps the custom VJP's ``defvjp``."""
    name = f"{SCOPE}.{fn.__name__}"

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with jax.named_scope(name):
            return fn(*args, **kwargs)

    if hasattr(fn, "defvjp"):
        run.defvjp = fn.defvjp
    return run  # type: ignore[return-value]
