import numpy as np
import pytest

from jformer.config import TrainConfig
from jformer.schedules import make_optimizer, rsqrt_schedule


@pytest.mark.parametrize("d_model, warmup, scale", [(512, 4000, 1.0), (256, 100, 2.0)])
def test_schedule_is_paper_equation_3(d_model, warmup, scale):
    sched = rsqrt_schedule(d_model, warmup, scale)
    for count in [0, 1, 10, warmup - 2, warmup - 1, warmup, 3 * warmup, 50 * warmup]:
        step = count + 1
        expected = scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert float(sched(count)) == pytest.approx(expected, rel=1e-5)


def test_peak_is_at_warmup():
    sched = rsqrt_schedule(512, 40, 1.0)
    values = np.array([float(sched(c)) for c in range(200)])
    assert values.argmax() == 39  # count 39 is step 40 = warmup


def test_optimizer_uses_paper_adam_settings():
    cfg = TrainConfig()
    assert (cfg.adam_b1, cfg.adam_b2, cfg.adam_eps) == (0.9, 0.98, 1e-9)
    tx, sched = make_optimizer(TrainConfig(grad_clip_norm=1.0), 512)
    assert sched is not None and tx is not None
