"""``jformer evaluate``: translate a test set and print sacreBLEU and chrF with signatures.

``--paper-bleu`` also prints the paper's tokenized, compound-split BLEU
(jformer.inference.paper_bleu), the convention of its 27.3 (base) and 28.4 (big) on
newstest2014.
"""
from __future__ import annotations

import argparse
import os
import sys

from jformer.cli.common import (add_compile_cache_arg, add_model_args, add_search_args,
                                load_translator, read_parallel, search_kwargs)
from jformer.cli.translate import DEFAULT_CHUNK_LINES, translate_stream

NAME = "evaluate"
HELP = "translate a test set and print BLEU and chrF"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    add_search_args(p)
    add_compile_cache_arg(p)
    p.add_argument("--src", required=True, help="source sentences, one per line")
    p.add_argument("--ref", required=True, help="reference translations, one per line")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive scores")
    p.add_argument("--paper-bleu", action="store_true",
                   help="also print the paper's BLEU: Moses-tokenized, compounds split "
                        "(tensor2tensor get_ende_bleu.sh); needs the paper-bleu extra")
    p.add_argument("--moses-lang", default=None,
                   help="Moses tokenizer language of --paper-bleu (default: the run's "
                        "data.tgt_lang)")
    p.add_argument("--hyp-out", default=None, help="also write the hypotheses here")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--record", action="store_true",
                   help="also append the scores, their signatures, the checkpoint step "
                        "and the search settings to <workdir>/evaluations.jsonl (the "
                        "exports' model cards report them)")


def run(args: argparse.Namespace) -> None:
    from sacrebleu.metrics import BLEU, CHRF

    sources, refs = read_parallel(args, "src", "ref")
    tokenize = lang = None
    if args.paper_bleu:  # before translating: a missing extra fails at once
        from jformer.inference import paper_bleu
        from jformer.workdir.files import load_config

        lang = args.moses_lang or load_config(args.workdir).data.tgt_lang
        tokenize = paper_bleu.moses_tokenizer(lang)
    translator = load_translator(args)
    hyp_file = open(args.hyp_out, "w", encoding="utf-8") if args.hyp_out else open(os.devnull, "w")
    with hyp_file:
        chunks = (sources[i:i + DEFAULT_CHUNK_LINES]
                  for i in range(0, len(sources), DEFAULT_CHUNK_LINES))
        hyps = translate_stream(translator, chunks, hyp_file, search_kwargs(args),
                                args.quiet, args.src)
    record = {}
    for name, metric in (("bleu", BLEU(lowercase=args.lowercase)),
                         ("chrf", CHRF(lowercase=args.lowercase))):
        score = metric.corpus_score(hyps, [refs])
        print(score)
        print(f"  signature: {metric.get_signature()}")
        record.update({name: score.score, f"{name}_signature": str(metric.get_signature())})
    if args.paper_bleu:
        score, signature = paper_bleu.paper_bleu(hyps, refs, lang, tokenize=tokenize)
        print(f"{score}  (paper)")
        print(f"  signature: {signature}")
        record.update(paper_bleu=score.score, paper_bleu_signature=signature)
    sys.stdout.flush()
    if args.record:
        _record(args, translator, len(sources), record)


def _record(args: argparse.Namespace, translator, lines: int, scores: dict) -> None:
    """One row of <workdir>/evaluations.jsonl: what was scored, by which checkpoint and
    search, and the scores with their signatures."""
    from jformer.workdir import checkpoint, files

    ckpt = os.path.abspath(args.checkpoint or files.checkpoint_dir(args.workdir))
    decode = translator.decode_cfg
    search = {"method": args.method, "beam": args.beam or decode.beam_size,
              "alpha": decode.alpha if args.alpha is None else args.alpha,
              "max_len": args.max_len, "eos_candidates": decode.eos_candidates,
              "stop": decode.stop,
              "dtype": decode.dtype}
    files.append_evaluation(args.workdir, {
        "src": os.path.abspath(args.src), "ref": os.path.abspath(args.ref), "lines": lines,
        "checkpoint_dir": ckpt, "step": checkpoint.resolve_step(ckpt, args.step),
        "lowercase": args.lowercase, "search": search, **scores})
