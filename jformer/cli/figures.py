"""``jformer figures``: the PNG figures of docs/transformer.md.

    jformer figures --out docs/figures --workdir runs/demo    # every figure
    jformer figures --out figs                                 # positional encodings only

Prints each written path, then what the embedding figure measured.
"""
from __future__ import annotations

import argparse

from jformer.cli.common import add_model_args

NAME = "figures"
HELP = ("PNG figures of positional encodings, masks, learned embeddings and attention "
        "(docs/transformer.md)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p, workdir_help="training run folder; without it only the positional-"
                                   "encoding figures are written (for --d-model, --max-len)")
    p.add_argument("--out", required=True, help="output folder for the PNG files")
    p.add_argument("--sentence", default=None,
                   help="source sentence of the attention maps (default: a demo sentence)")
    p.add_argument("--d-model", type=int, default=None,
                   help="d_model of the positional figures without --workdir (default: "
                        "the paper's base, 512)")
    p.add_argument("--max-len", type=int, default=None,
                   help="positions of the positional figures without --workdir (default: "
                        "256)")


def run(args: argparse.Namespace) -> None:
    from jformer.cli.common import load_translator
    from jformer.inference import figures

    if args.workdir is None and (args.checkpoint or args.step is not None or args.sentence):
        raise ValueError("--checkpoint, --step and --sentence need --workdir")
    if args.workdir is not None and (args.d_model or args.max_len):
        raise ValueError("--d-model and --max-len are for figures without --workdir (with "
                         "it, the model's own are used)")
    translator = load_translator(args) if args.workdir is not None else None
    paths, findings = figures.write_figures(
        args.out, translator, d_model=args.d_model or 512, max_len=args.max_len or 256,
        sentence=args.sentence or figures.DEFAULT_SENTENCE)
    for line in paths + findings:
        print(line)
