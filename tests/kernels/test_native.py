"""jformer.kernels.native: the C++ kernels' library is built once into the cache, and
without a compiler decoding warns once and keeps XLA's ops."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from jformer.kernels import native


def test_without_a_compiler_it_warns_once_and_decoding_keeps_xla(tmp_path):
    script = (
        "import logging, jax, jax.numpy as jnp\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from jformer.kernels import rows_matmul\n"
        "assert rows_matmul.available() is False and rows_matmul.available() is False\n"
        "from jformer.config import ModelConfig\n"
        "from jformer.ops import transformer\n"
        "model = transformer(ModelConfig(ops='cpu', tie_output=False))\n"
        "assert model.ops.cache.prepare(model, params=None) == {}\n")
    env = dict(os.environ, CXX="no-such-compiler-jformer", JFORMER_KERNEL_CACHE=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("jformer.kernels.native unavailable") == 1
    assert "no C++ compiler 'no-such-compiler-jformer'" in done.stderr


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
@pytest.mark.skipif(not native.available(), reason="the library could not be built here")
def test_the_library_is_built_once_into_the_cache(tmp_path):
    env = dict(os.environ, JFORMER_KERNEL_CACHE=str(tmp_path))
    script = ("from jformer.kernels import native\n"
              "assert native.available()\n"
              "print(native._library_path())\n")
    run = lambda: subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                                 text=True, check=True).stdout.strip()
    path = run()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [os.path.basename(path)] and files[0].endswith(".so")
    mtime = os.path.getmtime(path)
    assert run() == path and os.path.getmtime(path) == mtime  # reused, not rebuilt


@pytest.mark.skipif(not native.available(), reason="the library could not be built here")
def test_every_kernel_is_registered():
    import ctypes
    library = ctypes.cdll.LoadLibrary(str(native._library_path()))
    assert all(hasattr(library, symbol) for symbol in native.TARGETS)
    assert sorted(native.TARGETS.values()) == ["jformer_argmax", "jformer_beam_candidates",
                                               "jformer_beam_slot_attention",
                                               "jformer_int8_matmul", "jformer_int8_vnni",
                                               "jformer_log_softmax",
                                               "jformer_memory_attention",
                                               "jformer_rows_matmul"]


def test_a_compiler_that_fails_midway_leaves_nothing_in_the_cache(tmp_path):
    """The compiler starts, writes part of its output, then fails: the build raises, the
    half-written library is removed, and decoding keeps XLA's ops (one warning)."""
    compiler = tmp_path / "half-cxx"
    compiler.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\n'
                        'printf "half a library" > "$2"\necho "internal compiler error" >&2\n'
                        'exit 1\n')
    compiler.chmod(0o755)
    cache = tmp_path / "cache"
    script = ("import logging\nlogging.basicConfig(level=logging.WARNING)\n"
              "from jformer.kernels import native\nassert native.available() is False\n")
    env = dict(os.environ, CXX=str(compiler), JFORMER_KERNEL_CACHE=str(cache))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    assert "internal compiler error" in done.stderr and "failed (1)" in done.stderr
    assert cache.is_dir() and list(cache.iterdir()) == []  # the partial output is gone


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_without_a_compiler_translations_equal_the_native_kernels(tmp_path):
    """The fallback a user without g++ gets (XLA's ops, one warning) translates the
    committed workdir as the native kernels do: the same ids, scores to 1e-5."""
    from jformer.inference import Translator

    fixture = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "fixtures", "legacy_workdir")
    sources = ["The meeting is on Thursday, June 26, 1962.", "I see a big dog.",
               "Five red apples cost ten euros.", "It is seven o'clock."]
    script = (
        "import json, sys\n"
        "from jformer.inference import Translator\n"
        "from jformer.kernels import native\n"
        "assert native.available() is False\n"
        f"tr = Translator.from_checkpoint({fixture!r})\n"
        "out = [[(h.ids.tolist(), h.score) for h in tr.translate(json.loads(sys.argv[1]),\n"
        "        beam_size=w, return_scores=True)] for w in (1, 4)]\n"
        "print(json.dumps(out))\n")
    env = dict(os.environ, CXX="no-such-compiler-jformer", JFORMER_KERNEL_CACHE=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script, json.dumps(sources)], env=env,
                          capture_output=True, text=True, cwd=os.path.dirname(
                              os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("jformer.kernels.native unavailable") == 1
    fallback = json.loads(done.stdout.strip().splitlines()[-1])
    assert native.available()  # this process decodes through the native kernels
    translator = Translator.from_checkpoint(fixture)
    for beam, want in zip((1, 4), fallback):
        got = translator.translate(sources, beam_size=beam, return_scores=True)
        assert [h.ids.tolist() for h in got] == [ids for ids, _ in want]
        np.testing.assert_allclose([h.score for h in got], [s for _, s in want], rtol=1e-5)
