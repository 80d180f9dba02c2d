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
import itertools
import logging
import os
import sys
from typing import Iterable, Iterator, Sequence, TextIO

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
                   help="sampling seed (samples also depend on --devices)")
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

    from jformer.translate import Translator

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

    return dict(beam_size=args.beam, alpha=args.alpha, batch_size=args.batch_size,
                max_len=args.max_len, method=args.method, temperature=args.temperature,
                top_k=args.top_k, rng=jax.random.key(args.seed))


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(lines)
    while chunk := list(itertools.islice(it, size)):
        yield [line.rstrip("\r\n") for line in chunk]


def _one_line(text: str) -> str:
    # Byte-fallback pieces can decode to a line break; keep one output line per input line.
    return text.replace("\r", " ").replace("\n", " ")


def _translate_stream(translator, lines: Iterable[str], out: TextIO, kwargs: dict,
                      chunk_lines: int, quiet: bool, name: str) -> list[str]:
    """Translates ``lines`` chunk by chunk, writing (and flushing) each chunk in order.

    Chunk c samples with ``fold_in(rng, c)``: without it every chunk would restart the
    per-batch keys and repeat the first chunk's samples. ``name`` (the input) and the
    line number go into the error for an overlong line."""
    import jax
    from tqdm import tqdm

    from jformer.translate import OverlongError

    hyps = []
    with tqdm(unit="sent", file=sys.stderr, disable=quiet, desc="translating") as bar:
        for chunk_no, chunk in enumerate(_chunks(lines, chunk_lines)):
            chunk_kwargs = dict(kwargs, rng=jax.random.fold_in(kwargs["rng"], chunk_no))
            try:
                texts = translator.translate(chunk, **chunk_kwargs)
            except OverlongError as e:
                line = chunk_no * chunk_lines + e.index + 1
                raise ValueError(f"{name} line {line}: {e.detail}") from e
            for text in texts:
                out.write(_one_line(text) + "\n")
                hyps.append(text)
            out.flush()
            bar.update(len(chunk))
    return hyps


def _std_stream(stream: TextIO, mode: str) -> TextIO:
    """stdin / stdout as UTF-8 with lines split at "\\n" only, as files are read here
    (the locale's encoding and universal newlines would disagree with them)."""
    if not hasattr(stream, "buffer"):  # already a plain text stream (e.g. in tests)
        return stream
    return io.TextIOWrapper(stream.buffer, encoding="utf-8", newline="\n",
                            write_through=mode == "w")


def _open_in(path: str) -> TextIO:
    # newline="\n": a stray "\r" inside a line stays in it (universal newlines would
    # split there and shift every later output line against the input).
    return (_std_stream(sys.stdin, "r") if path == "-"
            else open(path, encoding="utf-8", newline="\n"))


def _open_out(path: str) -> TextIO:
    return _std_stream(sys.stdout, "w") if path == "-" else open(path, "w", encoding="utf-8")


def cmd_translate(args: argparse.Namespace) -> None:
    if args.chunk_lines < 1:
        raise ValueError(f"--chunk-lines must be >= 1; got {args.chunk_lines}")
    translator = _translator(args)
    with contextlib.ExitStack() as stack:  # releases what was opened, even on errors
        src = _open_in(args.input)
        stack.callback(_release, src, sys.stdin)
        out = _open_out(args.output)
        stack.callback(_release, out, sys.stdout)
        _translate_stream(translator, src, out, _search_kwargs(args), args.chunk_lines,
                          args.quiet, "stdin" if args.input == "-" else args.input)


def _release(f: TextIO, std: TextIO) -> None:
    """Closes a file; a wrapper of stdin/stdout is detached instead (closing, or
    garbage-collecting, it would close the process's own stream)."""
    if f is std:
        return
    if getattr(f, "buffer", None) is not None and f.buffer is getattr(std, "buffer", None):
        f.detach()  # flushes first
    else:
        f.close()


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip("\r\n") for line in f]


def cmd_evaluate(args: argparse.Namespace) -> None:
    from sacrebleu.metrics import BLEU, CHRF

    sources, refs = _read_lines(args.src), _read_lines(args.ref)
    if len(sources) != len(refs):
        raise ValueError(f"--src {args.src} has {len(sources)} lines but --ref {args.ref} "
                         f"has {len(refs)}")
    if not sources:
        raise ValueError(f"--src {args.src} and --ref {args.ref} are empty: nothing to score")
    translator = _translator(args)
    hyp_file = open(args.hyp_out, "w", encoding="utf-8") if args.hyp_out else open(os.devnull, "w")
    with hyp_file:
        hyps = _translate_stream(translator, sources, hyp_file, _search_kwargs(args),
                                 DEFAULT_CHUNK_LINES, args.quiet, args.src)
    for metric in (BLEU(lowercase=args.lowercase), CHRF(lowercase=args.lowercase)):
        score = metric.corpus_score(hyps, [refs])
        print(score)
        print(f"  signature: {metric.get_signature()}")
    sys.stdout.flush()


def cmd_attention(args: argparse.Namespace) -> None:
    from jformer.attention_maps import write_attention_maps

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
    from jformer.curves import plot_curves

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
    except (FileNotFoundError, IsADirectoryError, PermissionError, UnicodeDecodeError,
            ValueError) as e:
        print(f"jformer {args.command}: error: {_describe(e)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # e.g. `jformer translate ... | head`
        sys.stderr.close()
        return EXIT_ERROR
    return 0


def _describe(e: Exception) -> str:
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.strerror}: {e.filename}"
    if isinstance(e, UnicodeDecodeError):
        return f"input is not valid UTF-8 ({e.reason} at byte {e.start})"
    return str(e)


if __name__ == "__main__":
    sys.exit(main())
