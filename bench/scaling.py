"""Scaling, drawn: tokens/s against batch size and model size, jformer and its peers
measured in one run; a PNG of three panels and a table of peak memory.

    python bench/scaling.py [--train-batches 8,16,32,64,128] [--decode-batches
        1,2,4,8,16,32,64] [--decode-dtypes float32,int8] [--sizes small,base,big]
        [--size-batch 16] [--peers flax,marian,ct2] [--rounds 1]
        [--png bench/scaling.png] [--out scaling.json] [--quick]

The panels:

1. training the small config, target tokens/s against sentences per step (x 32 source x
   32 target tokens): jformer float32 and bfloat16, the Flax WMT example, HF Marian;
2. decoding the small config greedily, generated tokens/s against sentences per call
   (32 source tokens, exactly 32 generated): jformer float32 and int8 (``--decode-dtypes``),
   the Flax WMT example, HF Marian, CTranslate2 float32 and int8 (at each thread setting:
   one worker of 1 or 2 threads, 2 one-thread workers splitting the batch; each with
   ``CT2_USE_MKL`` 0 (oneDNN) and 1 (MKL); the fastest counts);
3. training tokens/s against model size: small, base and the paper's big (1024 wide,
   6 + 6 layers) at ``--size-batch`` sentences.

Every measurement is its own process, run by bench/compare.py's machinery: the same
shapes and random ids on every side, the huge-page malloc setting for all, jformer and
the peers interleaved inside each point, medians over ``--rounds``. The peer scripts fix
a training batch of 64 and know small and base only; bench/peer_override.py runs them
with the batch and the big config set, unchanged otherwise. The peak RSS of each process
(its own ``ru_maxrss``) fills the memory table: for training, parameters, Adam state,
activations and the runtime; for decoding, the model, the cache and the runtime.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_compare", os.path.join(HERE, "compare.py"))
compare = importlib.util.module_from_spec(_spec)
sys.modules["bench_compare"] = compare  # its dataclasses look their module up there
_spec.loader.exec_module(compare)

from jformer.workdir.files import write_json  # noqa: E402  (compare put the repo on the path)

Job = compare.Job
OVERRIDE = os.path.join(HERE, "peer_override.py")
STEPS = {"small": 5, "base": 3, "big": 2}  # timed training steps per config


def _parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-batches", default="8,16,32,64,128")
    p.add_argument("--decode-batches", default="1,2,4,8,16,32,64")
    p.add_argument("--sizes", default="small,base,big")
    p.add_argument("--size-batch", type=int, default=16, help="sentences per step of panel 3")
    p.add_argument("--dtypes", default="float32,bfloat16", help="jformer's, for training")
    p.add_argument("--decode-dtypes", default="float32,int8", help="jformer's, for decoding")
    p.add_argument("--peers", default=",".join(compare.PEERS))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--decode-calls", type=int, default=5)
    p.add_argument("--ct2-threads", default="1,2")
    p.add_argument("--ct2-mkl", default="0,1",
                   help="CT2_USE_MKL values (0: oneDNN, 1: MKL); the faster counts")
    p.add_argument("--jformer-devices", default="1,2",
                   help="jformer's decoding device settings (batches over 1 that n divides)")
    p.add_argument("--peer-python", default=sys.executable)
    p.add_argument("--no-gate", action="store_true")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--png", default=os.path.join(HERE, "scaling.png"))
    p.add_argument("--out", default="", help="everything as JSON")
    p.add_argument("--redraw", default="", metavar="JSON",
                   help="measure nothing: draw --png and print the tables from an --out")
    p.add_argument("--quick", action="store_true",
                   help="checks that it runs: two points per panel, small only, no gate")
    args = p.parse_args(argv)
    args.decode_config = "small"  # panel 2; compare.py's jobs read it
    if args.quick:
        args.train_batches, args.decode_batches, args.sizes = "2,4", "1,2", "small"
        args.size_batch, args.dtypes, args.decode_calls, args.no_gate = 2, "float32", 2, True
        args.decode_dtypes = "float32"
        args.jformer_devices = "1"
    for name in ("train_batches", "decode_batches"):
        values = getattr(args, name)
        if not all(x.isdigit() and int(x) > 0 for x in compare._list(values)):
            p.error(f"--{name.replace('_', '-')} must be positive ints; got {values!r}")
    unknown = set(compare._list(args.sizes)) - set(STEPS)
    if unknown:
        p.error(f"--sizes must name some of {', '.join(STEPS)}; got {sorted(unknown)}")
    return args


def train_jobs(args, config: str, batch: int, peers: list[str], tmp: str
               ) -> tuple[list[Job], list[Job]]:
    """One training point: jformer's dtypes, then the peers at the same batch and size."""
    group, steps = f"train {config} b{batch}", STEPS[config]
    ours = [Job(group, f"jformer {d}", [
        sys.executable, os.path.join(HERE, "bench_train.py"), "--configs", config,
        "--dtypes", d, "--batch", str(batch), "--steps", str(steps), "--base-steps",
        str(steps), "--warmup", str(args.warmup), "--no-probe",
        "--max-wait", "0" if args.no_gate else "60"], "tgt_tokens_per_s",
        json_path=os.path.join(tmp, f"train-{config}-{batch}-{d}.json"), peer=False)
        for d in compare._list(args.dtypes)]

    def wrapped(python: str, script: str) -> list[str]:
        return [python, OVERRIDE, os.path.join(compare.PEER_BENCH, script),
                "--train-batch", str(batch)] + (["--big"] if config == "big" else []) + ["--"]

    theirs = []
    if "flax" in peers:
        theirs.append(Job(group, "Flax WMT", wrapped(sys.executable, "peer_flax_wmt.py") + [
            "--worker", "--part", "train", "--config", config, "--mode", "jit",
            "--train-steps", str(steps), "--warmup", str(args.warmup)], "tgt_tokens_per_s"))
    if "marian" in peers:
        spec = dict(task="train", config=config, warmup=args.warmup, steps=steps)
        theirs.append(Job(group, "HF Marian", wrapped(args.peer_python, "peer_torch.py") + [
            "--worker", json.dumps(spec)], "tgt_tokens_per_s"))
    return ours, theirs


def collect(records: list[dict]) -> tuple[dict, dict]:
    """({group: {engine: tok/s}}, {group: {engine: peak MiB}}): medians over the rounds;
    for an engine with several settings (CTranslate2's threads, jformer's decoding
    devices), the fastest one's figures."""
    best, chosen = compare.summarize(records)
    memory: dict = {}
    for group, engines in chosen.items():
        for engine, detail in engines.items():
            peaks = [r["peak_rss_mib"] for r in records if r["group"] == group
                     and r["engine"] == engine and r["detail"] == detail and "tok_s" in r]
            memory.setdefault(group, {})[engine] = statistics.median(peaks)
    return best, memory


def panels(args) -> list[tuple[str, str, list[tuple[str, object]]]]:
    """(title, x label, [(group, x value)]) per panel."""
    return [
        ("training, small", "sentences per step (x 32 + 32 tokens)",
         [(f"train small b{b}", int(b)) for b in compare._list(args.train_batches)]),
        ("greedy decoding, small", "sentences per call (32 tokens generated each)",
         [(compare._shape_name(int(b), 1), int(b)) for b in compare._list(args.decode_batches)]),
        (f"training at {args.size_batch} sentences per step", "model",
         [(f"train {c} b{args.size_batch}", c) for c in compare._list(args.sizes)]),
    ]


def draw(path: str, args, best: dict, meta: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    every = list(dict.fromkeys(e for g in best for e in best[g]))  # one colour each
    colours = {e: plt.get_cmap("tab10")(i % 10) for i, e in enumerate(every)}
    for ax, (title, xlabel, points) in zip(axes, panels(args)):
        engines = [e for e in every if any(e in best.get(g, {}) for g, _ in points)]
        categorical = isinstance(points[0][1], str)
        for engine in engines:
            xs = [i if categorical else x for i, (g, x) in enumerate(points)
                  if engine in best.get(g, {})]
            ys = [best[g][engine] for g, _ in points if engine in best.get(g, {})]
            ax.plot(xs, ys, marker="o", linestyle="--" if "jformer" not in engine else "-",
                    color=colours[engine], label=engine)
        if categorical:
            ax.set_xticks(range(len(points)), [x for _, x in points])
        else:
            ax.set_xscale("log", base=2)
            ax.set_xticks([x for _, x in points], [str(x) for _, x in points])
        ax.set_yscale("log")
        ax.set(title=title, xlabel=xlabel, ylabel="tokens/s")
        ax.grid(True, which="both", alpha=0.3)
        if engines:
            ax.legend(fontsize=8)
    figure.suptitle(f"jformer and peers, one run on {meta['cpu']} x {meta['cpus']} "
                    f"({meta['started']}); float32 unless named", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def memory_table(memory: dict, groups: list[str]) -> str:
    engines = list(dict.fromkeys(e for g in groups for e in memory.get(g, {})))
    head = "| peak RSS MiB | " + " | ".join(groups) + " |\n|---|" + "---:|" * len(groups)
    rows = [f"| {e} | " + " | ".join(
        f"{memory[g][e]:,.0f}" if e in memory.get(g, {}) else "-" for g in groups) + " |"
        for e in engines]
    return "\n".join([head] + rows)


def report(args, best: dict, memory: dict, meta: dict, engines: list[str]) -> None:
    """Prints the speed, ratio and memory tables and draws the PNG."""
    names = list(dict.fromkeys(g for _, _, points in panels(args) for g, _ in points))
    print("\n" + compare.tables(best, names, engines))
    print(memory_table(memory, names))
    draw(args.png, args, best, meta)
    print(f"\nwrote {args.png}")


def decode_jobs(args: argparse.Namespace, batch: int, peers: list[str], tmp: str,
                ct2_dir: str) -> tuple[list, list]:
    """Panel 2's point at ``batch``: compare.py's greedy decoding jobs, jformer at
    ``--decode-dtypes``."""
    decode_args = argparse.Namespace(**{**vars(args), "dtypes": args.decode_dtypes})
    return compare.decode_jobs(decode_args, batch, 1, peers, tmp, ct2_dir)


def main(argv=None) -> int:
    args = _parse(argv)
    if args.redraw:
        with open(args.redraw) as f:
            saved = json.load(f)
        report(args, saved["tokens_per_s"], saved["peak_rss_mib"], saved["meta"],
               list(dict.fromkeys(r["engine"] for r in saved["measurements"])))
        return 0
    missing = compare.missing_peers(args)
    peers = [p for p in compare._list(args.peers) if p not in missing]
    env = compare.peer_env(args)
    meta = compare.run_meta(env)
    print(f"bench/scaling.py: {args.rounds} round(s) on {meta['cpu']} x {meta['cpus']}, "
          f"GLIBC_TUNABLES={env['GLIBC_TUNABLES']} for every process", flush=True)
    for peer, how in missing.items():
        print(f"peer {peer} skipped: {how}", flush=True)
    with tempfile.TemporaryDirectory(prefix="jformer-scaling-") as tmp:
        ct2_dir = ""
        if "ct2" in peers:
            ct2_dir, error = compare.prepare_ct2(args, env, tmp)
            if error:
                print(f"peer ct2 skipped: its model conversion failed: {error}", flush=True)
                peers.remove("ct2")
        groups = [train_jobs(args, "small", int(b), peers, tmp)
                  for b in compare._list(args.train_batches)]
        groups += [decode_jobs(args, int(b), peers, tmp, ct2_dir)
                   for b in compare._list(args.decode_batches)]
        groups += [train_jobs(args, c, args.size_batch, peers, tmp)
                   for c in compare._list(args.sizes)
                   if not (c == "small" and str(args.size_batch)
                           in compare._list(args.train_batches))]
        records = compare.run_rounds(args, groups, env, tmp)
    best, memory = collect(records)
    jobs = [j for ours, theirs in groups for j in ours + theirs]
    report(args, best, memory, meta, list(dict.fromkeys(e for j in jobs for e in j.engines)))
    if args.out:
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_json(args.out, dict(meta=meta, argv=sys.argv[1:] if argv is None else argv,
                                  missing_peers=missing, tokens_per_s=best,
                                  peak_rss_mib=memory, measurements=records))
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
