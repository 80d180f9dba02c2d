"""``jformer average-checkpoints``: one checkpoint holding the mean of K checkpoints'
parameters: the last K (paper 6.1), or the K of best validation BLEU or loss (``--best``)."""
from __future__ import annotations

import argparse
import os
import sys

from jformer.config import SELECTION_METRICS

NAME = "average-checkpoints"
HELP = "average the parameters of the last K checkpoints (paper 6.1), or the best K"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True, help="training run folder")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--last", type=int, default=None, metavar="K",
                       help="the newest K checkpoints (the default, with K = 5)")
    which.add_argument("--best", type=int, default=None, metavar="K",
                       help="the K checkpoints of best validation --metric, as "
                            "<workdir>/metrics.jsonl records it (ties: the later step); "
                            "train with train.keep_best=K to keep them")
    p.add_argument("--metric", choices=tuple(SELECTION_METRICS), default=None,
                   help="with --best: bleu (the default; higher is better) or loss (the "
                        "validation loss, label-smoothed; lower is better)")
    p.add_argument("--params", action="store_true",
                   help="of a run that kept a moving average of its parameters "
                        "(train.ema_decay), average the parameters, not the moving averages")
    p.add_argument("--out", required=True, help="new, empty output directory")


def run(args: argparse.Namespace) -> None:
    from jformer.workdir import files
    from jformer.workdir.averaging import average_best_checkpoints, average_checkpoints
    from jformer.workdir.metrics import METRIC_NAMES

    if not os.path.isdir(args.workdir):
        raise FileNotFoundError(f"workdir not found: {args.workdir}")
    which = "params" if args.params else "weights"
    if args.best is None:
        if args.metric is not None:
            raise ValueError("--metric chooses what --best ranks by; give --best K with it")
        last = 5 if args.last is None else args.last
        steps = average_checkpoints(files.checkpoint_dir(args.workdir), last, args.out,
                                    which)
        print(f"averaged steps {steps} into {args.out}")
        return
    metric = args.metric or "bleu"
    chosen = average_best_checkpoints(args.workdir, args.best, args.out, metric, which)
    if chosen.skipped:
        print(f"skipped validated steps whose checkpoint is gone: {chosen.skipped}",
              file=sys.stderr)
    name = METRIC_NAMES[metric]
    values = ", ".join(f"{step}: {value:.4g}" for step, value in
                       zip(chosen.steps, chosen.values))
    print(f"averaged steps {chosen.steps}, the best {args.best} by validation {name} "
          f"({values}), into {args.out}")
