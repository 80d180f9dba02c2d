"""``jformer score``: forced decoding, how likely a model finds given translations.

    jformer score --workdir runs/demo --src test.en --tgt test.de > scores.tsv

One output line per pair (jformer.inference.forced): the length-penalised score beam
search would rank the target by, its log-probability (the sum over its tokens, EOS
included), its mean token log-probability (a confidence) and the token log-probabilities,
tab-separated; ``--jsonl`` writes each as a JSON object with the target's pieces.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys

from jformer.cli.common import (add_compile_cache_arg, add_model_args, load_translator,
                                read_parallel)
from jformer.config import DECODE_DTYPES

NAME = "score"
HELP = "score given translations (forced decoding): log-probabilities per pair and token"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    add_compile_cache_arg(p)
    p.add_argument("--src", required=True, help="source sentences, one per line")
    p.add_argument("--tgt", required=True, help="their translations, one per line")
    p.add_argument("--alpha", type=float, default=None,
                   help="length penalty exponent of the score column (default: the run's "
                        "decode.alpha)")
    p.add_argument("--batch-size", type=int, default=None, help="pairs per batch")
    p.add_argument("--dtype", choices=DECODE_DTYPES, default=None,
                   help="precision, as jformer translate's --dtype")
    p.add_argument("--jsonl", action="store_true",
                   help="one JSON object per pair: score, log_prob, mean, pieces, "
                        "token_log_probs")
    p.add_argument("--output", default="-", help="output file (default: stdout)")


def run(args: argparse.Namespace) -> None:
    from jformer.cli.translate import _release, open_out
    from jformer.inference.forced import TooLong
    sources, targets = read_parallel(args, "src", "tgt")
    translator = load_translator(args)
    try:
        scores = translator.score(sources, targets, alpha=args.alpha,
                                  batch_size=args.batch_size)
    except TooLong as e:
        path = args.src if e.side == "sources" else args.tgt
        raise ValueError(f"{path} line {e.index + 1}: {str(e).split(' ', 1)[1]}") from e
    tok = translator.tokenizer
    with contextlib.ExitStack() as stack:
        out = open_out(args.output)
        stack.callback(_release, out, sys.stdout)
        for s in scores:
            if args.jsonl:
                out.write(json.dumps({
                    "score": s.score, "log_prob": s.total, "mean": s.mean,
                    "pieces": [tok.id_to_piece(i) for i in s.ids],
                    "token_log_probs": [round(float(x), 6) for x in s.log_probs]},
                    ensure_ascii=False) + "\n")
            else:
                tokens = " ".join(f"{x:.4f}" for x in s.log_probs)
                out.write(f"{s.score:.4f}\t{s.total:.4f}\t{s.mean:.4f}\t{tokens}\n")
