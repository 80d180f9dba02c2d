"""Prometheus figures of one server, in a registry of its own (GET /metrics).

    jformer_requests_total{route,status}          HTTP requests answered
    jformer_request_duration_seconds{route}       latency, arrival to answer (histogram)
    jformer_sentences_total                       lines decoded (blank lines not counted)
    jformer_source_tokens_total                   their source tokens, EOS included
    jformer_target_tokens_total                   best hypotheses' tokens, EOS included
    jformer_batch_sentences                       sentences per decoder batch (histogram:
                                                  _count is the batches, _sum / _count
                                                  the mean batch size)
    jformer_batch_duration_seconds                decoder time per batch (histogram)
    jformer_queue_wait_seconds                    a sentence's wait for its batch (histogram)
    jformer_queue_sentences                       sentences waiting now (gauge)
    jformer_rejected_requests_total{reason}       queue_full, not_ready, draining, timeout
    jformer_batch_failures_total                  batches whose decode raised
    jformer_ready                                 1 once loaded and warmed, 0 while draining
    jformer_model_info{...}                       workdir, step, languages
    process_*                                     memory, CPU, open files of the process
"""
from __future__ import annotations

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge,
                               Histogram, Info, ProcessCollector, generate_latest)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# Routes by name, so a scan of random paths cannot grow the label set.
ROUTES = ("/v1/translate", "/v1/attention", "/v1/health", "/v1/ready", "/v1/model",
          "/metrics", "/", "/docs", "/openapi.json",
          "/translate", "/detect", "/languages")  # LibreTranslate's API


class Metrics:
    """The server's collectors; ``registry`` is private to it (two servers in one
    process, as in tests, do not collide)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)
        self.requests = Counter("jformer_requests", "HTTP requests answered",
                                ["route", "status"], registry=r)
        self.request_seconds = Histogram("jformer_request_duration_seconds", "Request "
                                         "latency, arrival to answer", ["route"],
                                         buckets=LATENCY_BUCKETS, registry=r)
        self.sentences = Counter("jformer_sentences", "Lines decoded", registry=r)
        self.source_tokens = Counter("jformer_source_tokens", "Source tokens decoded, EOS "
                                     "included", registry=r)
        self.target_tokens = Counter("jformer_target_tokens", "Tokens of the best "
                                     "hypotheses, EOS included", registry=r)
        self.batch_sentences = Histogram("jformer_batch_sentences", "Sentences per "
                                         "decoder batch", buckets=BATCH_BUCKETS, registry=r)
        self.batch_seconds = Histogram("jformer_batch_duration_seconds", "Decoder time "
                                       "per batch", buckets=LATENCY_BUCKETS, registry=r)
        self.queue_wait = Histogram("jformer_queue_wait_seconds", "Time a sentence waits "
                                    "for its batch", buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("jformer_queue_sentences", "Sentences waiting for a batch",
                                 registry=r)
        self.rejected = Counter("jformer_rejected_requests", "Requests refused before "
                                "decoding", ["reason"], registry=r)
        self.batch_failures = Counter("jformer_batch_failures", "Decoder batches that "
                                      "raised", registry=r)
        self.ready = Gauge("jformer_ready", "1 once the model is loaded and warmed",
                           registry=r)
        self.model = Info("jformer_model", "The model served", registry=r)

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        route = path if path in ROUTES or path.startswith("/static/") else "other"
        route = "/static" if route.startswith("/static/") else route
        self.requests.labels(route, str(status)).inc()
        self.request_seconds.labels(route).observe(seconds)

    def observe_batch(self, sentences: int, source_tokens: int, target_tokens: int,
                      seconds: float, waits: list[float]) -> None:
        self.sentences.inc(sentences)
        self.source_tokens.inc(source_tokens)
        self.target_tokens.inc(target_tokens)
        self.batch_sentences.observe(sentences)
        self.batch_seconds.observe(seconds)
        for wait in waits:
            self.queue_wait.observe(wait)

    def exposition(self) -> tuple[bytes, str]:
        """(body, content type) of the text exposition format."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
