"""train.py's start-up (the huge-page malloc restart on Linux and its opt-outs) and its
one-line errors for bad input (all fail before any training step)."""
import dataclasses
import os
import subprocess
import sys

import pytest

from jformer.config import TrainConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = "import os, train; train.use_hugepage_malloc(); print(os.environ.get('GLIBC_TUNABLES'))"


def probe(**env_overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "JFORMER_MALLOC")}
    env.update(env_overrides)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunable")
def test_restarts_once_with_hugepage_malloc():
    assert probe() == "glibc.malloc.hugetlb=1"


def test_opt_outs_keep_the_environment():
    assert probe(JFORMER_MALLOC="default") == "None"
    assert probe(GLIBC_TUNABLES="glibc.malloc.arena_max=2") == "glibc.malloc.arena_max=2"


def run_train(*args, script=None):
    """Runs train.py (or `script`, Python code run as train.py) in a subprocess."""
    env = dict(os.environ, JFORMER_MALLOC="default")  # no restart: faster, same errors
    cmd = [sys.executable, "train.py", *args] if script is None else \
        [sys.executable, "-c", script, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def assert_one_line_error(out, message):
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    # jax may log its backend search (absl INFO) before the error: the error is the last line
    assert out.stderr.splitlines()[-1] == f"train.py: error: {message}", out.stderr


# every field of the train section: the shipped configs hold them all (tests/test_config.py)
TRAIN_FIELDS = ", ".join(sorted(f.name for f in dataclasses.fields(TrainConfig)))


@pytest.mark.parametrize("args, message", [
    (["--config.train.num_steps=0"],
     "config field 'train.num_steps': expected a positive int; got 0"),
    (["--config.train.adam_b1=1.5"],  # a training-only check, after the flags
     "config field 'train.adam_b1': expected a number in [0, 1); got 1.5"),
    (["--config.train.nm_steps=3"],
     "unknown config field train.nm_steps (did you mean train.num_steps?)"),
    (["--config.trian.num_steps=3"],
     "unknown config field trian.num_steps (did you mean train.num_steps?)"),
    (["--noconfig.train.async_checkpont"],
     "unknown config field train.async_checkpont (did you mean train.async_checkpoints?)"),
    (["--config.train.zzz=1"], f"unknown config field train.zzz: train has {TRAIN_FIELDS}"),
    (["--config.zz.num_steps=1"],
     "unknown config field zz.num_steps: the config has data, decode, model, train"),
    (["--config.train.num_steps.x=1"],
     "unknown config field train.num_steps.x: train.num_steps is a value, not a section"),
    (["--config.train.num_steps=abc"],
     "flag --config.train.num_steps=abc: invalid literal for int() with base 10: 'abc'"),
    (["extra"], "unexpected argument(s) 'extra'; every setting is a flag, e.g. "
     "--config.train.num_steps=500"),
])
def test_bad_config_overrides_are_one_line_errors(tmp_path, args, message):
    out = run_train("--config", "configs/demo.py", "--workdir", str(tmp_path / "run"), *args)
    assert_one_line_error(out, message)


def test_bad_paths_are_one_line_errors(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder\n")
    out = run_train("--config", "configs/demo.py", "--workdir", str(a_file))
    assert_one_line_error(out, f"--workdir {a_file}: expected a folder (new or existing); got "
                               f"an existing file")
    out = run_train("--config", str(tmp_path / "nosuch.py"), "--workdir", str(tmp_path / "r"),
                    "--config.train.num_steps=3")
    assert_one_line_error(out, f"--config {tmp_path / 'nosuch.py'}: no such file")
    out = run_train("--config=configs/demo.py", "--workdir", str(tmp_path / "r"),
                    "--config.data.source=text",
                    f"--config.data.text_pattern={tmp_path}/{{split}}.{{lang}}")
    assert_one_line_error(out, f"data file not found: {tmp_path}/train.en")


# train.py's main with train_and_evaluate replaced by one that raises `exc`: the errors
# a run meets after start-up (a diverging loss, a checkpoint or data position that does
# not fit the config, a vanished file) without training for them.
RAISING_MAIN = """
import sys, train
from jformer import train as train_lib
def train_and_evaluate(raw, workdir):
    raise {exc}
train_lib.train_and_evaluate = train_and_evaluate
sys.argv[0] = "train.py"
train.run()
"""


@pytest.mark.parametrize("exc, message", [
    ("train_lib.NonFiniteLossError('non-finite loss or gradient in 1 step(s) up to step 5')",
     "non-finite loss or gradient in 1 step(s) up to step 5"),
    ("ValueError('checkpoint /w/checkpoints/400 is incompatible with the model')",
     "checkpoint /w/checkpoints/400 is incompatible with the model"),
    ("PermissionError(13, 'Permission denied', '/w/metrics.jsonl')",
     "Permission denied: /w/metrics.jsonl"),
])
def test_errors_during_the_run_are_one_line_errors(tmp_path, exc, message):
    out = run_train("--config", "configs/demo.py", "--workdir", str(tmp_path),
                    script=RAISING_MAIN.format(exc=exc))
    assert_one_line_error(out, message)


def test_ctrl_c_after_its_checkpoint_is_one_line_and_status_130(tmp_path):
    exc = ("train_lib.TrainingInterrupted('interrupted at step 7, checkpoint saved; rerun the "
           "same command to resume')")
    out = run_train("--config", "configs/demo.py", "--workdir", str(tmp_path),
                    script=RAISING_MAIN.format(exc=exc))
    assert out.returncode == 130 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.splitlines()[-1] == ("train.py: interrupted at step 7, checkpoint "
                                           "saved; rerun the same command to resume")


def test_a_bug_keeps_its_traceback(tmp_path):
    out = run_train("--config", "configs/demo.py", "--workdir", str(tmp_path),
                    script=RAISING_MAIN.format(exc="RuntimeError('a bug')"))
    assert out.returncode == 1
    assert "Traceback" in out.stderr and out.stderr.splitlines()[-1] == "RuntimeError: a bug"
    assert "train.py: error" not in out.stderr
