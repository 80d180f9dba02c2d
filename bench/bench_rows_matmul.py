"""The decoder's weight products at decode-step row counts: XLA's dot against
jformer.kernels.rows_matmul over packed weights.

A ``lax.fori_loop`` of one decode step's 19 weight products of the small config (three
layers of Q/K/V, output, cross-attention query and output, FFN in and out, then the
[256, 8192] output projection), each followed by a tanh so that every product waits for
the one before, as in a step. Prints microseconds per step (the fastest of 3 calls per
round, median and range over the rounds, the two forms alternating), and the one-off cost
of packing the weights.

    python bench/bench_rows_matmul.py [--rows 1,2,4,8,16,32,64,128] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jformer.kernels import rows_matmul  # noqa: E402

LAYER = [(256, 768), (256, 256), (256, 256), (256, 256), (256, 1024), (1024, 256)]
SHAPES = LAYER * 3 + [(256, 8192)]  # [K, N] of each product, in step order
STEPS = 50


def _loop(product):
    def step(x_MD, weights):
        h = x_MD
        for w, (k, n) in zip(weights, SHAPES):
            h = jnp.tanh(product(h[:, :k], w, n))
            if n < 1024:  # the next product may read up to 1,024 columns
                h = jnp.tile(h, (1, 1024 // n))
        return x_MD + 1e-3 * h[:, :256]
    return jax.jit(lambda x, ws: lax.fori_loop(0, STEPS, lambda i, x: step(x, ws), x))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1,2,4,8,16,32,64,128")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    if not rows_matmul.available():
        sys.exit("jformer.kernels.rows_matmul could not be built here (see the warning)")
    rng = np.random.default_rng(0)
    plain = [jnp.asarray(rng.normal(size=s) * 0.05, jnp.float32) for s in SHAPES]
    pack = jax.jit(lambda ws: [rows_matmul.pack(w) for w in ws])
    jax.block_until_ready(pack(plain))
    start = time.perf_counter()
    packed = jax.block_until_ready(pack(plain))
    pack_ms = (time.perf_counter() - start) * 1e3
    forms = {"XLA dot": (_loop(lambda x, w, n: x @ w), plain),
             "rows_matmul": (_loop(rows_matmul.matmul), packed)}
    print(f"jax {jax.__version__}, {os.cpu_count()} CPUs; {len(SHAPES)} products of "
          f"{sum(k * n for k, n in SHAPES) * 4 / 2 ** 20:.1f} MiB of float32 weights per "
          f"step; us per step, median (range) of {args.rounds} rounds\n")
    print("| rows | XLA dot | rows_matmul | XLA / rows_matmul |\n|---:|---:|---:|---:|")
    for m in (int(r) for r in args.rows.split(",")):
        x = jnp.ones((m, 256), jnp.float32)
        got = {name: np.asarray(fn(x, w)) for name, (fn, w) in forms.items()}
        np.testing.assert_allclose(got["rows_matmul"], got["XLA dot"], rtol=1e-4, atol=1e-4)
        us = {name: [] for name in forms}
        for _ in range(args.rounds):
            for name, (fn, w) in forms.items():
                best = min(_timed(fn, x, w) for _ in range(3))
                us[name].append(best / STEPS * 1e6)
        a, b = (np.median(us[name]) for name in forms)
        cells = [f"{np.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" for v in us.values()]
        print(f"| {m} | {cells[0]} | {cells[1]} | {a / b:.2f}x |", flush=True)
    print(f"\npacking the 19 weights (once per model): {pack_ms:.1f} ms")


def _timed(fn, x, w) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(x, w))
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
