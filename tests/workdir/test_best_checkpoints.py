"""Checkpoints chosen by validation: the Checkpointer keeps the best K (train.keep_best) as
well as the newest, and average_best_checkpoints averages the best K that metrics.jsonl
records (jformer/workdir/checkpoint.py, averaging.py)."""
import contextlib
import json
import os

import numpy as np
import orbax.checkpoint as ocp
import pytest

from jformer.workdir import averaging, checkpoint, files
from jformer.workdir.checkpoint import Checkpointer

from tests.workdir._checkpoint_worker import flat_params, train_state

# Validation figures of a fabricated run: step -> (BLEU, loss). Step 7's record has no
# checkpoint (gone), step 2's checkpoint no record (saved between evaluations).
FIGURES = {1: (20.0, 3.0), 3: (31.0, 1.5), 4: (30.0, 1.6), 5: (31.0, 1.5), 6: (28.0, 1.7),
           7: (99.0, 0.1)}
SAVED = (1, 2, 3, 4, 5, 6)


def fabricated_workdir(root) -> str:
    """A workdir with tiny checkpoints at SAVED and metrics.jsonl rows for FIGURES (step 6's
    as a "final" row, after an "eval" row of the same step with other figures)."""
    workdir = str(root)
    with Checkpointer(files.checkpoint_dir(workdir), keep=10, save_every=1,
                      async_save=False) as ckpt:
        for step in SAVED:
            ckpt.save(step, train_state(step), {})
    rows = [{"kind": "train", "step": s, "time_s": s, "loss": 5.0} for s in range(1, 8)]
    rows += [{"kind": "eval", "step": 6, "time_s": 6.5, "loss": 9.0, "bleu": 1.0}]
    rows += [{"kind": "eval" if s != 6 else "final", "step": s, "time_s": s + 0.5,
              "bleu": bleu, "loss": loss} for s, (bleu, loss) in FIGURES.items()]
    rows.sort(key=lambda r: r["time_s"])
    with open(os.path.join(workdir, files.METRICS_FILENAME), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return workdir


def averaged_item(directory) -> dict:
    with contextlib.closing(checkpoint.read_only_manager(str(directory))) as manager:
        step = manager.latest_step()
        item = manager.restore(step, args=ocp.args.Composite(**{
            checkpoint.AVERAGED_ITEM: ocp.args.JsonRestore()}))
    return dict(item[checkpoint.AVERAGED_ITEM])


def assert_mean_of(directory, steps):
    averaged = flat_params(checkpoint.restore_params(directory))
    for name, value in averaged.items():
        want = np.mean([flat_params(train_state(s)["params"])[name] for s in steps], axis=0)
        np.testing.assert_allclose(value, want, rtol=1e-2 if name == "dense/bias" else 1e-6)


def test_best_k_by_bleu_and_by_loss_are_exactly_the_known_steps(tmp_path):
    workdir = fabricated_workdir(tmp_path / "run")
    # BLEU 31 at 3 and 5 (a tie), then 30 at 4; step 7 (99) has no checkpoint.
    chosen = averaging.average_best_checkpoints(workdir, 3, tmp_path / "bleu3")
    assert (chosen.steps, chosen.values, chosen.skipped) == ([3, 4, 5], [31.0, 30.0, 31.0], [7])
    assert_mean_of(tmp_path / "bleu3", [3, 4, 5])
    assert averaged_item(tmp_path / "bleu3") == {
        "steps": [3, 4, 5], "source": os.path.abspath(files.checkpoint_dir(workdir)),
        "selection": {"metric": "bleu", "values": [31.0, 30.0, 31.0]}}
    # Of the tie, the later step ranks first: the best 1 is step 5, not 3.
    assert averaging.average_best_checkpoints(workdir, 1, tmp_path / "bleu1").steps == [5]
    # Loss: lowest first; 1.5 at 3 and 5, then 1.6 at 4, 1.7 at 6 (the final row's).
    chosen = averaging.average_best_checkpoints(workdir, 4, tmp_path / "loss4", "loss")
    assert (chosen.steps, chosen.values) == ([3, 4, 5, 6], [1.5, 1.6, 1.5, 1.7])
    assert_mean_of(tmp_path / "loss4", [3, 4, 5, 6])
    assert averaged_item(tmp_path / "loss4")["selection"] == {
        "metric": "loss", "values": [1.5, 1.6, 1.5, 1.7]}


def test_fewer_evaluated_checkpoints_than_k_is_an_error_naming_the_steps(tmp_path):
    workdir = fabricated_workdir(tmp_path / "run")
    with pytest.raises(ValueError, match=(
            r"^asked for the best 6 checkpoints by validation BLEU but .*run has 5 "
            r"checkpoints with a validation record: steps \[1, 3, 4, 5, 6\] \(validation "
            r"records without a checkpoint: steps \[7\]; checkpoints without a validation "
            r"record: steps \[2\]\); train with train.keep_best=6 to keep them, or average "
            r"the newest with --last$")):
        averaging.average_best_checkpoints(workdir, 6, tmp_path / "avg")
    assert not os.path.exists(tmp_path / "avg")
    with pytest.raises(ValueError, match=r"metric must be one of \('bleu', 'loss'\); got 'chrf'"):
        averaging.average_best_checkpoints(workdir, 2, tmp_path / "avg", "chrf")


def test_a_record_without_the_metric_or_no_metrics_file_is_an_error(tmp_path):
    workdir = fabricated_workdir(tmp_path / "run")
    with open(os.path.join(workdir, files.METRICS_FILENAME), "a") as f:
        f.write(json.dumps({"kind": "eval", "step": 8, "time_s": 9.0, "loss": 1.0}) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl: the validation record of step 8 has "
                                         r"no 'bleu' figure; it has loss$"):
        averaging.average_best_checkpoints(workdir, 2, tmp_path / "avg")
    os.remove(os.path.join(workdir, files.METRICS_FILENAME))
    with pytest.raises(FileNotFoundError, match=r"no metrics.jsonl in .*run"):
        averaging.average_best_checkpoints(workdir, 2, tmp_path / "avg")


def test_keep_best_keeps_the_newest_and_the_best_scored_across_a_resume(tmp_path):
    state = train_state(1)
    bleu = {2: 30.0, 4: 35.0, 6: 33.0, 8: 35.0, 10: 31.0}
    with Checkpointer(tmp_path, keep=2, save_every=2, keep_best=2) as ckpt:
        for step in range(2, 16, 2):  # 12 and 14: saved between evaluations, no score
            ckpt.save(step, state, {}, score=bleu.get(step))
        ckpt.wait()
        assert ckpt.all_steps() == [4, 8, 12, 14]  # best 35 (a tie) at 4 and 8; newest 2
    # Resumed: the earlier scores come from metrics.jsonl; a better step 16 drops step 4.
    with Checkpointer(tmp_path, keep=2, save_every=2, keep_best=2, scores=bleu) as ckpt:
        ckpt.save(16, state, {}, score=40.0)
        ckpt.wait()
        assert ckpt.all_steps() == [8, 14, 16]
    # By loss, lower is better; ties again go to the later step.
    with Checkpointer(tmp_path / "loss", keep=1, save_every=1, keep_best=2,
                      best_metric="loss") as ckpt:
        for step, loss in ((1, 2.0), (2, 1.5), (3, 1.8), (4, 1.5), (5, 1.9)):
            ckpt.save(step, state, {}, score=loss)
        ckpt.wait()
        assert ckpt.all_steps() == [2, 4, 5]
    assert sorted(os.listdir(tmp_path / "loss")) == ["2", "4", "5"]
    with pytest.raises(ValueError, match=r"keep_best must be an int >= 0; got -1"):
        Checkpointer(tmp_path / "x", keep=1, save_every=1, keep_best=-1)
