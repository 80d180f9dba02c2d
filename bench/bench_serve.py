"""Load on `jformer serve`: throughput and latency at 1, 8 and 32 concurrent clients.

    python bench/bench_serve.py [--workdir runs/demo] [--clients 1,8,32] [--requests 1000]
        [--soak 10000] [--src FILE] [--server-args "--max-wait-ms 5"] [--check]

Starts `jformer serve` on 127.0.0.1 (a free port, from --port 0) and stops it with SIGTERM at the end
(its exit status is printed: 0 is a clean drain). Each level sends --requests
one-sentence requests (default method: the model's beam search), split over that many
clients, each a thread with its own keep-alive connection sending its next request as
soon as the last is answered. Sentences: --src (one per line) or English demo-corpus
sentences (in the demo model's domain), request i taking sentence i.

Per level it prints throughput (sentences/s), p50/p95/p99 latency, the mean decoder
batch size (from the server's jformer_batch_sentences histogram) and errors (any answer
but 200, or a connection error). After the untimed warm-up pass of each level, nothing
compiles during a timed pass. Then --soak requests at the largest client count with the
server's resident memory (process_resident_memory_bytes) every tenth of the way. Then,
the server stopped, the ceiling: the same sentences through one
``Translator.translate`` call in this process, with the server's batch size, after a
warm-up call, in batches and with decode.continuous (slots refilled as sentences
finish), the faster counted; beside it the same call at the largest batch the most clients can fill
(32 one-sentence clients never queue more than 32 sentences), which no batching policy
lets the server pass. Last, the issue's targets: 32 clients >= 85% of the ceiling, zero errors,
no memory growth (the soak's last reading within 5% of its first); --check exits 1 when
one is missed. 32 clients against 1 is printed without a target: on 2 cores the
ceiling itself is only 4-4.5x one client, so the old 8x could not hold.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

HOST = "127.0.0.1"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default=os.path.join(REPO, "runs", "demo"))
    p.add_argument("--clients", default="1,8,32", help="comma-separated client counts")
    p.add_argument("--requests", type=int, default=1000, help="requests per level")
    p.add_argument("--soak", type=int, default=10000,
                   help="requests of the memory run at the largest client count (0: none)")
    p.add_argument("--src", default=None, help="sentences, one per line (default: demo corpus)")
    p.add_argument("--server-args", default="", help="more `jformer serve` flags")
    p.add_argument("--ready-timeout", type=float, default=900.0,
                   help="seconds to wait for the server to load and warm up")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = p.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    if min(args.clients) < 1 or args.requests < 1 or args.soak < 0:
        p.error("--clients and --requests must be >= 1, --soak >= 0")
    return args


def sentences(src: str | None, count: int) -> list[str]:
    if src:
        from jformer.workdir import files

        lines = [line for line in files.read_lines(src) if line.strip()]
    else:
        from jformer.data import demo

        lines = [en for en, _ in demo.generate_pairs(12345, 0, 0, min(count, 2000))["test"]]
    if not lines:
        raise SystemExit(f"no sentences in {src}")
    return [lines[i % len(lines)] for i in range(count)]


# ------------------------------------------------------------------ the server
def start_server(workdir: str, flags: list[str], port_file: str, output=None
                 ) -> tuple[subprocess.Popen, int]:
    """`jformer serve` on a free loopback port (--port 0; the server writes the port it
    bound to ``port_file``: nothing to race for); (process, port)."""
    from jformer.serve.server import wait_for_port

    command = [sys.executable, "-m", "jformer", "serve", "--workdir", workdir, "--host",
               HOST, "--port", "0", "--port-file", port_file, *flags]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print("server:", " ".join(command[1:]), flush=True)
    proc = subprocess.Popen(command, env=env, stdout=output,
                            stderr=None if output is None else subprocess.STDOUT)
    try:
        return proc, wait_for_port(port_file, proc, 300)
    except RuntimeError as e:
        proc.kill()
        raise SystemExit(str(e)) from None


def wait_ready(proc: subprocess.Popen, base: str, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/v1/ready", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server was not ready within {timeout:.0f} s")


def metric(base: str, name: str) -> float:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise SystemExit(f"no {name} in /metrics")


# ------------------------------------------------------------------ the clients
class Client(threading.Thread):
    """Sends its share of the requests one after another on one keep-alive connection."""

    def __init__(self, port: int, bodies: list[bytes]):
        super().__init__(daemon=True)
        self.port, self.bodies = port, bodies
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=120)
        for body in self.bodies:
            start = time.perf_counter()
            try:
                conn.request("POST", "/v1/translate", body,
                             {"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
                if response.status != 200:
                    self.errors.append(f"{response.status} {data[:200]!r}")
                    continue
                self.latencies.append(time.perf_counter() - start)
            except (OSError, http.client.HTTPException) as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection(HOST, self.port, timeout=120)
        conn.close()


def run_level(port: int, texts: list[str], clients: int) -> dict:
    bodies = [json.dumps({"q": t}).encode() for t in texts]
    threads = [Client(port, bodies[c::clients]) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    latencies = sorted(x for t in threads for x in t.latencies)
    errors = [e for t in threads for e in t.errors]
    return dict(clients=clients, requests=len(texts), wall=wall, errors=errors,
                throughput=len(latencies) / wall, p50=percentile(latencies, 50),
                p95=percentile(latencies, 95), p99=percentile(latencies, 99))


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def measured_level(base: str, port: int, texts: list[str], clients: int) -> dict:
    """An untimed warm-up pass, then the timed one with its mean decoder batch size."""
    run_level(port, texts[:min(len(texts), 4 * clients)], clients)
    batches = metric(base, "jformer_batch_sentences_count")
    sentences_in = metric(base, "jformer_batch_sentences_sum")
    result = run_level(port, texts, clients)
    d_batches = metric(base, "jformer_batch_sentences_count") - batches
    d_sentences = metric(base, "jformer_batch_sentences_sum") - sentences_in
    result["mean_batch"] = d_sentences / d_batches if d_batches else float("nan")
    return result


def soak(base: str, port: int, texts: list[str], clients: int, total: int
         ) -> tuple[list[float], int]:
    """Resident MiB of the server before the soak and after each tenth of it; errors."""
    readings = [metric(base, "process_resident_memory_bytes") / 2 ** 20]
    errors = 0
    step = max(1, total // 10)
    for start in range(0, total, step):
        chunk = [texts[(start + i) % len(texts)] for i in range(min(step, total - start))]
        errors += len(run_level(port, chunk, clients)["errors"])
        readings.append(metric(base, "process_resident_memory_bytes") / 2 ** 20)
    print(f"soak: {total} requests at {clients} clients, {errors} errors; server RSS MiB: "
          + " ".join(f"{r:.1f}" for r in readings), flush=True)
    return readings, errors


# ------------------------------------------------------------------ the ceiling
def ceilings(workdir: str, texts: list[str], server_args: str, clients: int
             ) -> tuple[float, int, float | None]:
    """Sentences/s of one Translator.translate call over ``texts`` (after a warm-up) at
    the server's batch size: the ceiling; then the largest batch ``clients`` one-sentence
    clients can fill, and the same call's rate at it (None where that is the server's).
    """
    import dataclasses

    from jformer.inference import Translator

    batches = Translator.from_checkpoint(workdir)
    # the call at its fastest: in batches, or in slots refilled as sentences finish
    ways = {"batches": batches, "continuous": Translator.from_checkpoint(
        workdir, decode_cfg=dataclasses.replace(batches.decode_cfg, continuous=True))}
    flags = shlex.split(server_args)
    batch = (int(flags[flags.index("--max-batch") + 1]) if "--max-batch" in flags
             else batches.decode_cfg.batch_size)

    def rate(batch_size: int) -> float:
        rates = {}
        for name, translator in ways.items():
            translator.translate(texts, batch_size=batch_size)  # compiles every shape
            start = time.perf_counter()
            translator.translate(texts, batch_size=batch_size)
            rates[name] = len(texts) / (time.perf_counter() - start)
        print(f"one call at batch {batch_size}: " + ", ".join(
            f"{name} {value:.1f} sent/s" for name, value in rates.items()), flush=True)
        return max(rates.values())
    fill = min(batch, clients)
    return rate(batch), fill, rate(fill) if fill < batch else None


def report(levels: list[dict], ceiling: tuple[float, int, float | None], memory: list[float],
           soak_errors: int) -> bool:
    print(f"\n{'clients':>7} {'requests':>8} {'errors':>6} {'sent/s':>8} {'p50 ms':>8} "
          f"{'p95 ms':>8} {'p99 ms':>8} {'mean batch':>10}")
    for r in levels:
        print(f"{r['clients']:>7} {r['requests']:>8} {len(r['errors']):>6} "
              f"{r['throughput']:>8.1f} {1e3 * r['p50']:>8.1f} {1e3 * r['p95']:>8.1f} "
              f"{1e3 * r['p99']:>8.1f} {r['mean_batch']:>10.2f}")
        for e in sorted(set(r["errors"]))[:3]:
            print(f"        error: {e}")
    ceiling_rate, fill, fill_rate = ceiling
    print(f"ceiling (one Translator.translate call, this process): {ceiling_rate:.1f} sent/s")
    if fill_rate is not None:  # what a server fed by this many clients cannot pass
        print(f"the same call at batch {fill}, the most {fill} one-sentence clients can "
              f"fill: {fill_rate:.1f} sent/s ({100 * fill_rate / ceiling_rate:.0f}% of "
              "the ceiling)")
    by_clients = {r["clients"]: r for r in levels}
    checks = []
    if 1 in by_clients and 32 in by_clients:
        ratio = by_clients[32]["throughput"] / by_clients[1]["throughput"]
        print(f"32 clients / 1 client: {ratio:.1f}x; ceiling / 1 client: "
              f"{ceiling_rate / by_clients[1]['throughput']:.1f}x")
    if 32 in by_clients:
        share = by_clients[32]["throughput"] / ceiling_rate
        checks.append((f"32 clients >= 85% of the ceiling: {100 * share:.0f}%", share >= 0.85))
    errors = sum(len(r["errors"]) for r in levels) + soak_errors
    checks.append((f"zero errors (levels and soak): {errors}", errors == 0))
    if memory:
        growth = memory[-1] - memory[1] if len(memory) > 2 else 0.0
        checks.append((f"no memory growth: {growth:+.1f} MiB after the soak's first tenth "
                       f"({memory[1]:.1f} -> {memory[-1]:.1f} MiB)",
                       growth <= 0.05 * memory[1]))
    for text, ok in checks:
        print(f"target: {text:<70} {'PASS' if ok else 'MISS'}")
    return all(ok for _, ok in checks)


def main(argv=None) -> int:
    args = parse_args(argv)
    texts = sentences(args.src, args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(args.workdir, ["--no-access-log", "--log-level", "warning",
                                                 *shlex.split(args.server_args)],
                                  os.path.join(tmp, "port"))
    base = f"http://{HOST}:{port}"
    try:
        print(f"ready after {wait_ready(proc, base, args.ready_timeout):.1f} s "
              "(load + warm-up)", flush=True)
        levels = []
        for clients in args.clients:
            levels.append(measured_level(base, port, texts, clients))
            print(f"level {clients} clients done", flush=True)
        memory, soak_errors = (soak(base, port, texts, max(args.clients), args.soak)
                               if args.soak else ([], 0))
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(120)
    print(f"server stopped by SIGTERM, exit status {status}", flush=True)
    ok = report(levels, ceilings(args.workdir, texts, args.server_args, max(args.clients)),
                memory, soak_errors) and status == 0
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
