"""A decode step's attention alone: XLA's forms (jformer/kernels/attention.py) against the
C++ kernels (jformer/kernels/native_attention.py), in one process, float32.

    python bench/bench_attention_step.py [--heads 4] [--head-dim 64] [--memory 32]
        [--max-len 64] [--batches 1,32] [--steps 200] [--timings 5]

Each form runs --steps times inside one jitted loop (a step's query moves with the loop
counter, so nothing is hoisted), which leaves Python's dispatch out; the figure is
microseconds a step, best of --timings. Rows: the per-row (greedy) self-attention step at
position max_len / 2, the cross-attention step over the memory with 1 and 4 queries a row,
and beam 4's slot-addressed self-attention step. Each C++ result is checked equal to XLA's
before it is timed. Names the CPU and its vector features.
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

from jformer.kernels import attention, native, native_attention

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import cpu_features, cpu_name  # noqa: E402


def _heads_first(x):  # [B, L, H, K] <-> [B, H, L, K]
    return x.transpose(0, 2, 1, 3)


def xla_row(q, kt, v, index, k, v_own):
    earlier = (jnp.arange(kt.shape[3]) < index)[None, None, None, :]
    return _heads_first(attention.step_attention(_heads_first(q), kt, v, earlier,
                                                 _heads_first(k), _heads_first(v_own)))


def cases(batch: int, heads: int, head_dim: int, memory: int, max_len: int, rng):
    """(name, XLA's form, the C++ form, arguments; the first is the query)."""
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    index = jnp.int32(max_len // 2)
    own = (f(batch, 1, heads, head_dim), f(batch, 1, heads, head_dim))
    yield ("self, per row", xla_row, native_attention.row_attention,
           (f(batch, 1, heads, head_dim), f(batch, heads, head_dim, max_len),
            f(batch, heads, max_len, head_dim), index, *own))
    valid = np.arange(memory)[None, :] < rng.integers(memory // 2, memory + 1, (batch, 1))
    mask = jnp.asarray(valid)[:, None, None, :]
    for g in (1, 4):
        yield (f"cross, {g} quer{'y' if g == 1 else 'ies'}", attention.cached_attention,
               native_attention.memory_attention,
               (f(batch, heads, g, head_dim), f(batch, heads, head_dim, memory),
                f(batch, heads, memory, head_dim), mask))
    beam = 4
    slot = jnp.asarray(rng.integers(0, beam, (batch, beam, max_len)), jnp.int32)
    yield ("self, beam 4 slots", attention.beam_slot_attention,
           native_attention.beam_slot_attention,
           (f(batch, beam, heads, head_dim), f(batch, heads, head_dim, max_len * beam),
            f(batch, heads, max_len * beam, head_dim), slot, index,
            f(batch, beam, heads, head_dim), f(batch, beam, heads, head_dim)))


def looped(fn, steps: int):
    """fn run ``steps`` times in one program, its query nudged by the loop counter."""
    @jax.jit
    def run(q, *rest):
        def body(i, acc):
            return acc + fn(q + i.astype(q.dtype) * 1e-6, *rest)
        return lax.fori_loop(0, steps, body, jnp.zeros(q.shape, jnp.float32))
    return run


def best_us(fn, args, steps: int, timings: int) -> float:
    fn(*args).block_until_ready()
    best = float("inf")
    for _ in range(timings):
        start = time.perf_counter()
        fn(*args).block_until_ready()
        best = min(best, (time.perf_counter() - start) / steps)
    return best * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--memory", type=int, default=32, help="encoder memory columns")
    p.add_argument("--max-len", type=int, default=64, help="self-attention cache positions")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--timings", type=int, default=5)
    args = p.parse_args()
    if not native.available():
        raise SystemExit("the native kernels could not be built here (see the warning)")
    print(f"{cpu_name()} ({cpu_features()}), {len(os.sched_getaffinity(0))} CPUs; "
          f"jax {jax.__version__}; heads {args.heads}, head_dim "
          f"{args.head_dim}, memory {args.memory} (rows valid from half to all), cache "
          f"{args.max_len}, step at {args.max_len // 2}; us a step, best of {args.timings} "
          f"x {args.steps} steps in one program\n")
    print("| step | batch | XLA | C++ | XLA / C++ |\n|---|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for batch in (int(b) for b in args.batches.split(",")):
        for name, xla, cpp, inputs in cases(batch, args.heads, args.head_dim, args.memory,
                                            args.max_len, rng):
            np.testing.assert_allclose(np.asarray(jax.jit(cpp)(*inputs)),
                                       np.asarray(jax.jit(xla)(*inputs)), rtol=2e-5,
                                       atol=2e-5, err_msg=name)
            x = best_us(looped(xla, args.steps), inputs, args.steps, args.timings)
            c = best_us(looped(cpp, args.steps), inputs, args.steps, args.timings)
            print(f"| {name} | {batch} | {x:,.1f} | {c:,.1f} | {x / c:.2f}x |")


if __name__ == "__main__":
    main()
