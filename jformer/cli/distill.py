"""``jformer distill``: a teacher translates its run's training split into a distilled
corpus a student trains on (:mod:`jformer.distill`)."""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

from jformer.cli.common import (add_compile_cache_arg, add_model_args, add_search_args,
                                claim_devices, load_translator, search_kwargs)

NAME = "distill"
HELP = "translate the run's training split with it (the teacher) into a corpus for a student"
SPLITS = ("train", "eval", "test")
# The search settings a distilled corpus depends on (a resumed run must repeat them).
SEARCH_FIELDS = ("beam", "alpha", "max_len", "method", "temperature", "top_k", "seed",
                 "overlong", "eos_candidates", "stop", "dtype", "shortlist")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    add_search_args(p)
    add_compile_cache_arg(p)
    p.add_argument("--out", required=True,
                   help="folder for the distilled corpus: <split>.<src>, <split>.<tgt> as "
                        "data.text_pattern '<out>/{split}.{lang}' reads them, distill.json")
    p.add_argument("--split", choices=SPLITS, default="train",
                   help="the teacher run's split to translate (default: train); the "
                        "others are copied with their references")
    p.add_argument("--n-best", type=int, default=1, metavar="N",
                   help="beam search: a pair for each distinct text of the N best "
                        "hypotheses (N <= --beam)")
    p.add_argument("--samples", type=int, default=1, metavar="K",
                   help="--method sample: K sampled translations per source")
    p.add_argument("--max-pairs", type=int, default=0,
                   help="translate only the split's first N pairs (0: all)")
    p.add_argument("--chunk-lines", type=int, default=2000,
                   help="sources translated, written and recorded at a time (a stopped "
                        "run resumes after the last recorded chunk)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _check(args: argparse.Namespace) -> None:
    if args.chunk_lines < 1 or args.max_pairs < 0:
        raise ValueError(f"--chunk-lines must be >= 1 and --max-pairs >= 0; got "
                         f"{args.chunk_lines}, {args.max_pairs}")
    if args.n_best < 1 or args.samples < 1:
        raise ValueError(f"--n-best and --samples must be >= 1; got {args.n_best}, "
                         f"{args.samples}")
    if args.n_best > 1 and args.method != "beam":
        raise ValueError(f"--n-best {args.n_best} needs --method beam; got {args.method}")
    if args.samples > 1 and args.method != "sample":
        raise ValueError(f"--samples {args.samples} needs --method sample; got "
                         f"{args.method}")


def settings(args: argparse.Namespace, config) -> dict:
    """What the corpus depends on: the teacher, its checkpoint, the split, the search and
    the targets per source (jformer.distill.corpus.check_settings compares them)."""
    return dict(teacher=os.path.abspath(args.workdir),
                checkpoint=os.path.abspath(args.checkpoint) if args.checkpoint else "",
                step=args.step, split=args.split, max_pairs=args.max_pairs,
                n_best=args.n_best, samples=args.samples,
                source=config.data.source, src_lang=config.data.src_lang,
                tgt_lang=config.data.tgt_lang,
                **{name: getattr(args, name) for name in SEARCH_FIELDS})


def run(args: argparse.Namespace) -> None:
    session_start = time.perf_counter()
    _check(args)
    from jformer.data.streamed import CorpusStream
    from jformer.distill import corpus
    from jformer.workdir import files

    config = files.load_config(args.workdir)
    data = config.data
    split_names = dict(train=data.train_split, eval=data.eval_split, test=data.test_split)
    outputs = corpus.Outputs(args.out, split_names[args.split], data.src_lang, data.tgt_lang)
    wanted = settings(args, config)
    progress = corpus.start(outputs, wanted)
    if progress is None:
        print(f"{outputs.manifest}: already distilled with these settings; nothing to do")
        return
    _copy_references(args, data, split_names, corpus)
    claim_devices(args)
    kwargs = search_kwargs(args)
    if args.n_best > 1:
        kwargs["n_best"] = args.n_best
        kwargs["return_scores"] = True
    translator = load_translator(args)
    translator.translate([], **kwargs)  # checks the search arguments before any work
    from jformer.inference import OverlongWarning
    from jformer.inference.keys import row_key_data

    truncated = []

    def translate(sentences, first_row):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", OverlongWarning)
            results = translator.translate(sentences, **dict(
                kwargs, rng=row_key_data(kwargs["rng"], len(sentences), first=first_row)))
        for w in caught:
            if isinstance(w.message, OverlongWarning):
                truncated.append(first_row + w.message.index)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        return results

    def sources():
        taken = 0
        for pairs in CorpusStream(data, args.split).chunks():
            if args.max_pairs:
                pairs = pairs[:args.max_pairs - taken]
            taken += len(pairs)
            yield [s for s, _ in pairs]
            if args.max_pairs and taken >= args.max_pairs:
                return

    def report(p):
        if not args.quiet:
            print(f"distill: {p['done']} sources, {p['pairs']} pairs, "
                  f"{p['done'] / max(p['translate_s'], 1e-9):.1f} sentences/s translating",
                  file=sys.stderr, flush=True)

    manifest = corpus.distill(translate, sources(), outputs, progress, args.chunk_lines,
                              args.n_best, args.samples, session_start, report)
    print(f"distilled {manifest['sources']} sources into {manifest['pairs']} pairs "
          f"({manifest['empty_translations']} empty translations left out) in "
          f"{manifest['wall_s']:.1f} s, {manifest['translate_s']:.1f} s of it translating "
          f"({manifest['sentences_per_s']} sentences/s overall); wrote "
          f"{' and '.join(outputs.final)}")
    if truncated:
        print(f"distill: warning: {len(truncated)} translated rows (from row "
              f"{truncated[0]}) had sources over model.max_len, truncated as the run's "
              f"decode.overlong says; their pairs pair the whole source with the "
              f"translation of its start (--overlong split translates them whole)",
              file=sys.stderr)
    print(f"train a student on it: python train.py --config configs/multi30k_student.py "
          f"--workdir STUDENT --config.data.text_pattern='{os.path.abspath(args.out)}/"
          f"{{split}}.{{lang}}' --config.data.vocab_path="
          f"{files.tokenizer_path(data, args.workdir)}")


def _copy_references(args, data, split_names: dict, corpus) -> None:
    """The validation and test splits (unless one is the split translated), with their
    references, beside the distilled one: the student validates and tests on real
    references. A split the run lacks is named."""
    from jformer.data.sources import load_split

    for split in ("eval", "test"):
        if split == args.split:
            continue
        name = split_names[split]
        paths = tuple(os.path.join(args.out, f"{name}.{lang}")
                      for lang in (data.src_lang, data.tgt_lang))
        if all(os.path.exists(p) for p in paths):
            continue
        try:
            pairs = load_split(data, split)
        except FileNotFoundError as e:
            print(f"distill: warning: no {split} split to copy ({e}); give the student's "
                  f"data.{split}_split files yourself", file=sys.stderr)
            continue
        corpus.write_references(paths, pairs)
