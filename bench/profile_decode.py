"""Where a decode step's time goes: XLA:CPU's own per-op times, grouped, per generated step.

    python bench/profile_decode.py [--config small] [--batch 1] [--beam 4] [--len 32]
        [--dtype float32|bfloat16|int8] [--calls 10] [--top 12]

Compiles ``decode_batch`` at bench_decode.py's shapes (random parameters, source length
32, exactly ``--len`` generated tokens: EOS forbidden until the end), times it untraced
(median of ``--calls``), then runs ``--calls`` more under ``jax.profiler`` and reads
the op events of its Perfetto trace. An op that runs once per generated step (count =
calls x len) belongs to the step; the rest (encoder, cross-attention projections, cache
set-up, the result) is the per-call part. Step ops are split into products (a ``dot``,
or a fusion holding one, listed by output shape: rank 2 is a weight product [rows, out],
a higher rank an attention product over the cache) and everything else (listed by
fusion kind, with their count per step).

The traced times include the profiler's own cost per op (a microsecond or two), so the
untraced time per call is printed beside them; read the split, not the sum. Timings
vary by 10-30% from hour to hour on the shared 2-core machine: compare within one run.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_decode import ALPHA, CONFIGS, SRC_LEN  # noqa: E402
from jformer.inference.batch_decode import SearchSpec, decode_batch  # noqa: E402
from jformer.model import Transformer  # noqa: E402
from jformer.ops import resolve, transformer  # noqa: E402


_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\w+)\[([\d,]*)\]\S* (\w[\w\-]*)\(")
_CALLS = re.compile(r"calls=%([\w.\-]+)")


@dataclasses.dataclass(frozen=True)
class Op:
    """One HLO instruction of the compiled program: what it is and its output shape."""
    kind: str  # "matmul" (a dot or a fusion holding one) or the op / fusion name stem
    shape: str  # output, e.g. "f32[1,8192]"
    operands: str = ""  # a product's operand dtypes, e.g. "bf16,bf16" ("" for the rest)


def _operands(line: str, match: re.Match, dtypes: dict[str, str]) -> str:
    """The operand dtypes of one instruction line, e.g. "bf16,bf16"."""
    args = line[match.end():].split(")", 1)[0]
    return ",".join(dtypes.get(n, "?") for n in re.findall(r"%([\w.\-]+)", args))


def _dot_operands(lines: list[str]) -> str | None:
    """The operand dtypes of the first dot in one computation's lines, or None."""
    dtypes = {}
    for line in lines:
        m = _INSTR.match(line)
        if m:
            dtypes[m.group(1)] = m.group(2)
            if m.group(4) in ("dot", "convolution"):
                return _operands(line, m, dtypes)
    return None


_TARGET = re.compile(r'custom_call_target="(jformer_\w+)"')


def classify(hlo_text: str) -> dict[str, Op]:
    """Instruction name -> :class:`Op` for every instruction of an optimised HLO module."""
    computations, current = {}, None
    for line in hlo_text.splitlines():
        head = re.match(r"^(?:ENTRY )?%([\w.\-]+) ", line)
        if head and line.rstrip().endswith("{"):
            current = computations.setdefault(head.group(1), [])
        elif current is not None:
            current.append(line)
    dot_operands = {name: _dot_operands(lines) for name, lines in computations.items()}
    ops = {}
    for lines in computations.values():
        dtypes = {}
        for line in lines:
            m = _INSTR.match(line)
            if not m:
                continue
            name, dtype, dims, opcode = m.groups()
            dtypes[name] = dtype
            called = _CALLS.search(line)
            stem = re.sub(r"\.\d+$", "", name)
            if opcode in ("dot", "convolution"):
                ops[name] = Op("matmul", f"{dtype}[{dims}]", _operands(line, m, dtypes))
            elif opcode == "fusion" and called and dot_operands.get(called.group(1)) is not None:
                ops[name] = Op("matmul", f"{dtype}[{dims}]", dot_operands[called.group(1)])
            elif opcode == "custom-call" and _TARGET.search(line):
                # jformer's FFI kernels, by target and output shape
                target = _TARGET.search(line).group(1)
                ops[name] = Op(f"{target} {dtype}[{dims}]", f"{dtype}[{dims}]")
            else:
                ops[name] = Op(stem, f"{dtype}[{dims}]")
    return ops


def summarise(events: list[dict], ops: dict[str, Op], calls: int, steps: int) -> dict:
    """Per-step and per-call microseconds from trace events ('X' events: name, dur in us).

    Returns {"step_matmul": {(shape, operand dtypes): (us/step, n/step)},
    "step_other": {kind: (us, n)},
    "call": us per call outside the step ops}, counting only events named after an HLO
    instruction of ``ops``.
    """
    total, count = collections.defaultdict(float), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ops:
            total[e["name"]] += e["dur"]
            count[e["name"]] += 1
    step_mm, step_other = collections.defaultdict(lambda: [0.0, 0]), collections.defaultdict(
        lambda: [0.0, 0])
    per_call = 0.0
    for name, us in total.items():
        op = ops[name]
        if count[name] == calls * steps:
            group = (step_mm[(op.shape, op.operands)] if op.kind == "matmul"
                     else step_other[op.kind])
            group[0] += us / calls / steps
            group[1] += 1
        else:
            per_call += us / calls
    return {"step_matmul": {k: tuple(v) for k, v in step_mm.items()},
            "step_other": {k: tuple(v) for k, v in step_other.items()}, "call": per_call}


def time_and_trace(run, calls: int) -> tuple[float, list[dict]]:
    """Runs ``run`` once to warm up, ``calls`` times timed, then ``calls`` times traced:
    (median untraced seconds, the trace's events)."""
    run()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), _trace_events(run, calls)


def _trace_events(run, calls: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as logdir:
        with jax.profiler.trace(logdir, create_perfetto_trace=True):
            for _ in range(calls):
                run()
        path, = glob.glob(os.path.join(logdir, "**", "*.trace.json.gz"), recursive=True)
        with gzip.open(path) as f:
            return json.load(f)["traceEvents"]


def _print(summary: dict, untraced_s: float, args: argparse.Namespace) -> None:
    mm, other = summary["step_matmul"], summary["step_other"]
    mm_us, other_us = sum(v[0] for v in mm.values()), sum(v[0] for v in other.values())
    step_us = mm_us + other_us
    print(f"\n{args.config}, batch {args.batch}, beam {args.beam}, {args.len} steps, "
          f"{args.dtype}: untraced {untraced_s * 1e3:.2f} ms per call "
          f"({args.batch * args.len / untraced_s:,.0f} tokens/s)")
    print(f"traced: {step_us:.1f} us per step ({len(mm)} product shapes, "
          f"{sum(v[1] for v in mm.values())} products; "
          f"{sum(v[1] for v in other.values())} other ops), "
          f"{summary['call'] / 1e3:.2f} ms per call outside the steps\n")
    print("| per step | us | share | ops |\n|---|---:|---:|---:|")
    rows = [(f"{'weight' if shape.count(',') == 1 else 'attention'} products {shape} "
             f"({operands})", *v) for (shape, operands), v in mm.items()]
    rows.sort(key=lambda r: -r[1])
    rest = sorted(((f"{k}", *v) for k, v in other.items()), key=lambda r: -r[1])
    for label, us, n in rows + rest[:args.top]:
        print(f"| {label} | {us:.1f} | {us / step_us:.0%} | {n} |")
    if len(rest) > args.top:
        us, n = sum(r[1] for r in rest[args.top:]), sum(r[2] for r in rest[args.top:])
        print(f"| {len(rest) - args.top} other kinds | {us:.1f} | {us / step_us:.0%} | {n} |")
    weights = [v for (shape, _), v in mm.items() if shape.count(",") == 1]
    w_us = sum(v[0] for v in weights)
    print(f"| **weight products** | {w_us:.1f} | {w_us / step_us:.0%} | "
          f"{sum(v[1] for v in weights)} |")
    print(f"| **all products** | {mm_us:.1f} | {mm_us / step_us:.0%} | "
          f"{sum(v[1] for v in mm.values())} |")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="small", choices=sorted(CONFIGS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--len", type=int, default=32, help="generated tokens (= steps)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "int8"),
                   help="int8: float32 activations, the steps' products int8 "
                        "(decode.dtype=int8), over the CPU kernel where it runs")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--top", type=int, default=12, help="other op kinds listed")
    args = p.parse_args(argv)
    int8 = args.dtype == "int8"
    cfg = dataclasses.replace(CONFIGS[args.config], dtype="float32" if int8 else args.dtype)
    dummy = jnp.ones((1, SRC_LEN), jnp.int32)
    params = jax.jit(transformer(cfg).init)(jax.random.key(0), dummy, dummy)["params"]
    inputs = np.random.default_rng(0).integers(4, cfg.vocab_size, (args.batch, SRC_LEN))
    inputs = inputs.astype(np.int32)
    inputs[:, -1] = cfg.eos_id
    spec = SearchSpec("beam" if args.beam > 1 else "greedy", args.beam, max_len=args.len,
                      min_len=args.len)
    model = Transformer(cfg, resolve(cfg, int8=int8))
    # XLA's own products, without the packed weights of jformer.kernels.rows_matmul (a
    # custom call, which this profile cannot split into weight and attention products);
    # int8 steps over the int8 kernel (a custom call: listed as such, with its count)
    prepared = model.ops.cache.prepare(model, params, portable=not int8)
    call_args = (params, prepared, inputs, np.ones(args.batch, bool),
                 jax.random.key(0), np.float32(ALPHA if args.beam > 1 else 0.0))
    compiled = decode_batch.lower(*call_args, model_cfg=cfg, ops=model.ops, spec=spec).compile()

    def run():
        jax.block_until_ready(compiled(*call_args))

    untraced_s, events = time_and_trace(run, args.calls)
    summary = summarise(events, classify(compiled.as_text()), args.calls, args.len)
    _print(summary, untraced_s, args)


if __name__ == "__main__":
    main()
