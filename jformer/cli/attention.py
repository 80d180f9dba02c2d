"""``jformer attention``: PNG heatmaps of every attention layer and head for one sentence."""
from __future__ import annotations

import argparse

from jformer.cli.common import add_model_args, load_translator

NAME = "attention"
HELP = "PNG heatmaps of every attention layer and head"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("--out", default="attention", help="output folder for the PNG files")


def run(args: argparse.Namespace) -> None:
    from jformer.inference.attention_maps import write_attention_maps

    for path in write_attention_maps(load_translator(args), args.sentence, args.out):
        print(path)
