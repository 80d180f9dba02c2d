"""The accelerator check: jformer's tests and speed on one GPU or TPU, in one prepared run.

    python bench/accelerator_check.py [--platform gpu|tpu|cpu] [--quick] [--out DIR]
        [--budget-s 420] [--configs small,base,big] [--batch 512]
        [--decode-configs base] [--decode-dtypes float32]
        [--decode-batches 1,32,256] [--flax-wmt-dir DIR] [--test-workers 8]

Parts, in this order, each started only while the budget (``--budget-s``) has time left;
a part or row that would start past it is recorded as skipped, never silently dropped:

1. ``tests``: pytest over tests/model, tests/search, tests/train/test_step.py and
   tests/inference/test_translator.py in a subprocess whose JAX runs on the platform
   (``JAX_PLATFORMS``), with float32 products at full precision
   (``JAX_DEFAULT_MATMUL_PRECISION=highest``: the tests compare float32 results at tight
   tolerances, which TF32 products do not hold). Failures are listed by test id. It runs
   before this process starts JAX, so its workers share the chip's memory with no one.
2. ``env``: Python, jax, jaxlib, flax, optax versions and the devices.
3. ``probe``: the chip's matmul rate, best of several jitted 8192^3 products, bf16 inputs
   with float32 accumulation (the MFU denominator) and float32 at default precision.
4. ``train``: the real jformer train step (``bench/bench_train.py``'s ``_build``: Adam on
   the paper's schedule, label smoothing 0.1, dropout 0.1, one-device mesh) for each
   config and dtype at ``--batch`` x 32 source x 32 target tokens, and the Flax WMT
   example's step at the same shapes (``bench/flax_wmt_peer.py``). Target tokens/s,
   median step time, build and compile times, and MFU = model FLOPs
   (``bench_train.model_flops``) / step time / bf16 probe.
5. ``decode``: jformer's compiled search (``bench/bench_decode.py``'s ``measure``: source
   length 32, exactly 32 generated tokens, EOS forbidden before) at batch 1, 32 and 256,
   greedy and beam 4, and the example's ``decode.beam_search`` at the same settings.
   ``--decode-dtypes`` may name ``int8`` (jformer's int8 decoding: XLA's int8 dot off the
   CPU); the example has no int8 form, so its int8 rows are recorded as skipped.

Rows of parts 4 and 5 are built and compiled ``--prepare-ahead`` (8) at a time in threads
(on an H200 one train program compiles in 35-60 s alone, 66-100 s eight at once, and one
search in 5-28 s; in turn they do not fit the budget), and a wave's rows are timed one at a
time after the whole wave is compiled, so no compile shares the host with a timed row.

Sizing, from the H200 calls of 2026-11-28: tests 141 s, the probe 4 s, 8 train rows
(base and big, both dtypes, both implementations) 162 s, 30 decode rows 275 s. So the
default (12 train rows, 12 float32 decode rows) needs about 8 minutes; the budget skips,
and names, what it cannot reach (small's training first, it comes last). bf16 and int8
decoding are ``--decode-dtypes`` options for a second call.

The Flax rows need the example's source (``--flax-wmt-dir`` or ``$FLAX_WMT_DIR``); without
it they are skipped and the table says so. ``--platform cpu --quick`` runs every part at
toy sizes in under a minute (tests/test_bench_accelerator_check.py runs it in CI).

Writes ``accelerator_check.json`` and ``accelerator_check.md`` into ``--out`` after every
part (a run cut short keeps what it measured), prints the markdown, and exits 1 when a
test failed or a part raised.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
import types

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
JAX_PLATFORM = {"gpu": "cuda", "tpu": "tpu", "cpu": "cpu"}
PARTS = ("tests", "env", "probe", "train", "decode")
TEST_PATHS = ("tests/model", "tests/search", "tests/train/test_step.py",
              "tests/inference/test_translator.py")
QUICK_TEST_PATHS = ("tests/model/test_masks.py",)
# --quick: a toy shape, so the whole check runs in CI in under a minute on 2 cores
TINY = dict(vocab_size=512, d_model=64, num_heads=2, d_ff=128, num_encoder_layers=2,
            num_decoder_layers=2)
GEN_LEN = 32


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--platform", default="gpu", choices=sorted(JAX_PLATFORM))
    p.add_argument("--quick", action="store_true", help="toy sizes (CI)")
    p.add_argument("--parts", default=",".join(PARTS), help="comma list of " + ", ".join(PARTS))
    p.add_argument("--test-paths", default="", help="pytest paths or node ids instead of "
                   "the default set")
    p.add_argument("--out", default="accelerator_check_out", help="folder for JSON and md")
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="no part or row starts after this many seconds")
    p.add_argument("--configs", default="base,big,small", help="train configs")
    p.add_argument("--dtypes", default="float32,bfloat16", help="train dtypes")
    p.add_argument("--batch", type=int, default=512, help="train sentences per step")
    p.add_argument("--steps", type=int, default=10, help="timed train steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps, compile included")
    p.add_argument("--decode-configs", default="base")
    p.add_argument("--decode-dtypes", default="float32",
                   help="float32, bfloat16, int8 (comma list)")
    p.add_argument("--decode-batches", default="1,32,256")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--repeats", type=int, default=5, help="timed decode calls (median)")
    p.add_argument("--probe-n", type=int, default=8192, help="matmul probe size")
    p.add_argument("--flax-wmt-dir", default="", help="the example's folder (models.py)")
    p.add_argument("--test-workers", type=int, default=12, help="pytest-xdist workers")
    p.add_argument("--prepare-ahead", type=int, default=None,
                   help="rows built and compiled together in threads, a wave at a time, "
                        "before the wave is timed (default 4 on an accelerator; 0 on the "
                        "CPU, where each row is built just before it is timed)")
    p.add_argument("--tests-budget-s", type=float, default=240.0)
    p.add_argument("--train-share", type=float, default=0.5,
                   help="share of the budget left after the tests that training may use")
    args = p.parse_args(argv)
    if args.quick:
        args.configs = args.decode_configs = "tiny"
        args.batch, args.steps, args.warmup, args.repeats = 8, 2, 1, 2
        args.dtypes = args.decode_dtypes = "float32"
        args.decode_batches, args.probe_n = "2", 256
        args.test_workers, args.prepare_ahead = 0, 1
    if args.prepare_ahead is None:
        args.prepare_ahead = 0 if args.platform == "cpu" else 8
    return args


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


class Report:
    """The parts' results; rewrites the JSON and markdown files after every change."""

    def __init__(self, out: str, budget_s: float):
        self.out, self.budget_s, self.t0 = out, budget_s, time.monotonic()
        self.part_deadline: float | None = None  # a part's own limit (monotonic time)
        self.data: dict = {"parts": {}, "errors": []}
        os.makedirs(out, exist_ok=True)

    def left_s(self) -> float:
        now = time.monotonic()
        left = self.budget_s - (now - self.t0)
        return left if self.part_deadline is None else min(left, self.part_deadline - now)

    def run(self, name: str, fn, *args) -> None:
        """Runs one part; an exception is recorded (with its traceback's tail), not raised."""
        if self.left_s() <= 0:
            self.data["parts"][name] = {"status": "skipped: budget spent"}
            self.save()
            return
        t0 = time.monotonic()
        try:
            result = fn(self, *args)
            status = "ok"
        except Exception as exc:  # a broken part must not lose the others' figures
            result, status = {}, f"error: {type(exc).__name__}: {exc}"
            self.data["errors"].append(f"{name}: {traceback.format_exc()[-3000:]}")
        self.data["parts"][name] = {"status": status, "seconds": time.monotonic() - t0,
                                    **(result or {})}
        self.save()
        print(f"[accelerator_check] {name}: {status} ({time.monotonic() - t0:.0f} s, "
              f"{self.left_s():.0f} s of budget left)", flush=True)

    def save(self) -> None:
        with open(os.path.join(self.out, "accelerator_check.json"), "w") as f:
            json.dump(self.data, f, indent=1, default=str)
        with open(os.path.join(self.out, "accelerator_check.md"), "w") as f:
            f.write(markdown(self.data))

    def failed(self) -> bool:
        tests = self.data["parts"].get("tests", {})
        ran = "tests" in self.data["parts"]
        return bool(self.data["errors"]) or ran and (
            tests.get("failed", 0) > 0 or tests.get("exit") != 0
            or not tests.get("status", "").startswith("ok"))


def part_env(report: Report, args) -> dict:
    import flax
    import jax
    import jaxlib
    import optax
    devices = jax.devices()
    return {"python": platform.python_version(), "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "flax": flax.__version__,
            "optax": optax.__version__, "backend": jax.default_backend(),
            "device_kind": devices[0].device_kind, "device_count": len(devices),
            "devices": [str(d) for d in devices]}


def part_tests(report: Report, args) -> dict:
    """pytest in a subprocess on the platform; counts and failing ids from its summary."""
    paths = _list(args.test_paths) or (QUICK_TEST_PATHS if args.quick else TEST_PATHS)
    # The platform first (the default device), then the CPU, where jax.debug.callback
    # places its operands (the search tests count steps through it).
    platforms = ",".join(dict.fromkeys([JAX_PLATFORM[args.platform], "cpu"]))
    env = dict(os.environ, JAX_PLATFORMS=platforms,
               JAX_DEFAULT_MATMUL_PRECISION="highest", XLA_PYTHON_CLIENT_PREALLOCATE="false",
               PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
           *(["-n", str(args.test_workers)] if args.test_workers else []), *paths]
    timeout = max(10.0, min(args.tests_budget_s, report.left_s()))
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)
        output, status, code = done.stdout + done.stderr, f"exit {done.returncode}", done.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        status, code = f"timed out after {timeout:.0f} s", None
    with open(os.path.join(report.out, "tests.log"), "w") as f:
        f.write(output)
    summary = re.findall(r"^.*\d+ (?:passed|failed|errors?|skipped).* in [\d.]+s.*$", output,
                         re.M)
    counts = {k: int(n) for n, k in re.findall(
        r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", summary[-1] if summary else "")}
    failing = re.findall(r"^(?:FAILED|ERROR) (\S+)(?: - (.*))?$", output, re.M)
    result = {"paths": list(paths), "pytest": status, "exit": code, **counts,
              "failed": counts.get("failed", 0) + counts.get("error", 0)
              + counts.get("errors", 0),
              "failures": [f"{t} - {m[:200]}" for t, m in failing][:60],
              "skip_reasons": re.findall(r"^SKIPPED (.*)$", output, re.M)[:20]}
    if status.startswith("timed out"):
        raise TimeoutError(f"pytest {status}")
    return result


def part_probe(report: Report, args) -> dict:
    import jax
    import jax.numpy as jnp
    n = args.probe_n
    out = {"n": n}
    for name, dtype in (("bfloat16", jnp.bfloat16), ("float32", jnp.float32)):
        a = jax.random.normal(jax.random.key(0), (n, n), dtype)
        b = jax.random.normal(jax.random.key(1), (n, n), dtype)
        dot = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
        dot(a, b).block_until_ready()
        best = min(_timed(lambda: dot(a, b).block_until_ready()) for _ in range(10))
        out[f"{name}_tflops"] = 2 * n ** 3 / best / 1e12
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _time_steps(step, state, batches, warmup: int, steps: int) -> dict:
    """The first step's time and the median of ``steps`` timed steps after ``warmup``
    (``step`` is compiled already)."""
    import jax
    times, first_s = [], None
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        state, metrics = step(state, batches[i % len(batches)])
        jax.block_until_ready((state, metrics))
        wall = time.perf_counter() - t0
        first_s = wall if first_s is None else first_s
        if i >= warmup:
            times.append(wall)
    return {"first_step_s": first_s, "step_s": statistics.median(times),
            "spread_s": [min(times), max(times)]}


class Skip(Exception):
    """A row that is not measured, and why (its status)."""


def _ahead(jobs: list, prepare, workers: int, report: Report):
    """Yields (job, prepared, error) in the order of ``jobs``. Jobs are prepared (built
    and compiled) in waves of ``workers`` threads, and a wave's rows are timed only once
    the whole wave is prepared, so nothing compiles while a row is timed: compiling takes
    seconds to a minute of host time on a GPU machine, and a decode at batch 1 is bound by
    that host (an H200 run that timed rows while others compiled measured batch 1 at a
    quarter of its speed). ``workers`` 0 prepares each job just before it is timed. No job
    is started once the budget is spent; those yield a Skip."""
    from concurrent.futures import ThreadPoolExecutor

    def guarded(job):
        if report.left_s() <= 0:
            raise Skip("skipped: budget spent")
        return prepare(job)

    if workers <= 0:
        for job in jobs:
            try:
                yield job, guarded(job), None
            except Exception as exc:
                yield job, None, exc
        return
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(jobs), workers):
            wave = [(job, pool.submit(guarded, job)) for job in jobs[start:start + workers]]
            for _, future in wave:  # the whole wave prepared before any of it is timed
                future.exception()
            for job, future in wave:
                error = future.exception()
                yield job, (None if error else future.result()), error


def _settle(report: Report, row: dict, error: Exception | None, what: str) -> bool:
    """Records a failed or skipped preparation in ``row``; True if the row can be timed."""
    if error is None:
        return True
    if isinstance(error, Skip):
        row["status"] = str(error)
        return False
    row["status"] = f"error: {type(error).__name__}: {str(error)[:300]}"
    report.data["errors"].append(f"{what}: " + "".join(
        traceback.format_exception(error))[-3000:])
    return False


def part_train(report: Report, args) -> dict:
    import bench_train
    import flax_wmt_peer
    probe = report.data["parts"].get("probe", {}).get("bfloat16_tflops")
    example = flax_wmt_peer.example_dir(args.flax_wmt_dir)
    models = flax_wmt_peer.load_example(example)[0] if example else None
    bench_train.CONFIGS.setdefault("tiny", TINY)

    def prepare(row: dict):
        """(compiled step, state, batches) of one row, and its build and compile time."""
        if row["impl"] == "flax_wmt" and models is None:
            raise Skip("skipped: no --flax-wmt-dir / $FLAX_WMT_DIR")
        t0 = time.perf_counter()
        if row["impl"] == "jformer":
            _, _, step, state, batches = bench_train._build(row["config"], row["dtype"], 0.1,
                                                            "auto", args.batch)
        else:
            step, state, data = flax_wmt_peer.train_setup(
                models, bench_train.CONFIGS[row["config"]], row["dtype"], args.batch,
                bench_train.SRC_LEN, bench_train.TGT_LEN)
            batches = [data]
        t1 = time.perf_counter()
        compiled = step.lower(state, batches[0]).compile()
        row.update(build_s=t1 - t0, compile_s=time.perf_counter() - t1)
        return compiled, state, batches

    rows = [{"config": c, "dtype": d, "impl": i, "batch": args.batch,
             "flops": bench_train.model_flops(types.SimpleNamespace(**bench_train.CONFIGS[c]),
                                              args.batch)}
            for c in _list(args.configs) for d in _list(args.dtypes)
            for i in ("jformer", "flax_wmt")]
    for row, prepared, error in _ahead(rows, prepare, args.prepare_ahead, report):
        if _settle(report, row, error, f"train {row['config']} {row['dtype']} {row['impl']}"):
            row.update(_time_steps(*prepared, args.warmup, args.steps))
            row["tgt_tokens_per_s"] = args.batch * bench_train.TGT_LEN / row["step_s"]
            row["tflops"] = row["flops"] / row["step_s"] / 1e12
            row["mfu"] = row["tflops"] / probe if probe else None
            row["status"] = "ok"
        prepared = None
        report.data["parts"]["train"] = {"status": "running", "rows": rows}
        report.save()
        print(f"  train {row['config']} {row['dtype']} {row['impl']}: {_row_line(row)}",
              flush=True)
    return {"rows": rows}


def _row_line(row: dict) -> str:
    if row.get("status") != "ok":
        return row.get("status", "?")
    if "tgt_tokens_per_s" in row:
        return f"{row['tgt_tokens_per_s']:,.0f} tgt tok/s, {row['step_s'] * 1e3:.1f} ms/step"
    return f"{row['tokens_per_s']:,.0f} tok/s"


def part_decode(report: Report, args) -> dict:
    import dataclasses

    import bench_decode
    import flax_wmt_peer
    import jax
    import jax.numpy as jnp
    from jformer.ops import transformer

    example = flax_wmt_peer.example_dir(args.flax_wmt_dir)
    modules = flax_wmt_peer.load_example(example) if example else None
    bench_decode.CONFIGS.setdefault("tiny", dataclasses.replace(bench_decode.CONFIGS["small"],
                                                                **TINY))
    params = {}
    for config in _list(args.decode_configs):
        dummy = jnp.zeros((1, 4), jnp.int32)
        params[config] = jax.jit(transformer(bench_decode.CONFIGS[config]).init)(
            jax.random.key(0), dummy, dummy)["params"]

    def prepare(row: dict):
        """(compiled search, its args) of one row; its compile time goes into the row."""
        if row["impl"] == "jformer":
            compiled, fargs, _, got = bench_decode.prepare(
                row["config"], params[row["config"]], row["batch"], row["beam"], GEN_LEN, 8,
                row["dtype"])
            row["compile_s"] = got["compile_s"]
            return compiled, fargs
        if row["dtype"] == "int8":
            raise Skip("skipped: the example has no int8 decoding")
        if modules is None:
            raise Skip("skipped: no --flax-wmt-dir / $FLAX_WMT_DIR")
        cfg = bench_decode.CONFIGS[row["config"]]
        fn, fargs = flax_wmt_peer.decode_setup(
            *modules, {k: getattr(cfg, k) for k in TINY}, row["batch"], row["beam"],
            bench_decode.SRC_LEN, GEN_LEN, row["dtype"])
        t0 = time.perf_counter()
        compiled = fn.lower(*fargs).compile()
        row["compile_s"] = time.perf_counter() - t0
        return compiled, fargs

    rows = [{"config": c, "dtype": d, "batch": b, "beam": w, "impl": i}
            for c in _list(args.decode_configs) for d in _list(args.decode_dtypes)
            for b in map(int, _list(args.decode_batches)) for w in map(int, _list(args.beams))
            for i in ("jformer", "flax_wmt")]
    for row, prepared, error in _ahead(rows, prepare, args.prepare_ahead, report):
        if _settle(report, row, error, f"decode {row}"):
            seconds = bench_decode._time(*prepared, args.repeats)
            row.update(tokens_per_s=row["batch"] * GEN_LEN / seconds, status="ok")
        prepared = None
        report.data["parts"]["decode"] = {"status": "running", "rows": rows}
        report.save()
        print(f"  decode {row['config']} {row['dtype']} b{row['batch']} w{row['beam']} "
              f"{row['impl']}: {_row_line(row)}", flush=True)
    return {"rows": rows}


def _fmt(x, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def markdown(data: dict) -> str:
    """The report as markdown: environment, tests, probe, train and decode tables."""
    parts = data["parts"]
    lines = ["# jformer accelerator check", ""]
    env = parts.get("env", {})
    if env.get("status") == "ok":
        lines += [f"{env['device_kind']} x {env['device_count']} ({env['backend']}); "
                  f"jax {env['jax']}, jaxlib {env['jaxlib']}, flax {env['flax']}, optax "
                  f"{env['optax']}, Python {env['python']}", ""]
    for name, part in parts.items():
        lines.append(f"- {name}: {part.get('status')}"
                     + (f" ({part['seconds']:.0f} s)" if "seconds" in part else ""))
    tests = parts.get("tests", {})
    if "paths" in tests:
        counts = ", ".join(f"{tests[k]} {k}" for k in ("passed", "failed", "skipped", "errors",
                                                        "error") if tests.get(k))
        lines += ["", f"## Tests ({' '.join(tests['paths'])}): {counts or tests['pytest']}"]
        lines += [f"- FAILED {f}" for f in tests["failures"]]
    probe = parts.get("probe", {})
    if "bfloat16_tflops" in probe:
        lines += ["", f"## Matmul probe {probe['n']}^3: bf16 {probe['bfloat16_tflops']:.3g} "
                  f"TFLOP/s, float32 (default precision) {probe['float32_tflops']:.3g} TFLOP/s"]
    train = parts.get("train", {}).get("rows", [])
    if train:
        lines += ["", f"## Train step, batch {train[0]['batch']} x 32 src x 32 tgt, Adam, "
                  "label smoothing 0.1, dropout 0.1, 1 device", "",
                  "| config | dtype | impl | ms/step | tgt tok/s | TFLOP/s | MFU (bf16 probe) "
                  "| build s | compile s | status |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in train:
            ok = r.get("status") == "ok"
            lines.append(
                f"| {r['config']} | {r['dtype']} | {r['impl']} | "
                f"{_fmt(r['step_s'] * 1e3, '.1f') if ok else '-'} | "
                f"{_fmt(r.get('tgt_tokens_per_s'))} | {_fmt(r.get('tflops'), '.3g')} | "
                f"{_fmt(r.get('mfu'), '.1%')} | {_fmt(r.get('build_s'), '.1f')} | "
                f"{_fmt(r.get('compile_s'), '.1f')} | "
                f"{r.get('status')} |")
    decode = parts.get("decode", {}).get("rows", [])
    if decode:
        lines += ["", f"## Decoding, source length 32, exactly {GEN_LEN} generated tokens "
                  "per sentence", "",
                  "| config | dtype | batch | beam | impl | tokens/s | compile s | status |",
                  "|---|---|---:|---:|---|---:|---:|---|"]
        for r in decode:
            lines.append(f"| {r['config']} | {r['dtype']} | {r['batch']} | {r['beam']} | "
                         f"{r['impl']} | {_fmt(r.get('tokens_per_s'))} | "
                         f"{_fmt(r.get('compile_s'), '.1f')} | {r.get('status')} |")
    if data["errors"]:
        lines += ["", "## Errors", ""] + [f"```\n{e}\n```" for e in data["errors"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse(argv)
    os.environ["JAX_PLATFORMS"] = JAX_PLATFORM[args.platform]  # before jax is imported
    sys.path[:0] = [REPO, BENCH]
    report = Report(args.out, args.budget_s)
    report.data["args"] = vars(args)
    parts = _list(args.parts)
    for name in parts:
        if name not in PARTS:
            raise SystemExit(f"--parts: {name!r} is not one of {', '.join(PARTS)}")
    for name in PARTS:  # tests first: its workers share the chip's memory with no one
        if name not in parts:
            continue
        if name == "train":
            report.part_deadline = time.monotonic() + args.train_share * report.left_s()
        report.run(name, globals()[f"part_{name}"], args)
        report.part_deadline = None
    print(markdown(report.data), flush=True)
    return 1 if report.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
