"""jformer and its peers measured side by side, interleaved in one run: one table of ratios.

    python bench/compare.py [--train-configs small,base] [--dtypes float32,bfloat16,int8]
        [--decode-config small|base] [--decode-shapes 32x1,32x4,1x1,1x4]
        [--peers flax,marian,ct2] [--rounds 3]
        [--peer-python PY] [--ct2-threads 1,2] [--ct2-mkl 0,1] [--jformer-devices 1,2]
        [--out compare.json] [--quick]

What runs, each measurement in its own process:

- jformer: bench/bench_train.py (one config; several dtypes in one run, interleaved step
  by step, so their ratio compares the same minutes) and bench/bench_decode.py (the
  --decode-config model, small by default; one batch x beam shape, one dtype; int8
  decodes only), decoding once per device setting
  (``--devices n`` for each n of --jformer-devices that divides a batch over 1: the batch
  decoded data-parallel over n CPU devices, as ``jformer translate --devices n`` does);
  the best setting counts, as CTranslate2's does;
- the Flax WMT example: ../shared/bench/peer_flax_wmt.py's worker (the example's
  models.py in a jitted train step; its decode.beam_search, beam 1 for greedy), float32,
  with jformer's interpreter; its source comes from FLAX_WMT_DIR (../shared/bench/README.md);
- Hugging Face Marian: ../shared/bench/peer_torch.py's worker (an eager train step;
  ``generate``), float32, under ``--peer-python`` (torch and transformers);
- CTranslate2: peer_torch.py's worker on its converted random Marian model, float32 and
  int8 weights, once per thread setting (one worker with each of --ct2-threads; for a
  batch over 1 also that many one-thread workers splitting it) and per matrix backend
  (``CT2_USE_MKL`` each of --ct2-mkl: 1 Intel's MKL, 0 oneDNN; CTranslate2 picks MKL on
  Intel CPUs by default, where oneDNN can be 8x faster at batch 1); the best setting
  counts, as a user would tune it.

The shapes are the same everywhere: training 64 sentences x 32 source x 32 target tokens
(label smoothing 0.1, dropout 0.1, Adam), decoding the small config from 32 source
tokens to exactly 32 generated tokens per sentence; random weights and ids everywhere.

Interleaving: each round measures every group (a training config, a decoding shape) in
turn, alternating jformer and the peers inside the group (jformer, peer, jformer,
peer...); odd rounds start with a peer. A figure is the median over the rounds and a
ratio a ratio of medians, so both sides see the same hours of the machine. Every
process, jformer's and the peers', runs with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (as
jformer's train.py does), and the output says so. A peer that is not installed is
reported with how to install it; the others still run. Each record of ``--out`` also holds
the process's own peak RSS (``wait4``'s ru_maxrss; bench/scaling.py tabulates it).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from jformer.cli.cpu_malloc import HUGEPAGE_ENV  # noqa: E402  (after the path insert)
from jformer.workdir.files import write_json  # noqa: E402

PEER_BENCH = os.environ.get("PEER_BENCH_DIR", os.path.join(REPO, "..", "shared", "bench"))
FLAX_COMMIT = "18f8f311c275d57f46d95e41b15aa97b454754c0"  # ../shared/bench/README.md
FLAX_DIR_DEFAULT = os.path.join(os.environ.get("PEERS_DIR", os.path.expanduser("~/peers")),
                                "flax", "examples", "wmt")
PEERS = ("flax", "marian", "ct2")
SCRIPTS = {"flax": "peer_flax_wmt.py", "marian": "peer_torch.py", "ct2": "peer_torch.py"}
# ct2 too: peer_torch.py converts a random transformers MarianMTModel with CTranslate2.
PEER_MODULES = {"marian": ("torch", "transformers"),
                "ct2": ("torch", "transformers", "ctranslate2")}
CT2_BACKENDS = {"0": "oneDNN", "1": "MKL"}  # CT2_USE_MKL: CTranslate2's matrix library
TORCH_THREADS = 2  # peer_torch.py's setting for torch and CTranslate2's default worker
DECODE_CONFIG = "small"  # --decode-config's default


@dataclasses.dataclass
class Job:
    """One measurement: a process and where its tokens/s is."""

    group: str  # "train small" | "decode b32 beam4" (a column of the tables)
    engine: str  # "jformer float32" | "Flax WMT" | ... (a row)
    argv: list[str]
    key: str  # the result field holding tokens/s
    json_path: str = ""  # jformer: the result is rows[0] of this file; peers: RESULT line
    detail: str = ""  # the setting: CTranslate2's threads, jformer's decoding devices
    peer: bool = True
    env: dict = dataclasses.field(default_factory=dict)  # over the run's environment
    rows: tuple[str, ...] = ()  # several rows in one process: the engine of each JSON row

    @property
    def engines(self) -> tuple[str, ...]:
        return self.rows or (self.engine,)


def _parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-configs", default="small,base", help="'' for no training")
    p.add_argument("--dtypes", default="float32,bfloat16",
                   help="jformer's compute dtypes (int8: decoding only, decode.dtype=int8)")
    p.add_argument("--decode-config", default=DECODE_CONFIG, choices=("small", "base"),
                   help="the model every side decodes")
    p.add_argument("--decode-shapes", default="32x1,32x4,1x1,1x4",
                   help="batch x beam of the small config ('' for no decoding)")
    p.add_argument("--peers", default=",".join(PEERS), help="of flax, marian, ct2")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    p.add_argument("--train-steps", type=int, default=10, help="timed steps, every side")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps / calls")
    p.add_argument("--decode-calls", type=int, default=10, help="timed calls, every side")
    p.add_argument("--ct2-threads", default="1,2")
    p.add_argument("--ct2-mkl", default="0,1",
                   help="CT2_USE_MKL settings to run CTranslate2 with (1 MKL, 0 oneDNN)")
    p.add_argument("--jformer-devices", default="1,2",
                   help="jformer's decoding device settings (batches over 1 that n divides)")
    p.add_argument("--peer-python", default=sys.executable,
                   help="interpreter with torch, transformers and ctranslate2 for "
                        "peer_torch.py (e.g. ~/peers-venv/bin/python)")
    p.add_argument("--no-gate", action="store_true",
                   help="time whatever else runs (smoke runs): no waiting for a quiet CPU")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per process")
    p.add_argument("--out", default="", help="write everything as JSON here too")
    p.add_argument("--quick", action="store_true",
                   help="checks that it runs: 1 round, small float32 training of 2 steps, "
                        "batch 1 greedy, 2 calls, one CTranslate2 thread setting, no gate")
    args = p.parse_args(argv)
    unknown = set(_list(args.peers)) - set(PEERS)
    if unknown:
        p.error(f"--peers must name some of {', '.join(PEERS)}; got {sorted(unknown)}")
    if not _list(args.ct2_mkl) or set(_list(args.ct2_mkl)) - set(CT2_BACKENDS):
        p.error(f"--ct2-mkl must list some of 0, 1 (CT2_USE_MKL); got {args.ct2_mkl!r}")
    if args.quick:
        args.rounds, args.train_configs, args.dtypes, args.decode_shapes = 1, "small", \
            "float32", "1x1"
        args.train_steps, args.warmup, args.decode_calls = 2, 1, 2
        args.ct2_threads, args.jformer_devices, args.no_gate = "1", "1", True
        args.ct2_mkl = "0"
    return args


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _shape_name(batch: int, beam: int) -> str:
    return f"decode b{batch} {'greedy' if beam == 1 else f'beam{beam}'}"


# ------------------------------------------------------------------------ the peers
def missing_peers(args: argparse.Namespace) -> dict[str, str]:
    """{peer: how to install it} for the asked peers that cannot run here."""
    missing = {}
    flax_dir = os.environ.get("FLAX_WMT_DIR", FLAX_DIR_DEFAULT)
    for peer in _list(args.peers):
        script = os.path.join(PEER_BENCH, SCRIPTS[peer])
        if not os.path.isfile(script):
            missing[peer] = f"{script} not found (set PEER_BENCH_DIR to ../shared/bench)"
        elif peer == "flax" and not all(os.path.isfile(os.path.join(flax_dir, f))
                                        for f in ("models.py", "decode.py")):
            missing[peer] = (
                f"the Flax WMT example's source is not in FLAX_WMT_DIR={flax_dir}: unpack "
                f"examples/wmt of a google/flax snapshot at commit {FLAX_COMMIT}: mkdir -p "
                f"~/peers/flax && git --git-dir=<google/flax bare git dir> archive "
                f"{FLAX_COMMIT} examples/wmt | tar -x -C ~/peers/flax; then export "
                f"FLAX_WMT_DIR=~/peers/flax/examples/wmt (see ../shared/bench/README.md)")
        elif peer != "flax" and not _imports(args.peer_python, PEER_MODULES[peer]):
            missing[peer] = (
                f"{args.peer_python} cannot import {', '.join(PEER_MODULES[peer])}: in its "
                f"environment, pip install torch==2.13.0 (the CPU wheel) && echo torch==2.13.0 > "
                f"constraints.txt && pip install -c constraints.txt transformers "
                f"sentencepiece ctranslate2; or point "
                f"--peer-python at one that has them (see ../shared/bench/README.md)")
    return missing


def _imports(python: str, modules: tuple[str, ...]) -> bool:
    done = subprocess.run([python, "-c", f"import {', '.join(modules)}"],
                          capture_output=True, timeout=300)
    return done.returncode == 0


def peer_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment of every process: the caller's, huge-page malloc, peer settings."""
    env = dict(os.environ)
    for name, value in HUGEPAGE_ENV.items():
        if value not in env.get(name, "").split(":"):
            env[name] = ":".join(filter(None, [env.get(name, ""), value]))
    for name, value in (("OMP_NUM_THREADS", str(TORCH_THREADS)),
                        ("MKL_NUM_THREADS", str(TORCH_THREADS)),
                        ("TOKENIZERS_PARALLELISM", "false"), ("HF_HUB_OFFLINE", "1"),
                        ("TRANSFORMERS_OFFLINE", "1"),
                        ("FLAX_WMT_DIR", os.environ.get("FLAX_WMT_DIR", FLAX_DIR_DEFAULT))):
        env.setdefault(name, value)
    if args.no_gate:
        env["PEER_NO_GATE"] = "1"
    return env


def _torch_worker(args, spec: dict) -> list[str]:
    return [args.peer_python, os.path.join(PEER_BENCH, "peer_torch.py"), "--worker",
            json.dumps(spec)]


def _flax_worker(*options) -> list[str]:
    return [sys.executable, os.path.join(PEER_BENCH, "peer_flax_wmt.py"), "--worker",
            *map(str, options)]


def jformer_devices(batch: int, devices: list[int]) -> list[int]:
    """The device counts of ``devices`` jformer decodes a batch with: 1, and each n > 1
    that divides a batch over 1 (bench_decode.py's --devices keeps batch 1 on one
    device); one device where none of them applies, so every shape is measured."""
    return [n for n in devices if n == 1 or (batch > 1 and batch % n == 0)] or [1]


def ct2_settings(batch: int, threads: list[int]) -> list[tuple[int, int, int]]:
    """(inter_threads, intra_threads, max_batch_size): one worker of n threads; n
    one-thread workers splitting a batch over 1."""
    return ([(1, n, 0) for n in threads]
            + [(n, 1, -(-batch // n)) for n in threads if n > 1 and batch > 1])


def ct2_detail(inter: int, intra: int, mkl: str) -> str:
    """A CTranslate2 setting in words: its workers and threads, then its backend."""
    threads = (f"{intra} thread{'s' if intra > 1 else ''}" if inter == 1
               else f"{inter} workers x 1 thread")
    return f"{threads}, {CT2_BACKENDS[mkl]}"


# ------------------------------------------------------------------------ the jobs
def train_jobs(args, config: str, peers: list[str], tmp: str) -> tuple[list, list]:
    # all in one bench_train.py run, interleaved step by step; int8 is a decoding form only
    dtypes = [d for d in _list(args.dtypes) if d != "int8"]
    ours = [Job(f"train {config}", "jformer " + ",".join(dtypes), [
        sys.executable, os.path.join(REPO, "bench", "bench_train.py"), "--configs", config,
        "--dtypes", ",".join(dtypes), "--steps", str(args.train_steps), "--base-steps",
        str(args.train_steps), "--warmup", str(args.warmup), "--no-probe",
        "--max-wait", "0" if args.no_gate else "60"], "tgt_tokens_per_s",
        json_path=os.path.join(tmp, f"train-{config}.json"), peer=False,
        rows=tuple(f"jformer {d}" for d in dtypes))] if dtypes else []
    theirs = []
    if "flax" in peers:
        theirs.append(Job(f"train {config}", "Flax WMT", _flax_worker(
            "--part", "train", "--config", config, "--mode", "jit", "--train-steps",
            args.train_steps, "--warmup", args.warmup), "tgt_tokens_per_s"))
    if "marian" in peers:
        theirs.append(Job(f"train {config}", "HF Marian", _torch_worker(args, dict(
            task="train", config=config, warmup=args.warmup, steps=args.train_steps)),
            "tgt_tokens_per_s"))
    return ours, theirs


def decode_jobs(args, batch: int, beam: int, peers: list[str], tmp: str,
                ct2_dir: str) -> tuple[list, list]:
    group = _shape_name(batch, beam)
    ours = [Job(group, f"jformer {d}", [
        sys.executable, os.path.join(REPO, "bench", "bench_decode.py"), "--configs",
        args.decode_config, "--batches", str(batch), "--beams", str(beam), "--dtype", d,
        "--repeats", str(args.decode_calls), "--recompute", "none", "--no-floor",
        "--devices", str(n)], "cached",
        json_path=os.path.join(tmp, f"decode-{batch}x{beam}-{d}-{n}.json"), peer=False,
        detail=f"{n} device{'s' if n > 1 else ''}")
        for d in _list(args.dtypes)
        for n in jformer_devices(batch, [int(n) for n in _list(args.jformer_devices)])]
    theirs = []
    if "flax" in peers:
        theirs.append(Job(group, "Flax WMT", _flax_worker(
            "--part", "decode", "--config", args.decode_config, "--batch", batch,
            "--beam", beam,
            "--warmup", args.warmup, "--decode-calls", args.decode_calls,
            "--decode-min-seconds", 0), "gen_tokens_per_s"))
    reps = dict(min_reps=args.decode_calls, budget_s=0.0, max_reps=args.decode_calls)
    if "marian" in peers:
        theirs.append(Job(group, "HF Marian", _torch_worker(args, dict(
            task="generate", config=args.decode_config, batch=batch, beams=beam, **reps)),
            "tokens_per_s"))
    if "ct2" in peers:
        for ct, setting, mkl in itertools.product(("float32", "int8"), ct2_settings(
                batch, [int(n) for n in _list(args.ct2_threads)]), _list(args.ct2_mkl)):
            inter, intra, most = setting
            spec = dict(task="ct2", config=args.decode_config, batch=batch, beams=beam,
                        compute_type=ct, model_dir=ct2_dir, inter_threads=inter,
                        intra_threads=intra, max_batch_size=most, **reps)
            theirs.append(Job(group, f"CTranslate2 {ct}", _torch_worker(args, spec),
                              "tokens_per_s", detail=ct2_detail(inter, intra, mkl),
                              env={"CT2_USE_MKL": mkl}))
    return ours, theirs


def interleaved(ours: list[Job], theirs: list[Job], peer_first: bool) -> list[Job]:
    """jformer, peer, jformer, peer... (peer first if asked), the longer list's rest last."""
    a, b = (theirs, ours) if peer_first else (ours, theirs)
    return [j for pair in itertools.zip_longest(a, b) for j in pair if j is not None]


# ------------------------------------------------------------------------ running
def run_job(job: Job, env: dict, timeout: float, cwd: str) -> dict:
    """Runs the job's process; {"tok_s": ..., "peak_rss_mib": ..., "result": ...} or
    {"error": ...}. The peak RSS is the process's own (``wait4``'s ru_maxrss); a job of
    several rows also gets "rows", every row of its JSON (each with its worker's RSS)."""
    argv = job.argv + (["--json", job.json_path] if job.json_path else [])
    start = time.perf_counter()
    done = run_measured(argv, {**env, **job.env}, timeout, cwd)
    wall = time.perf_counter() - start
    if done.timed_out:
        return {"error": f"timeout after {timeout:g} s"}
    if done.returncode:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"}
    try:
        rows = []
        if job.json_path:
            with open(job.json_path) as f:
                rows = json.load(f)["rows"]
            result = rows[0]
        else:
            line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
            result = json.loads(line[len("RESULT "):])
        out = {"tok_s": float(result[job.key]), "wall_s": wall,
               "peak_rss_mib": done.peak_rss_mib, "result": result}
        if job.rows:
            out["rows"] = [{"tok_s": float(r[job.key]), "wall_s": wall,
                            "peak_rss_mib": r["peak_rss_mib"], "result": r} for r in rows]
        return out
    except (IndexError, KeyError, ValueError, OSError) as e:
        return {"error": f"no result ({e!r}): {done.stdout.strip()[-800:]}"}


@dataclasses.dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    peak_rss_mib: float  # the process's own peak resident memory (not its children's)
    timed_out: bool


def run_measured(argv: list[str], env: dict, timeout: float, cwd: str) -> Finished:
    """Runs argv to its end (killed after ``timeout`` s) and reaps it with ``wait4``, which
    gives that one process's peak RSS (``subprocess.run`` reaps without it). Linux carries
    the spawner's RSS high-water mark into the child's ru_maxrss across exec, so the
    figure is max(the child's own peak, this process's RSS at the spawn): this script
    stays near 20 MB, below every measured process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env, cwd=cwd)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
        out.seek(0)
        err.seek(0)
        return Finished(proc.returncode, out.read(), err.read(), usage.ru_maxrss / 1024,
                        killed.is_set())


def prepare_ct2(args, env: dict, tmp: str) -> tuple[str, str]:
    """(CTranslate2 model directory, error): peer_torch.py converts its random Marian."""
    job = Job("prepare", "CTranslate2", _torch_worker(args, dict(
        task="prepare", config=args.decode_config, workdir=os.path.join(tmp, "peer-models"))),
        "ct2_vocab")
    out = run_job(job, env, args.timeout, tmp)
    return (out["result"]["ct2_dir"], "") if "error" not in out else ("", out["error"])


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else ``platform.processor()``, else "unknown
    CPU"."""
    fallback = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), fallback)
    except OSError:
        return fallback


def cpu_features() -> str:
    """The vector features of this CPU that jformer's kernels choose by (from
    /proc/cpuinfo's flags line), space-separated."""
    from jformer.kernels import native
    flags = native.cpu_flags().split()
    return " ".join(f for f in ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                                "amx_int8") if f in flags)


def run_meta(env: dict) -> dict:
    """When, on what CPU, and which Flax example (its COMMIT file, if unpacked so)."""
    cpu = cpu_name()
    commit, folder = None, env["FLAX_WMT_DIR"]
    for _ in range(3):
        folder = os.path.dirname(folder)
        if os.path.isfile(os.path.join(folder, "COMMIT")):
            with open(os.path.join(folder, "COMMIT")) as f:
                commit = f.read().strip()
            break
    return dict(started=time.strftime("%Y-%m-%d %H:%M:%S"), cpu=cpu,
                cpus=len(os.sched_getaffinity(0)), python=sys.version.split()[0],
                flax_wmt_commit=commit)


# ------------------------------------------------------------------------ summary
def summarize(records: list[dict]) -> tuple[dict, dict]:
    """Median over rounds per (group, engine, detail); per (group, engine) the best
    detail (CTranslate2's thread settings, jformer's decoding devices). Returns (tok/s,
    chosen details)."""
    runs: dict = {}
    for r in records:
        if "tok_s" in r:
            runs.setdefault((r["group"], r["engine"], r["detail"]), []).append(r["tok_s"])
    best: dict = {}
    chosen: dict = {}
    for (group, engine, detail), values in runs.items():
        median = statistics.median(values)
        if median > best.get(group, {}).get(engine, 0.0):
            best.setdefault(group, {})[engine] = median
            chosen.setdefault(group, {})[engine] = detail
    return best, chosen


def ratio_rows(engines: list[str]) -> list[tuple[str, str]]:
    """(numerator, denominator) rows: each jformer dtype over each peer; bf16 / f32."""
    ours = [e for e in engines if e.startswith("jformer")]
    pairs = [(o, p) for o in ours for p in engines if not p.startswith("jformer")]
    for other in ("bfloat16", "int8"):
        if {"jformer float32", f"jformer {other}"} <= set(ours):
            pairs.append((f"jformer {other}", "jformer float32"))
    return pairs


def tables(best: dict, groups: list[str], engines: list[str]) -> str:
    def cell(value):
        return "-" if value is None else f"{value:,.0f}"

    head = "| | " + " | ".join(groups) + " |\n|---|" + "---:|" * len(groups) + "\n"
    speed = "".join(f"| {e} | " + " | ".join(cell(best.get(g, {}).get(e)) for g in groups)
                    + " |\n" for e in engines)
    ratios = ""
    for num, den in ratio_rows(engines):
        cells = []
        for g in groups:
            a, b = best.get(g, {}).get(num), best.get(g, {}).get(den)
            cells.append("-" if a is None or b is None else f"{a / b:.2f}x")
        ratios += f"| {num} / {den} | " + " | ".join(cells) + " |\n"
    ratios = f"{head}{ratios}" if ratios else "(no peer measured)\n"
    return (f"Tokens/s (training: target tokens; decoding: generated tokens), median over "
            f"the rounds:\n\n{head}{speed}\nRatios (same run):\n\n{ratios}")


def run_rounds(args, groups: list[tuple[list, list]], env: dict, tmp: str) -> list[dict]:
    """Every round, every group, its jobs interleaved; one record per process."""
    records = []
    for r in range(args.rounds):
        for ours, theirs in groups:
            for job in interleaved(ours, theirs, peer_first=r % 2 == 1):
                out = run_job(job, env, args.timeout, tmp)
                outs = out.pop("rows", None) or [out] * len(job.engines)
                for engine, one in zip(job.engines, outs):
                    records.append(dict(round=r, group=job.group, engine=engine,
                                        detail=job.detail, argv=job.argv, **one))
                    shown = (f"{one['tok_s']:,.0f} tok/s" if "tok_s" in one
                             else f"ERROR {one['error'].splitlines()[-1][:300]}")
                    name = engine + (f" ({job.detail})" if job.detail else "")
                    print(f"  round {r + 1} | {job.group} | {name}: {shown}", flush=True)
    return records


def main(argv=None) -> int:
    args = _parse(argv)
    missing = missing_peers(args)
    peers = [p for p in _list(args.peers) if p not in missing]
    env = peer_env(args)
    meta = run_meta(env)
    print(f"bench/compare.py: {args.rounds} interleaved round(s) on {meta['cpu']} x "
          f"{meta['cpus']}; every process, jformer's and the peers', runs with "
          f"GLIBC_TUNABLES={env['GLIBC_TUNABLES']}; torch and CTranslate2 with OMP/MKL "
          f"threads {TORCH_THREADS}; peers in float32. Training: 64 x 32 source x 32 target "
          f"tokens; decoding: {args.decode_config}, 32 source tokens, exactly 32 generated "
          f"per sentence.",
          flush=True)
    for peer, how in missing.items():
        print(f"peer {peer} skipped: {how}", flush=True)
    with tempfile.TemporaryDirectory(prefix="jformer-compare-") as tmp:
        ct2_dir = ""
        if "ct2" in peers and _list(args.decode_shapes):
            ct2_dir, error = prepare_ct2(args, env, tmp)
            if error:
                print(f"peer ct2 skipped: its model conversion failed: {error}", flush=True)
                missing["ct2"], peers = f"conversion failed: {error}", \
                    [p for p in peers if p != "ct2"]
        groups = [train_jobs(args, c, peers, tmp) for c in _list(args.train_configs)]
        for shape in _list(args.decode_shapes):
            batch, beam = (int(x) for x in shape.split("x"))
            groups.append(decode_jobs(args, batch, beam, peers, tmp, ct2_dir))
        records = run_rounds(args, groups, env, tmp)
    jobs = [j for ours, theirs in groups for j in ours + theirs]
    best, chosen = summarize(records)
    engines = list(dict.fromkeys(e for j in jobs for e in j.engines))
    print("\n" + tables(best, list(dict.fromkeys(j.group for j in jobs)), engines))
    for g, details in chosen.items():
        settings = {e: d for e, d in details.items() if d}
        if settings:
            print(f"Best setting, {g}: " + "; ".join(f"{e} {d}" for e, d in settings.items()))
    if args.out:
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_json(args.out, dict(
            meta=meta, argv=sys.argv[1:] if argv is None else list(argv), rounds=args.rounds,
            environment={k: env[k] for k in ("GLIBC_TUNABLES", "OMP_NUM_THREADS",
                                             "MKL_NUM_THREADS", "FLAX_WMT_DIR")},
            missing_peers=missing, tokens_per_s=best, best_settings=chosen,
            ratios={f"{a} / {b}": {g: best[g][a] / best[g][b] for g in best
                                   if a in best[g] and b in best[g]}
                    for a, b in ratio_rows(engines)},
            measurements=records))
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
