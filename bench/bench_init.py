"""Compile and run seconds of ``model.init``: ``jax.jit``'s defaults against
:func:`jformer.model.init.run_once` (a program that runs once), alternating.

    python bench/bench_init.py [--configs tiny,small,base] [--rounds 3]

Prints, per config and way, the median seconds to compile and to run, and whether the two
ways' parameters are equal bit for bit. Each round lowers and compiles afresh (no
persistent compilation cache), as a training run's start does.
"""
import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.dirname(os.path.abspath(__file__))]

import jax  # noqa: E402
import numpy as np  # noqa: E402

import bench_decode  # noqa: E402
from jformer.config import ModelConfig  # noqa: E402
from jformer.model import init  # noqa: E402
from jformer.ops import transformer  # noqa: E402

CONFIGS = {
    # tests/train/test_step.py's model
    "tiny": ModelConfig(vocab_size=31, d_model=16, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=1, d_ff=24, max_len=16, dropout_rate=0.0),
    **bench_decode.CONFIGS,  # small (the Multi30k shape) and base, as decoding measures them
}


def measure(model_init, args, options: dict) -> tuple[float, float, list]:
    t0 = time.perf_counter()
    compiled = jax.jit(model_init).lower(*args).compile(compiler_options=options)
    t1 = time.perf_counter()
    params = jax.block_until_ready(compiled(*args))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, [np.asarray(x) for x in jax.tree.leaves(params)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="tiny,small,base")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    backend = jax.default_backend()
    once = init._RUN_ONCE_OPTIONS.get(backend, {})
    print(f"backend {backend}; run_once's options: {once or 'none (jit defaults)'}")
    print("| config | way | compile s (median) | run s (median) | equal params |")
    print("|---|---|---:|---:|---|")
    for name in a.configs.split(","):
        cfg = CONFIGS[name]
        model = transformer(cfg)
        x = np.ones((1, min(cfg.max_len, 64)), np.int32)
        args = (jax.random.PRNGKey(0), x, x)
        times = {"jax.jit": ([], []), "run_once": ([], [])}
        leaves = {}
        for _ in range(a.rounds):
            for way, options in (("jax.jit", {}), ("run_once", once)):
                c, r, leaves[way] = measure(model.init, args, options)
                times[way][0].append(c)
                times[way][1].append(r)
        equal = all(np.array_equal(u, v) for u, v in zip(leaves["jax.jit"], leaves["run_once"]))
        for way, (c, r) in times.items():
            print(f"| {name} | {way} | {statistics.median(c):.2f} | {statistics.median(r):.2f} "
                  f"| {equal} |", flush=True)


if __name__ == "__main__":
    main()
