"""Train a Transformer: ``python train.py --config configs/demo.py --workdir runs/demo``.

Any config field can be overridden: ``--config.train.num_steps=500``. Rerunning with
the same workdir resumes from its latest checkpoint. Ctrl-C stops after the running step
with a checkpoint of it (exit status 130); a second Ctrl-C stops at once.

Bad input (an unknown or invalid config field, a missing file, a checkpoint or data
position that does not fit the config, a diverging run) ends with one line,
``train.py: error: <what is wrong>``, and exit status 1; anything else is a bug and keeps
its traceback.
"""
from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TFDS imports TensorFlow; keep it quiet

from absl import app

from jformer.cli.cpu_malloc import use_hugepage_malloc  # restarts once; see its docstring
from jformer.cli import describe_error
from jformer.cli.train_flags import FLAGS, check_workdir, fail, parse_flags


def main(argv):
    del argv  # parse_flags allows no positional arguments
    from jformer import train as training  # after flag parsing: jax.distributed must come first

    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        check_workdir(FLAGS.workdir)
        training.maybe_initialize_distributed(FLAGS.config.train)  # before any device use
        final = training.train_and_evaluate(FLAGS.config, FLAGS.workdir)
    # Config, file and data problems (ConfigError is a ValueError; missing files are
    # OSErrors), checkpoints or data positions that do not fit, a diverging run.
    except (OSError, ValueError, training.NonFiniteLossError) as e:
        fail(describe_error(e))
    except training.TrainingInterrupted as e:  # Ctrl-C, after a checkpoint
        print(f"train.py: {e}", file=sys.stderr)
        sys.exit(130)
    training.report(final)


def run() -> None:
    app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
    use_hugepage_malloc()
    run()
