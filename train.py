"""Train a Transformer: ``python train.py --config configs/demo.py --workdir runs/demo``.

Any config field can be overridden: ``--config.train.num_steps=500``. Rerunning with
the same workdir resumes from its latest checkpoint.

Bad input (an unknown or invalid config field, a missing file, a checkpoint or data
position that does not fit the config, a diverging run) ends with one line,
``train.py: error: <what is wrong>``, and exit status 1; anything else is a bug and keeps
its traceback.
"""
from __future__ import annotations

import difflib
import logging
import os
import re
import sys
from typing import Any, NoReturn, Sequence

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

_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]*)")  # ml_collections' override syntax


def fail(message: str) -> NoReturn:
    """Ends the run with ``train.py: error: <message>`` on stderr and exit status 1."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(1)


def describe(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.strerror}: {e.filename}"
    return str(e)


def parse_flags(argv: Sequence[str]) -> list[str]:
    """absl's flag parsing, with every command-line mistake a one-line :func:`fail`.

    ml_collections raises a bare AttributeError/KeyError (a traceback) for an unknown
    ``--config.*`` field and defers a missing config file to a multi-line OSError at
    first use; both are reworded here, the unknown field with a did-you-mean.
    """
    argv = list(argv)
    config_path = _config_path(argv)
    if config_path is not None:
        path = config_path.split(":", 1)[0]  # config.py:arg passes arg to get_config
        if not os.path.exists(path):
            fail(f"--config {path}: no such file")
        if not os.path.isfile(path):
            fail(f"--config {path}: expected a config file (.py); got a folder or special "
                 f"file")
    try:
        rest = FLAGS(argv)
    except flags.Error as e:
        fail(str(e))
    except (AttributeError, KeyError):
        problem = _override_problem(argv, config_path)
        if problem is None:
            raise  # not an override we can explain: keep the traceback
        fail(problem)
    if len(rest) > 1:
        fail(f"unexpected argument(s) {' '.join(rest[1:])!r}; every setting is a flag, e.g. "
             f"--config.train.num_steps=500")
    return rest


def _expanded(argv: Sequence[str]) -> list[str]:
    try:
        return FLAGS.read_flags_from_files(list(argv[1:]), force_gnu=False)
    except flags.Error:
        return list(argv[1:])  # FLAGS(argv) reports the flagfile problem


def _config_path(argv: Sequence[str]) -> str | None:
    """The value of --config (last one wins, as in absl), or None if absent."""
    args, path = _expanded(argv), None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        m = re.match(r"^--?config(=(.*))?$", arg)
        if m:
            path = m.group(2) if m.group(1) else (args[i + 1] if i + 1 < len(args) else None)
    return path


def _override_problem(argv: Sequence[str], config_path: str | None) -> str | None:
    """A one-line description of the first ``--config.<path>`` that names no field."""
    if config_path is None:
        return None
    try:
        config = FLAGS["config"].parser.parse(config_path)  # the file loaded fine just now
    except Exception:  # noqa: BLE001 - only an explanation is at stake; keep the original
        return None
    for arg in _expanded(argv):
        m = _OVERRIDE.match(arg)
        if m:
            problem = unknown_field(config, m.group(1))
            if problem:
                return problem
    return None


def unknown_field(config: Any, path: str) -> str | None:
    """Why ``path`` (e.g. ``train.nm_steps``) names no field of ``config``, or None."""
    done: list[str] = []
    node = config
    parts = path.split(".")
    for i, part in enumerate(parts):
        key = part.split("[", 1)[0]  # field[0] indexes a tuple field
        if not hasattr(node, "keys"):
            return (f"unknown config field {path}: {'.'.join(done)} is a value, not a "
                    f"section")
        known = sorted(node.keys())
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            if close:
                guess = ".".join(done + close + parts[i + 1:])
                return f"unknown config field {path} (did you mean {guess}?)"
            return (f"unknown config field {path}: {'.'.join(done) or 'the config'} has "
                    f"{', '.join(known)}")
        node = node[key]
        done.append(key)
    return None


def check_workdir(workdir: str) -> None:
    if not workdir:
        raise ValueError("--workdir: expected a folder path; got ''")
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError(f"--workdir {workdir}: expected a folder (new or existing); got an "
                         f"existing file")


def main(argv):
    del argv  # parse_flags allows no positional arguments
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
    app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
    use_hugepage_malloc()
    run()
