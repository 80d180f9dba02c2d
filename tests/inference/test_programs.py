"""jformer/inference/programs.py: a compiled program is kept on disk by what it is made of,
loaded by a second store (or process) without tracing, compiled anew for another shape or
static argument or after a broken entry, and whole even where JAX's persistent cache
already held it."""
import functools
import logging
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.inference.programs import SUFFIX, ProgramStore, stable
from jformer.ops import resolve

TRACES = []


@functools.partial(jax.jit, static_argnames=("power",))
def program(params, x, *, power):
    TRACES.append(x.shape)
    i = jnp.arange(x.shape[0])
    return jnp.where(i[:, None] <= i[None, :], jnp.tanh(x @ params["w"]) ** power, 0.0).sum(1)


def args(rows=8):
    return ({"w": jnp.eye(rows) * 0.5}, np.ones((rows, rows), np.float32))


def test_a_second_store_loads_the_program_without_tracing(tmp_path):
    devices = jax.local_devices()[:1]
    first = ProgramStore(tmp_path)
    want = first.run(program, args(), devices, power=2)
    assert (first.compiled, first.loaded) == (1, 0)
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 1
    TRACES.clear()
    second = ProgramStore(tmp_path)
    got = second.run(program, args(), devices, power=2)
    assert (second.compiled, second.loaded, TRACES) == (0, 1, [])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(want, program(*args(), power=2))
    second.run(program, args(), devices, power=2)  # kept in memory: read once
    assert second.loaded == 1


def test_another_shape_or_static_argument_is_another_program(tmp_path):
    devices = jax.local_devices()[:1]
    store = ProgramStore(tmp_path)
    store.run(program, args(8), devices, power=2)
    store.run(program, args(16), devices, power=2)
    store.run(program, args(8), devices, power=3)
    assert store.compiled == 3 and len(list(tmp_path.glob(f"*{SUFFIX}"))) == 3


def test_a_broken_entry_is_reported_compiled_again_and_rewritten(tmp_path, caplog):
    devices = jax.local_devices()[:1]
    ProgramStore(tmp_path).run(program, args(), devices, power=2)
    (entry,) = tmp_path.glob(f"*{SUFFIX}")
    entry.write_bytes(b"not a program")
    store = ProgramStore(tmp_path)
    with caplog.at_level(logging.WARNING, logger="jformer.inference.programs"):
        got = store.run(program, args(), devices, power=2)
    assert store.compiled == 1 and "could not be loaded" in caplog.text and str(entry) in caplog.text
    np.testing.assert_allclose(got, program(*args(), power=2))
    assert ProgramStore(tmp_path).run(program, args(), devices, power=2) is not None
    assert entry.read_bytes() != b"not a program"


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_one_device_program_is_compiled_once_for_every_device(tmp_path, on_disk):
    if len(jax.local_devices()) < 2:
        pytest.skip("needs 2 local devices (tests/conftest.py asks for 8)")
    first, second = jax.local_devices()[:2]
    params, x = args()
    store = ProgramStore(tmp_path if on_disk else None)
    on = {d: store.run(program, (jax.device_put(params, d), x), [d], power=2)
          for d in (first, second)}
    assert (store.compiled, store.moved) == (1, 1)
    assert [next(iter(y.devices())) for y in on.values()] == [first, second]
    np.testing.assert_array_equal(on[first], on[second])
    if on_disk:  # another process reads the one entry onto the device it asks for
        later = ProgramStore(tmp_path)
        got = later.run(program, (jax.device_put(params, second), x), [second], power=2)
        assert (later.compiled, later.loaded) == (0, 1) and got.devices() == {second}
        np.testing.assert_array_equal(got, on[first])


def test_a_program_that_cannot_be_moved_is_compiled_for_its_device(monkeypatch, caplog):
    if len(jax.local_devices()) < 2:
        pytest.skip("needs 2 local devices (tests/conftest.py asks for 8)")
    from jformer.inference import programs

    def broken(data, device):
        raise pickle.UnpicklingError("unknown persistent id 'exec2'")

    monkeypatch.setattr(programs, "_load_onto", broken)
    first, second = jax.local_devices()[:2]
    params, x = args()
    store = ProgramStore(None)
    want = store.run(program, (jax.device_put(params, first), x), [first], power=2)
    with caplog.at_level(logging.WARNING, logger="jformer.inference.programs"):
        got = store.run(program, (jax.device_put(params, second), x), [second], power=2)
    assert (store.compiled, store.moved) == (2, 0) and "could not be loaded onto" in caplog.text
    assert got.devices() == {second}
    np.testing.assert_array_equal(got, want)


def test_without_a_directory_programs_stay_in_memory(tmp_path):
    store = ProgramStore(None)
    store.run(program, args(), jax.local_devices()[:1], power=2)
    store.run(program, args(), jax.local_devices()[:1], power=2)
    assert store.compiled == 1 and not list(tmp_path.iterdir())


def test_the_key_text_of_the_static_arguments_holds_no_memory_address():
    text = stable(resolve(ModelConfig(ops="cpu"))) + stable(ModelConfig())
    assert "0x" not in text and "jformer.kernels" in text


SCRIPT = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    from jformer.inference.programs import ProgramStore
    def f(w, x):
        i = jnp.arange(x.shape[0])
        return jnp.where(i[:, None] < i[None, :], jnp.tanh(x @ w), 0.0).sum(1)
    w, x = jnp.eye(64) * 0.5, jnp.ones((64, 64))
    if sys.argv[3] == "fill":  # JAX's cache gets the program
        print(jax.jit(f)(w, x)[:2])
    else:
        store = ProgramStore(sys.argv[2])
        print(store.run(jax.jit(f), (w, x), jax.local_devices()[:1])[:2], store.compiled,
              store.loaded)
""")


def test_an_entry_is_whole_where_jaxs_cache_held_the_program(tmp_path):
    """jax 0.10 serializes an executable its cache loaded without its kernels' code; the
    store compiles its programs past that cache, so a later process can run them."""
    env = dict(os.environ, PYTHONPATH=os.getcwd(), XLA_FLAGS="")
    def run(step):
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "xla"),
                               str(tmp_path / "programs"), step], capture_output=True,
                              text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()
    filled = run("fill")
    wrote, loaded = run("store"), run("store")
    assert wrote[-2:] == ["1", "0"] and loaded[-2:] == ["0", "1"]
    assert wrote[:-2] == loaded[:-2] == filled


def test_a_prefetched_program_is_read_on_the_reader_thread_and_run_takes_it(
        tmp_path, monkeypatch):
    from jformer.inference import programs

    devices = jax.local_devices()[:1]
    want = ProgramStore(tmp_path).run(program, args(), devices, power=2)
    threads = []
    real = programs._load

    def recording(data, on):
        threads.append(threading.current_thread().name)
        return real(data, on)

    monkeypatch.setattr(programs, "_load", recording)
    store = ProgramStore(tmp_path)
    params, x = args()
    store.prefetch(program, (params, np.zeros_like(x)), devices, power=2)  # shapes only
    store.prefetch(program, args(), devices, power=2)  # the same program: one read
    TRACES.clear()
    got = store.run(program, args(), devices, power=2)
    assert threads == ["jformer-programs_0"] and TRACES == []
    assert (store.loaded, store.compiled) == (1, 0)
    np.testing.assert_array_equal(got, want)
    store.prefetch(program, args(), devices, power=2)  # already in memory: nothing to do
    store.run(program, args(), devices, power=2)
    assert threads == ["jformer-programs_0"] and store.loaded == 1


def test_prefetch_never_compiles_and_a_broken_entry_is_compiled_by_run(tmp_path, caplog):
    devices = jax.local_devices()[:1]
    store = ProgramStore(tmp_path)
    store.prefetch(program, args(), devices, power=2)  # nothing on disk: nothing starts
    assert store._reader is None and (store.compiled, store.loaded) == (0, 0)
    ProgramStore(tmp_path).run(program, args(), devices, power=2)
    (entry,) = tmp_path.glob(f"*{SUFFIX}")
    entry.write_bytes(b"not a program")
    store = ProgramStore(tmp_path)
    with caplog.at_level(logging.WARNING, logger="jformer.inference.programs"):
        store.prefetch(program, args(), devices, power=2)
        got = store.run(program, args(), devices, power=2)
    assert (store.compiled, store.loaded) == (1, 0) and "could not be loaded" in caplog.text
    np.testing.assert_allclose(got, program(*args(), power=2))


def test_a_prefetched_move_to_another_device_loads_there(tmp_path):
    if len(jax.local_devices()) < 2:
        pytest.skip("needs 2 local devices (tests/conftest.py asks for 8)")
    first, second = jax.local_devices()[:2]
    params, x = args()
    store = ProgramStore(None)
    want = store.run(program, (jax.device_put(params, first), x), [first], power=2)
    store.prefetch(program, (jax.device_put(params, second), x), [second], power=2)
    got = store.run(program, (jax.device_put(params, second), x), [second], power=2)
    assert (store.compiled, store.moved) == (1, 1) and got.devices() == {second}
    np.testing.assert_array_equal(got, want)


def recent_store(root, name="model A", devices=1):
    store = ProgramStore(root)
    store.read_recent(name, jax.local_devices()[:devices])
    return store


def test_a_named_store_reads_the_programs_the_last_one_ran_before_they_are_asked_for(
        tmp_path, monkeypatch):
    from jformer.inference import programs

    devices = jax.local_devices()[:1]
    first = recent_store(tmp_path)
    want = [first.run(program, args(rows), devices, power=2) for rows in (16, 8)]
    assert first.compiled == 2
    read = []
    real = programs._load

    def recording(data, on):
        read.append((threading.current_thread().name, len(data)))
        return real(data, on)

    monkeypatch.setattr(programs, "_load", recording)
    second = recent_store(tmp_path)  # reads both, in the order the first store ran them
    for future in list(second._early.values()):
        future.result()
    assert [name for name, _ in read] == ["jformer-programs_0"] * 2 and second.loaded == 2
    TRACES.clear()
    got = [second.run(program, args(rows), devices, power=2) for rows in (16, 8)]
    assert (second.loaded, second.compiled, TRACES, len(read)) == (2, 0, [], 2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    other = recent_store(tmp_path, "model B")  # another checkpoint's list: none yet
    assert other._early == {} and other._reader is None


def test_the_recent_list_keeps_a_longer_job_and_follows_another_one(tmp_path):
    devices = jax.local_devices()[:1]
    first = recent_store(tmp_path)
    for rows in (16, 8):
        first.run(program, args(rows), devices, power=2)
    (listed,) = (tmp_path / "recent").glob("*.json")
    longer = listed.read_text()
    shorter = recent_store(tmp_path)  # runs what the list begins with: it stays
    shorter.run(program, args(16), devices, power=2)
    assert listed.read_text() == longer
    another = recent_store(tmp_path)  # begins with another program: its own list
    another.run(program, args(8), devices, power=3)
    assert listed.read_text() != longer
    assert len(recent_store(tmp_path)._early) == 1
    listed.write_text("{not json")  # unreadable: as none, and written anew
    broken = recent_store(tmp_path)
    assert broken._early == {}
    broken.run(program, args(8), devices, power=2)
    assert len(recent_store(tmp_path)._early) == 1


def test_an_early_read_that_fails_is_compiled_by_run(tmp_path, caplog):
    devices = jax.local_devices()[:1]
    recent_store(tmp_path).run(program, args(), devices, power=2)
    (entry,) = tmp_path.glob(f"*{SUFFIX}")
    entry.write_bytes(b"not a program")
    with caplog.at_level(logging.WARNING, logger="jformer.inference.programs"):
        store = recent_store(tmp_path)
        got = store.run(program, args(), devices, power=2)
    assert (store.compiled, store.loaded) == (1, 0)
    assert caplog.text.count("could not be loaded") == 1
    np.testing.assert_allclose(got, program(*args(), power=2))


def test_an_early_read_serves_prefetch_without_a_second_read(tmp_path):
    devices = jax.local_devices()[:1]
    recent_store(tmp_path).run(program, args(), devices, power=2)
    store = recent_store(tmp_path)
    store.prefetch(program, args(), devices, power=2)
    assert store._early == {} and len(store._pending) == 1
    store.run(program, args(), devices, power=2)
    assert (store.loaded, store.compiled) == (1, 0)


def test_a_recent_list_of_another_jformer_source_is_not_read(tmp_path, monkeypatch):
    from jformer.inference import programs

    recent_store(tmp_path).run(program, args(), jax.local_devices()[:1], power=2)
    assert len(recent_store(tmp_path)._early) == 1
    monkeypatch.setattr(programs, "source_digest", lambda: "another source")
    assert recent_store(tmp_path)._early == {}


def test_the_recent_list_reads_each_program_onto_the_device_it_ran_on(tmp_path):
    if len(jax.local_devices()) < 2:
        pytest.skip("needs 2 local devices (tests/conftest.py asks for 8)")
    first, second = jax.local_devices()[:2]

    def on(device, rows):
        params, x = args(rows)
        return (jax.device_put(params, device), x), [device]

    store = recent_store(tmp_path, devices=2)
    for device, rows in ((first, 8), (second, 8), (second, 16)):
        store.run(program, *on(device, rows), power=2)
    digest = {rows: store._digest(program, *jax.tree.flatten(on(first, rows)[0]),
                                  [first], {"power": 2}) for rows in (8, 16)}
    again = recent_store(tmp_path, devices=2)  # in the order they first ran
    assert list(again._early) == [(digest[8], first.id), (digest[8], second.id),
                                  (digest[16], second.id)]
    assert list(recent_store(tmp_path, devices=1)._early) == [(digest[8], first.id)]
    for device, rows in ((first, 8), (second, 8), (second, 16)):
        got = again.run(program, *on(device, rows), power=2)
        assert got.devices() == {device}
    assert again.loaded + again.moved == 3 and again.compiled == 0 and not again._early


NATIVE_SCRIPT = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp
    from jformer.inference.programs import ProgramStore
    from jformer.kernels import native, native_attention
    if sys.argv[2] == "write":  # registered before compiling, as a Translator does
        assert native.available()
    q, kt, v = jnp.ones((1, 2, 1, 8)), jnp.ones((1, 2, 8, 5)), jnp.ones((1, 2, 5, 8))
    mask = jnp.ones((1, 1, 1, 5), bool)
    store = ProgramStore(sys.argv[1])
    out = store.run(jax.jit(native_attention.memory_attention), (q, kt, v, mask),
                    jax.local_devices()[:1])
    print(float(out.sum()), store.compiled, store.loaded)
""")


@pytest.mark.skipif(not __import__("jformer.kernels.native").kernels.native.available(),
                    reason="the native kernels could not be built here")
def test_a_program_calling_a_native_kernel_loads_in_a_process_that_never_registered_it(
        tmp_path):
    """A store reads early, before anything has registered jformer's C++ kernels: the
    load registers them first, so the program is loaded, not compiled again."""
    env = dict(os.environ, PYTHONPATH=os.getcwd(), XLA_FLAGS="")

    def run(step):
        done = subprocess.run([sys.executable, "-c", NATIVE_SCRIPT, str(tmp_path), step],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "could not be loaded" not in done.stderr, done.stderr[-2000:]
        return done.stdout.split()
    wrote, loaded = run("write"), run("load")
    assert wrote[1:] == ["1", "0"] and loaded[1:] == ["0", "1"]
    assert wrote[0] == loaded[0] == str(float(2 * 8))
