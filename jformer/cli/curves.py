"""``jformer curves``: training loss, validation loss and BLEU of runs against steps and time."""
from __future__ import annotations

import argparse

NAME = "curves"
HELP = ("PNG of training loss, validation loss and BLEU against steps and time (from "
        "<workdir>/metrics.jsonl)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="training run folders, or label=folder")
    p.add_argument("--out", required=True, help="output PNG path")
    p.add_argument("--title", default="", help="figure title")


def run(args: argparse.Namespace) -> None:
    from jformer.train.curves import plot_curves

    print(plot_curves(args.runs, args.out, title=args.title))
