"""Where a real file's translation time goes: XLA:CPU's per-op times over every program
one ``Translator.translate`` call runs, grouped, beside the time outside the programs.

    python bench/profile_translate.py --workdir W [--checkpoint W/best5] --src FILE
        [--limit N] [--batch-size 64] [--beam 4] [--calls 2] [--dtype float32]
        [--rules STOP:EOS] [--top 14]

bench/profile_decode.py profiles one program at synthetic shapes (exactly ``--len``
tokens, nothing finishes); a file runs a dozen programs (length buckets, shrink stages,
the encoder) whose rows finish at different steps. This script compiles them with one
call of the file (in memory: ``compile_cache="off"``), times ``--calls`` more untraced
(the median is printed), then traces one under ``jax.profiler`` and reads its op events.

An op event names its HLO module and instruction (``args.hlo_module``, ``hlo_op``), and
every decode program is the module ``jit_decode_program``, so an instruction name is
looked up in all compiled programs at once and labelled by what it is there
(:func:`profile_decode.classify`): a weight product by its output width and operand
dtypes (``[*, V]`` is the output projection), an attention product by its rank, a
jformer kernel by its target, anything else by its op or fusion kind. A name that is
a different kind of op in different programs is counted as "(ambiguous)".

Printed: the traced call's wall time; per device, the time its thread spent inside
programs (``ThunkExecutor::Execute``), the rest being host work (batching, keys,
tokenizing, reading results) or waiting for the other device's share of the cores; the
op time by label, summed over threads (ops of two devices overlap, so the sum can pass
the wall time; read the shares). Traced ops cost the profiler a microsecond or two each.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from profile_decode import Op, _trace_events, classify  # noqa: E402

AMBIGUOUS = "(ambiguous)"
EXECUTE = "ThunkExecutor::Execute (wait for completion)"


def label(op: Op) -> str:
    """What an instruction is, without its row count (programs differ in rows)."""
    dims = op.shape[op.shape.index("[") + 1:-1].split(",")
    if op.kind.startswith("jformer_"):  # a kernel, by target and output width
        return f"{op.kind.split()[0]} [*,{dims[-1]}]" if dims[-1] else op.kind.split()[0]
    if op.kind != "matmul":
        return op.kind
    if len(dims) == 2:
        return f"weight product [*,{dims[1]}] ({op.operands})"
    return f"attention product, rank {len(dims)} ({op.operands})"


def labels_by_name(hlo_texts: list[str]) -> dict[str, str]:
    """Instruction name -> :func:`label`, over all programs (AMBIGUOUS where they differ)."""
    seen: dict[str, set[str]] = collections.defaultdict(set)
    for text in hlo_texts:
        for name, op in classify(text).items():
            seen[name].add(label(op))
    return {name: (next(iter(s)) if len(s) == 1 else AMBIGUOUS) for name, s in seen.items()}


def summarise(events: list[dict], labels: dict[str, str]) -> dict:
    """{"ops": {label: (seconds, count)}, "inside": {device: seconds in programs},
    "skipped": {op kind: events}}: op events are counted by their instruction's label;
    those of instructions :func:`classify` names none of (tuple-shaped ones: a ``while``,
    whose events span its body's ops, a ``sort``, a kernel with several outputs) are only
    counted, never summed, so no time counts twice (and a multi-output kernel's own time
    is left out of the table)."""
    ops = collections.defaultdict(lambda: [0.0, 0])
    skipped = collections.Counter()
    inside = collections.defaultdict(float)
    for e in events:
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        if e["name"] == EXECUTE:
            inside[args.get("device_ordinal", "?")] += e["dur"] / 1e6
        elif args.get("hlo_op") in labels:
            group = ops[labels[args["hlo_op"]]]
            group[0] += e["dur"] / 1e6
            group[1] += 1
        elif "hlo_op" in args:  # tuple-shaped: a while (spanning its body), a sort, ...
            skipped[args["hlo_op"].split(".")[0]] += 1
    return {"ops": {k: tuple(v) for k, v in ops.items()}, "inside": dict(inside),
            "skipped": dict(skipped)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--src", required=True, help="one source sentence per line")
    p.add_argument("--limit", type=int, default=0, help="first N lines (0: all)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--beam", type=int, default=None)
    p.add_argument("--calls", type=int, default=2, help="untraced calls timed")
    p.add_argument("--dtype", default=None, help="decode.dtype (default: the run's)")
    p.add_argument("--rules", default=None, help="STOP:EOS, e.g. exact:all (default: the "
                   "run's decode.stop and decode.eos_candidates)")
    p.add_argument("--top", type=int, default=14, help="op labels listed")
    args = p.parse_args(argv)

    from jformer.inference import Translator
    from jformer.workdir import files

    with open(args.src, encoding="utf-8") as f:
        sources = [line.rstrip("\n") for line in f]
    sources = sources[:args.limit] if args.limit else sources
    decode = files.load_config(args.workdir).decode
    changes = {} if args.dtype is None else {"dtype": args.dtype}
    if args.rules:
        changes["stop"], changes["eos_candidates"] = args.rules.split(":")
    translator = Translator.from_checkpoint(
        args.workdir, args.checkpoint, decode_cfg=dataclasses.replace(decode, **changes),
        compile_cache="off")
    kwargs = {k: v for k, v in (("batch_size", args.batch_size), ("beam_size", args.beam))
              if v is not None}

    def run():
        translator.translate(sources, **kwargs)

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = []
    for _ in range(args.calls):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    spans = []

    def timed_run():
        start = time.perf_counter()
        run()
        spans.append(time.perf_counter() - start)

    events = _trace_events(timed_run, 1)
    traced = spans[0]
    texts = [program.as_text() for program in translator.programs._programs.values()]
    summary = summarise(events, labels_by_name(texts))

    d = translator.decode_cfg
    print(f"\n{len(sources)} sentences, {len(texts)} programs, decode.dtype {d.dtype}, "
          f"rules {d.stop}:{d.eos_candidates}, {kwargs or 'the run defaults'}: first call "
          f"{first:.2f} s (compiles), untraced median {statistics.median(times):.2f} s "
          f"({len(times)} calls), traced {traced:.2f} s")
    for device, s in sorted(summary["inside"].items()):
        print(f"device {device}: {s:.2f} s inside programs, {traced - s:.2f} s outside")
    ops = summary["ops"]
    total = sum(s for s, _ in ops.values())
    print("\n| op (summed over threads) | s | share | events |\n|---|---:|---:|---:|")
    rows = sorted(ops.items(), key=lambda kv: -kv[1][0])
    for name, (s, n) in rows[:args.top]:
        print(f"| {name} | {s:.3f} | {s / total:.0%} | {n:,} |")
    rest = rows[args.top:]
    if rest:
        s, n = sum(v[0] for _, v in rest), sum(v[1] for _, v in rest)
        print(f"| {len(rest)} other labels | {s:.3f} | {s / total:.0%} | {n:,} |")
    products = sum(s for name, (s, _) in ops.items() if "product" in name or "matmul" in name)
    # jformer_rows_matmul: the packed float32 products of steps of <= 128 rows
    print(f"| **all ops** | {total:.3f} | 100% | {sum(n for _, n in ops.values()):,} |")
    print(f"| **products** (XLA's and jformer_rows_matmul) | {products:.3f} | "
          f"{products / total:.0%} | |")

    if summary["skipped"]:
        print(f"\n(not summed, tuple-shaped: events of {summary['skipped']}; a while's span "
              "its body's ops, multi-output kernels' own time is left out)")


if __name__ == "__main__":
    main()
