"""Where a train step's time goes: XLA:CPU's own per-op times, products by operand dtype.

    python bench/profile_train.py [--config small] [--dtype bfloat16] [--batch 64]
        [--ops auto] [--steps 5] [--top 15]

Builds bench_train.py's one-device train step (random batches of 64 x 32 x 32 tokens,
dropout 0.1, label smoothing 0.1, Adam), times ``--steps`` steps untraced (median),
then runs ``--steps`` more under ``jax.profiler`` and reads the op events of its
Perfetto trace (profile_decode.py's reader). Products (a ``dot``, or a fusion holding
one) are listed by operand dtypes and output shape: in bfloat16 every product should
read bf16 operands (the bf16 kernels run at about twice the float32 rate), so a
"f32,f32" product there is a product that lost its bf16 inputs to a convert. The other
ops are listed by fusion kind (name stem), with their count per step.

The traced times include the profiler's own cost per op, so the untraced step time is
printed beside them; read the split, not the sum. Timings vary by 10-30% from hour to
hour on the shared 2-core machine: compare within one run.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_train import CONFIGS, SRC_LEN, TGT_LEN, _build, model_flops  # noqa: E402
from profile_decode import classify, summarise, time_and_trace  # noqa: E402


def by_operands(products: dict) -> dict[str, tuple[float, int]]:
    """{(shape, operand dtypes): (us, n)} -> {operand dtypes: (us, n)} summed over shapes."""
    out = collections.defaultdict(lambda: [0.0, 0])
    for (_, operands), (us, n) in products.items():
        out[operands][0] += us
        out[operands][1] += n
    return {k: tuple(v) for k, v in out.items()}


def irregular(events: list[dict], ops: dict, steps: int) -> dict[str, tuple[float, float]]:
    """Ops that did not run exactly once per step (inside a loop, e.g. the chunked loss):
    {"kind shape": (us per step, runs per step)}."""
    total, count = collections.defaultdict(float), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ops:
            total[e["name"]] += e["dur"]
            count[e["name"]] += 1
    out = collections.defaultdict(lambda: [0.0, 0.0])
    for name, us in total.items():
        if count[name] != steps:
            op = ops[name]
            key = f"{op.kind} {op.shape}" + (f" ({op.operands})" if op.operands else "")
            out[key][0] += us / steps
            out[key][1] += count[name] / steps
    return {k: tuple(v) for k, v in out.items()}


def _print(summary: dict, looped: dict, step_s: float, args: argparse.Namespace,
           flops: float) -> None:
    mm, other = summary["step_matmul"], summary["step_other"]
    mm_us = sum(v[0] for v in mm.values())
    total_us = mm_us + sum(v[0] for v in other.values()) + summary["call"]
    print(f"\n{args.config}, batch {args.batch} x {SRC_LEN} x {TGT_LEN}, {args.dtype}, "
          f"ops {args.ops}: untraced {step_s * 1e3:.1f} ms per step "
          f"({args.batch * TGT_LEN / step_s:,.0f} target tokens/s, "
          f"{flops / step_s / 1e9:.0f} GFLOP/s of model FLOPs)")
    print(f"traced: {total_us / 1e3:.1f} ms per step, {sum(v[1] for v in mm.values())} "
          f"products, {sum(v[1] for v in other.values())} other ops\n")
    print("| per step | ms | share | ops |\n|---|---:|---:|---:|")
    rows = [(f"products, operands {k}", *v) for k, v in by_operands(mm).items()]
    rows.sort(key=lambda r: -r[1])
    shapes = sorted(((f"product {shape} ({operands})", *v)
                     for (shape, operands), v in mm.items()), key=lambda r: -r[1])
    rest = sorted(((k, *v) for k, v in other.items()), key=lambda r: -r[1])
    for label, us, n in rows + shapes[:args.top] + rest[:args.top]:
        print(f"| {label} | {us / 1e3:.2f} | {us / total_us:.0%} | {n} |")
    if len(rest) > args.top:
        us, n = sum(r[1] for r in rest[args.top:]), sum(r[2] for r in rest[args.top:])
        print(f"| {len(rest) - args.top} other kinds | {us / 1e3:.2f} | {us / total_us:.0%} "
              f"| {n} |")
    if summary["call"]:
        print(f"| ops not run once per step | {summary['call'] / 1e3:.2f} | "
              f"{summary['call'] / total_us:.0%} | - |")
        loops = sorted(((f"looped: {k}, {runs:g} runs", us) for k, (us, runs) in looped.items()),
                       key=lambda r: -r[1])
        for label, us in loops[:args.top]:
            print(f"| {label} | {us / 1e3:.2f} | {us / total_us:.0%} | - |")
    print(f"| **all products** | {mm_us / 1e3:.2f} | {mm_us / total_us:.0%} | "
          f"{sum(v[1] for v in mm.values())} |")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="small", choices=sorted(CONFIGS))
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--ops", default="auto", choices=("auto", "plain", "cpu"))
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=15, help="product shapes and op kinds listed")
    args = p.parse_args(argv)
    cfg, _, step, state, batches = _build(args.config, args.dtype, args.dropout,
                                          args.ops, args.batch)
    compiled = step.lower(state, batches[0]).compile()
    holder = {"state": state, "i": 0}

    def run():
        s, metrics = compiled(holder["state"], batches[holder["i"] % len(batches)])
        jax.block_until_ready((s, metrics))
        holder["state"], holder["i"] = s, holder["i"] + 1

    step_s, events = time_and_trace(run, args.steps)
    ops = classify(compiled.as_text())
    summary = summarise(events, ops, args.steps, 1)
    _print(summary, irregular(events, ops, args.steps), step_s, args,
           model_flops(cfg, args.batch))


if __name__ == "__main__":
    main()
