"""Train a Transformer: ``python train.py --config configs/demo.py --workdir runs/demo``.

Any config field can be overridden: ``--config.train.num_steps=500``. Rerunning with
the same workdir resumes from its latest checkpoint.
"""
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TFDS imports TensorFlow; keep it quiet

from absl import app, flags
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/demo.py.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Run folder: vocabulary, checkpoints, TensorBoard.")
flags.mark_flags_as_required(["config", "workdir"])


HUGEPAGE_MALLOC = "glibc.malloc.hugetlb=1"


def use_hugepage_malloc() -> None:
    """Restarts this process once with glibc malloc on transparent huge pages (Linux).

    XLA:CPU maps each step's scratch memory fresh and pays a 4 KiB page fault for every
    page of it; with huge pages a small-config CPU step runs ~15% faster (see
    bench/bench_train.py). glibc reads the setting only at start-up, hence the re-exec.
    It changes nothing on accelerators. Skipped when GLIBC_TUNABLES is already set or
    JFORMER_MALLOC=default.
    """
    if (sys.platform.startswith("linux") and "GLIBC_TUNABLES" not in os.environ
            and os.environ.get("JFORMER_MALLOC", "") != "default"):
        env = dict(os.environ, GLIBC_TUNABLES=HUGEPAGE_MALLOC)
        os.execve(sys.executable, sys.orig_argv, env)  # interpreter flags kept


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
