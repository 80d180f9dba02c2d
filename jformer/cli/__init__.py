"""The ``jformer`` command line (also ``python -m jformer``).

    jformer translate --workdir runs/demo [--checkpoint DIR] [--beam 4] [--devices N]
        [--dtype int8] [--shortlist FILE] < in > out
    jformer evaluate --workdir runs/demo --src test.en --ref test.de [--hyp-out FILE]
    jformer score --workdir runs/demo --src test.en --tgt test.de [--jsonl]   (forced decoding)
    jformer attention --workdir runs/demo "A sentence." [--out DIR]
    jformer average-checkpoints --workdir runs/demo --last 5 | --best 5 [--metric loss] --out DIR
    jformer curves runs/a [label=runs/b ...] --out curves.png
    jformer serve --workdir runs/demo [--host 127.0.0.1] [--port 8000]   (HTTP API, page)
    jformer memory --workdir runs/demo | --config configs/base.py [--batch --beam ...]
    jformer figures --out docs/figures [--workdir runs/demo]
    jformer export ctranslate2 --workdir runs/demo --out DIR [--quantization int8]
    jformer export jax --workdir runs/demo --out DIR [--buckets 16,32] [--platforms cpu,cuda]
        [--dtype int8]
    jformer shortlist --workdir runs/demo [--top 20] [--frequent 100] [--out FILE]
    jformer distill --workdir runs/teacher --out DIR [--n-best N | --method sample --samples K]
    jformer import marian opus-mt-en-de --workdir runs/en-de   (Hugging Face Marian, OPUS-MT)
    jformer predict --workdir runs/bert_demo_tag [--scores] < in > out   (a fine-tuned encoder)

Each subcommand is a module of this package with ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args)``; :data:`SUBCOMMANDS` lists them. Modules
import jax and the model only inside ``run``, so ``--help`` is fast.

Expected problems (a missing workdir, checkpoint, tokenizer or input file, a bad
config) print one line naming the path and exit with status 1; stdout carries nothing
but results.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

EXIT_ERROR = 1
SUBCOMMANDS = ("translate", "evaluate", "score", "attention", "figures", "average", "curves",
               "memory", "serve", "export", "import_marian", "predict", "shortlist", "distill")


def _modules():
    return [importlib.import_module(f"jformer.cli.{name}") for name in SUBCOMMANDS]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jformer", description="Transformer translation "
                                     "in JAX: translate, evaluate, inspect, average, "
                                     "size up memory, serve, export, import; run a "
                                     "fine-tuned encoder (predict).")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _modules():
        p = sub.add_parser(module.NAME, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 on success)."""
    args = build_parser().parse_args(argv)
    # orbax logs (through absl) a warning for every read-only checkpoint open; stderr
    # is for progress and errors here.
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        args.run(args)
    except BrokenPipeError:  # e.g. `jformer translate ... | head`
        sys.stderr.close()
        return EXIT_ERROR
    except (OSError, ValueError) as e:  # files, folders, configs, arguments, input text
        print(f"jformer {args.command}: error: {describe_error(e)}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def entry() -> None:
    """The ``jformer`` script and ``python -m jformer``: :func:`main`, then a quick exit.

    Everything the command opened is closed by then; stdout and stderr are flushed,
    logging shut down and the ``atexit`` handlers run, as at a normal exit, and then the
    process ends without tearing down what is left in memory (``os._exit``): freeing
    XLA's loaded programs and backend took about 0.3 s of a 5 s ``jformer translate``
    on the 2-core Zen 4 (bench/README.md). In-process callers (tests, notebooks) call
    :func:`main`, which returns."""
    import atexit
    import os

    status = main()
    try:
        for stream in (sys.stdout, sys.stderr):
            if not stream.closed:
                stream.flush()
        logging.shutdown()
        atexit._run_exitfuncs()  # noqa: SLF001 - the handlers a normal exit runs
    except Exception:  # noqa: BLE001 - anything amiss: leave it to a normal exit
        sys.exit(status)
    os._exit(status)


def describe_error(e: BaseException) -> str:
    """The one-line text of an expected error: "<reason>: <path>" for a file error."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.strerror}: {e.filename}"
    return str(e)
