"""jformer's C++ decode-step kernels, reached through XLA's FFI, and how they are built.

The sources in csrc/ (``rows_matmul.cc``: jformer.kernels.rows_matmul; ``attention.cc``:
jformer.kernels.native_attention; ``int8_matmul.cc`` and ``int8_vnni.cc``:
jformer.kernels.int8_matmul; ``search.cc``: jformer.kernels.native_search;
``parallel.h``: the work sharing over XLA's intra-op threads; ``vec.h``: the 16-float
vector and its loads; ``vexp.h``: exp 16 lanes at a time) are
compiled into one library on first use, with the C++ compiler (``$CXX``, else ``g++``)
against jaxlib's FFI headers, for this machine's CPU (``-march=native``), into
``$JFORMER_KERNEL_CACHE`` (default ``~/.cache/jformer/kernels``), keyed by the sources,
flags, jaxlib version and CPU, and written atomically. Without a compiler
:func:`available` warns once and returns False, and decoding keeps XLA's ops.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import jax

CSRC = Path(__file__).with_name("csrc")
SOURCES = (CSRC / "rows_matmul.cc", CSRC / "attention.cc", CSRC / "int8_matmul.cc",
           CSRC / "int8_vnni.cc", CSRC / "search.cc")
HEADERS = (CSRC / "parallel.h", CSRC / "vec.h", CSRC / "vexp.h")
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC")
# the library's handler symbols -> the FFI targets they are registered as (platform cpu)
TARGETS = {"JformerRowsMatmul": "jformer_rows_matmul",
           "JformerBeamSlotAttention": "jformer_beam_slot_attention",
           "JformerMemoryAttention": "jformer_memory_attention",
           "JformerInt8Matmul": "jformer_int8_matmul",
           "JformerInt8Vnni": "jformer_int8_vnni",
           "JformerLogSoftmax": "jformer_log_softmax",
           "JformerBeamCandidates": "jformer_beam_candidates",
           "JformerArgmax": "jformer_argmax"}

log = logging.getLogger(__name__)


@functools.cache
def cpu_flags() -> str:
    """The CPU's feature flags (/proc/cpuinfo's flags line), else its processor name; read
    once a process (every model built and every compiled program's key asks for it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _library_path() -> Path:
    key = hashlib.sha256()
    for part in (*(p.read_bytes() for p in SOURCES + HEADERS), " ".join(FLAGS).encode(),
                 jax.__version__.encode(), jax.ffi.include_dir().encode(),
                 cpu_flags().encode(), os.environ.get("CXX", "g++").encode()):
        key.update(part)
    root = Path(os.environ.get("JFORMER_KERNEL_CACHE")
                or Path.home() / ".cache" / "jformer" / "kernels")
    return root / f"jformer-kernels-{key.hexdigest()[:16]}.so"


def _build(path: Path) -> None:
    """Compiles SOURCES into one library at path, atomically (a temporary file renamed
    into place)."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise RuntimeError(f"no C++ compiler {cxx!r} on PATH (set $CXX, or install g++)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        cmd = [cxx, *FLAGS, f"-I{jax.ffi.include_dir()}", *map(str, SOURCES), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                               f"{done.stderr[-2000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_FIRST = threading.Lock()  # one thread builds and registers; the others wait for it


def available() -> bool:
    """Builds (once per source and machine) and registers the kernels; False, with one
    warning saying why, where it cannot (then decoding keeps XLA's ops). Safe to call
    from any thread: the first call does the work, later ones return its answer."""
    with _FIRST:
        return _register()


@functools.cache
def _register() -> bool:
    try:
        path = _library_path()
        if not path.exists():
            _build(path)
        library = ctypes.cdll.LoadLibrary(str(path))
        for symbol, target in TARGETS.items():
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)),
                                        platform="cpu")
        return True
    except (OSError, RuntimeError, AttributeError) as e:
        log.warning("jformer.kernels.native unavailable, decoding with XLA's ops: %s", e)
        return False
