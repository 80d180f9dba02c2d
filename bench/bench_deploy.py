"""Deploy speed: one small-config model as jformer, CTranslate2 float32 and CTranslate2 int8.

    python bench/bench_deploy.py [--config small] [--batches 1,32] [--beams 1,4]
        [--repeats 10] [--threads 1,2] [--quick]

The model is bench_decode.py's (random float32 params of ``Transformer.init``, key 0),
exported with :mod:`jformer.interop.ctranslate2` into a temporary directory as float32
and as int8 (int8 weights; CTranslate2 computes in int8_float32 on a CPU). The shapes
are bench_decode.py's: source length 32 (EOS included), EXACTLY 32 generated tokens per
sentence (EOS is forbidden until the end: jformer's min_len = max_len, CTranslate2's
min_decoding_length = max_decoding_length = 32), beam search counting 32 tokens per
sentence, batch 1 and 32, greedy and beam 4.

jformer: ``bench_decode.measure`` (one compiled encoder + cache + search program, median
of --repeats calls after a warm-up). CTranslate2: ``translate_batch`` over the pieces of
random ids, median of --repeats calls after a warm-up, for each thread setting: one
worker with intra_threads = each of --threads, and for batches over 1, also --threads
workers of one thread each (inter_threads) splitting the batch (max_batch_size). On
2-core machines CTranslate2's int8 is slow with two intra-op threads (thread wake-up
cost), so the best setting differs between float32 and int8: every setting is printed,
and the side-by-side table takes the best.

Run on a quiet machine (with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, as for the
other benchmarks); figures go to bench/README.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCH))
sys.path.insert(0, BENCH)

import ctranslate2  # noqa: E402

import bench_decode  # noqa: E402
from jformer.interop.ctranslate2 import JformerConverter  # noqa: E402
from jformer.ops import transformer
from jformer.model import Transformer  # noqa: E402

SRC_LEN, GEN_LEN = bench_decode.SRC_LEN, bench_decode.GEN_LEN
QUANTIZATIONS = ("float32", "int8")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="small", choices=sorted(bench_decode.CONFIGS))
    p.add_argument("--batches", default="1,32")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--repeats", type=int, default=10, help="timed calls (median)")
    p.add_argument("--threads", default="1,2",
                   help="CTranslate2 thread counts to try (intra_threads of one worker; "
                        "and as that many one-thread workers for batches over 1)")
    p.add_argument("--quick", action="store_true",
                   help="batch 1 greedy, 2 repeats, one thread: checks the script runs")
    return p.parse_args()


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def vocabulary(vocab_size: int) -> list[str]:
    """Pieces for a random model: the special pieces at jformer's ids, then p4, p5, ..."""
    special = {0: "<pad>", 1: "<unk>", 2: "<s>", 3: "</s>"}
    return [special.get(i, f"p{i}") for i in range(vocab_size)]


def export_model(cfg, params, directory: str) -> dict[str, str]:
    """The model as CTranslate2 directories: {quantization: path}."""
    converter = JformerConverter(cfg, params, vocabulary(cfg.vocab_size), unk_id=1)
    return {q: converter.convert(os.path.join(directory, q), quantization=q)
            for q in QUANTIZATIONS}


def thread_settings(batch: int, threads: list[int]) -> list[tuple[int, int, int]]:
    """(inter_threads, intra_threads, max_batch_size) to try: one worker with n threads;
    n one-thread workers, each taking batch / n sentences."""
    settings = [(1, n, 0) for n in threads]
    settings += [(n, 1, -(-batch // n)) for n in threads if n > 1 and batch > 1]
    return settings


def measure_ct2(model_dir: str, sources: list[list[str]], beam: int, setting, repeats: int
                ) -> float:
    """Tokens/s of ``translate_batch`` (median of ``repeats`` after a warm-up)."""
    inter, intra, max_batch = setting
    translator = ctranslate2.Translator(model_dir, device="cpu", inter_threads=inter,
                                        intra_threads=intra)
    options = dict(beam_size=beam, length_penalty=0.0, min_decoding_length=GEN_LEN,
                   max_decoding_length=GEN_LEN, max_batch_size=max_batch)
    results = translator.translate_batch(sources, **options)  # warm-up
    lengths = {len(r.hypotheses[0]) for r in results}
    if lengths != {GEN_LEN}:
        raise RuntimeError(f"CTranslate2 generated {lengths} tokens, not {GEN_LEN}")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        translator.translate_batch(sources, **options)
        times.append(time.perf_counter() - start)
    return len(sources) * GEN_LEN / statistics.median(times)


def random_sources(vocab: list[str], batch: int, seed: int) -> list[list[str]]:
    """``batch`` sources of SRC_LEN - 1 random pieces (the export appends EOS)."""
    ids = np.random.default_rng(seed).integers(4, len(vocab), (batch, SRC_LEN - 1))
    return [[vocab[i] for i in row] for row in ids]


def _setting_name(setting) -> str:
    inter, intra, max_batch = setting
    return (f"{intra} thread{'s' if intra > 1 else ''}" if inter == 1
            else f"{inter} workers x 1 thread, {max_batch} rows each")


def main(args: argparse.Namespace) -> None:
    batches, beams = ([1], [1]) if args.quick else (_ints(args.batches), _ints(args.beams))
    repeats, threads = (2, [1]) if args.quick else (args.repeats, _ints(args.threads))
    cfg = bench_decode.CONFIGS[args.config]
    dummy = jnp.zeros((1, 4), jnp.int32)
    params = jax.jit(transformer(cfg).init)(jax.random.key(0), dummy, dummy)["params"]
    print(f"jax {jax.__version__}, ctranslate2 {ctranslate2.__version__}, {os.cpu_count()} "
          f"CPUs; {args.config} config, random params, source length {SRC_LEN}, {GEN_LEN} "
          f"generated tokens per sentence, median of {repeats} calls")
    rows, detail = [], []
    with tempfile.TemporaryDirectory() as directory:
        dirs = export_model(cfg, jax.device_get(params), directory)
        for batch in batches:
            for beam in beams:
                row = dict(batch=batch, beam=beam)
                row["jformer"] = bench_decode.measure(args.config, params, batch, beam,
                                                      GEN_LEN, repeats, False, 8)["cached"]
                sources = random_sources(vocabulary(cfg.vocab_size), batch, seed=batch + beam)
                for q in QUANTIZATIONS:
                    best = (0.0, None)
                    for setting in thread_settings(batch, threads):
                        tok_s = measure_ct2(dirs[q], sources, beam, setting, repeats)
                        detail.append((batch, beam, q, _setting_name(setting), tok_s))
                        best = max(best, (tok_s, setting), key=lambda x: x[0])
                    row[q] = best
                print(f"  batch {batch} beam {beam}: jformer {row['jformer']:,.0f}, "
                      f"CTranslate2 float32 {row['float32'][0]:,.0f}, int8 "
                      f"{row['int8'][0]:,.0f} tok/s", flush=True)
                rows.append(row)
    print_tables(rows, detail)


def print_tables(rows: list[dict], detail: list[tuple]) -> None:
    print("\n| batch | search | jformer tok/s | CTranslate2 float32 tok/s | "
          "CTranslate2 int8 tok/s | float32 / jformer | int8 / jformer |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        f32, i8 = r["float32"], r["int8"]
        print(f"| {r['batch']} | {search} | {r['jformer']:,.0f} | {f32[0]:,.0f} "
              f"({_setting_name(f32[1])}) | {i8[0]:,.0f} ({_setting_name(i8[1])}) | "
              f"{f32[0] / r['jformer']:.2f}x | {i8[0] / r['jformer']:.2f}x |")
    print("\nCTranslate2, every thread setting:\n")
    print("| batch | beam | weights | threads | tok/s |")
    print("|---|---|---|---|---|")
    for batch, beam, q, name, tok_s in detail:
        print(f"| {batch} | {beam} | {q} | {name} | {tok_s:,.0f} |")


if __name__ == "__main__":
    main(_parse())
