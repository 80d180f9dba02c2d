"""Train-step speed: target tokens/s, step time, peak memory and MFU (small / base / big).

    python bench/bench_train.py [--configs small,base] [--dtypes float32,bfloat16]
        [--batch 64] [--steps 20] [--base-steps 10] [--warmup 2] [--dropout 0.1]
        [--malloc hugepages|glibc] [--max-wait 60] [--sequential] [--no-probe] [--json PATH]

Runs the real jformer train step (``make_train_step`` + ``DataParallel`` over a one-device
mesh, donated state, Adam on the paper's schedule, label smoothing 0.1, dropout 0.1) on a
batch of 64 rows (``--batch``) x 32 source x 32 target tokens: random ids from a fixed seed, every row
full length (no padding), as the peer scripts in ../shared/bench do. Each (config, dtype)
runs in its own subprocess so its peak RSS (``ru_maxrss``) belongs to that measurement
alone. Step time is the median of the timed steps after warm-up; the first (compiling)
step is reported separately. The dtypes (and ``--ops`` sets) of one config are
interleaved: their processes live side by side and run one step each in turn (the
others wait, idle), so a bf16 / f32 ratio compares the same minutes of the machine,
whose speed drifts by 10-30% over an hour; ``--sequential`` measures them one after the
other instead. As in the peer script, a step is timed only while other
processes use < 5% of a core (the 2 cores are shared): contended steps are dropped and
the next waits for a quiet second; after ``--max-wait`` seconds of waiting in one
measurement, steps are kept as they come and counted as "contended" in the table.

XLA:CPU allocates each step's scratch memory (about 450 MB for small, 1.5 GB for base)
as one block that glibc maps fresh from the kernel and unmaps after every step, so each
step pays for about 4 KiB page faults and zeroing across all of it (small float32:
~125,000 faults, a sixth of the step's CPU time). ``--malloc hugepages`` (the default)
runs the measured processes with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which makes
glibc ask for transparent huge pages (2 MiB faults; ~750 per step); the same
environment setting speeds up ``python train.py`` on a CPU. ``--malloc glibc`` measures
with glibc's defaults.

Model FLOPs per step (the usual MFU convention: matmuls only, recomputation not counted;
softmax, LayerNorm, biases, Adam and the embedding gather are left out):
  6 * P_enc * N_src                        encoder Q/K/V/O + FFN weights (P = 4D^2 + 2DF)
  6 * (P_dec_q * N_tgt + P_dec_kv * N_src) decoder: self Q/K/V/O, cross Q/O, FFN on target
                                           tokens (6D^2 + 2DF), cross K/V on the memory (2D^2)
  3 * 4 * L * M * D per layer per row      attention logits Q.K^T and context P.V, forward
                                           2LMD each, backward twice that; causal self-
                                           attention counted in full (XLA computes it all)
  6 * N_tgt * D * V                        tied output projection
with N_src = B*S, N_tgt = B*T tokens in the batch. MFU = FLOPs / step time / peak, where the
peak is measured here, in the same run, by a matmul probe (best of several ``jnp.dot`` at
2048x512x2048, float32 and bf16 inputs with float32 accumulation; ``--no-probe`` skips it
and the MFU column).

Peers (the Flax WMT example, Hugging Face Marian) are measured beside these figures, in
the same run, by ``bench/compare.py``; ``--json`` writes this script's rows for it.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from jformer.cli.cpu_malloc import HUGEPAGE_ENV  # noqa: E402  (after the path insert)
from jformer.workdir.files import write_json  # noqa: E402

BATCH, SRC_LEN, TGT_LEN = 64, 32, 32
# Same shapes as ../shared/bench/peer_torch.py.
CONFIGS = {
    "small": dict(vocab_size=8192, d_model=256, num_heads=4, d_ff=1024,
                  num_encoder_layers=3, num_decoder_layers=3),
    "base": dict(vocab_size=32768, d_model=512, num_heads=8, d_ff=2048,
                 num_encoder_layers=6, num_decoder_layers=6),
    # the paper's Transformer (big), table 3; bench/scaling.py gives the peers the same
    "big": dict(vocab_size=32768, d_model=1024, num_heads=16, d_ff=4096,
                num_encoder_layers=6, num_decoder_layers=6),
}
DTYPES = ("float32", "bfloat16")
PROBE_SHAPE = (2048, 512, 2048)  # M x K x N
QUIET_SHARE = 0.05  # of one core: the most other processes may use while a step is timed
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MALLOC_ENV = {"hugepages": HUGEPAGE_ENV, "glibc": {}}


def _parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="small,base", help="comma list of small, base, big")
    p.add_argument("--batch", type=int, default=BATCH, help="sentences per step")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma list of compute dtypes")
    p.add_argument("--steps", type=int, default=20, help="timed steps (small)")
    p.add_argument("--base-steps", type=int, default=10, help="timed steps for base, big")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps incl. the compile")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--ops", default="auto",
                   help="comma list of model.ops settings: auto, plain, cpu")
    p.add_argument("--max-wait", type=float, default=60.0,
                   help="seconds one measurement may wait for a quiet machine (0: no gate)")
    p.add_argument("--malloc", default="hugepages", choices=sorted(MALLOC_ENV),
                   help="glibc allocator setting of the measured processes")
    p.add_argument("--sequential", action="store_true",
                   help="measure the dtypes (and kernel sets) of a config one after the "
                        "other instead of interleaved step by step")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="skip the matmul probe (and the MFU column)")
    p.add_argument("--json", default="", metavar="PATH",
                   help="also write the probe and the rows (with tgt_tokens_per_s) as JSON")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # "config:dtype" or "probe"
    p.add_argument("--turns", action="store_true", help=argparse.SUPPRESS)  # see Turns
    return p.parse_args(argv)


def model_flops(cfg, batch: int = BATCH) -> float:
    """Model FLOPs of one train step (forward + backward) at batch x SRC_LEN x TGT_LEN."""
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    n_src, n_tgt = batch * SRC_LEN, batch * TGT_LEN
    enc = 6 * (4 * d * d + 2 * d * f) * n_src * cfg.num_encoder_layers
    dec = 6 * ((6 * d * d + 2 * d * f) * n_tgt + 2 * d * d * n_src) * cfg.num_decoder_layers
    attn_rows = (cfg.num_encoder_layers * SRC_LEN * SRC_LEN
                 + cfg.num_decoder_layers * (TGT_LEN * TGT_LEN + TGT_LEN * SRC_LEN))
    attn = 3 * 4 * attn_rows * d * batch
    out = 6 * n_tgt * d * v
    return float(enc + dec + attn + out)


def _machine_busy_s() -> float:
    """CPU seconds all processes of the machine have been busy (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


class QuietGate:
    """Keeps a timed step only if other processes used < 5% of a core meanwhile.

    The 2 cores are shared; a step timed while another job computes measures that job.
    As ../shared/bench/peer_torch.py does for the peers, contended steps are dropped
    and the next one waits for a quiet second; after ``max_wait_s`` of waiting in one
    measurement, steps are kept as they come (and counted in ``contended_kept``).
    """

    def __init__(self, max_wait_s: float):
        self.max_wait_s, self.waited_s, self.dropped, self.contended_kept = max_wait_s, 0.0, 0, 0
        self._quiet = True

    def _is_quiet(self, wall_s: float, foreign_cpu_s: float) -> bool:
        return foreign_cpu_s <= QUIET_SHARE * wall_s + 2.0 / _CLOCK_TICKS

    def keep(self, wall_s: float, foreign_cpu_s: float) -> bool:
        self._quiet = self._is_quiet(wall_s, foreign_cpu_s)
        if self._quiet:
            return True
        if self.waited_s >= self.max_wait_s:
            self.contended_kept += 1
            return True
        self.dropped += 1
        return False

    def wait(self, window_s: float = 0.5, windows: int = 2, force: bool = False) -> None:
        """After a contended step (or if forced): blocks until `windows` quiet windows in a row."""
        quiet_in_row = windows if self._quiet and not force else 0
        while quiet_in_row < windows and self.waited_s < self.max_wait_s:
            busy0, own0 = _machine_busy_s(), time.process_time()
            time.sleep(window_s)
            self.waited_s += window_s
            foreign = _machine_busy_s() - busy0 - (time.process_time() - own0)
            quiet_in_row = quiet_in_row + 1 if self._is_quiet(window_s, foreign) else 0
        self._quiet = True


class Turns:
    """A worker's side of the interleaving: each step (warm-up included) waits for a
    line on stdin, and each step but the last answers with one JSON line on stdout (the
    last step's answer is the worker's result). The parent (:func:`_run_interleaved`)
    gives the workers of one config their turns in rotation, so at most one of them
    computes at a time and every dtype sees the same minutes of the machine."""

    def wait(self) -> None:
        if not sys.stdin.readline():
            raise SystemExit("bench_train worker: the parent closed the turn pipe")

    def done(self, step: int, wall_s: float) -> None:
        print(json.dumps({"step": step, "wall_s": wall_s}), flush=True)


def _probe() -> dict:
    """Best-of-N GEMM rate (GFLOP/s) of this process's jnp.dot, float32 and bf16 inputs."""
    import jax
    import jax.numpy as jnp
    m, k, n = PROBE_SHAPE
    out = {}
    QuietGate(max_wait_s=30.0).wait(force=True)
    for name, dtype in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
        a = jax.random.normal(jax.random.key(0), (m, k), dtype)
        b = jax.random.normal(jax.random.key(1), (k, n), dtype)
        dot = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32))
        dot(a, b).block_until_ready()
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            dot(a, b).block_until_ready()
            times.append(time.perf_counter() - t0)
        out[name] = 2 * m * k * n / min(times) / 1e9
    return out


def _batches(vocab_size: int, batch: int, count: int = 4) -> list[dict]:
    import numpy as np
    rng = np.random.default_rng(0)
    # ids from 4 up: never PAD/BOS/EOS/UNK, so every position is a real token
    return [{"inputs": rng.integers(4, vocab_size, (batch, SRC_LEN), dtype=np.int32),
             "targets": rng.integers(4, vocab_size, (batch, TGT_LEN), dtype=np.int32)}
            for _ in range(count)]


def _build(config: str, dtype: str, dropout: float, ops: str = "auto",
           batch: int = BATCH):
    """The compiled one-device train step, its state and 4 device batches."""
    import jax
    from jformer.config import ModelConfig, TrainConfig
    from jformer.train.schedules import make_optimizer
    from jformer.mesh import make_mesh
    from jformer.ops import transformer
    from jformer.train.sharding import DataParallel
    from jformer.train.step import create_train_state, make_train_step

    cfg = ModelConfig(**CONFIGS[config], dropout_rate=dropout, max_len=64, dtype=dtype,
                      ops=ops)
    tcfg = TrainConfig(label_smoothing=0.1, compute_dtype=dtype)
    model = transformer(cfg)
    tx, schedule = make_optimizer(tcfg, cfg.d_model)
    dp = DataParallel(make_mesh(jax.devices()[:1]))  # what a one-CPU user runs
    step = dp.compile(make_train_step(model, tx, label_smoothing=tcfg.label_smoothing,
                                      pad_id=cfg.pad_id, schedule=schedule))
    host_batches = _batches(cfg.vocab_size, batch)
    state = dp.put_state(create_train_state(model, tx, tcfg.seed, host_batches[0]))
    return cfg, dp, step, state, [dp.put_batch(b) for b in host_batches]


def _measure(config: str, dtype: str, steps: int, warmup: int, dropout: float,
             max_wait_s: float, ops: str = "auto", batch: int = BATCH,
             turns: Turns | None = None) -> dict:
    """One (config, dtype, ops) row; run in its own process (with ``turns``: one step
    per turn, interleaved with the config's other workers)."""
    import jax
    from jformer.config import resolve_ops
    cfg, dp, step, state, batches = _build(config, dtype, dropout, ops, batch)
    params = sum(x.size for x in jax.tree.leaves(state.params))
    gate = QuietGate(max_wait_s)
    times, faults, first_s, i = [], [], None, 0
    while len(times) < steps:
        if turns is not None:
            if i:
                turns.done(i, wall)
            turns.wait()
        if i >= warmup:
            gate.wait()
        t0, own0, busy0 = time.perf_counter(), time.process_time(), _machine_busy_s()
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        state, metrics = step(state, batches[i % len(batches)])
        jax.block_until_ready((state, metrics))
        wall = time.perf_counter() - t0
        first_s = wall if first_s is None else first_s
        if i >= warmup and gate.keep(wall, _machine_busy_s() - busy0 - (time.process_time() - own0)):
            times.append(wall)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0)
        i += 1
    loss = dp.get_metrics(metrics)
    if loss["nonfinite"]:
        raise RuntimeError(f"{config}/{dtype}: non-finite loss {loss}")
    return {"config": config, "dtype": dtype, "ops": ops, "batch": batch,
            "ops_resolved": resolve_ops(cfg.ops), "params": params,
            "first_step_s": first_s,
            "step_s": statistics.median(times), "steps": steps, "spread": (min(times), max(times)),
            "dropped": gate.dropped, "contended_kept": gate.contended_kept,
            "waited_s": gate.waited_s, "loss_per_token": loss["loss"] / loss["tokens"],
            "page_faults_per_step": statistics.median(faults),
            "flops": model_flops(cfg, batch), "peak_rss_mib": _peak_rss_mib()}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _worker_cmd(spec: str, args: argparse.Namespace) -> tuple[list[str], dict]:
    """The command line and environment of one --worker process."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", spec,
           "--steps", str(args.steps), "--base-steps", str(args.base_steps),
           "--warmup", str(args.warmup), "--dropout", str(args.dropout), "--malloc", args.malloc,
           "--max-wait", str(args.max_wait), "--batch", str(args.batch)]
    env = dict(os.environ)
    for name, value in MALLOC_ENV[args.malloc].items():  # appended to the caller's tunables
        if value not in env.get(name, "").split(":"):
            env[name] = ":".join(filter(None, [env.get(name, ""), value]))
    return cmd, env


def _run_worker(spec: str, args: argparse.Namespace) -> dict:
    """Runs this script with --worker in a fresh process; returns its JSON line."""
    cmd, env = _worker_cmd(spec, args)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    if done.returncode:
        raise RuntimeError(f"worker {spec} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_interleaved(specs: list[str], args: argparse.Namespace) -> list[dict]:
    """One --worker --turns process per spec, all alive at once, given one step each in
    rotation (the order alternates every round) until each has its timed steps; each
    keeps its own peak RSS. Returns their results in the order of ``specs``."""
    import tempfile
    procs, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, spec in enumerate(specs):
            cmd, env = _worker_cmd(spec, args)
            err = open(os.path.join(tmp, f"{n}.err"), "w+")
            procs.append((spec, err, subprocess.Popen(
                cmd + ["--turns"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, cwd=REPO, env=env)))
        try:
            order = list(range(len(procs)))
            while len(results) < len(procs):
                for n in order:
                    spec, err, proc = procs[n]
                    if spec in results:
                        continue
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        proc.wait()
                        err.seek(0)
                        raise RuntimeError(f"worker {spec} failed:\n{err.read()[-3000:]}")
                    answer = json.loads(line)
                    if "step" not in answer:  # the last step's answer: the result
                        results[spec] = answer
                order.reverse()
        finally:
            for _, err, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                err.close()
    return [results[s] for s in specs]


def _worker_main(args: argparse.Namespace) -> None:
    if args.worker == "probe":
        print(json.dumps(_probe()))
        return
    config, dtype, ops = args.worker.split(":")
    steps = args.steps if config == "small" else args.base_steps
    print(json.dumps(_measure(config, dtype, steps, max(args.warmup, 1), args.dropout,
                              args.max_wait, ops, args.batch,
                              Turns() if args.turns else None)), flush=True)


def _table(rows: list[dict], probe: dict | None) -> str:
    lines = ["| config | dtype | ops | params | step s (median) | min-max s | tgt tok/s | "
             "first step s | steps (dropped) | peak RSS MiB | GFLOP/step | GFLOP/s "
             "| MFU (probe) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rate = r["flops"] / r["step_s"] / 1e9
        mfu = f"{rate / probe[r['dtype']]:.0%}" if probe else "-"
        lines.append(
            f"| {r['config']} | {r['dtype']} | {r['ops']} ({r['ops_resolved']}) | "
            f"{r['params'] / 1e6:.2f}M | {r['step_s']:.3f} | "
            f"{r['spread'][0]:.3f}-{r['spread'][1]:.3f} | {r['tgt_tokens_per_s']:,.0f} | "
            f"{r['first_step_s']:.1f} | {_steps_cell(r)} | {r['peak_rss_mib']:,.0f} | "
            f"{r['flops'] / 1e9:.1f} | {rate:.0f} | {mfu} |")
    return "\n".join(lines)


def _dtype_ratios(rows: list[dict]) -> list[str]:
    """"bfloat16 / float32" step-time ratios of the same config and ops, one line each."""
    steps = {(r["config"], r["ops"], r["dtype"]): r for r in rows}
    lines = []
    for (config, ops, dtype), r in steps.items():
        f32 = steps.get((config, ops, "float32"))
        if dtype == "bfloat16" and f32:
            how = "interleaved step by step" if r.get("interleaved") else "one after the other"
            lines.append(f"{config} {ops}: bfloat16 / float32 tokens/s = "
                         f"{f32['step_s'] / r['step_s']:.2f}x ({how})")
    return lines


def _steps_cell(r: dict) -> str:
    cell = f"{r['steps']} ({r['dropped']})"
    if r["contended_kept"]:  # the gate gave up waiting: these steps ran beside other jobs
        cell += f", {r['contended_kept']} contended"
    return cell


def main(argv=None) -> None:
    args = _parse(argv)
    if args.worker:
        _worker_main(args)
        return
    configs = [c for c in args.configs.split(",") if c]
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1; got {args.batch}")
    dtypes = [d for d in args.dtypes.split(",") if d]
    for c in configs:
        if c not in CONFIGS:
            raise ValueError(f"--configs must name {sorted(CONFIGS)}; got {c!r}")
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"--dtypes must name {list(DTYPES)}; got {d!r}")
    op_sets = [k for k in args.ops.split(",") if k]
    for k in op_sets:
        if k not in ("auto", "plain", "cpu"):
            raise ValueError(f"--ops must name auto, plain or cpu; got {k!r}")
    probe = _run_worker("probe", args) if args.probe else None
    if probe:
        print(f"matmul probe {'x'.join(map(str, PROBE_SHAPE))} (best of 30): "
              + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in probe.items()), flush=True)
    rows = []
    for c in configs:
        specs = [f"{c}:{d}:{k}" for d, k in itertools.product(dtypes, op_sets)]
        interleaved = len(specs) > 1 and not args.sequential
        if interleaved:
            measured = _run_interleaved(specs, args)
        else:
            measured = [_run_worker(spec, args) for spec in specs]
        for r in measured:
            r["tgt_tokens_per_s"] = args.batch * TGT_LEN / r["step_s"]
            r["interleaved"] = interleaved
            print(f"  {c} {r['dtype']} {r['ops']}: {r['step_s']:.3f} s/step, "
                  f"{r['tgt_tokens_per_s']:,.0f} tok/s, "
                  f"{r['page_faults_per_step']:,.0f} page faults/step", flush=True)
        rows += measured
    print(f"\n### Train step, batch {args.batch} x {SRC_LEN} src x {TGT_LEN} tgt, "
          f"dropout {args.dropout}, label smoothing 0.1, Adam, 1 device, "
          f"malloc {args.malloc} {MALLOC_ENV[args.malloc] or ''}\n")
    print(_table(rows, probe))
    ratios = _dtype_ratios(rows)
    if ratios:
        print("\n" + "\n".join(ratios))
    if args.json:
        write_json(args.json, {"probe_gflops": probe, "malloc": MALLOC_ENV[args.malloc],
                               "rows": rows})


if __name__ == "__main__":
    main()
