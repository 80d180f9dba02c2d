"""Early stopping's decision (jformer/train/run_control.py): how many validations since
the best, and when train.early_stop_evals stops the run, on fabricated sequences."""
import pytest

from jformer.config import ConfigError, TrainConfig
from jformer.train.run_control import EarlyStop, evals_since_best


def steps(values, every=500):
    return [(every * (i + 1), v) for i, v in enumerate(values)]


def test_evals_since_best_by_the_metric_s_direction():
    assert evals_since_best([], "bleu") == 0
    assert evals_since_best(steps([30, 32, 31, 31.5]), "bleu") == 2
    assert evals_since_best(steps([30, 32, 31, 32]), "bleu") == 0  # equal: the later is best
    assert evals_since_best(steps([2.0, 1.5, 1.7, 1.6, 1.9]), "loss") == 3
    assert evals_since_best(steps([2.0, 1.5, 1.7, 1.4]), "loss") == 0


def test_early_stop_triggers_after_n_validations_without_a_new_best():
    # Validation BLEU of the fast machine: the peak at step 4,500.
    bleu = [30.1, 35.2, 37.0, 38.4, 39.3, 39.9, 40.2, 40.4, 40.8, 40.5, 40.6, 40.3]
    stop = EarlyStop(3, "bleu")
    said = [(step, stop.update(step, value)) for step, value in steps(bleu)]
    stopped = [(step, message) for step, message in said if message]
    assert stopped[0] == (6000, "early stop at step 6000: validation BLEU has not improved "
                                "for 3 evaluations (train.early_stop_evals=3): best 40.8 at "
                                "step 4500, since then 40.5, 40.6, 40.3")
    assert all(message is None for step, message in said if step < 6000)
    never = EarlyStop(0, "bleu")
    assert all(never.update(step, v) is None for step, v in steps(bleu))
    loss = EarlyStop(2, "loss")
    assert [loss.update(s, v) is not None for s, v in steps([2.0, 1.6, 1.7, 1.6, 1.65, 1.7])] \
        == [False, False, False, False, False, True]  # 1.6 again at 2,000 resets the count


def test_a_resumed_run_counts_its_earlier_validations():
    stop = EarlyStop(2, "bleu", history=steps([30.0, 32.0, 31.0]))
    assert stop.check() is None
    assert stop.update(2000, 31.5) == ("early stop at step 2000: validation BLEU has not "
                                       "improved for 2 evaluations (train.early_stop_evals=2): "
                                       "best 32 at step 1000, since then 31, 31.5")
    assert EarlyStop(2, "bleu", history=steps([32.0, 31.0, 30.0])).check() is not None


@pytest.mark.parametrize("field, value, message", [
    ("keep_best", -1, "'train.keep_best': expected an int >= 0; got -1"),
    ("early_stop_evals", 1.5, "'train.early_stop_evals': expected an int >= 0; got 1.5"),
    ("best_metric", "chrf", "'train.best_metric': expected one of ('bleu', 'loss'); got 'chrf'"),
])
def test_selection_fields_are_checked(field, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(**{field: value})
