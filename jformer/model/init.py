"""Programs that run once, such as ``model.init``, compiled for a single run.

A training run calls ``model.init`` once, yet ``jax.jit`` has XLA optimise it as hard as
the train step it runs thousands of times. On a CPU, ``init`` is mostly threefry draws,
and optimising them is the slowest compile of a small model's start. At XLA's backend
optimization level 1 (the default is 2, O2 for LLVM), a Multi30k model's ``init``
compiles in about half the time and runs as fast (bench/bench_init.py).
tests/model/test_init.py checks that the parameters equal ``jax.jit(model.init)``'s bit
for bit. Level 0 would compile faster still, but its parameters differ by an ulp, and a
base model's init then runs 4x slower.
"""
from typing import Any, Callable

import jax

# compiler options for a run-once program, by backend; other backends get jit's defaults
_RUN_ONCE_OPTIONS = {"cpu": {"xla_backend_optimization_level": 1}}


def run_once(fn: Callable, *args: Any) -> Any:
    """``jax.jit(fn)(*args)``, compiled with the current backend's options for a program
    that runs once (on a CPU, XLA backend optimization level 1). ``args`` are arrays or
    PRNG keys, passed positionally, as ``model.init(rng, inputs, targets)`` takes them."""
    options = _RUN_ONCE_OPTIONS.get(jax.default_backend(), {})
    return jax.jit(fn).lower(*args).compile(compiler_options=options)(*args)
