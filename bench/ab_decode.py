"""Two checkouts' compiled decode programs timed in alternation: a paired A/B.

    git worktree add /tmp/base <commit>
    python bench/ab_decode.py --base /tmp/base --head . [--shapes 1x1,1x4,32x1,32x4]
        [--rounds 30] [--block-s 0.3] [--config small] [--rows-kernel on|off] [--json PATH]

``compare_commits.py`` runs each checkout's benchmark in its own process, one after the
other, so minutes pass between the two figures of a round, and on a shared 2-core machine
the load drifts by more than the change being looked for. Here one long-lived worker per
checkout compiles every shape once, through that checkout's own
``bench/bench_decode.py`` (``prepare``: random float32 parameters from key 0, source
length 32, exactly 32 generated tokens). The coordinator then asks the workers in turn,
in blocks of about ``--block-s`` seconds of calls, alternating which goes first; while one
times, the other waits on its pipe. Drift between two neighbouring blocks is small, so the
per-round ratio head/base is a paired measurement. ``--rows-kernel off`` prepares both
without packed weights (``prepare(..., rows_kernel=False)``), so that both decode over
XLA's dot whatever each checkout would choose on this CPU.

Printed per shape: the median seconds per call of each checkout over all timed calls, as
tokens/s; head/base from those medians; the median and the 10th-90th percentile range of
the per-round ratios; and how many rounds head was the faster. A range that holds 1.0 is
no change that this run can see. Both checkouts must pick the same tokens, which is
checked once per shape. Nothing else may run on the machine meanwhile.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

GEN_LEN = 32  # bench_decode's generated tokens per sentence (its GEN_LEN)


def worker(tree: str) -> None:
    """Serve one checkout: ``prepare NAME BATCH BEAM ROWS_KERNEL`` compiles (and answers
    the tokens), ``time KEY N`` answers N per-call seconds, ``quit`` ends."""
    replies = os.fdopen(os.dup(1), "w")  # the protocol's channel; anything else that
    os.dup2(2, 1)  # prints (a compiler, a library) goes to stderr
    sys.path.insert(0, tree)
    sys.path.insert(0, os.path.join(tree, "bench"))
    import jax
    import jax.numpy as jnp
    import numpy as np
    import bench_decode as bd  # the checkout's own module: its prepare, its model

    sys.argv = [sys.argv[0]]  # the checkout's own defaults (its chunk size)
    chunk = bd._parse().chunk_size
    params, programs = {}, {}
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "quit":
            return
        if cmd[0] == "prepare":
            name, batch, beam, rows_kernel = cmd[1], int(cmd[2]), int(cmd[3]), cmd[4] == "on"
            if name not in params:
                build = getattr(bd, "transformer", None) or bd.Transformer
                dummy = jnp.zeros((1, 4), jnp.int32)
                params[name] = jax.jit(build(bd.CONFIGS[name]).init)(
                    jax.random.key(0), dummy, dummy)["params"]
            compiled, args, _, _ = bd.prepare(name, params[name], batch, beam, GEN_LEN,
                                              chunk, rows_kernel=rows_kernel)
            tokens = np.asarray(jax.block_until_ready(compiled(*args)).tokens)
            programs[f"{name}:{batch}:{beam}"] = (compiled, args)
            reply = {"tokens": tokens.tolist()}
        else:
            compiled, args = programs[cmd[1]]
            times = []
            for _ in range(int(cmd[2])):
                start = time.perf_counter()
                jax.block_until_ready(compiled(*args))
                times.append(time.perf_counter() - start)
            reply = {"times": times}
        print(json.dumps(reply), file=replies, flush=True)


class Worker:
    def __init__(self, tree: str):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        self.tree = tree
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", os.path.abspath(tree)],
            cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise SystemExit(f"{self.tree}: the worker exited ({self.proc.wait()}) on "
                             f"{line!r}")
        return json.loads(answer)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def compare_shape(base: Worker, head: Worker, name: str, batch: int, beam: int,
                  rounds: int, block_s: float, rows_kernel: str = "on") -> dict:
    key = f"{name}:{batch}:{beam}"
    got = [w.ask(f"prepare {name} {batch} {beam} {rows_kernel}") for w in (base, head)]
    if got[0]["tokens"] != got[1]["tokens"]:
        raise SystemExit(f"{key}: the two checkouts decode different tokens")
    probe = statistics.median(base.ask(f"time {key} 3")["times"]
                              + head.ask(f"time {key} 3")["times"])
    calls = max(1, round(block_s / probe))
    times = {"base": [], "head": []}
    ratios = []
    for r in range(rounds):
        order = (("head", head), ("base", base)) if r % 2 else (("base", base), ("head", head))
        block = {}
        for label, w in order:
            t = w.ask(f"time {key} {calls}")["times"]
            times[label] += t
            block[label] = statistics.median(t)
        ratios.append(block["base"] / block["head"])  # > 1: head faster
    tokens = batch * GEN_LEN
    base_s, head_s = statistics.median(times["base"]), statistics.median(times["head"])
    return dict(shape=f"{name} batch {batch} beam {beam}", calls_per_block=calls,
                rounds=rounds, base_tok_s=tokens / base_s, head_tok_s=tokens / head_s,
                ratio=base_s / head_s, ratio_median=statistics.median(ratios),
                ratio_p10=percentile(ratios, 0.1), ratio_p90=percentile(ratios, 0.9),
                head_faster=sum(x > 1 for x in ratios))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", help="the checkout compared against (required)")
    p.add_argument("--head", default=".", help="the checkout under test")
    p.add_argument("--config", default="small", choices=("small", "base"))
    p.add_argument("--shapes", default="1x1,1x4,32x1,32x4", help="BATCHxBEAM, comma-separated")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--block-s", type=float, default=0.3,
                   help="seconds of calls each checkout times per round")
    p.add_argument("--rows-kernel", default="on", choices=("on", "off"),
                   help="off: both prepared without packed weights (default on: as each "
                        "checkout prepares them)")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    if not args.base:
        p.error("--base is required")
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    commits = {t: subprocess.run(["git", "-C", t, "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip() or "?"
               for t in (args.base, args.head)}
    print(f"base {args.base} ({commits[args.base]}), head {args.head} "
          f"({commits[args.head]}); {args.rounds} rounds of ~{args.block_s} s blocks, "
          f"alternating; {GEN_LEN} generated tokens per sentence; rows kernel "
          f"{args.rows_kernel}")
    base, head = Worker(args.base), Worker(args.head)
    rows = []
    try:
        for batch, beam in shapes:
            rows.append(compare_shape(base, head, args.config, batch, beam, args.rounds,
                                      args.block_s, args.rows_kernel))
            print(f"  {rows[-1]['shape']}: head/base {rows[-1]['ratio']:.3f}", flush=True)
    finally:
        base.close()
        head.close()
    print("\n| shape | calls/block | base tok/s | head tok/s | head/base (medians) "
          "| per-round ratio: median [p10, p90] | rounds head faster |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['shape']} | {r['calls_per_block']} | {r['base_tok_s']:,.0f} "
              f"| {r['head_tok_s']:,.0f} | {r['ratio']:.3f} | {r['ratio_median']:.3f} "
              f"[{r['ratio_p10']:.3f}, {r['ratio_p90']:.3f}] "
              f"| {r['head_faster']} / {r['rounds']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"commits": commits, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
