"""``jformer predict``: a fine-tuned encoder on stdin (or a file), one line per line.

What a line holds and what is written depends on the run's ``task.kind``:

* classify: ``text`` or ``text_a<TAB>text_b`` -> ``label`` (``--scores``: ``label<TAB>p``);
* tag: ``text`` -> ``word/TAG word/TAG ...`` (words split at whitespace);
* span: ``question<TAB>context`` -> the answer (``--scores``: ``answer<TAB>score``).
"""
from __future__ import annotations

import argparse
import contextlib
import sys

from jformer.cli.common import add_model_args

NAME = "predict"
HELP = "run a fine-tuned encoder (classify, tag or span) on stdin, one example per line"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--input", default="-", help="input file (default: stdin)")
    p.add_argument("--output", default="-", help="output file (default: stdout)")
    p.add_argument("--scores", action="store_true",
                   help="classify: the label's probability; span: the answer's score")
    p.add_argument("--batch-size", type=int, default=64, help="examples per forward pass")
    p.add_argument("--chunk-lines", type=int, default=1000,
                   help="lines read, predicted and written at a time")


def _fields(line: str, counts: tuple[int, ...], name: str, number: int) -> list[str]:
    fields = line.split("\t")
    if len(fields) not in counts:
        want = " or ".join(f"{c} TAB-separated field{'s' * (c > 1)}" for c in counts)
        raise ValueError(f"{name} line {number}: expected {want}; got {len(fields)}")
    return fields


def predict_lines(predictor, lines: list[str], scores: bool, name: str, first: int
                  ) -> list[str]:
    """The output line of every input line (``first``: the 1-based number of lines[0])."""
    kind = predictor.kind
    if kind == "classify":
        rows = [_fields(line, (1, 2), name, first + i) for i, line in enumerate(lines)]
        pairs = any(len(r) == 2 for r in rows)
        results = predictor.classify([r[0] for r in rows],
                                     [r[1] if len(r) == 2 else "" for r in rows]
                                     if pairs else None)
        return [f"{label}\t{p:.4f}" if scores else label for label, p in results]
    if kind == "tag":
        return [" ".join(f"{w}/{t}" for w, t in words) for words in predictor.tag(lines)]
    rows = [_fields(line, (2,), name, first + i) for i, line in enumerate(lines)]
    answers = predictor.answer([q for q, _ in rows], [c for _, c in rows])
    return [f"{a}\t{s:.4f}" if scores else a for a, _, _, s in answers]


def run(args: argparse.Namespace) -> None:
    for flag in ("batch_size", "chunk_lines"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1; got "
                             f"{getattr(args, flag)}")
    from jformer.cli.textio import line_batches
    from jformer.cli.translate import _release, open_out
    from jformer.inference.encoder import EncoderPredictor

    predictor = EncoderPredictor.from_checkpoint(args.workdir, checkpoint_dir=args.checkpoint,
                                                 step=args.step, batch_size=args.batch_size)
    with contextlib.ExitStack() as stack:
        src = sys.stdin if args.input == "-" else stack.enter_context(open(args.input, "rb"))
        out = open_out(args.output)
        stack.callback(_release, out, sys.stdout)
        name = "stdin" if args.input == "-" else args.input
        done = 0
        for chunk in line_batches(src, name, args.chunk_lines):
            for line in predict_lines(predictor, chunk, args.scores, name, done + 1):
                out.write(line.replace("\n", " ") + "\n")
            out.flush()
            done += len(chunk)
