"""Compiled decode programs kept on disk, so that a second process skips tracing and
lowering as well as compiling.

JAX's persistent cache (:mod:`.compile_cache`) is keyed by the lowered program, so a
process with a warm cache still traces and lowers every program to find its entry: about
0.7 s a decode program of the Multi30k model, a dozen programs for a file. A
:class:`ProgramStore` is keyed by what a program is made of instead, and holds the
executable itself (``jax.experimental.serialize_executable``):

- jformer's own source (every ``.py``, ``.cc`` and ``.h`` file of the package), so
  another version of the code never loads a program this one did not compile;
- jax's and jaxlib's versions, the backend, its version, and the devices the program
  runs on (for a program on one device, its kind only); ``XLA_FLAGS``, the jax settings
  that change lowering, and the CPU's flags (XLA:CPU and the native kernels compile for
  this CPU);
- the jitted function's name, its static arguments, and every argument's tree, shape,
  dtype, weak type and sharding (for a program on one device, without the device).

A program that runs on one device is compiled once for all of them: the store keeps
its serialized executable and loads it onto each device that asks for it
(:func:`_load_onto`; XLA's code does not depend on which of a kind of device runs it),
so n devices that decode side by side cost one compile, not n.

:meth:`ProgramStore.prefetch` starts reading a program on a background thread, so a
Translator reads the programs of a file's later batches while its first batches decode
(XLA holds Python's lock for most of a read, bench/README.md measures it: reads overlap
the decoding, which releases it, far better than Python work). A store opened under a name
(:meth:`ProgramStore.read_recent`; ``Translator.from_checkpoint`` names it after the
checkpoint) keeps the list of one-device programs it ran in ``<root>/recent/<name>.json``,
and the next store of that name starts reading those at once: ``jformer translate``
reads its first batch's program while it imports flax and restores the params, not after.

Entries are written atomically (a temporary file renamed into place); one that cannot
be read is reported once, compiled again and rewritten. Without a directory the store
keeps compiled programs in memory only. Loading an entry runs code it holds: the store
reads only its own directory, which lies beside JAX's cache (``~/.cache/jformer``).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import logging
import os
import pickle
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jaxlib
import jaxlib.xla_client as xc
import numpy as np
from jax.experimental import serialize_executable
from jax.experimental.compilation_cache.compilation_cache import reset_cache

from jformer.inference.digests import source_digest, stable
from jformer.kernels import native
from jformer.workdir import files

log = logging.getLogger(__name__)

SUFFIX = ".jfprog"
RECENT_MAX = 64  # programs a recent list names, at most
# jax settings that change what a traced function lowers to
LOWERING_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_rank_promotion",
                     "jax_default_prng_impl", "jax_threefry_partitionable")


_CACHE_SWITCH = threading.Lock()


@contextlib.contextmanager
def _fresh_compile():
    """Compiles inside it skip JAX's persistent cache: with jax 0.10, an executable that
    cache loaded serializes without its kernels' code (its entry would load, and fail
    when run: "Function ..._fusion not found"), while a fresh one serializes whole.
    Compiles that other threads run meanwhile skip it too, which costs them time only."""
    with _CACHE_SWITCH:
        was = jax.config.jax_enable_compilation_cache
        jax.config.update("jax_enable_compilation_cache", False)
        reset_cache()  # jax decides once whether its cache is in use: ask it again
        try:
            yield
        finally:
            jax.config.update("jax_enable_compilation_cache", was)
            reset_cache()


def _leaf(x: Any, anywhere: bool = False) -> tuple:
    """What of an argument leaf the compiled program depends on: the memory key, and by
    its repr (no memory addresses: shapes, dtypes, shardings by device id) the file's;
    ``anywhere``: without the device (a one-device program, :func:`_load_onto`)."""
    if isinstance(x, jax.Array):
        where = (type(x.sharding).__name__, x.sharding.memory_kind) if anywhere else x.sharding
        return (x.shape, x.dtype, getattr(x, "weak_type", False), where)
    if isinstance(x, np.ndarray):
        return (x.shape, x.dtype)
    return (type(x), np.shape(x), np.result_type(x))


def _memory_key(jitted: Callable, leaves: list, tree, static: dict) -> tuple:
    """A program's key in this process: the function, the arguments' tree and leaves
    (:func:`_leaf`), the static arguments."""
    return (jitted, tree, tuple(map(_leaf, leaves)), tuple(sorted(static.items())))


class ProgramStore:
    """Compiled programs by what they are made of (module docstring), in memory and,
    with a ``root`` directory, on disk.

    ``store.run(jitted, args, devices, **static)`` returns ``jitted(*args, **static)``:
    from a program compiled before (in this process, or on disk), else compiled now
    (``jitted.lower(...).compile()``; with a ``root``, past JAX's persistent cache:
    :func:`_fresh_compile`) and kept.
    ``devices`` are the devices the program runs on (one, or a mesh's).
    """

    def __init__(self, root: str | os.PathLike | None):
        self.root = Path(root) if root is not None else None
        self._programs: dict[tuple, Any] = {}
        self._serialized: dict[str, bytes] = {}  # one-device programs, by entry digest
        self.loaded = self.compiled = 0  # programs read from disk / compiled, this store
        self.moved = 0  # one-device programs loaded from one compiled for another device
        self._lock = threading.Lock()  # _serialized and the counters (the reader shares them)
        self._pending: dict[tuple, concurrent.futures.Future] = {}  # prefetched, not yet run
        self._reader: concurrent.futures.ThreadPoolExecutor | None = None
        # read_recent: the list's file and devices, what it named, what this store ran
        # ([digest, device's place in the devices] pairs, in order)
        self._recent: Path | None = None
        self._recent_devices: list[jax.Device] = []
        self._recent_read: list[list] = []
        self._ran: list[list] = []
        self._early: dict[tuple[str, int], concurrent.futures.Future] = {}  # (digest, device)

    def run(self, jitted: Callable, args: Sequence, devices: Sequence[jax.Device],
            **static) -> Any:
        leaves, tree = jax.tree.flatten(args)
        key = _memory_key(jitted, leaves, tree, static)
        program = self._programs.get(key)
        if program is None:
            digest = self._digest(jitted, leaves, tree, devices, static)
            pending = self._pending.pop(key, None)
            program = pending.result() if pending is not None else None
            if program is None:  # not prefetched, or nothing to read: as without prefetch
                program = self._load_or_compile(jitted, args, digest, devices, static)
            self._programs[key] = program
            if len(devices) == 1:
                self._note_ran(digest, devices[0])
        return program(*args)

    def read_recent(self, name: str, devices: Sequence[jax.Device]) -> None:
        """Starts reading on the background thread the one-device programs that the last
        store of this ``name`` ran, each onto the device in the same place of ``devices``
        as it ran on then, in the order they first ran; from now on keeps that list
        (with this jformer's source digest: one another source wrote is not read). A list
        that this store's runs begin with is kept whole (a shorter job leaves a longer
        one's list); any other replaces it. A program listed but never run costs
        reader-thread time only."""
        if self.root is None:
            return
        self._recent = self.root / "recent" / f"{hashlib.sha256(name.encode()).hexdigest()[:32]}.json"
        try:
            listed = json.loads(self._recent.read_text())
            fresh = listed["source"] == source_digest()  # else another jformer's programs
            self._recent_read = [[str(d), int(i)] for d, i in listed["programs"] if fresh]
        except (OSError, ValueError, KeyError, TypeError):  # none yet, or unreadable: a new one
            self._recent_read = []
        self._recent_devices = list(devices)
        for digest, place in self._recent_read:
            path, device = self._path(digest), devices[place] if place < len(devices) else None
            if device and (digest, device.id) not in self._early and path.exists():
                self._early[(digest, device.id)] = self._submit(digest, path, [device])

    def _note_ran(self, digest: str, device: jax.Device) -> None:
        """Adds a program this store ran on ``device`` to its recent list
        (:meth:`read_recent`), written when the list changes."""
        if self._recent is None or device not in self._recent_devices:
            return
        ran = [digest, self._recent_devices.index(device)]
        if ran in self._ran or len(self._ran) >= RECENT_MAX:
            return
        self._ran.append(ran)
        if self._recent_read[:len(self._ran)] == self._ran:
            return
        self._recent_read = list(self._ran)
        try:
            files.write_atomically(self._recent, json.dumps(
                {"source": source_digest(), "programs": self._ran}).encode())
        except OSError as e:
            log.warning("list of recent programs not written to %s (%s)", self._recent, e)
            self._recent = None

    def _submit(self, digest: str, path: Path | None, devices: list) -> concurrent.futures.Future:
        """:meth:`_read` on the reader thread (one thread: reads run in submission order)."""
        if self._reader is None:
            self._reader = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="jformer-programs")
        return self._reader.submit(self._read, digest, path, devices)

    def _take_early(self, digest: str, devices: Sequence[jax.Device]):
        """The future of a program :meth:`read_recent` started reading onto this one
        device, taken from the early reads; None if there is none."""
        if len(devices) != 1:
            return None
        return self._early.pop((digest, devices[0].id), None)

    def prefetch(self, jitted: Callable, args: Sequence, devices: Sequence[jax.Device],
                 **static) -> None:
        """Starts reading, on a background thread, the program that :meth:`run` with these
        arguments would read (from disk, or from the copy read or compiled for another
        device), so that it loads while earlier batches decode; ``run`` then takes it
        (and waits for it if it is not done). Never compiles: a program that is neither
        on disk nor here is compiled by ``run`` as before. Only the shapes, dtypes and
        placements of ``args`` matter."""
        leaves, tree = jax.tree.flatten(args)
        key = _memory_key(jitted, leaves, tree, static)
        if key in self._programs or key in self._pending:
            return
        digest = self._digest(jitted, leaves, tree, devices, static)
        early = self._take_early(digest, devices)
        if early is not None:
            self._pending[key] = early
            return
        path = self._path(digest)
        with self._lock:
            here = digest in self._serialized
        if not here and (path is None or not path.exists()):
            return
        self._pending[key] = self._submit(digest, path, list(devices))

    @staticmethod
    def _digest(jitted, leaves, tree, devices, static) -> str:
        """The program's key on disk (its file: ``<root>/<digest>.jfprog``)."""
        backend, anywhere = devices[0].client, len(devices) == 1
        parts = [source_digest(), jax.__version__, jaxlib.__version__, backend.platform,
                 backend.platform_version,
                 stable([(d.platform, d.device_kind) if anywhere
                         else (d.platform, d.device_kind, d.id) for d in devices]),
                 os.environ.get("XLA_FLAGS", ""), native.cpu_flags(),
                 *(f"{name}={getattr(jax.config, name)}" for name in LOWERING_SETTINGS),
                 f"{jitted.__module__}.{jitted.__qualname__}",
                 *(f"{name}={stable(value)}" for name, value in sorted(static.items())),
                 str(tree), *(repr(_leaf(x, anywhere)) for x in leaves)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def _path(self, digest: str) -> Path | None:
        """The entry's file (None: the store keeps programs in memory only)."""
        return self.root / f"{digest}{SUFFIX}" if self.root else None

    def _read(self, digest: str, path: Path | None, devices: Sequence[jax.Device]) -> Any:
        """The program of ``digest`` loaded onto ``devices`` from its copy for another
        device or from its file; None where there is neither (or neither loads: the
        warning says why, and the caller compiles)."""
        _register_kernels(devices)
        with self._lock:
            data = self._serialized.get(digest)
        if data is not None:  # compiled (or read) here for another device
            try:
                program = _load_onto(data, devices[0])
                with self._lock:
                    self.moved += 1
                return program
            except Exception as e:  # noqa: BLE001 - e.g. another jax's pickle format
                log.warning("compiled program could not be loaded onto %s (%s: %s); "
                            "compiling it for that device", devices[0], type(e).__name__, e)
                with self._lock:  # the other devices compile theirs too
                    self._serialized.pop(digest, None)
        if path is not None and path.exists():
            try:
                data = path.read_bytes()
                program = _load(data, devices)
                with self._lock:
                    self.loaded += 1
                    if len(devices) == 1:
                        self._serialized[digest] = data
                return program
            except Exception as e:  # noqa: BLE001 - a stale or broken entry: compile anew
                log.warning("compiled program %s could not be loaded (%s: %s); compiling "
                            "it again", path, type(e).__name__, e)
        return None

    def _load_or_compile(self, jitted, args, digest, devices, static):
        early = self._take_early(digest, devices)
        path = self._path(digest)
        # read early (None: it could not be, and the warning said why), or now
        program = early.result() if early is not None else self._read(digest, path, devices)
        if program is not None:
            return program
        if path is None and len(devices) > 1:  # in memory, and never moved: as jax does
            program = jitted.lower(*args, **static).compile()
        else:
            with _fresh_compile():
                program = jitted.lower(*args, **static).compile()
            data = _serialize(program)
            if data is not None and len(devices) == 1:
                with self._lock:
                    self._serialized[digest] = data
            if data is not None and path is not None:
                try:
                    files.write_atomically(path, data)
                except OSError as e:
                    log.warning("compiled program not written to %s (%s)", path, e)
        with self._lock:
            self.compiled += 1
        return program


def open_recent(cache_dir: str | None, workdir: str | os.PathLike,
                checkpoint_dir: str | os.PathLike | None = None,
                step: int | None = None, devices: int = 1) -> ProgramStore:
    """A store in ``<cache_dir>/programs`` (None: in memory only) that has started reading
    the programs last run with this checkpoint (:meth:`ProgramStore.read_recent`, onto
    the first ``devices`` local devices), named by the workdir's and checkpoint's
    absolute paths and the step."""
    store = ProgramStore(cache_dir and os.path.join(cache_dir, "programs"))
    where = [os.path.realpath(p) if p is not None else None for p in (workdir, checkpoint_dir)]
    store.read_recent(f"{where[0]}|{where[1]}|{step}", jax.local_devices()[:devices])
    return store


def _serialize(program) -> bytes | None:
    """The program's executable and trees as bytes; None where the backend cannot
    serialize it (the program then stays in memory only)."""
    try:
        return pickle.dumps(serialize_executable.serialize(program))
    except (ValueError, NotImplementedError, TypeError, pickle.PicklingError,
            jax.errors.JaxRuntimeError) as e:  # e.g. "`LessThan` is not serializable"
        log.info("compiled program not kept serialized (%s)", e)
        return None


def _register_kernels(devices: Sequence[jax.Device]) -> None:
    """Registers jformer's C++ kernels (:func:`jformer.kernels.native.available`) before
    a CPU program is loaded: a program that calls one cannot be loaded before its
    handler is registered, and a store reads early, before the Translator that
    registers them has prepared its weights."""
    if any(d.platform == "cpu" for d in devices):
        native.available()


def _load(data: bytes, devices: Sequence[jax.Device]):
    """A program from :func:`_serialize`'s bytes, on ``devices``: a one-device program
    on whichever device it is asked for, a mesh's on the devices it was compiled for."""
    if len(devices) == 1:
        return _load_onto(data, devices[0])
    blob, in_tree, out_tree = pickle.loads(data)
    return serialize_executable.deserialize_and_load(
        blob, in_tree, out_tree, backend=devices[0].client, execution_devices=list(devices))


class _Unpickler(pickle.Unpickler):
    """Reads ``serialize_executable``'s pickle of a one-device program with every
    device it names taken as ``device``, and the executable loaded for that device
    (``deserialize_executable`` with its device assignment, as JAX's own cache loads an
    entry compiled on another GPU)."""

    def __init__(self, data: bytes, device: jax.Device):
        super().__init__(io.BytesIO(data))
        self.device = device

    def persistent_load(self, pid):
        kind = pid[0]
        if kind == "exec":
            options = xc.CompileOptions()
            options.device_assignment = xc.DeviceAssignment.create(
                np.array([[self.device.id]]))
            return self.device.client.deserialize_executable(
                pid[1], xc.DeviceList((self.device,)), options)
        if kind == "device":
            return self.device
        if kind == "client":
            return self.device.client
        raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")


def _load_onto(data: bytes, device: jax.Device):
    """The one-device program of :func:`_serialize`'s bytes, loaded to run on ``device``
    (whichever device it was compiled for)."""
    blob, in_tree, out_tree = pickle.loads(data)
    unloaded, args_info, no_kwargs = _Unpickler(blob, device).load()
    return jax.stages.Compiled(unloaded.load(), [], in_tree.unflatten(args_info), out_tree,
                               no_kwargs=no_kwargs)
