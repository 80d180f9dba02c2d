"""``jformer average-checkpoints``: one checkpoint holding the mean of the last K (paper 6.1)."""
from __future__ import annotations

import argparse
import os

NAME = "average-checkpoints"
HELP = "average the parameters of the last K checkpoints (paper 6.1)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True, help="training run folder")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints (K)")
    p.add_argument("--out", required=True, help="new, empty output directory")


def run(args: argparse.Namespace) -> None:
    from jformer.workdir import files
    from jformer.workdir.averaging import average_checkpoints

    if not os.path.isdir(args.workdir):
        raise FileNotFoundError(f"workdir not found: {args.workdir}")
    steps = average_checkpoints(files.checkpoint_dir(args.workdir), args.last, args.out)
    print(f"averaged steps {steps} into {args.out}")
