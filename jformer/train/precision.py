"""``train.compute_dtype="auto"``: bfloat16 where the devices compute it natively, else
float32.

bfloat16 products pay only where the hardware has them. Measured with
``bench/bench_train.py --configs small --dtypes float32,bfloat16`` (the Multi30k
recipe's model shape), bfloat16 steps against float32 ones:

- a TPU, a CUDA GPU of compute capability 8.0 or more (Ampere on), a ROCm GPU: bfloat16
  is their native training dtype; an older CUDA GPU (V100, T4) has no bfloat16 units:
  float32;
- a CPU with AVX512_BF16 (AMD Zen 4: 1.4-1.9x the float32 speed; bench/README.md,
  jformer/kernels/README.md) or AMX-BF16 (Intel Xeon with AMX: about 5x in issue 46's
  run): bfloat16;
- a CPU without either (Intel Xeon Ice Lake, AVX-512 and VNNI only: 0.67x, 2026-12-01,
  where XLA:CPU's bfloat16 matmul probe ran at 162 GFLOP/s against float32's 330;
  bench/README.md): float32.

The choice is made when a run's config is validated
(:func:`jformer.train.config_checks.validate_config`), before the model is built, and
the config.json the run writes holds the chosen dtype, not "auto". A resumed run
chooses again for the machine it resumes on (the parameters and Adam's moments are
float32 either way, so ``model.dtype`` may change on resume). A training job resolves
it once (:func:`resolve_for_run`, in :func:`jformer.train.loop.build_job`); each process
chooses for its own devices, and a multi-process job whose processes choose differently
(hosts of two kinds) stops with a ConfigError naming each process's choice, rather than
compile programs that disagree on their dtypes. CPU flags are those
:func:`jformer.kernels.native.cpu_flags` reads (/proc/cpuinfo); a CPU whose flags
cannot be read trains in float32.
"""
from __future__ import annotations

import functools
import logging
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from jformer.config import DTYPES, ConfigError
from jformer.kernels import native

log = logging.getLogger(__name__)

AUTO = "auto"
# x86 CPU flags (as /proc/cpuinfo spells them) under which XLA:CPU's bfloat16 products
# are native: AVX-512 BF16 dot products, or AMX tiles with bf16.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
AMPERE = 8.0  # the first CUDA compute capability with bfloat16 tensor cores


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (:func:`jformer.kernels.native.cpu_flags`' line), empty
    where they cannot be read."""
    line = native.cpu_flags()
    return frozenset(line.split(":", 1)[1].split()) if ":" in line else frozenset()


def cuda_capability() -> float | None:
    """The first device's CUDA compute capability (None where it has none)."""
    capability = getattr(jax.devices()[0], "compute_capability", None)
    try:
        return float(capability)
    except (TypeError, ValueError):
        return None


def compute_dtype(name: str, platform: str | None = None,
                  flags: frozenset[str] | None = None,
                  capability: float | None = None) -> str:
    """The dtype a run trains in: ``name`` itself unless it is "auto" (module docstring).
    ``platform`` defaults to this process's backend, ``flags`` (on a CPU) to
    :func:`cpu_flags`, ``capability`` (on a CUDA GPU) to :func:`cuda_capability`."""
    if name != AUTO:
        return name
    platform = platform or jax.default_backend()
    if platform == "cpu":
        native_flags = sorted(NATIVE_BF16_FLAGS & (cpu_flags() if flags is None else flags))
        chosen = "bfloat16" if native_flags else "float32"
        why = (f"this CPU has {', '.join(native_flags)}" if native_flags
               else f"this CPU has none of {sorted(NATIVE_BF16_FLAGS)}")
    elif platform in ("gpu", "cuda"):
        capability = cuda_capability() if capability is None else capability
        chosen = "float32" if capability is not None and capability < AMPERE else "bfloat16"
        why = (f"platform {platform}" if capability is None
               else f"CUDA compute capability {capability}")
    else:
        chosen, why = "bfloat16", f"platform {platform}"
    _log_once(chosen, why)
    return chosen


def resolve_for_run(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (a config dict) with ``train.compute_dtype`` "auto" replaced by this
    machine's choice, the same in every process of a multi-process job or a ConfigError
    that names the processes' choices; any other value is left for the config checks."""
    train = dict(raw.get("train", {}))
    if train.get("compute_dtype") != AUTO:
        return raw
    chosen = compute_dtype(AUTO)
    if jax.process_count() > 1:
        agree_across_processes(chosen)
    return {**raw, "train": {**train, "compute_dtype": chosen}}


def agree_across_processes(chosen: str) -> None:
    """ConfigError unless every process of this job chose ``chosen``."""
    codes = np.asarray(multihost_utils.process_allgather(np.int32(DTYPES.index(chosen))))
    choices = [DTYPES[int(c)] for c in codes.reshape(-1)]
    if len(set(choices)) > 1:
        each = ", ".join(f"process {i}: {c}" for i, c in enumerate(choices))
        raise ConfigError(
            f"config field 'train.compute_dtype' ('auto') resolves differently on this "
            f"job's machines ({each}); set --config.train.compute_dtype=float32 or "
            f"bfloat16 for all of them")


@functools.lru_cache(maxsize=None)
def _log_once(chosen: str, why: str) -> None:
    log.info("train.compute_dtype auto: %s (%s)", chosen, why)
