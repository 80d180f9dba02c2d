"""The int8 decode-step product alone: XLA's float32 dot, XLA's int8 dot and each form of
jformer's int8 kernel that this CPU runs (jformer/kernels/int8_matmul.py), in one process.

    python bench/bench_int8_matmul.py [--shapes 4x512x512,...] [--calls 100] [--timings 5]

Prints a markdown table of microseconds a call (best of --timings timings of --calls
calls, after one compiling call) for x [M, K] float32 . w [K, N], and the speed-up of the
fastest kernel form over the float32 dot. Every form's result is checked equal to the
plain form (jformer.model.int8.matmul) before it is timed. Names the CPU and its vector
features, since the forms depend on them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jformer.kernels import int8_matmul, native
from jformer.model import int8

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import cpu_features, cpu_name  # noqa: E402

SHAPES = "1x256x1024,4x512x512,4x512x8000,32x256x1024,32x256x8192,32x512x2048,128x512x2048,128x2048x512,256x512x2048"


def best_us(fn, args, calls: int, timings: int) -> float:
    fn(*args).block_until_ready()
    best = float("inf")
    for _ in range(timings):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SHAPES, help="MxKxN,...")
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--timings", type=int, default=5)
    args = p.parse_args()
    if not native.available():
        raise SystemExit("the kernels' library did not build or load (see the warning)")
    forms = [f for f in int8_matmul.FORMS if f.fits_cpu()]
    print(f"{cpu_name()}, {jax.local_device_count()} device(s), "
          f"{len(os.sched_getaffinity(0))} CPUs; features: {cpu_features()}; "
          f"jax {jax.__version__}; best of {args.timings} x "
          f"{args.calls} calls, microseconds\n")
    heads = ["x [M, K] . w [K, N]", "f32", "XLA int8"] + [f.name for f in forms]
    print("| " + " | ".join(heads) + " | f32 / best form |")
    print("|---" + "|---:" * (len(heads)) + "|")
    rng = np.random.default_rng(0)
    f32 = jax.jit(lambda x, w: x @ w)
    plain = jax.jit(int8.matmul)
    for shape in args.shapes.split(","):
        m, k, n = map(int, shape.split("x"))
        x = jnp.asarray(rng.normal(size=(m, k)).astype(np.float32))
        w = jnp.asarray(rng.normal(size=(k, n)).astype(np.float32))
        q = int8.quantize_weight(w)
        want = np.asarray(plain(x, q))
        row = [best_us(f32, (x, w), args.calls, args.timings),
               best_us(plain, (x, q), args.calls, args.timings)]
        for f in forms:
            packed = int8_matmul.pack({"w": q}, f)["w"]
            fn = jax.jit(lambda x, p, f=f: int8_matmul.matmul(x, p, f))
            np.testing.assert_array_equal(np.asarray(fn(x, packed)), want)
            row.append(best_us(fn, (x, packed), args.calls, args.timings))
        cells = [f"{v:,.0f}" if v >= 100 else f"{v:.1f}" for v in row]
        print(f"| {m} x {k} x {n} | " + " | ".join(cells)
              + f" | {row[0] / min(row[2:]):.2f}x |")


if __name__ == "__main__":
    main()
