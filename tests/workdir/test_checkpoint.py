"""Tests for jformer/workdir/checkpoint.py and averaging.py: round trips, retention, crash
safety, any-device restores."""
import os
import re
import shutil
import signal
import subprocess
import sys

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jformer.config import TrainConfig
from jformer.train.schedules import make_optimizer
from jformer.workdir import averaging, checkpoint
from jformer.workdir.checkpoint import Checkpointer

from tests.workdir._checkpoint_worker import flat_params, train_state  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_checkpoint_worker.py")


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: dict
    opt_state: object
    rng: jax.Array


def _abstract(tree):
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def _assert_trees_equal(actual, expected):
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def _run_worker(*args, devices: int) -> None:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    result = subprocess.run([sys.executable, WORKER, *map(str, args)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def _mesh_shardings(tree, mesh):
    """Replicated everywhere, except params['embed'] split over the 8 devices."""
    def sharding(path, _):
        keys = [getattr(k, "key", getattr(k, "name", None)) for k in path]
        return NamedSharding(mesh, P("data") if keys[-1] == "embed" else P())
    return jax.tree_util.tree_map_with_path(sharding, tree)


def test_round_trip_of_struct_state_is_exact(tmp_path):
    d = train_state(7)
    # The test state has the structure of a real Adam state.
    assert (jax.tree.structure(d["opt_state"])
            == jax.tree.structure(optax.adam(1e-3).init(d["params"])))
    state = TrainState(step=d["step"], params=d["params"], opt_state=d["opt_state"],
                       rng=d["rng"])
    data_state = {"epoch": 2, "position": 123, "shard": [0, 4]}
    with Checkpointer(tmp_path, keep=2, save_every=1) as ckpt:
        assert ckpt.save(10, state, data_state)
        ckpt.wait()
    with Checkpointer(tmp_path, keep=2, save_every=1) as ckpt:
        assert ckpt.latest_step() == 10
        restored, restored_data = ckpt.restore(abstract_state=_abstract(state))
    assert isinstance(restored, TrainState)
    _assert_trees_equal(restored, state)
    assert restored.rng.dtype == jnp.uint32
    assert restored_data == data_state


def test_saves_every_n_steps_or_when_forced_and_once_per_step(tmp_path):
    state = train_state(1)
    with Checkpointer(tmp_path, keep=5, save_every=2, async_save=False) as ckpt:
        assert not ckpt.save(3, state, {})
        assert ckpt.save(4, state, {})
        assert ckpt.save(5, state, {}, force=True)
        assert not ckpt.save(5, state, {}, force=True)
        assert ckpt.all_steps() == [4, 5]


def test_keeps_last_k(tmp_path):
    state = train_state(1)
    with Checkpointer(tmp_path, keep=3, save_every=1) as ckpt:
        for step in range(1, 7):
            assert ckpt.save(step, state, {"step": step})
        ckpt.wait()
        assert ckpt.all_steps() == [4, 5, 6]
    assert sorted(os.listdir(tmp_path)) == ["4", "5", "6"]
    with Checkpointer(tmp_path, keep=3, save_every=1) as ckpt:
        # A target of concrete arrays works as well as one of ShapeDtypeStructs.
        restored, data_state = ckpt.restore(5, abstract_state=train_state(2))
    _assert_trees_equal(restored, state)
    assert data_state == {"step": 5}


def _tmp_bytes(directory, step: int) -> int:
    """Bytes written so far under `directory`/<step>.orbax-checkpoint-tmp*."""
    total = 0
    for name in os.listdir(directory):
        if name.startswith(f"{step}.orbax-checkpoint-tmp"):
            for root, _, files in os.walk(os.path.join(directory, name)):
                for f in files:
                    try:  # The writer may rename or remove files while we look.
                        total += os.path.getsize(os.path.join(root, f))
                    except OSError:
                        pass
    return total


def test_sigkill_during_save_leaves_last_good_checkpoint(tmp_path):
    ckpt_dir, log_path = tmp_path / "ckpt", tmp_path / "worker.log"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    with open(log_path, "w") as log:  # a file, not a pipe that could fill and block it
        proc = subprocess.run([sys.executable, WORKER, "save-then-die", str(ckpt_dir)],
                              env=env, stdout=subprocess.PIPE, stderr=log, text=True,
                              timeout=300)
    assert proc.returncode == -signal.SIGKILL, log_path.read_text()[-3000:]
    assert proc.stdout.splitlines() == ["saved 1", "killed before committing 2"]
    assert "2" not in os.listdir(ckpt_dir)
    assert _tmp_bytes(ckpt_dir, step=2) >= 16_000_000  # step 2's arrays were all written

    expected = train_state(1)
    # A reader sees step 1 only, and leaves the partial save alone.
    _assert_trees_equal(checkpoint.restore_params(ckpt_dir), jax.device_get(expected["params"]))
    assert _tmp_bytes(ckpt_dir, step=2) >= 16_000_000
    with Checkpointer(ckpt_dir, keep=1, save_every=1) as ckpt:
        assert sorted(os.listdir(ckpt_dir)) == ["1"]  # opening removed the partial save
        assert ckpt.all_steps() == [1]
        state, data_state = ckpt.restore(abstract_state=_abstract(expected))
        _assert_trees_equal(state, expected)
        assert data_state == {"epoch": 0, "position": 1}
        assert ckpt.save(2, train_state(2), {"epoch": 0, "position": 2})
        ckpt.wait()
        assert ckpt.all_steps() == [2]
    assert sorted(os.listdir(ckpt_dir)) == ["2"]
    _assert_trees_equal(checkpoint.restore_params(ckpt_dir), train_state(2)["params"])


def test_params_saved_on_8_device_mesh_restore_on_1_device(tmp_path):
    mesh = Mesh(np.array(jax.devices()), ("data",))
    assert mesh.size == 8
    state = train_state(4)
    sharded = jax.device_put(state, _mesh_shardings(state, mesh))
    assert not sharded["params"]["embed"].sharding.is_fully_replicated
    with Checkpointer(tmp_path / "ckpt", keep=1, save_every=1) as ckpt:
        ckpt.save(4, sharded, {})
    out = tmp_path / "restored.npz"
    _run_worker("restore-params", tmp_path / "ckpt", out, devices=1)
    loaded = np.load(out)
    assert int(loaded["__devices__"]) == 1
    assert list(loaded["__kinds__"]) == ["ndarray"]
    for name, value in flat_params(state["params"]).items():
        np.testing.assert_array_equal(loaded[name], value)


def test_checkpoint_saved_on_1_device_restores_on_8_device_mesh(tmp_path):
    _run_worker("save", tmp_path, 3, devices=1)
    expected = train_state(3)
    params = checkpoint.restore_params(tmp_path)
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(params))
    _assert_trees_equal(params, expected["params"])

    mesh = Mesh(np.array(jax.devices()), ("data",))
    shardings = _mesh_shardings(expected, mesh)
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                            expected, shardings)
    with Checkpointer(tmp_path, keep=3, save_every=1) as ckpt:
        state, data_state = ckpt.restore(abstract_state=abstract)
    _assert_trees_equal(state, expected)
    assert state["params"]["embed"].sharding == shardings["params"]["embed"]
    assert data_state == {"step": 3}


def test_average_checkpoints_is_the_mean_of_the_last_k(tmp_path):
    ckpt_dir, out_dir = tmp_path / "ckpt", tmp_path / "avg"
    with Checkpointer(ckpt_dir, keep=5, save_every=1) as ckpt:
        for step in range(1, 5):
            ckpt.save(step, train_state(step), {})
    assert averaging.average_checkpoints(ckpt_dir, 3, out_dir) == [2, 3, 4]
    averaged = checkpoint.restore_params(out_dir)
    for name, value in flat_params(averaged).items():
        want = np.mean([flat_params(train_state(s)["params"])[name] for s in (2, 3, 4)], axis=0)
        # bfloat16 leaves are averaged in float32 and rounded back once.
        rtol = 1e-2 if name == "dense/bias" else 1e-6
        np.testing.assert_allclose(value, want, rtol=rtol)
    assert averaged["dense"]["bias"].dtype == jnp.bfloat16
    with pytest.raises(ValueError, match=r"last 5 checkpoints .* holds 4: steps \[1, 2, 3, 4\]"):
        averaging.average_checkpoints(ckpt_dir, 5, tmp_path / "avg5")
    with pytest.raises(ValueError, match=r"avg is not empty \(holds 4\); pass a new or empty"):
        averaging.average_checkpoints(ckpt_dir, 2, out_dir)


def test_average_checkpoints_names_the_step_that_differs(tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    with Checkpointer(ckpt_dir, keep=5, save_every=1) as ckpt:
        ckpt.save(10, {"params": {"bias": np.zeros(128, np.float32)}}, {})
        ckpt.save(20, {"params": {"bias": np.zeros(64, np.float32),
                                  "extra": np.zeros(2, np.float32)}}, {})
    with pytest.raises(ValueError, match=r"ckpt: step 20 differs from step 10: bias: shape "
                                         r"\(64,\) vs \(128,\)"):
        averaging.average_checkpoints(ckpt_dir, 2, tmp_path / "avg")
    with pytest.raises(ValueError, match=r"\(128,\); extra: only in step 20$"):
        averaging.average_checkpoints(ckpt_dir, 2, tmp_path / "avg")


def test_average_checkpoints_checks_the_output_dir_before_reading(tmp_path, monkeypatch):
    ckpt_dir = tmp_path / "ckpt"
    with Checkpointer(ckpt_dir, keep=5, save_every=1) as ckpt:
        for step in (1, 2):
            ckpt.save(step, train_state(step), {})
    reads = []
    monkeypatch.setattr(checkpoint, "restore_params",
                        lambda *a, **k: reads.append(a) or pytest.fail("read before the check"))
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"used is not empty \(holds notes.txt\)"):
        averaging.average_checkpoints(ckpt_dir, 2, tmp_path / "used")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"file is a file; pass a new or empty directory"):
        averaging.average_checkpoints(ckpt_dir, 2, tmp_path / "file")
    assert reads == [] and (tmp_path / "used" / "notes.txt").read_text() == "mine"
    monkeypatch.undo()
    (tmp_path / "empty").mkdir()  # an empty directory (or none) is fine
    assert averaging.average_checkpoints(ckpt_dir, 2, tmp_path / "empty") == [1, 2]


def test_restore_into_incompatible_model_names_path_and_shapes(tmp_path):
    state = train_state(1)
    with Checkpointer(tmp_path, keep=1, save_every=1) as ckpt:
        ckpt.save(1, state, {})
        other = _abstract(state)
        other["params"]["dense"]["kernel"] = jax.ShapeDtypeStruct((5, 3), jnp.float32)
        pattern = (re.escape(str(tmp_path)) + r".*params/dense/kernel: checkpoint has shape "
                   r"\(4, 3\), target expects \(5, 3\)")
        with pytest.raises(ValueError, match=pattern):
            ckpt.restore(abstract_state=other)


def test_errors_without_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        checkpoint.restore_params(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        checkpoint.restore_params(tmp_path)
    with Checkpointer(tmp_path / "c", keep=1, save_every=1) as ckpt:
        assert ckpt.latest_step() is None and ckpt.all_steps() == []
        with pytest.raises(FileNotFoundError, match="no checkpoint in"):
            ckpt.restore(abstract_state={})
    with pytest.raises(ValueError, match="keep must be a positive int; got 0"):
        Checkpointer(tmp_path, keep=0, save_every=1)
    # A step folder made by hand (or by another tool): one line naming it.
    (tmp_path / "hand" / "7").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"hand/7 has no 'state' item \(an incomplete"):
        checkpoint.restore_params(tmp_path / "hand")


def _optimizer_state(tcfg, step):
    """A TrainState with make_optimizer(tcfg)'s opt_state after `step` updates."""
    tx, _ = make_optimizer(tcfg, 16)
    params = train_state(0)["params"]
    params = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
    opt_state = tx.init(params)
    for i in range(step):
        grads = jax.tree.map(lambda x: np.full_like(x, 0.5 + i), params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return TrainState(step=jnp.int32(step), params=params, opt_state=opt_state,
                      rng=jnp.zeros((2,), jnp.uint32))


@pytest.mark.parametrize("saved, resumed", [
    ({}, {"grad_clip_norm": 1.0}), ({}, {"weight_decay": 0.01}),
    ({"grad_clip_norm": 1.0, "weight_decay": 0.01}, {})])
def test_changing_clipping_or_decay_resumes_the_checkpoint(tmp_path, saved, resumed):
    state = _optimizer_state(TrainConfig(**saved), 3)
    with Checkpointer(tmp_path, keep=1, save_every=1) as ckpt:
        ckpt.save(20, state, {})
    target = _abstract(_optimizer_state(TrainConfig(**resumed), 0))
    with Checkpointer(tmp_path, keep=1, save_every=1) as ckpt:
        restored, _ = ckpt.restore(abstract_state=target)
    _assert_trees_equal(restored, state)


def test_optimizer_state_mismatch_blames_the_optimizer_not_the_model(tmp_path):
    state = _optimizer_state(TrainConfig(), 1)
    with Checkpointer(tmp_path, keep=1, save_every=1) as ckpt:
        ckpt.save(20, state, {})
        # the layout make_optimizer built for clipped runs before it stopped depending on it
        old = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
        target = _abstract(state.replace(opt_state=old.init(state.params)))
        with pytest.raises(ValueError, match=r"checkpoint .*/20 holds another optimizer state "
                                             r"than this run's optimizer \(were the optimizer "
                                             r"settings changed\?\); the parameters fit: "
                                             r"opt_state/1/0/count: missing from the checkpoint"):
            ckpt.restore(abstract_state=target)
        # a parameter mismatch as well: the model is to blame
        params = dict(target.params, embed=jax.ShapeDtypeStruct((9, 4), jnp.float32))
        with pytest.raises(ValueError, match="incompatible with the model"):
            ckpt.restore(abstract_state=target.replace(params=params))


def _two_steps(directory):
    with Checkpointer(directory, keep=5, save_every=1) as ckpt:
        for step in (10, 20):
            ckpt.save(step, train_state(step), {"step": step})
    return _abstract(train_state(0))


def test_empty_step_folder_is_a_one_line_error(tmp_path):
    abstract = _two_steps(tmp_path / "run")
    (tmp_path / "run" / "30").mkdir()  # made by hand: orbax lists it as the latest step
    pattern = r"run/30 has no 'state' item \(an incomplete or foreign folder\)"
    with Checkpointer(tmp_path / "run", keep=5, save_every=1) as ckpt:
        with pytest.raises(ValueError, match=pattern):
            ckpt.restore(abstract_state=abstract)
        ckpt.restore(20, abstract_state=abstract)  # the others still restore
    with pytest.raises(ValueError, match=pattern):
        averaging.average_checkpoints(tmp_path / "run", 2, tmp_path / "avg")


def test_deleted_array_files_are_a_one_line_error(tmp_path):
    abstract = _two_steps(tmp_path / "run")
    shutil.rmtree(tmp_path / "run" / "20" / "state" / "d")
    pattern = (r"checkpoint .*run/20 is damaged: cannot read array '[\w.]+' of its 'state' "
               r"item \(missing file .*run/20/state/d/\w+\); remove the step folder")
    with Checkpointer(tmp_path / "run", keep=5, save_every=1) as ckpt:
        with pytest.raises(ValueError, match=pattern) as info:
            ckpt.restore(abstract_state=abstract)
        assert "\n" not in str(info.value)
        _, data = ckpt.restore(10, abstract_state=abstract)
        assert data == {"step": 10}
    with pytest.raises(ValueError, match=pattern):
        checkpoint.restore_params(tmp_path / "run")
    with pytest.raises(ValueError, match=pattern):
        averaging.average_checkpoints(tmp_path / "run", 2, tmp_path / "avg")
    shutil.rmtree(tmp_path / "run" / "10" / "data")
    with Checkpointer(tmp_path / "run", keep=5, save_every=1) as ckpt:
        with pytest.raises(ValueError, match=r"run/10 is damaged: cannot read its 'data' item "
                                             r"\(no .*run/10/data folder\)"):
            ckpt.restore(10, abstract_state=abstract)


def test_save_rejects_bad_arguments(tmp_path):
    state = train_state(1)
    with Checkpointer(tmp_path, keep=1, save_every=1) as ckpt:
        with pytest.raises(ValueError, match="step must be a non-negative int; got -3"):
            ckpt.save(-3, state, {})
        with pytest.raises(ValueError, match="data_state must be a dict; got list"):
            ckpt.save(1, state, [1])
        with pytest.raises(ValueError, match="data_state must be JSON-serialisable"):
            ckpt.save(1, state, {"position": object()})
        assert ckpt.save(jnp.int32(2), state, {"position": 2})  # a jax scalar step works
        ckpt.wait()
        assert ckpt.all_steps() == [2]
