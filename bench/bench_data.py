"""Data-pipeline throughput and padding efficiency on a real corpus (default: Multi30k).

    python bench/bench_data.py [--data-pattern '../shared/data/multi30k/{split}.{lang}']
        [--vocab-size 8000] [--max-tokens 4096] [--step-seconds 0.5]

Prints: tokenizer training time, encoding / decoding sentences per second, then for
plain bucketing and for packing: batches/s and real tokens/s of the train iterator
(after encoding), the share of real (non-pad) tokens in the batch slots, and the ratio
of batch rate to what a train step needs. The tokenizer is trained in a temporary
directory; nothing is written into the repository.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from jformer.config import DataConfig  # noqa: E402
from jformer.data import batching, length_filter, pipeline, rows, sources, vocabulary  # noqa: E402
from jformer.data.ragged import RaggedArray  # noqa: E402
from jformer.data.tokenizer import Tokenizer  # noqa: E402

# The lead's reference figure: a small-config train step on a [64, 32] batch takes about
# 0.5 s on the CPU, and the input pipeline should be 10x faster than that (>= 20 batches/s).
REFERENCE_STEP_SECONDS = 0.5
HEADROOM = 10.0


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-pattern", default="../shared/data/multi30k/{split}.{lang}",
                   help="text pattern with {split} and {lang}, relative to the repo root")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=4096, help="token budget per batch")
    p.add_argument("--max-len", type=int, default=128, help="max tokens per side (incl. EOS)")
    p.add_argument("--step-seconds", type=float, default=REFERENCE_STEP_SECONDS,
                   help="train step time to compare the batch rate with")
    p.add_argument("--batches", type=int, default=3000, help="batches timed per setting")
    return p.parse_args()


def _time_encode_decode(tok: Tokenizer, sentences: list[str]) -> tuple[float, float]:
    """Sentences per second of batched encoding, and of decoding a padded id array."""
    t0 = time.perf_counter()
    rows = tok.encode_lists(sentences)
    t_enc = time.perf_counter() - t0
    ragged = RaggedArray.from_rows(rows)
    ids_BL = ragged.gather_padded(np.arange(len(rows)), int(ragged.lengths.max()), tok.pad_id)
    t0 = time.perf_counter()
    tok.decode(ids_BL)
    t_dec = time.perf_counter() - t0
    return len(sentences) / t_enc, len(sentences) / t_dec


def _measure(src, tgt, options: batching.BatchOptions, num_batches: int) -> dict:
    """Plans epoch 0, counts its real tokens, then times num_batches calls of next() (the
    train loop's view, crossing into later epochs as needed)."""
    t0 = time.perf_counter()
    it = batching.BatchIterator(src, tgt, options)
    per_epoch = it.num_batches(0)  # computes epoch 0's plan (packing runs first-fit here)
    t_plan = time.perf_counter() - t0
    real_in = real_tg = slots = 0
    shapes = set()
    for batch in it.epoch_batches(0):
        real_in += int((batch["inputs"] != options.pad_id).sum())
        real_tg += int((batch["targets"] != options.pad_id).sum())
        slots += batch["inputs"].size
        shapes.add(batch["inputs"].shape)
    t0 = time.perf_counter()
    for _ in range(num_batches):
        next(it)
    rate = num_batches / (time.perf_counter() - t0)
    return {"batches/epoch": per_epoch, "shapes": len(shapes), "plan_s": t_plan,
            "batches/s": rate, "real_tok/s": rate * (real_in + real_tg) / per_epoch,
            "real_in": real_in / slots, "real_tg": real_tg / slots,
            "real": (real_in + real_tg) / (2 * slots)}


def _row(name: str, m: dict, need: float) -> str:
    return (f"{name:<38} {m['batches/epoch']:>7d} {m['shapes']:>6d} {m['plan_s']:>7.2f} "
            f"{m['batches/s']:>9.0f} {m['real_tok/s'] / 1e6:>8.2f} {m['real_in']:>6.1%} "
            f"{m['real_tg']:>6.1%} {m['real']:>6.1%} {m['batches/s'] / need:>8.0f}x")


def main() -> None:
    args = _parse()
    pattern = args.data_pattern
    if not os.path.isabs(pattern):
        pattern = os.path.normpath(os.path.join(REPO, pattern))
    cfg = DataConfig(source="text", text_pattern=pattern, vocab_size=args.vocab_size,
                     max_tokens=args.max_tokens, max_source_len=args.max_len,
                     max_target_len=args.max_len, pack_len=args.max_len)
    t0 = time.perf_counter()
    corpus = sources.load_corpus(cfg, "train")
    t_load = time.perf_counter() - t0
    print(f"corpus: {corpus.origin}: {len(corpus.pairs)} pairs (read in {t_load:.2f} s)")
    with tempfile.TemporaryDirectory() as workdir:
        t0 = time.perf_counter()
        tok = vocabulary.load_or_train_tokenizer(cfg, workdir, corpus.pairs)
        print(f"tokenizer: {cfg.vocab_model_type}, {tok.vocab_size} pieces, trained in "
              f"{time.perf_counter() - t0:.1f} s on {2 * len(corpus.pairs)} sentences")
        sentences = [s for s, _ in corpus.pairs] + [t for _, t in corpus.pairs]
        enc, dec = _time_encode_decode(tok, sentences)
        print(f"tokenizer speed: encode {enc:,.0f} sentences/s, decode {dec:,.0f} sentences/s "
              f"({len(sentences)} sentences, batched, {os.cpu_count()} CPUs)")
        t0 = time.perf_counter()
        src, tgt = rows.encode_pairs(tok, corpus.pairs)
        src, tgt, stats = length_filter.filter_by_length(src, tgt, args.max_len, args.max_len)
        print(f"encode + filter corpus: {time.perf_counter() - t0:.2f} s; {len(src)} pairs kept "
              f"({stats.num_dropped} over {args.max_len} tokens dropped); mean length "
              f"src {src.lengths.mean():.1f}, tgt {tgt.lengths.mean():.1f} tokens incl. EOS")
        _report(args, cfg, tok, src, tgt)


def _report(args, cfg: DataConfig, tok: Tokenizer, src, tgt) -> None:
    need = HEADROOM / args.step_seconds  # batches/s the trainer needs, with headroom
    train_opts = pipeline.batch_options(cfg, pad_id=tok.pad_id, train=True)
    settings = [
        (f"bucketing, max_tokens={args.max_tokens}", train_opts),
        (f"packing {args.max_tokens // args.max_len}x{args.max_len}",
         dataclasses.replace(train_opts, pack=True)),
        ("bucketing, max_tokens=2048", dataclasses.replace(train_opts, max_tokens=2048)),
        ("packing 64x32 (reference shape)",
         dataclasses.replace(train_opts, pack=True, pack_len=32, max_tokens=2048)),
    ]
    print(f"\ntrain iterator: {args.batches} batches timed per row; in / tgt / real = non-pad "
          f"share of the inputs / targets / all batch slots over one epoch; need = "
          f"{HEADROOM:.0f} / step_seconds = {need:.0f} batches/s ({HEADROOM:.0f}x headroom over "
          f"a {args.step_seconds} s train step)")
    print(f"{'setting':<38} {'b/epoch':>7} {'shapes':>6} {'plan_s':>7} {'batches/s':>9} "
          f"{'Mtok/s':>8} {'in':>6} {'tgt':>6} {'real':>6} {'vs need':>9}")
    for name, opts in settings:
        s, t = src, tgt
        if opts.pack and opts.pack_len < args.max_len:  # pairs must fit the row
            s, t, _ = length_filter.filter_by_length(src, tgt, opts.pack_len, opts.pack_len)
            print(f"(packing into {opts.pack_len}: {len(src) - len(s)} pairs over "
                  f"{opts.pack_len} tokens dropped)")
        print(_row(name, _measure(s, t, opts, args.batches), need))


if __name__ == "__main__":
    main()
