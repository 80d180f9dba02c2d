"""Streaming translation: time to the first shown text against the full latency.

    python bench/streaming.py --workdir /work/democlone/runs/demo
    python bench/streaming.py --workdir /work/runs/m30 --checkpoint-dir /work/runs/m30/avg5 \\
        --dtype auto --source /work/shared/data/multi30k/test2016.en
        [--sentences 5] [--methods greedy,beam] [--steps 2] [--repeats 3]

For each sentence (the first --sentences lines of --source, or of the run's demo test
split) and method, after one untimed call of each (compiling its programs):

- translate: ``Translator.translate([sentence])``, the whole translation at once;
- first: :func:`jformer.inference.stream` until its first update (greedy: the first
  settled text; beam: the first best hypothesis);
- stream: the same stream until its done update.

Each figure is the median of --repeats runs, in milliseconds; the stream's final text is
checked equal to translate's. Decoding one sentence at a time, on whatever the machine
is doing: report figures with the load they were measured under.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from jformer.data import demo  # noqa: E402
from jformer.inference import Translator, stream  # noqa: E402
from jformer.workdir import files  # noqa: E402


def sentences_of(args, config) -> list[str]:
    if args.source:
        with open(args.source, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip()]
    else:
        d = config.data
        lines = [en for en, _ in demo.generate_pairs(d.demo_seed, d.demo_num_train,
                                                     d.demo_num_eval,
                                                     d.demo_num_test)["test"]]
    return lines[:args.sentences]


def timed_stream(translator, sentence: str, kwargs: dict, steps: int
                 ) -> tuple[float, float, str, int]:
    """(ms to the first update, ms to done, final text, updates)."""
    start = time.perf_counter()
    first, count = None, 0
    for update in stream(translator, sentence, steps=steps, **kwargs):
        count += 1
        if first is None:
            first = time.perf_counter()
        if update.done:
            end = time.perf_counter()
            return 1e3 * (first - start), 1e3 * (end - start), update.text, count
    raise AssertionError("the stream ended without a done update")


def bench(translator, sentence: str, method: str, args) -> dict:
    kwargs = {"method": method}
    if method == "beam":
        kwargs["beam_size"] = args.beam
    (want,) = translator.translate([sentence], **kwargs)  # compiles
    timed_stream(translator, sentence, kwargs, args.steps)  # compiles
    full, first, streamed = [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        translator.translate([sentence], **kwargs)
        full.append(1e3 * (time.perf_counter() - start))
        t_first, t_done, text, updates = timed_stream(translator, sentence, kwargs,
                                                      args.steps)
        if text != want:
            raise AssertionError(f"stream != translate for {sentence!r}: {text!r} vs {want!r}")
        first.append(t_first)
        streamed.append(t_done)
    return dict(translate=statistics.median(full), first=statistics.median(first),
                stream=statistics.median(streamed), updates=updates,
                tokens=len(translator.tokenizer.encode([want], add_eos=True)[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=os.path.join(REPO, "runs", "demo"))
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--source", default=None, help="one sentence a line")
    parser.add_argument("--sentences", type=int, default=5)
    parser.add_argument("--methods", default="greedy,beam")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="decode steps per update")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default=None, help="decode.dtype (default: the run's; "
                        "auto: float32 on a CPU)")
    args = parser.parse_args()
    config = files.load_config(args.workdir)
    decode = config.decode if args.dtype is None else dataclasses.replace(config.decode,
                                                                        dtype=args.dtype)
    translator = Translator.from_checkpoint(args.workdir, args.checkpoint_dir,
                                            decode_cfg=decode)
    print(f"{args.workdir} (checkpoint {args.checkpoint_dir or 'latest'}), decode.dtype="
          f"{translator.decode_cfg.dtype}, steps per update {args.steps}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'method':7} {'tokens':>6} {'updates':>7} {'first ms':>9} {'stream ms':>9} "
          f"{'translate ms':>12}  sentence")
    for method in args.methods.split(","):
        rows = []
        for sentence in sentences_of(args, config):
            r = bench(translator, sentence, method, args)
            rows.append(r)
            print(f"{method:7} {r['tokens']:6d} {r['updates']:7d} {r['first']:9.1f} "
                  f"{r['stream']:9.1f} {r['translate']:12.1f}  {sentence[:50]}")
        med = {k: statistics.median(r[k] for r in rows) for k in ("first", "stream",
                                                                   "translate")}
        print(f"{method:7} median: first {med['first']:.1f} ms, stream {med['stream']:.1f} "
              f"ms, translate {med['translate']:.1f} ms "
              f"(first / translate = {med['first'] / med['translate']:.2f})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
