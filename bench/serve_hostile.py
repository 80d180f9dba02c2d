"""`jformer serve` under hostile, concurrent load on loopback, then a SIGTERM mid-run.

    python bench/serve_hostile.py [--workdir tests/fixtures/legacy_workdir] [--clients 32]
        [--rounds 4] [--idle 64] [--seconds 300] [--json OUT]

Starts `jformer serve` (--port 0, tight limits: --max-body-bytes 65536, --timeout-s 3,
and --drain-notice-s 5: the socket listens 5 s past SIGTERM, answering /v1/ready 503)
and first asks it, quietly, for the reference translation of each valid sentence. Then
--clients threads each send --rounds passes over every KIND below (raw sockets, a new
connection a request): valid requests mixed with malformed JSON, wrong types, bodies
over the limit (and 64x over it), invalid UTF-8, huge n_best and beam_size, a wrong
Content-Type, unknown paths, bodies that stall midway, bodies that declare one length
and send another, 32 KiB headers, and fuzzed bodies (nesting depth, size, number
ranges, encodings, duplicate keys). --idle connections are held open all along, half
of them with a request line cut short. Once half the requests are answered it sends
SIGTERM, asks /v1/ready on connections opened before it and on a new one, and waits
for the exit.

Prints per kind: requests, status codes seen, max latency and failures (a 5xx, a hang
past --timeout-s + 5 s, a reset, or a wrong status or translation); then the server's
RSS at start / before SIGTERM, /v1/ready's answers during the drain and the exit
status. Requests cut by the shutdown (refused, reset, or 503 draining because their
handler began after SIGTERM) are counted apart.
Exits 1 when a target is missed: every valid request answered correctly, every hostile
one its 4xx, the server up until SIGTERM, the drain answering 503 and exiting 0, RSS
before SIGTERM within 10% (or 32 MiB) of its reading after the first quarter.
"""
from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import random
import select
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import HOST, REPO, start_server, wait_ready  # noqa: E402

SENTENCES = ["I see a big dog.", "It is seven o'clock.", "It is late.", "We need one car.",
             "Five.", "Hello"]
MAX_BODY, TIMEOUT = 65536, 3.0
NOTICE = 5.0  # --drain-notice-s: /v1/ready answers 503 this long before the socket closes
JSON_CT = "application/json"


def request(method: str, path: str, body: bytes = b"", content_type: str | None = JSON_CT,
            length: int | None = None, extra: str = "") -> bytes:
    """A raw HTTP/1.1 request; ``length`` overrides the true Content-Length."""
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n{extra}"
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    if method == "POST":
        head += f"Content-Length: {len(body) if length is None else length}\r\n"
    return head.encode("latin-1") + b"\r\n" + body


def post(body: dict | bytes, **kw) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request("POST", "/v1/translate", raw, **kw)


def fuzz_body(rng: random.Random) -> bytes:
    """A body from one of five hostile families; some of them are valid requests."""
    family = rng.choice(["depth", "size", "numbers", "encoding", "duplicates"])
    if family == "depth":
        depth = rng.choice([2, 31, 33, 200, 5000, 30000])
        opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
        return ('{"q": ' + opener * depth + '"x"' + closer * depth + "}").encode()
    if family == "size":
        n = rng.choice([0, 1, 128, 129, 5000, 5001, 20000])
        return json.dumps(rng.choice([{"q": "a " * (n // 2)}, {"q": ["a"] * n},
                                      {"q": "a\n" * n}])).encode()
    if family == "numbers":
        field = rng.choice(["beam_size", "n_best", "max_len", "seed", "top_k", "alpha",
                            "temperature"])
        value = rng.choice(["0", "-1", "2147483648", "18446744073709551616", "1e400",
                            "-0.0", "1.5", "1e-320", "NaN", "-Infinity", "9" * 4000])
        return f'{{"q": "Hello", "method": "sample", "{field}": {value}}}'.encode()
    if family == "encoding":
        text = '{"q": "Grüße \U0001F600"}'
        return rng.choice([text.encode("utf-16"), text.encode("utf-8-sig"),
                           text.encode("latin-1", "replace"), b'{"q": "\xc0\xaf"}',
                           b'{"q": "\xed\xa0\x80"}', b'{"q": "\\udfff\\ud800"}',
                           text.encode("utf-32")])
    key = rng.choice(["q", "method", "beam_size"])
    return f'{{"q": "Hello", "{key}": "x", "{key}": 2}}'.encode()


# kind -> (build(rng) -> (parts to send, pause between them), statuses it may get)
KINDS = {
    "valid": (lambda r: ([post({"q": r.choice(SENTENCES)})], 0), {200}),
    "malformed_json": (lambda r: ([post(b'{"q": "Hello",')], 0), {400}),
    "wrong_type": (lambda r: ([post({"q": r.choice([3, None, {"a": 1}, [["a"]]])})], 0),
                   {422}),
    "oversize_body": (lambda r: ([post(b'{"q": "' + b"x" * MAX_BODY + b'"}')], 0), {413}),
    "oversize_64x": (lambda r: ([post(b"x" * (64 * MAX_BODY))], 0), {413}),
    "invalid_utf8": (lambda r: ([post(b'{"q": "caf\xe9 \xff"}')], 0), {400}),
    "huge_n_best": (lambda r: ([post({"q": "Hello", "n_best": 10 ** 30})], 0), {422}),
    "huge_beam": (lambda r: ([post({"q": "Hello", "beam_size": 2 ** 63})], 0), {422}),
    "wrong_content_type": (lambda r: ([post({"q": "Hello"}, content_type="text/plain")], 0),
                           {415}),
    "unknown_path": (lambda r: ([r.choice([request("GET", "/nowhere"),
                                           request("POST", "/v1/nope", b"{}")])], 0), {404}),
    "stall_midway": (lambda r: ([post({"q": "Hello"})[:-4], b'o"}'], TIMEOUT + 1), {408}),
    "declare_longer": (lambda r: ([post({"q": "Hello"}, length=400)], 0), {408}),
    "declare_shorter": (lambda r: ([post({"q": "Hello"}, length=5)], 0), {400}),
    "oversize_headers": (lambda r: ([request("GET", "/v1/health",
                                             extra=f"X-Pad: {'a' * (32 << 10)}\r\n")], 0),
                         {400, 431}),
    "fuzz": (lambda r: ([post(fuzz_body(r))], 0), None),  # None: any status under 500
}


class Run:
    """What the clients share: outcomes, the SIGTERM time and the stop flag."""

    def __init__(self, port: int, references: dict[str, str]):
        self.port, self.references = port, references
        self.lock = threading.Lock()
        self.outcomes: dict[str, list[tuple]] = collections.defaultdict(list)
        self.done = 0
        self.sigterm_at: float | None = None
        self.stop = threading.Event()

    def record(self, kind: str, started: float, status, failure: str | None) -> None:
        with self.lock:
            cut = self.sigterm_at is not None and failure in ("refused", "reset", "draining")
            self.outcomes[kind].append((status, time.monotonic() - started,
                                        "cut" if cut else failure))
            self.done += 1


def exchange(port: int, parts: list[bytes], pause: float) -> tuple[int, bytes]:
    with socket.create_connection((HOST, port), timeout=TIMEOUT + 5) as sock:
        for i, part in enumerate(parts):
            if i and pause:
                time.sleep(pause)
            if i and select.select([sock], [], [], 0)[0]:
                break  # answered already (e.g. 408): read it rather than send on
            try:
                sock.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered and closed first: read what it said
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read()


def check(run: Run, kind: str, body_sent: bytes, status: int, data: bytes,
          allowed: set | None) -> str | None:
    if status == 503 and b'"reason":"draining"' in data:
        return "draining"  # its handler began after SIGTERM: cut, if SIGTERM was sent
    if status >= 500:
        return "5xx"
    if allowed is not None and status not in allowed:
        return f"status {status}"
    if kind == "valid":
        sentence = json.loads(body_sent.split(b"\r\n\r\n", 1)[1])["q"]
        if json.loads(data)["translations"] != [run.references[sentence]]:
            return "wrong translation"
    elif status >= 400 and not data.startswith(b'{"error"') and not data.startswith(
            b"Invalid HTTP request"):  # h11's own 400 for broken framing is plain text
        return "not a JSON error"
    return None


def client(run: Run, index: int, rounds: int, deadline: float) -> None:
    rng = random.Random(index)
    names = list(KINDS)
    for _ in range(rounds):
        for kind in rng.sample(names, len(names)):  # each round in its own order
            if run.stop.is_set() or time.monotonic() > deadline:
                return
            build, allowed = KINDS[kind]
            parts, pause = build(rng)
            started = time.monotonic()
            try:
                status, data = exchange(run.port, parts, pause)
                run.record(kind, started, status, check(run, kind, parts[0], status, data,
                                                        allowed))
            except ConnectionRefusedError:
                run.record(kind, started, "refused", "refused")
            except socket.timeout:
                run.record(kind, started, "hang", "hang")
            except (OSError, http.client.HTTPException):
                run.record(kind, started, "reset", "reset")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def references(port: int) -> dict[str, str]:
    out = {}
    for s in SENTENCES:
        status, data = exchange(port, [post({"q": s})], 0)
        if status != 200:
            raise SystemExit(f"reference request got {status}: {data[:200]!r}")
        out[s] = json.loads(data)["translations"][0]
    return out


def drain_probes(port: int, count: int) -> list[socket.socket]:
    """Keep-alive connections that have had one answer (new ones are refused once
    SIGTERM closes the listener)."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection((HOST, port), timeout=10)
        sock.sendall(f"GET /v1/health HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        socks.append(sock)
    return socks


def new_connection(port: int) -> socket.socket | None:
    try:
        return socket.create_connection((HOST, port), timeout=10)
    except OSError:
        return None  # refused: the notice is over


def ask_ready(sock: socket.socket | None) -> str:
    if sock is None:
        return "refused"
    try:
        sock.sendall(f"GET /v1/ready HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        response = http.client.HTTPResponse(sock)
        response.begin()
        response.read()
        return str(response.status)
    except (OSError, http.client.HTTPException):
        return "closed"
    finally:
        sock.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default=os.path.join(REPO, "tests", "fixtures",
                                                     "legacy_workdir"))
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rounds", type=int, default=4, help="passes over the kinds per client")
    p.add_argument("--idle", type=int, default=64, help="idle connections held open")
    p.add_argument("--seconds", type=float, default=300, help="bound on the whole mix")
    p.add_argument("--json", default=None, help="write the results here too")
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="serve_hostile_")
    log = open(os.path.join(tmp, "server.log"), "wb")
    proc, port = start_server(args.workdir, [
        "--no-access-log", "--log-level", "warning", "--max-body-bytes", str(MAX_BODY),
        "--timeout-s", str(TIMEOUT), "--drain-notice-s", str(NOTICE), "--drain-s", "20"],
        os.path.join(tmp, "port"), log)
    idle: list[socket.socket] = []
    try:
        wait_ready(proc, f"http://{HOST}:{port}", 600)
        run = Run(port, references(port))
        for i in range(args.idle):
            idle.append(socket.create_connection((HOST, port), timeout=10))
            if i % 2:
                idle[-1].sendall(b"GET /v1/hea")
        rss = {"start": rss_mib(proc.pid)}
        total = args.clients * args.rounds * len(KINDS)
        deadline = time.monotonic() + args.seconds
        threads = [threading.Thread(target=client, args=(run, i, args.rounds, deadline),
                                    daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        while run.done < total // 2 and time.monotonic() < deadline:
            if "quarter" not in rss and run.done >= total // 4:
                rss["quarter"] = rss_mib(proc.pid)
            time.sleep(0.05)
        up_until_sigterm = proc.poll() is None
        rss["before SIGTERM"] = rss_mib(proc.pid)
        probes = drain_probes(port, 4)
        with run.lock:
            run.sigterm_at = time.monotonic()
            run.stop.set()
        proc.send_signal(signal.SIGTERM)
        ready_answers = [ask_ready(s) for s in probes] + [ask_ready(new_connection(port))]
        status = proc.wait(60)
        for t in threads:
            t.join(TIMEOUT + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for s in idle:
            s.close()
    return report(run, rss, ready_answers, up_until_sigterm, status, args)


def report(run: Run, rss: dict, ready_answers: list[str], up: bool, status: int,
           args) -> int:
    print(f"\n{args.clients} clients x {args.rounds} rounds x {len(KINDS)} kinds, "
          f"{args.idle} idle connections held; SIGTERM after {run.done} requests\n")
    print("| kind | requests | statuses seen | max latency s | failures | cut by shutdown |")
    print("|---|---:|---|---:|---|---:|")
    failures, rows = {}, {}
    for kind in KINDS:
        outcomes = run.outcomes.get(kind, [])
        statuses = collections.Counter(str(s) for s, _, f in outcomes if f != "cut")
        failed = collections.Counter(f for _, _, f in outcomes if f not in (None, "cut"))
        cut = sum(f == "cut" for _, _, f in outcomes)
        latency = max((t for _, t, f in outcomes if f != "cut"), default=0.0)
        failures[kind] = sum(failed.values())
        rows[kind] = dict(requests=len(outcomes), statuses=dict(statuses),
                          max_latency_s=round(latency, 2), failures=dict(failed), cut=cut)
        print(f"| {kind} | {len(outcomes)} | "
              + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
              + f" | {latency:.2f} | " + (", ".join(f"{f}: {n}" for f, n in failed.items())
                                          or "0") + f" | {cut} |")
    base = rss.get("quarter", rss["start"])
    flat = rss["before SIGTERM"] <= max(base * 1.10, base + 32)
    targets = [("every valid request answered correctly, every hostile one its 4xx "
                "(no 5xx, hang or reset)", sum(failures.values()) == 0),
               ("the server up until SIGTERM", up),
               ("/v1/ready answers 503 during the drain (never 200)",
                "503" in ready_answers and "200" not in ready_answers),
               ("the drain exits 0", status == 0),
               ("RSS flat (before SIGTERM within 10% or 32 MiB of the first quarter)", flat)]
    print("\nserver RSS MiB: " + ", ".join(f"{k} {v:.1f}" for k, v in rss.items()))
    print(f"/v1/ready on keep-alive connections right after SIGTERM: {ready_answers}")
    print(f"exit status after SIGTERM: {status}\n")
    for text, ok in targets:
        print(f"target: {text:<88} {'PASS' if ok else 'MISS'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(kinds=rows, rss_mib=rss, ready_during_drain=ready_answers,
                           exit_status=status, requests_before_sigterm=run.done,
                           targets={t: ok for t, ok in targets}), f, indent=1)
    return 0 if all(ok for _, ok in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
