"""Train a Transformer: ``python train.py --config configs/demo.py --workdir runs/demo``.

Any config field can be overridden: ``--config.train.num_steps=500``. Rerunning with
the same workdir resumes from its latest checkpoint.

Bad input (an invalid config value, a missing file, a checkpoint or data position
that does not fit the config, a diverging run) ends with one line,
``train.py: error: <what is wrong>``, and exit status 1; anything else is a bug and keeps
its traceback.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TFDS imports TensorFlow; keep it quiet

from absl import app, flags
from ml_collections import config_flags

from jformer.cpu_malloc import use_hugepage_malloc  # restarts once; see its docstring

PROG = "train.py"
FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/demo.py.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Run folder: vocabulary, checkpoints, TensorBoard.")
flags.mark_flags_as_required(["config", "workdir"])


def fail(message: str) -> NoReturn:
    """Ends the run with ``train.py: error: <message>`` on stderr and exit status 1."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(1)


def describe(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.strerror}: {e.filename}"
    return str(e)


def check_workdir(workdir: str) -> None:
    if not workdir:
        raise ValueError("--workdir: expected a folder path; got ''")
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError(f"--workdir {workdir}: expected a folder (new or existing); got an "
                         f"existing file")


def main(argv):
    del argv
    from jformer import train_lib  # after flag parsing: jax.distributed must come first

    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        check_workdir(FLAGS.workdir)
        train_lib.maybe_initialize_distributed(FLAGS.config.train)  # before any device use
        final = train_lib.train_and_evaluate(FLAGS.config, FLAGS.workdir)
    # Config, file and data problems (ConfigError is a ValueError; missing files are
    # OSErrors), checkpoints or data positions that do not fit, a diverging run.
    except (OSError, ValueError, train_lib.NonFiniteLossError) as e:
        fail(describe(e))
    train_lib.report(final)


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    use_hugepage_malloc()
    run()
