"""A search step's ranking alone: XLA's forms against the C++ kernels
(jformer/kernels/native_search.py), in one process, float32.

    python bench/bench_search_step.py [--vocab 8192] [--batches 1,32] [--beams 1,4]
        [--steps 200] [--timings 5]

Each form runs --steps times inside one jitted loop (its input moves with the loop
counter, so nothing is hoisted), which leaves Python's dispatch out; the figure is
microseconds a step, best of --timings. Rows: the log-softmax of the B*W rows' logits
(``jformer.search.log_softmax``, which every search ran before); beam search's candidates,
the 2W best of each row's W x V extensions (the CPU set's two-stage
``jformer.kernels.topk.beam_candidates``); and the two together, as a beam step ranks.
Each C++ result is checked against XLA's before it is timed. Names the CPU and its vector
features.
"""
from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jformer.kernels import native, native_search, topk
from jformer.search import log_softmax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention_step import best_us  # noqa: E402
from compare import cpu_features, cpu_name  # noqa: E402


def ranking(normalize, candidates):
    """A beam step's ranking of logits [B, W, V] given alive log-probs [B, W]."""
    def rank(logits_BWV, alive_BW):
        batch, w, vocab = logits_BWV.shape
        logp = normalize(logits_BWV.reshape(batch * w, vocab)).reshape(batch, w, vocab)
        return candidates(logp + alive_BW[:, :, None], 2 * w)
    return rank


def cases(batch: int, beam: int, vocab: int, rng):
    """(name, XLA's form, the C++ form, arguments; the first moves with the loop)."""
    logits = jnp.asarray(3.0 * rng.normal(size=(batch, beam, vocab)), jnp.float32)
    alive = jnp.asarray(-rng.uniform(0, 5, size=(batch, beam)), jnp.float32)
    flat = logits.reshape(batch * beam, vocab)
    yield "log-softmax", log_softmax, native_search.log_softmax, (flat,)
    if beam > 1:
        k = 2 * beam
        yield ("candidates", lambda x: topk.beam_candidates(x, k),
               lambda x: native_search.beam_candidates(x, k), (logits - 5.0,))
        yield ("both", ranking(log_softmax, topk.beam_candidates),
               ranking(native_search.log_softmax, native_search.beam_candidates),
               (logits, alive))


def looped(fn, steps: int):
    """fn run ``steps`` times in one program, its first input nudged by the counter."""
    @jax.jit
    def run(x, *rest):
        def body(i, acc):
            out = fn(x + i.astype(x.dtype) * 1e-6, *rest)
            return acc + jnp.sum(jax.tree.leaves(out)[0])
        return lax.fori_loop(0, steps, body, jnp.float32(0))
    return run


def check(name, xla, cpp, inputs) -> None:
    want, got = jax.jit(xla)(*inputs), jax.jit(cpp)(*inputs)
    for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=2e-5,
                                   err_msg=name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batches", default="1,32")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--timings", type=int, default=5)
    args = p.parse_args()
    if not native.available():
        raise SystemExit("the native kernels could not be built here (see the warning)")
    print(f"{cpu_name()} ({cpu_features()}), {len(os.sched_getaffinity(0))} CPUs; "
          f"jax {jax.__version__}; vocab {args.vocab}; us a step, best of {args.timings} "
          f"x {args.steps} steps in one program\n")
    print("| ranking | batch | beam | XLA | C++ | XLA / C++ |\n|---|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for batch in (int(b) for b in args.batches.split(",")):
        for beam in (int(w) for w in args.beams.split(",")):
            for name, xla, cpp, inputs in cases(batch, beam, args.vocab, rng):
                check(name, xla, cpp, inputs)
                x = best_us(looped(xla, args.steps), inputs, args.steps, args.timings)
                c = best_us(looped(cpp, args.steps), inputs, args.steps, args.timings)
                print(f"| {name} | {batch} | {beam} | {x:,.1f} | {c:,.1f} | {x / c:.2f}x |")


if __name__ == "__main__":
    main()
