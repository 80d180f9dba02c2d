"""Training with train.keep_best and train.early_stop_evals (jformer/train/loop.py): which
checkpoints stay, where the run stops, what metrics.jsonl records, and that `jformer
average-checkpoints --best` then takes exactly the best steps."""
import json
import os

import pytest

from jformer import train as train_lib
from jformer.config import ConfigError
from jformer.train.tasks import TranslationTask
from jformer.workdir import averaging
from jformer.workdir.checkpoint import Checkpointer
from jformer.workdir.files import checkpoint_dir
from tests.train_helpers import tiny_bert_config, tiny_config, workdir_with_vocab

# Fabricated validation losses at steps 2, 4, 6, 8: best at 4; 6 and 8 miss it.
LOSSES = [3.0, 2.0, 2.2, 2.1]


def selecting_config(**overrides):
    return tiny_config(num_steps=40, eval_every=2, checkpoint_every=4, keep_checkpoints=1,
                       keep_best=2, best_metric="loss", early_stop_evals=2, **overrides)


@pytest.mark.slow
def test_early_stop_keeps_the_best_checkpoints_and_best_averages_them(
        tmp_path, shared_vocab, monkeypatch, capsys):
    figures = iter(LOSSES + [9.0])  # the rerun's final evaluation: 9.0
    calls = []

    def evaluate(self, job, params, num_samples=0):
        calls.append(num_samples)
        loss = next(figures)
        return {"loss": loss, "nll": loss, "perplexity": 1.0, "bleu": 10.0 / loss}

    monkeypatch.setattr(TranslationTask, "evaluate", evaluate)
    w = workdir_with_vocab(tmp_path, "run", shared_vocab)
    final = train_lib.train_and_evaluate(selecting_config(), w)
    # Stopped at step 8 (2 validations since the best at 4); that evaluation is the final one.
    assert final["step"] == 8 and final["loss"] == 2.1 and calls == [0, 0, 0, 0]
    assert ("early stop at step 8: validation loss has not improved for 2 evaluations "
            "(train.early_stop_evals=2): best 2 at step 4, since then 2.2, 2.1\n") in \
        capsys.readouterr().out  # the log lines above the progress bar, as "[eval @ ...]"
    rows = [json.loads(line) for line in open(os.path.join(w, "metrics.jsonl"))]
    assert [(r["kind"], r["step"], r["loss"]) for r in rows if r["kind"] != "train"] == [
        ("eval", 2, 3.0), ("eval", 4, 2.0), ("eval", 6, 2.2), ("eval", 8, 2.1),
        ("final", 8, 2.1)]
    # Every evaluated step was checkpointed (2 and 6 are not multiples of 4); kept: the
    # newest (8) and the best 2 by loss (4 and 8).
    with Checkpointer(checkpoint_dir(w), keep=1, save_every=4) as ckpt:
        assert ckpt.all_steps() == [4, 8]
    chosen = averaging.average_best_checkpoints(w, 2, tmp_path / "best2", "loss")
    assert (chosen.steps, chosen.values, chosen.skipped) == ([4, 8], [2.0, 2.1], [2, 6])
    # The same command again: the earlier validations already stopped it; no step runs.
    final = train_lib.train_and_evaluate(selecting_config(), w)
    assert final["step"] == 8 and final["loss"] == 9.0 and calls == [0, 0, 0, 0, 5]
    assert "train.early_stop_evals ended this run before" in capsys.readouterr().out


def test_best_metric_must_be_a_figure_of_the_task(tmp_path):
    with pytest.raises(ConfigError, match=r"'train.best_metric': expected one of \('loss',\) "
                                          r"\(the validation figures of task.kind='classify'\)"):
        train_lib.train(tiny_bert_config("classify", keep_best=2), str(tmp_path / "w"))
    assert not os.path.exists(tmp_path / "w")  # refused before any work
