"""JAX's persistent compilation cache: a second run loads its programs instead of
compiling them. (The Translator's decode programs are kept whole beside it, in
``<dir>/programs``, by :mod:`.programs`, which skips their tracing too.)

    compile_cache.enable()          # ~/.cache/jformer/xla, or $JFORMER_COMPILE_CACHE
    compile_cache.enable("off")     # nothing changes

``jformer translate``, ``evaluate`` and ``serve`` and every :class:`Translator` call
:func:`enable` with their own setting (``--compile-cache DIR|off``, the Translator's
``compile_cache``). The directory is resolved as:

1. the explicit setting, if one is given (``"off"``: no cache);
2. else ``$JFORMER_COMPILE_CACHE`` (a directory, or ``off``);
3. else ``~/.cache/jformer/xla``, beside the native kernels' build cache.

JAX's cache is one setting of the whole process. A directory the process already chose
(``jax.config.update("jax_compilation_cache_dir", ...)`` or ``$JAX_COMPILATION_CACHE_DIR``)
is kept, and only programs that took at least
``jax_persistent_cache_min_compile_time_secs`` to compile are written (every one here unless
the process set it). Entries are keyed by JAX on the program, the compiler options and
the backend, so another model, setting or jax version compiles anew, never reads a wrong
program. The native kernels (:mod:`jformer.kernels.native`) are called by name from the
loaded program, and they are registered before any decode program runs, so a cached
program calls the library of this process.
"""
from __future__ import annotations

import os

import jax

ENV = "JFORMER_COMPILE_CACHE"
OFF = ("off", "none", "0", "false", "no")
MIN_COMPILE_SECONDS = 0.0  # every program: a start-up compiles a dozen small ones (0.4 s)


def default_dir() -> str:
    """``~/.cache/jformer/xla`` (``$XDG_CACHE_HOME/jformer/xla`` where that is set)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "jformer", "xla")


def resolve(setting: str | None = None) -> str | None:
    """The cache directory for ``setting`` (module docstring), None for off."""
    if setting is None:
        setting = os.environ.get(ENV)
        if setting is None:
            return default_dir()
    setting = setting.strip()
    if not setting or setting.lower() in OFF:
        return None
    return os.path.abspath(os.path.expanduser(setting))


def in_use(setting: str | None = None) -> str | None:
    """The directory :func:`enable` would use, without enabling anything: the process's
    own cache directory if it set one, else :func:`resolve`'s (None: none)."""
    return jax.config.jax_compilation_cache_dir or resolve(setting)


def enable(setting: str | None = None) -> str | None:
    """Turns JAX's persistent cache on at :func:`resolve`'s directory, unless the process
    already has one (kept) or the setting is off; returns the directory in use (None:
    none). A directory that cannot be created is an error naming it."""
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    path = resolve(setting)
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"compile cache directory {path!r} cannot be created ({e}); "
                         f"pass another one, or 'off' (--compile-cache, ${ENV})") from None
    jax.config.update("jax_compilation_cache_dir", path)
    if jax.config.jax_persistent_cache_min_compile_time_secs == 1.0:  # JAX's default
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
