"""Train a Transformer: ``python train.py --config configs/demo.py --workdir runs/demo``.

Any config field can be overridden: ``--config.train.num_steps=500``. Rerunning with
the same workdir resumes from its latest checkpoint.
"""
import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TFDS imports TensorFlow; keep it quiet

from absl import app, flags
from ml_collections import config_flags

from jformer.cpu_malloc import use_hugepage_malloc  # restarts once; see its docstring

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/demo.py.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Run folder: vocabulary, checkpoints, TensorBoard.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    from jformer import train_lib  # after flag parsing: jax.distributed must come first

    logging.getLogger("absl").setLevel(logging.WARNING)
    train_lib.maybe_initialize_distributed(FLAGS.config.train)  # before any device use
    final = train_lib.train_and_evaluate(FLAGS.config, FLAGS.workdir)
    train_lib.report(final)


if __name__ == "__main__":
    use_hugepage_malloc()
    app.run(main)
