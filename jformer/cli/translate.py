"""``jformer translate``: stdin (or a file) to stdout, one line per line, streamed."""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import warnings
from typing import Iterable, NamedTuple, TextIO

from jformer.cli.common import (add_compile_cache_arg, add_model_args, add_search_args,
                                claim_devices, load_translator, search_kwargs)

NAME = "translate"
HELP = "translate stdin (one sentence per line) to stdout"
DEFAULT_CHUNK_LINES = 1000


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    add_search_args(p)
    add_compile_cache_arg(p)
    p.add_argument("--input", default="-", help="input file (default: stdin)")
    p.add_argument("--output", default="-", help="output file (default: stdout)")
    p.add_argument("--chunk-lines", type=int, default=DEFAULT_CHUNK_LINES,
                   help="lines read, translated and written at a time")
    p.add_argument("--n-best", type=int, default=1, metavar="N",
                   help="write the N best beam hypotheses per line, best first, in Moses "
                        "n-best format: 'ID ||| translation ||| score' (ID: 0-based input "
                        "line; score: log-prob / length penalty)")
    p.add_argument("--target-prefix", default=None, metavar="FILE",
                   help="a line per input line: text its translation must begin with "
                        "(an empty line: none)")
    p.add_argument("--prefix-bias-beta", type=float, default=None, metavar="BETA",
                   help="with --target-prefix: only bias the search towards the prefixes, "
                        "by BETA in (0, 1), instead of forcing them")
    p.add_argument("--alignments", action="store_true",
                   help="append each translation's word alignment from cross-attention "
                        "(decode.alignment_layer / alignment_head): 'translation ||| 0-0 "
                        "2-1 1-2', Moses source-target word index pairs (with --n-best: "
                        "a fourth field)")
    p.add_argument("--alignment-layer", type=int, default=None, metavar="L",
                   help="decoder layer whose cross-attention gives --alignments (negative: "
                        "from the end; default: the run's decode.alignment_layer, the last)")
    p.add_argument("--alignment-head", type=int, default=None, metavar="H",
                   help="that layer's head (e.g. a guided one; default: the mean of all)")
    p.add_argument("--constraints", default=None, metavar="FILE",
                   help="a line per input line: target phrases its translation must "
                        "contain, as a JSON list or tab-separated (an empty line: none); "
                        "beam search only")
    p.add_argument("--glossary", default=None, metavar="FILE",
                   help="'source<TAB>target' terms: where a line contains a source term "
                        "(whole words, any case), its target term becomes a constraint")
    p.add_argument("--format", choices=("text", "html"), default="text",
                   help="html: each line is HTML; its text is translated and its inline "
                        "tags and placeholders ({name}, %%s, ...) put back around the words "
                        "they enclosed, by word alignment")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> None:
    if args.chunk_lines < 1:
        raise ValueError(f"--chunk-lines must be >= 1; got {args.chunk_lines}")
    from jformer.cli.textio import line_batches

    claim_devices(args)  # before search_kwargs' key starts jax's backend
    kwargs = search_kwargs(args)
    if args.format == "html":
        given = [flag for flag, value in (("--alignments", args.alignments),
                                          ("--target-prefix", args.target_prefix),
                                          ("--constraints", args.constraints),
                                          ("--glossary", args.glossary)) if value]
        if given:
            raise ValueError(f"--format html does not go with {', '.join(given)} (they "
                             f"steer plain sentences)")
        kwargs["format"] = "html"
    translator = load_translator(args)
    with contextlib.ExitStack() as stack:  # releases what was opened, even on errors
        # Bytes, decoded line by line (jformer.cli.textio): stdin is never wrapped or closed.
        src = sys.stdin if args.input == "-" else stack.enter_context(open(args.input, "rb"))
        out = open_out(args.output)
        stack.callback(_release, out, sys.stdout)
        name = "stdin" if args.input == "-" else args.input
        translate_stream(translator, line_batches(src, name, args.chunk_lines), out,
                          kwargs, args.quiet, name, args.n_best,
                          prefix_lines(args), constraint_lines(args), args.alignments)


def prefix_lines(args: argparse.Namespace) -> tuple[str, list[str]] | None:
    """(--target-prefix's path, its lines), or None; --prefix-bias-beta needs it."""
    if args.target_prefix is None:
        if args.prefix_bias_beta is not None:
            raise ValueError("--prefix-bias-beta needs --target-prefix FILE")
        return None
    from jformer.workdir.files import read_lines

    return args.target_prefix, read_lines(args.target_prefix)


def constraint_lines(args: argparse.Namespace) -> "Steering | None":
    """What --constraints and --glossary ask for, or None."""
    if args.constraints is None and args.glossary is None:
        return None
    from jformer.inference.constraints import load_glossary, read_constraints

    return Steering(args.constraints and (args.constraints,
                                          read_constraints(args.constraints)),
                    load_glossary(args.glossary) if args.glossary else [])


class Steering(NamedTuple):
    """Lexical constraints of a stream: (--constraints path, its lines) or None, and the
    glossary's (source, target) entries."""

    lines: tuple[str, list] | None
    glossary: list


def _one_line(text: str) -> str:
    # Byte-fallback pieces can decode to a line break; keep one output line per input line.
    return text.replace("\r", " ").replace("\n", " ")


def translate_stream(translator, chunks: Iterable[list[str]], out: TextIO, kwargs: dict,
                      quiet: bool, name: str, n_best: int = 1,
                      prefixes: tuple[str, list[str]] | None = None,
                      steering: Steering | None = None,
                      alignments: bool = False) -> list[str]:
    """Translates ``chunks`` (lists of lines) in order, writing and flushing each one;
    returns the best translation of every line. ``n_best`` > 1 writes that many
    hypotheses per line in Moses n-best format instead of one line per line.

    Line i (0-based, over all chunks) samples with ``fold_in(rng, i)``, as it would in
    one ``translate`` call of the whole input: samples do not depend on how the input
    arrives in chunks. An overlong line's error, or its truncation warning, names
    ``name`` (the input) and the line number. ``prefixes``: (a file's name, its lines),
    the target prefix of each input line (``kwargs`` may hold ``prefix_bias_beta``); it
    must have exactly one line per input line. ``steering``: lexical constraints
    (:func:`constraint_lines`), a file's line each, and a glossary's. ``alignments``:
    each translation is followed by " ||| " and its word alignment
    (:mod:`jformer.inference.alignment`)."""
    from tqdm import tqdm

    from jformer.inference import OverlongError, OverlongWarning
    from jformer.inference.keys import row_key_data
    from jformer.inference.constraints import ConstraintError, glossary_constraints
    from jformer.inference.prefixes import PrefixTooLong

    if n_best > 1:
        kwargs = dict(kwargs, n_best=n_best, return_scores=True)
    if alignments:
        kwargs = dict(kwargs, return_alignments=True)
    translator.translate([], **kwargs)  # checks the search arguments, before any output
    hyps: list[str] = []
    with tqdm(unit="sent", file=sys.stderr, disable=quiet, desc="translating") as bar:
        for chunk in chunks:
            first_line = len(hyps) + 1
            chunk_kwargs = dict(kwargs, rng=row_key_data(kwargs["rng"], len(chunk),
                                                         first=first_line - 1))
            if prefixes is not None:
                chunk_kwargs["target_prefix"] = _chunk_lines(prefixes, name, first_line,
                                                             len(chunk), "--target-prefix")
            if steering is not None:
                given = steering.lines and _chunk_lines(steering.lines, name, first_line,
                                                        len(chunk), "--constraints")
                chunk_kwargs["constraints"] = glossary_constraints(steering.glossary, chunk,
                                                                   given)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", OverlongWarning)
                    results = translator.translate(chunk, **chunk_kwargs)
            except OverlongError as e:
                raise ValueError(f"{name} line {first_line + e.index}: {e.detail}") from e
            except PrefixTooLong as e:
                raise ValueError(f"{prefixes[0]} line {first_line + e.index}: the prefix "
                                 f"{e.detail}") from e
            except ConstraintError as e:
                if e.index is None:
                    raise
                where = steering.lines[0] if steering.lines else name
                phrase = e.field.split("]", 1)[1]  # "[j]" or ""
                what = f"phrase {int(phrase[1:-1]) + 1}" if phrase else "the constraints"
                raise ValueError(f"{where} line {first_line + e.index}: {what} "
                                 f"{e.problem}") from e
            for w in caught:  # the chunk's positions as the input's line numbers
                if isinstance(w.message, OverlongWarning):
                    bar.write(f"warning: {name} line {first_line + w.message.index}: "
                              f"{w.message.detail}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            for result in results:
                if n_best > 1:  # Hypothesis lists, best first
                    for h in result:
                        out.write(f"{len(hyps)} ||| {_one_line(h.text)} ||| {h.score:.6f}"
                                  f"{_links(h)}\n")
                    result = result[0].text
                elif alignments:
                    out.write(f"{_one_line(result.text)}{_links(result)}\n")
                    result = result.text
                else:
                    out.write(_one_line(result) + "\n")
                hyps.append(result)
            out.flush()
            bar.update(len(chunk))
    for flag, side in (("--target-prefix", prefixes),
                       ("--constraints", steering and steering.lines)):
        if side and len(side[1]) != len(hyps):
            raise ValueError(f"{flag} {side[0]} has {len(side[1])} lines but {name} has "
                             f"{len(hyps)}")
    return hyps


def _links(h) -> str:
    """" ||| 0-0 1-2" for a Hypothesis with an alignment; "" without."""
    from jformer.data.alignments import to_moses

    return "" if h.alignment is None else f" ||| {to_moses(h.alignment)}"


def _chunk_lines(side: tuple[str, list], name: str, first_line: int, count: int,
                 flag: str) -> list:
    """The lines of a per-line side file (``flag`` FILE) for one chunk of the input."""
    path, lines = side
    if len(lines) < first_line - 1 + count:
        raise ValueError(f"{flag} {path} has {len(lines)} lines but {name} has "
                         f"more (line {first_line - 1 + count} at least)")
    return lines[first_line - 1:first_line - 1 + count]


def open_out(path: str) -> TextIO:
    """The output file, or stdout as UTF-8 (not the locale's encoding) with "\\n" line
    ends, as files are written here."""
    if path != "-":
        return open(path, "w", encoding="utf-8")
    if not hasattr(sys.stdout, "buffer"):  # already a plain text stream (e.g. in tests)
        return sys.stdout
    return io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n",
                            write_through=True)


def _release(f: TextIO, std: TextIO) -> None:
    """Closes a file; a wrapper of stdout is detached instead (closing, or
    garbage-collecting, it would close the process's own stream)."""
    if f is std:
        return
    if getattr(f, "buffer", None) is not None and f.buffer is getattr(std, "buffer", None):
        f.detach()  # flushes first
    else:
        f.close()
