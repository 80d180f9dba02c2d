"""The ``jformer`` command line (also ``python -m jformer``).

    jformer translate --workdir runs/demo [--checkpoint DIR] [--beam 4] [--devices N] < in > out
    jformer evaluate --workdir runs/demo --src test.en --ref test.de [--hyp-out FILE]
    jformer attention --workdir runs/demo "A sentence." [--out DIR]
    jformer average-checkpoints --workdir runs/demo --last 5 --out DIR
    jformer curves runs/a [label=runs/b ...] --out curves.png

Expected problems (a missing workdir, checkpoint, tokenizer or input file, a bad
config) print one line naming the path and exit with status 1; stdout carries nothing
but results.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import warnings
from typing import Iterable, Sequence, TextIO

EXIT_ERROR = 1
DEFAULT_CHUNK_LINES = 1000


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True,
                   help="training run folder (config.json, spm.model, checkpoints/)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="checkpoint directory to use instead of <workdir>/checkpoints "
                        "(e.g. an averaged checkpoint)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")


def _add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=int, default=None, help="beam size (1: greedy); "
                   "default: the run's decode.beam_size")
    p.add_argument("--alpha", type=float, default=None, help="length penalty exponent")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per decode batch")
    p.add_argument("--max-len", type=int, default=None,
                   help="max output tokens (default: decode.max_len_a * len + max_len_b)")
    p.add_argument("--method", choices=("beam", "greedy", "sample"), default="beam")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k best")
    p.add_argument("--seed", type=int, default=0,
                   help="sampling seed; a line's sample depends only on it and the line's "
                        "number (not on --devices or batching)")
    p.add_argument("--devices", type=int, default=1,
                   help="decode each batch data-parallel over this many local devices; "
                        "the batch size must be a multiple (on a CPU: its cores split "
                        "into that many devices; helps large batches, not batch 1)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jformer", description="Transformer translation "
                                     "in JAX: translate, evaluate, inspect, average.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("translate", help="translate stdin (one sentence per line) to stdout")
    _add_model_args(p)
    _add_search_args(p)
    p.add_argument("--input", default="-", help="input file (default: stdin)")
    p.add_argument("--output", default="-", help="output file (default: stdout)")
    p.add_argument("--chunk-lines", type=int, default=DEFAULT_CHUNK_LINES,
                   help="lines read, translated and written at a time")
    p.add_argument("--n-best", type=int, default=1, metavar="N",
                   help="write the N best beam hypotheses per line, best first, in Moses "
                        "n-best format: 'ID ||| translation ||| score' (ID: 0-based input "
                        "line; score: log-prob / length penalty)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")

    p = sub.add_parser("evaluate", help="translate a test set and print BLEU and chrF")
    _add_model_args(p)
    _add_search_args(p)
    p.add_argument("--src", required=True, help="source sentences, one per line")
    p.add_argument("--ref", required=True, help="reference translations, one per line")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive scores")
    p.add_argument("--hyp-out", default=None, help="also write the hypotheses here")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")

    p = sub.add_parser("attention", help="PNG heatmaps of every attention layer and head")
    _add_model_args(p)
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("--out", default="attention", help="output folder for the PNG files")

    p = sub.add_parser("average-checkpoints",
                       help="average the parameters of the last K checkpoints (paper 6.1)")
    p.add_argument("--workdir", required=True, help="training run folder")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints (K)")
    p.add_argument("--out", required=True, help="new, empty output directory")

    p = sub.add_parser("curves", help="PNG of training loss, validation loss and BLEU "
                       "against steps and time (from <workdir>/metrics.jsonl)")
    p.add_argument("runs", nargs="+", help="training run folders, or label=folder")
    p.add_argument("--out", required=True, help="output PNG path")
    p.add_argument("--title", default="", help="figure title")
    return parser


# ------------------------------------------------------------------ subcommands


def _translator(args: argparse.Namespace):
    import jax  # deferred: fast --help

    from jformer.inference.translator import Translator

    devices = getattr(args, "devices", 1)
    # Process-wide, and only before jax starts its CPU backend (accelerators are
    # unaffected); it then overrides an XLA_FLAGS device count.
    if devices > 1:
        try:
            jax.config.update("jax_num_cpu_devices", devices)
        except RuntimeError:  # jax already running (in-process use): keep its devices
            pass
    return Translator.from_checkpoint(args.workdir, checkpoint_dir=args.checkpoint,
                                      step=args.step, devices=devices)


def _search_kwargs(args: argparse.Namespace) -> dict:
    import jax

    if not 0 <= args.seed < 2 ** 63:
        raise ValueError(f"--seed must be an int in [0, 2**63); got {args.seed}")
    return dict(beam_size=args.beam, alpha=args.alpha, batch_size=args.batch_size,
                max_len=args.max_len, method=args.method, temperature=args.temperature,
                top_k=args.top_k, rng=jax.random.key(args.seed))


def _one_line(text: str) -> str:
    # Byte-fallback pieces can decode to a line break; keep one output line per input line.
    return text.replace("\r", " ").replace("\n", " ")


def _translate_stream(translator, chunks: Iterable[list[str]], out: TextIO, kwargs: dict,
                      quiet: bool, name: str, n_best: int = 1) -> list[str]:
    """Translates ``chunks`` (lists of lines) in order, writing and flushing each one;
    returns the best translation of every line. ``n_best`` > 1 writes that many
    hypotheses per line in Moses n-best format instead of one line per line.

    Line i (0-based, over all chunks) samples with ``fold_in(rng, i)``, as it would in
    one ``translate`` call of the whole input: samples do not depend on how the input
    arrives in chunks. An overlong line's error, or its truncation warning, names
    ``name`` (the input) and the line number."""
    from tqdm import tqdm

    from jformer.search.loop import row_keys
    from jformer.inference.translator import OverlongError, OverlongWarning

    if n_best > 1:
        kwargs = dict(kwargs, n_best=n_best, return_scores=True)
    translator.translate([], **kwargs)  # checks the search arguments, before any output
    hyps: list[str] = []
    with tqdm(unit="sent", file=sys.stderr, disable=quiet, desc="translating") as bar:
        for chunk in chunks:
            first_line = len(hyps) + 1
            chunk_kwargs = dict(kwargs, rng=row_keys(kwargs["rng"], len(chunk),
                                                     first=first_line - 1))
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", OverlongWarning)
                    results = translator.translate(chunk, **chunk_kwargs)
            except OverlongError as e:
                raise ValueError(f"{name} line {first_line + e.index}: {e.detail}") from e
            for w in caught:  # the chunk's positions as the input's line numbers
                if isinstance(w.message, OverlongWarning):
                    bar.write(f"warning: {name} line {first_line + w.message.index}: "
                              f"{w.message.detail}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            for result in results:
                if n_best > 1:  # Hypothesis lists, best first
                    for h in result:
                        out.write(f"{len(hyps)} ||| {_one_line(h.text)} ||| {h.score:.6f}\n")
                    result = result[0].text
                else:
                    out.write(_one_line(result) + "\n")
                hyps.append(result)
            out.flush()
            bar.update(len(chunk))
    return hyps


def _open_out(path: str) -> TextIO:
    """The output file, or stdout as UTF-8 (not the locale's encoding) with "\\n" line
    ends, as files are written here."""
    if path != "-":
        return open(path, "w", encoding="utf-8")
    if not hasattr(sys.stdout, "buffer"):  # already a plain text stream (e.g. in tests)
        return sys.stdout
    return io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n",
                            write_through=True)


def cmd_translate(args: argparse.Namespace) -> None:
    if args.chunk_lines < 1:
        raise ValueError(f"--chunk-lines must be >= 1; got {args.chunk_lines}")
    from jformer.cli.textio import line_batches

    translator = _translator(args)
    with contextlib.ExitStack() as stack:  # releases what was opened, even on errors
        # Bytes, decoded line by line (jformer.cli.textio): stdin is never wrapped or closed.
        src = sys.stdin if args.input == "-" else stack.enter_context(open(args.input, "rb"))
        out = _open_out(args.output)
        stack.callback(_release, out, sys.stdout)
        name = "stdin" if args.input == "-" else args.input
        _translate_stream(translator, line_batches(src, name, args.chunk_lines), out,
                          _search_kwargs(args), args.quiet, name, args.n_best)


def _release(f: TextIO, std: TextIO) -> None:
    """Closes a file; a wrapper of stdout is detached instead (closing, or
    garbage-collecting, it would close the process's own stream)."""
    if f is std:
        return
    if getattr(f, "buffer", None) is not None and f.buffer is getattr(std, "buffer", None):
        f.detach()  # flushes first
    else:
        f.close()


def cmd_evaluate(args: argparse.Namespace) -> None:
    from sacrebleu.metrics import BLEU, CHRF

    from jformer.cli.textio import read_lines

    sources, refs = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(refs):
        raise ValueError(f"--src {args.src} has {len(sources)} lines but --ref {args.ref} "
                         f"has {len(refs)}")
    if not sources:
        raise ValueError(f"--src {args.src} and --ref {args.ref} are empty: nothing to score")
    translator = _translator(args)
    hyp_file = open(args.hyp_out, "w", encoding="utf-8") if args.hyp_out else open(os.devnull, "w")
    with hyp_file:
        chunks = (sources[i:i + DEFAULT_CHUNK_LINES]
                  for i in range(0, len(sources), DEFAULT_CHUNK_LINES))
        hyps = _translate_stream(translator, chunks, hyp_file, _search_kwargs(args),
                                 args.quiet, args.src)
    for metric in (BLEU(lowercase=args.lowercase), CHRF(lowercase=args.lowercase)):
        score = metric.corpus_score(hyps, [refs])
        print(score)
        print(f"  signature: {metric.get_signature()}")
    sys.stdout.flush()


def cmd_attention(args: argparse.Namespace) -> None:
    from jformer.inference.attention_maps import write_attention_maps

    for path in write_attention_maps(_translator(args), args.sentence, args.out):
        print(path)


def cmd_average(args: argparse.Namespace) -> None:
    from jformer import checkpoint

    if not os.path.isdir(args.workdir):
        raise FileNotFoundError(f"workdir not found: {args.workdir}")
    steps = checkpoint.average_checkpoints(checkpoint.checkpoint_dir(args.workdir),
                                           args.last, args.out)
    print(f"averaged steps {steps} into {args.out}")


def cmd_curves(args: argparse.Namespace) -> None:
    from jformer.train.curves import plot_curves

    print(plot_curves(args.runs, args.out, title=args.title))


COMMANDS = {"translate": cmd_translate, "evaluate": cmd_evaluate,
            "attention": cmd_attention, "average-checkpoints": cmd_average,
            "curves": cmd_curves}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0 on success)."""
    args = build_parser().parse_args(argv)
    # orbax logs (through absl) a warning for every read-only checkpoint open; stderr
    # is for progress and errors here.
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        COMMANDS[args.command](args)
    except BrokenPipeError:  # e.g. `jformer translate ... | head`
        sys.stderr.close()
        return EXIT_ERROR
    except (OSError, ValueError) as e:  # files, folders, configs, arguments, input text
        print(f"jformer {args.command}: error: {describe_error(e)}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def describe_error(e: BaseException) -> str:
    """The one-line text of an expected error: "<reason>: <path>" for a file error."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.strerror}: {e.filename}"
    return str(e)


if __name__ == "__main__":
    sys.exit(main())
