"""jformer/inference/placement.py: side by side, batches go to the devices in turn with a
second one queued on each (none under a memory limit), on each device's own params copy;
split, each batch spans a mesh; a bad name is refused."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.inference import placement

PARAMS = {"w": jnp.arange(6.0).reshape(2, 3)}


def prepare(params):
    return {"w_T": params["w"].T}


def devices(n):
    local = jax.local_devices()
    if len(local) < n:
        pytest.skip(f"needs {n} local devices (tests/conftest.py asks for 8)")
    return local[:n]


@pytest.mark.parametrize("queue,in_flight", [(True, 6), (False, 3)])
def test_side_by_side_puts_a_params_copy_on_each_device(queue, in_flight):
    three = devices(3)
    placed = placement.place("batches", three, PARAMS, prepare, queue=queue)
    assert isinstance(placed, placement.SideBySide)
    assert (placed.rows_multiple, placed.in_flight) == (1, in_flight)
    for device, params, prepared in zip(three, placed.params, placed.prepared):
        assert params["w"].devices() == {device} == prepared["w_T"].devices()
        np.testing.assert_array_equal(prepared["w_T"], PARAMS["w"].T)


def test_split_spans_a_mesh_and_one_device_is_side_by_side():
    two = devices(2)
    split = placement.place("split", two, PARAMS, prepare, queue=True)
    assert isinstance(split, placement.Split)
    assert (split.rows_multiple, split.in_flight) == (2, 1)
    assert split.params[0]["w"].sharding.device_set == set(two)
    alone = placement.place("split", two[:1], PARAMS, prepare, queue=True)
    assert isinstance(alone, placement.SideBySide) and alone.in_flight == 2


def test_an_unknown_placement_is_refused_by_name():
    with pytest.raises(ValueError, match=r"parallel must be one of \('batches', 'split'\); "
                                         r"got 'mesh'"):
        placement.place("mesh", devices(1), PARAMS, prepare, queue=True)


def test_a_translator_starts_reading_every_program_of_a_call_before_its_first_batch(
        setup, tmp_path):
    from jformer.inference import Translator
    from jformer.inference.programs import SUFFIX, ProgramStore
    from tests.inference.test_translator import CHUNK, DECODE, SHORT

    devices(2)
    cfg, params, tok = setup
    sentences = SHORT + [" ".join(SHORT[1:4])] * 3  # the 16- and the 32-token bucket

    def translator():
        made = Translator(cfg, params, tok, DECODE, chunk_size=CHUNK, devices=2)
        made.programs = ProgramStore(tmp_path)
        return made

    first = translator()
    want = first.translate(sentences)
    second = translator()
    store, calls = second.programs, []
    for name in ("prefetch", "run"):
        def spy(*args, _name=name, _real=getattr(store, name), **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)
        setattr(store, name, spy)
    assert second.translate(sentences) == want
    first_run = calls.index("run")
    assert first_run >= 2 and set(calls[:first_run]) == {"prefetch"}
    assert "prefetch" not in calls[first_run:] and not store._pending
    # Every program on disk (two buckets, two row counts) is read, none of them compiled;
    # only one XLA could not serialize (a sort's comparator, in some processes) is not
    # on disk, and only that one is compiled again.
    on_disk = len(list(tmp_path.glob(f"*{SUFFIX}")))
    assert first.programs.compiled >= 2 and on_disk >= 1
    assert store.loaded == on_disk
    assert store.compiled == first.programs.compiled - on_disk
