"""train.py's command line: absl flags whose every mistake is a one-line error.

``FLAGS.config`` (an ml_collections config file, fields overridable as
``--config.train.num_steps=500``) and ``FLAGS.workdir``; :func:`parse_flags` is absl's
parser with the mistakes ml_collections would turn into tracebacks (an unknown field, a
missing config file) reworded as ``train.py: error: ...`` (:func:`fail`). Imports no jax:
train.py parses flags before jax.distributed may start.
"""
from __future__ import annotations

import difflib
import os
import re
import sys
from typing import Any, NoReturn, Sequence

from absl import flags
from ml_collections import config_flags

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
