"""Two checkouts of jformer side by side: bench_train.py and bench_decode.py, interleaved.

    git worktree add /tmp/base <commit>
    python bench/compare_commits.py --base /tmp/base --head . --rounds 4 [--parts train]

Each round runs every measurement once per checkout, one process each, alternating which
checkout goes first (odd rounds: head first), so drift in the machine's load hits both
alike. The figures are read from the markdown tables the scripts print, so a checkout
from before the scripts gained --json still compares. It prints the median tokens/s per
checkout, the head/base ratio, and each checkout's spread over the rounds (max/min - 1):
a ratio inside the larger spread is noise.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TRAIN = ["bench/bench_train.py", "--configs", "small"]  # its quiet-machine gate on
DECODE = ["bench/bench_decode.py", "--configs", "small", "--recompute", "none"]


def table_rows(text: str, key_column: str) -> list[dict[str, str]]:
    """The rows of every markdown table in ``text`` whose header holds ``key_column``."""
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells if key_column in cells else None
        elif not set(line) <= set("|-: "):
            rows.append(dict(zip(header, cells)))
    return rows


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def measure(tree: str, argv: list[str]) -> dict[str, float]:
    """{label: tokens/s} from one run of a bench script in checkout ``tree``."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{tree}: {' '.join(argv)} failed ({out.returncode}):\n"
                         f"{out.stderr[-2000:]}")
    if argv[0].endswith("bench_train.py"):
        return {f"train {r['config']} {r['dtype']}": number(r["tgt tok/s"])
                for r in table_rows(out.stdout, "tgt tok/s") if "dtype" in r}
    return {f"decode {r['config']} batch {r['batch']} beam {r['beam']}":
            number(r["cached tok/s"]) for r in table_rows(out.stdout, "cached tok/s")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="checkout to compare against")
    p.add_argument("--head", default=".", help="checkout under test")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--steps", type=int, default=20, help="timed train steps")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--repeats", type=int, default=5, help="timed decode calls (median)")
    p.add_argument("--parts", default="train,decode",
                   help="which benchmarks: train, decode or both (comma-separated)")
    p.add_argument("--json", help="also write every round's figures here")
    args = p.parse_args(argv)
    parts = {
        "train": TRAIN + ["--dtypes", args.dtypes, "--steps", str(args.steps)],
        "decode": DECODE + ["--batches", args.batches, "--beams", args.beams,
                            "--repeats", str(args.repeats)]}
    chosen = [name.strip() for name in args.parts.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(parts))
    if unknown or not chosen:
        p.error(f"--parts: expected train and/or decode, got {args.parts!r}")
    runs = [parts[name] for name in chosen]
    trees = {"base": args.base, "head": args.head}
    figures: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
    for r in range(args.rounds):
        order = ["head", "base"] if r % 2 == 0 else ["base", "head"]
        for run in runs:
            for name in order:
                for label, value in measure(trees[name], run).items():
                    figures[name].setdefault(label, []).append(value)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"base {os.path.abspath(args.base)}, head {os.path.abspath(args.head)}, "
          f"{args.rounds} interleaved rounds, tokens/s medians\n")
    print("| measurement | base tok/s | head tok/s | head/base | base spread | head spread |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, base in figures["base"].items():
        head = figures["head"].get(label)
        if not head:
            continue
        b, h = statistics.median(base), statistics.median(head)
        spread = [f"{max(v) / min(v) - 1:.0%}" for v in (base, head)]
        print(f"| {label} | {b:,.0f} | {h:,.0f} | {h / b:.3f} | {spread[0]} | {spread[1]} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
