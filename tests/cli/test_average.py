"""``jformer average-checkpoints --best K``: which steps it took, printed; the options'
mistakes as one-line errors (jformer/cli/average.py)."""
import os

import pytest

from jformer.cli import main

from tests.workdir.test_best_checkpoints import assert_mean_of, fabricated_workdir


def run_cli(argv, capsys):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_best_prints_the_steps_and_figures_it_averaged(tmp_path, capsys):
    workdir = fabricated_workdir(tmp_path / "run")
    status, out, err = run_cli(["average-checkpoints", "--workdir", workdir, "--best", 3,
                                "--out", tmp_path / "best3"], capsys)
    assert status == 0, err
    assert out == (f"averaged steps [3, 4, 5], the best 3 by validation BLEU (3: 31, 4: 30, "
                   f"5: 31), into {tmp_path / 'best3'}\n")
    assert err == "skipped validated steps whose checkpoint is gone: [7]\n"
    assert_mean_of(tmp_path / "best3", [3, 4, 5])
    status, out, err = run_cli(["average-checkpoints", "--workdir", workdir, "--best", 2,
                                "--metric", "loss", "--out", tmp_path / "loss2"], capsys)
    assert status == 0 and "averaged steps [3, 5], the best 2 by validation loss" in out, err
    status, out, err = run_cli(["average-checkpoints", "--workdir", workdir,  # --last 5
                                "--out", tmp_path / "last5"], capsys)
    assert status == 0 and out == f"averaged steps [2, 3, 4, 5, 6] into {tmp_path / 'last5'}\n"
    assert_mean_of(tmp_path / "last5", [2, 3, 4, 5, 6])


def test_best_option_mistakes_are_one_line_errors(tmp_path, capsys):
    workdir = fabricated_workdir(tmp_path / "run")
    status, _, err = run_cli(["average-checkpoints", "--workdir", workdir, "--best", 6,
                              "--out", tmp_path / "avg"], capsys)
    assert status == 1 and err.count("\n") == 1
    assert err.startswith("jformer average-checkpoints: error: asked for the best 6 "
                          "checkpoints by validation BLEU but ")
    assert "has 5 checkpoints with a validation record: steps [1, 3, 4, 5, 6]" in err
    status, _, err = run_cli(["average-checkpoints", "--workdir", workdir, "--last", 2,
                              "--metric", "loss", "--out", tmp_path / "avg"], capsys)
    assert status == 1 and "--metric chooses what --best ranks by; give --best K" in err
    with pytest.raises(SystemExit):  # argparse: not allowed with argument --last
        main(["average-checkpoints", "--workdir", workdir, "--last", "2", "--best", "2",
              "--out", str(tmp_path / "avg")])
    assert "argument --best: not allowed with argument --last" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "avg")


def test_a_run_with_a_moving_average_averages_it_and_its_params_on_request(tmp_path, capsys):
    """train.ema_decay runs save "ema" beside "params": averaging takes the averages (the
    weights the run validated), --params the parameters."""
    import numpy as np

    from jformer.workdir import files
    from jformer.workdir.checkpoint import Checkpointer, restore_params

    workdir = str(tmp_path / "run")
    state = lambda s: {"params": {"w": np.full(3, s, np.float32)},  # noqa: E731
                       "ema": {"w": np.full(3, 10.0 * s, np.float32)}}
    with Checkpointer(files.checkpoint_dir(workdir), keep=5, save_every=1,
                      async_save=False) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(step, state(step), {})
    for flags, want in (([], 25.0), (["--params"], 2.5)):  # steps 2 and 3
        out = tmp_path / f"avg{len(flags)}"
        status, printed, err = run_cli(["average-checkpoints", "--workdir", workdir, "--last",
                                        2, *flags, "--out", out], capsys)
        assert status == 0, err
        assert "averaged steps [2, 3]" in printed
        np.testing.assert_array_equal(restore_params(out)["w"], np.full(3, want, np.float32))
