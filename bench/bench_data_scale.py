"""The data layer at WMT scale: a synthetic parallel corpus of N pairs, run as train.py runs
it, first start against restart.

    python bench/bench_data_scale.py --pairs 4500000 [--vocab-size 37000] [--dir DIR]
        [--max-tokens 25000] [--iterate-s 20] [--keep]

The corpus has WMT-like lengths (words per sentence log-normal around 23, the target's
length tied to the source's, a Zipf-distributed vocabulary of 60,000 made-up words with
an 8-piece morphology) and is written as two text files. Then, each in a fresh process
(peak RSS is that process's), as ``jformer train`` builds its train split
(``build_pipeline(..., "train")``, then the first batch):

- ``first``: from an empty workdir: the joint sentencepiece vocabulary learned
  (``data.vocab_sample_size`` sentences sampled), the split read, encoded, filtered and
  (with the encoded cache) saved, to the first batch;
- ``restart``: the same call again, to the first batch (the cache, when on, is read);
- ``iterate``: target tokens/s of the train iterator, on one core, over --iterate-s.

``first`` prints its parts: ``vocab_s`` (drawing the sample and learning the
vocabulary), ``encode_s`` (the rest of building the split: reading, encoding,
filtering, saving) and ``batch_s`` (to the first batch); ``seconds`` is their sum.
``--no-cache`` runs ``first`` and ``restart`` with ``data.encoded_cache=False`` too
(today's path before the cache), for the comparison. Prints one line a phase: seconds,
peak RSS; and the iterator's rate.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

WORDS = 60_000
CHUNK = 200_000  # pairs generated and written at a time


def _parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=1_000_000)
    p.add_argument("--vocab-size", type=int, default=37_000)
    p.add_argument("--max-tokens", type=int, default=25_000,
                   help="data.max_tokens (the paper: about 25,000 per side a step)")
    p.add_argument("--iterate-s", type=float, default=20.0)
    p.add_argument("--dir", default=None, help="where the corpus and workdirs go "
                   "(default: a temporary folder, removed unless --keep)")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--no-cache", action="store_true",
                   help="also run first and restart with data.encoded_cache=False")
    p.add_argument("--phase", default=None, help=argparse.SUPPRESS)  # a worker process
    p.add_argument("--cache", type=int, default=1, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _lexicon(rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """Made-up source and target words: stems of 2-4 syllables, a few endings each."""
    syllables = np.array([c + v for c in "bdfgklmnprstvz" for v in "aeiou"])
    def words(seed_shift: int) -> list[str]:
        n = rng.integers(2, 5, WORDS)
        parts = rng.integers(0, len(syllables), (WORDS, 4))
        return ["".join(syllables[parts[i, :n[i]]]) + ("", "s", "en", "er")[i % 4]
                for i in range(WORDS)]
    return words(0), words(1)


def generate(path_src: str, path_tgt: str, pairs: int, seed: int = 0) -> None:
    """Writes the synthetic corpus (module docstring)."""
    rng = np.random.default_rng(seed)
    src_words, tgt_words = _lexicon(rng)
    ranks = np.arange(1, WORDS + 1)
    zipf = 1.0 / ranks ** 1.05
    zipf /= zipf.sum()
    with open(path_src, "w") as fs, open(path_tgt, "w") as ft:
        for start in range(0, pairs, CHUNK):
            n = min(CHUNK, pairs - start)
            src_len = np.clip(rng.lognormal(np.log(20), 0.55, n), 1, 150).astype(int)
            tgt_len = np.clip((src_len * rng.normal(1.1, 0.12, n)).round(), 1, 160).astype(int)
            ids = rng.choice(WORDS, size=int(src_len.sum() + tgt_len.sum()), p=zipf)
            at = 0
            src_lines, tgt_lines = [], []
            for ls, lt in zip(src_len, tgt_len):
                src_lines.append(" ".join(src_words[i] for i in ids[at:at + ls]).capitalize() + ".")
                at += ls
                tgt_lines.append(" ".join(tgt_words[i] for i in ids[at:at + lt]).capitalize() + ".")
                at += lt
            fs.write("\n".join(src_lines) + "\n")
            ft.write("\n".join(tgt_lines) + "\n")


def _config(args, root: str):
    from jformer.config import DataConfig

    return DataConfig(source="text", text_pattern=os.path.join(root, "{split}.{lang}"),
                      vocab_size=args.vocab_size, max_source_len=128, max_target_len=128,
                      max_tokens=args.max_tokens, encoded_cache=bool(args.cache))


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB -> GiB


def _timed_vocabulary(spent: list[float]) -> None:
    """Adds the time spent drawing the vocabulary's sample and learning (or loading and
    checking) it to ``spent[0]``."""
    from jformer.data import rows, streamed

    def timed(fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0
        return run
    rows.load_or_train_tokenizer = timed(rows.load_or_train_tokenizer)
    streamed.CorpusStream.sample_sentences = timed(streamed.CorpusStream.sample_sentences)


def worker(args) -> dict:
    """One phase in this process; returns its figures."""
    from jformer.data import pipeline

    root = args.dir
    cfg = _config(args, root)
    workdir = os.path.join(root, f"run-cache{args.cache}")
    if args.phase in ("first", "restart"):
        if args.phase == "first":  # an empty workdir, as a new run's
            shutil.rmtree(workdir, ignore_errors=True)
            os.makedirs(workdir)
        vocab = [0.0]
        _timed_vocabulary(vocab)
        t0 = time.perf_counter()
        split = pipeline.build_pipeline(cfg, workdir, "train")
        built = time.perf_counter()
        batch = next(split.batches)
        done = time.perf_counter()
        parts = ({"vocab_s": vocab[0], "encode_s": built - t0 - vocab[0],
                  "batch_s": done - built} if args.phase == "first" else {})
        return {"seconds": done - t0, **parts, "peak_rss_gb": _peak_rss_gb(),
                "pairs": split.filter_stats.num_pairs,
                "batch_shape": list(batch["targets"].shape)}
    if args.phase == "iterate":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
        split = pipeline.build_pipeline(cfg, workdir, "train")
        next(split.batches)
        tokens, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.iterate_s:
            tokens += int((next(split.batches)["targets"] != 0).sum())
        return {"target_tokens_per_s": tokens / (time.perf_counter() - t0),
                "peak_rss_gb": _peak_rss_gb()}
    raise ValueError(f"unknown phase {args.phase!r}")


def _run(args, phase: str, cache: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--cache", str(cache),
           "--dir", args.dir, "--vocab-size", str(args.vocab_size), "--max-tokens",
           str(args.max_tokens), "--iterate-s", str(args.iterate_s)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{phase} failed:\n{done.stderr[-3000:]}")
    # process_s: the whole process (interpreter, imports); seconds: the phase's own work
    return dict(json.loads(done.stdout.strip().splitlines()[-1]),
                process_s=time.perf_counter() - t0)


def main(argv=None) -> None:
    args = _parse(argv)
    if args.phase:
        print(json.dumps(worker(args)))
        return
    made = args.dir is None
    args.dir = args.dir or tempfile.mkdtemp(prefix="jformer-data-scale-")
    os.makedirs(args.dir, exist_ok=True)
    try:
        t0 = time.perf_counter()
        if not os.path.isfile(os.path.join(args.dir, "train.de")):
            generate(os.path.join(args.dir, "train.en"), os.path.join(args.dir, "train.de"),
                     args.pairs)
        size = sum(os.path.getsize(os.path.join(args.dir, f"train.{x}")) for x in ("en", "de"))
        print(f"corpus: {args.pairs:,} pairs, {size / 1e9:.2f} GB of text "
              f"({time.perf_counter() - t0:.0f} s to make)", flush=True)
        rows = [(p, c) for c in ([1, 0] if args.no_cache else [1])
                for p in ("first", "restart")] + [("iterate", 1)]
        for phase, cache in rows:
            out = _run(args, phase, cache)
            label = phase + ("" if phase == "iterate" else
                             f" (encoded cache {'on' if cache else 'off'})")
            print(f"{label}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else
                                          f"{k} {v}" for k, v in out.items()), flush=True)
    finally:
        if made and not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
