"""The ASGI application: routes, start-up (load, warm up, ready) and shutdown (drain).

    POST /v1/translate   translations, batched with other requests (jformer.serve.batcher)
    POST /v1/attention   cross-attention weights of one line, per layer and head
    GET  /v1/health      liveness: 200 while the decoder thread lives
    GET  /v1/ready       200 once the model is loaded and warmed; 503 before and draining
    GET  /v1/model       config, vocabulary, checkpoint step, languages, limits
    GET  /metrics        Prometheus text format (jformer.serve.metrics)
    GET  /               the web page (static/, no build step, no CDN)
    GET  /docs           OpenAPI page (FastAPI's; its script comes from a CDN)

Start-up returns at once, so liveness and metrics answer while the decoder thread loads
the model and compiles the common shapes; /v1/ready, translate and attention answer 503
with Retry-After until then. Errors are JSON (jformer.serve.errors).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any, Callable

import numpy as np
import swagger_ui_bundle
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from jformer.inference import Translator
from jformer.serve import errors, translation
from jformer.serve.batcher import Batcher, PendingRequest, QueueFull, Stopped
from jformer.serve.errors import ApiError
from jformer.serve.limits import ServeLimits
from jformer.serve.loading import default_settings, describe, warm_up
from jformer.serve.metrics import Metrics
from jformer.serve.schemas import (AttentionRequest, AttentionResponse, ErrorResponse,
                                   TranslateRequest, TranslateResponse)
from jformer.serve.text import LINE_BREAK, TextError, check_text

logger = logging.getLogger("jformer.serve")
STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
Loader = Callable[[], "tuple[Translator, dict[str, Any]]"]
MAX_HEADER_BYTES = 16 << 10  # names and values, all headers together
_ERRORS = {code: {"model": ErrorResponse} for code in (400, 408, 413, 415, 422, 500, 503,
                                                             504)}


class ServerState:
    """What the routes share: the phase, the model, the batcher and the metrics.

    phase: loading -> ready -> draining, or loading -> failed (``error`` says why;
    ``on_failure`` is called, e.g. to stop the server).
    """

    def __init__(self, load: Loader, limits: ServeLimits, devices: int,
                 on_failure: Callable[[BaseException], None] | None):
        self.load, self.limits, self.devices = load, limits, devices
        self.on_failure = on_failure
        self.metrics = Metrics()
        # max_batch is set once the model (and its decode.batch_size) is loaded.
        self.batcher = Batcher(max_batch=limits.max_batch or 1,
                               max_batch_tokens=limits.max_batch_tokens,
                               max_wait_s=limits.max_wait_ms / 1000.0,
                               max_queue=limits.max_queue, devices=devices,
                               metrics=self.metrics)
        self.phase = "loading"
        self.error: BaseException | None = None
        self.translator: Translator | None = None
        self.info: dict[str, Any] = {}

    def start(self) -> None:
        """Starts the decoder thread and, on it, loading and warm-up."""
        self.batcher.start()
        self.batcher.call(self._load).add_done_callback(self._loaded)

    def _load(self) -> None:  # on the decoder thread
        translator, info = self.load()
        max_batch = self.limits.batch_size(translator.decode_cfg.batch_size)
        if max_batch % self.devices:
            raise ValueError(f"--max-batch ({max_batch}) must be a multiple of --devices "
                             f"({self.devices})")
        self.batcher.translator, self.batcher.max_batch = translator, max_batch
        shapes = warm_up(translator, default_settings(translator), max_batch,
                         self.limits.warmup_buckets, self.devices)
        logger.info("warm-up compiled %d shapes (bucket, rows): %s", len(shapes), shapes)
        self.translator = translator
        self.info = dict(info, limits=self.limits.as_dict(translator.decode_cfg.batch_size),
                         devices=self.devices)

    def _loaded(self, future) -> None:  # on the decoder thread
        error = future.exception()
        if error is None:
            labels = {k: str(self.info.get(k)) for k in ("source_lang", "target_lang",
                                                         "step", "checkpoint_dir")}
            self.metrics.model.info(labels)
            if self.phase == "loading":
                self.phase = "ready"
                self.metrics.ready.set(1)
                logger.info("ready")
            return
        logger.error("loading the model failed: %s: %s", type(error).__name__, error)
        self.phase, self.error = "failed", error
        if self.on_failure is not None:
            self.on_failure(error)

    def begin_drain(self) -> None:
        """SIGTERM: /v1/ready answers 503 from now on; requests in flight finish."""
        if self.phase == "failed":
            return
        if self.phase != "draining":
            logger.info("draining: %d sentences queued", self.batcher.queued)
        self.phase = "draining"
        self.batcher.hurry()  # what is queued goes now, not after --max-wait-ms
        self.metrics.ready.set(0)

    def require_ready(self) -> Translator:
        if self.phase == "ready":
            return self.translator
        self.metrics.rejected.labels(self.phase if self.phase == "draining"
                                     else "not_ready").inc()
        raise self.not_ready()

    def not_ready(self) -> ApiError:
        if self.phase == "draining":
            return ApiError(503, "the server is shutting down", reason="draining",
                            headers={"Retry-After": "1"})
        if self.phase == "failed":
            return ApiError(503, f"the model failed to load: {self.error}",
                            reason="failed")
        return ApiError(503, "the model is loading and compiling; retry shortly",
                        reason="not_ready", headers={"Retry-After": "2"})


def create_app(load: Loader | Translator, limits: ServeLimits | None = None, *,
               devices: int = 1, on_failure: Callable[[BaseException], None] | None = None
               ) -> FastAPI:
    """The server for a model: ``load()`` gives (Translator, description for /v1/model)
    on the decoder thread at start-up; a Translator already in memory works too."""
    if isinstance(load, Translator):
        translator = load
        load = lambda: (translator, describe(translator))  # noqa: E731
    state = ServerState(load, limits or ServeLimits(), devices, on_failure)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state.start()
        yield
        state.begin_drain()
        if not await asyncio.to_thread(state.batcher.stop, state.limits.drain_s):
            logger.error("the decoder thread did not stop within %.0f s", state.limits.drain_s)

    app = FastAPI(title="jformer translation API", version="1", lifespan=lifespan,
                  docs_url=None, redoc_url=None,  # /docs below: served locally, offline
                  description="Batched Transformer translation. Errors are "
                              '{"error": {"code", "reason", "message", "field"}}.')
    app.state.jformer = state
    errors.install_handlers(app)
    app.add_middleware(_MetricsMiddleware, metrics=state.metrics)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.mount("/docs-static", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path),
              name="docs-static")
    _add_routes(app)
    return app


def _body(model) -> dict:
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": model.model_json_schema()}}}}


def _add_routes(app: FastAPI) -> None:
    app.add_api_route("/", page, include_in_schema=False)
    app.add_api_route("/docs", docs, include_in_schema=False)
    app.add_api_route("/v1/health", health, summary="Liveness")
    app.add_api_route("/v1/ready", ready, summary="Readiness",
                      responses={503: {"model": ErrorResponse}})
    app.add_api_route("/v1/model", model, summary="The model served")
    app.add_api_route("/metrics", metrics, summary="Prometheus metrics")
    app.add_api_route("/v1/translate", translate, methods=["POST"], summary="Translate texts",
                      response_model=TranslateResponse, responses=_ERRORS,
                      openapi_extra=_body(TranslateRequest))
    app.add_api_route("/v1/attention", attention, methods=["POST"],
                      summary="Cross-attention of one line", response_model=AttentionResponse,
                      responses=_ERRORS, openapi_extra=_body(AttentionRequest))


def _state(request: Request) -> ServerState:
    return request.app.state.jformer


async def page() -> FileResponse:
    return FileResponse(os.path.join(STATIC_DIR, "index.html"))


async def docs() -> HTMLResponse:
    """The OpenAPI page, its Swagger UI served from the swagger-ui-bundle package (no CDN)."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="jformer API - Swagger UI",
                               swagger_js_url="/docs-static/swagger-ui-bundle.js",
                               swagger_css_url="/docs-static/swagger-ui.css",
                               swagger_favicon_url="/static/favicon.svg")


async def health(request: Request) -> dict:
    state = _state(request)
    if not state.batcher.alive() and state.phase != "draining":
        raise ApiError(500, "the decoder thread has stopped", reason="dead")
    return {"status": "ok", "phase": state.phase}


async def ready(request: Request) -> dict:
    state = _state(request)
    if state.phase != "ready":
        raise state.not_ready()
    return {"status": "ready"}


async def model(request: Request) -> dict:
    state = _state(request)
    state.require_ready()
    return state.info


async def metrics(request: Request) -> Response:
    state = _state(request)
    state.metrics.queue_depth.set(state.batcher.queued)
    body, content_type = state.metrics.exposition()
    return Response(body, media_type=content_type)


async def translate(request: Request) -> JSONResponse:
    arrived = time.monotonic()
    state = _state(request)
    translator, limits = state.require_ready(), state.limits
    req = errors.parse(TranslateRequest, await _read_json(request, limits, arrived))
    settings, seed = translation.resolve_settings(req, translator, limits)
    texts = [req.q] if isinstance(req.q, str) else req.q
    plan = translation.plan(texts, translator, limits, single=isinstance(req.q, str))
    results: list = []
    if plan.sentences:
        job = PendingRequest(plan.sentences, plan.lengths, plan.buckets, settings,
                             asyncio.get_running_loop(), seed=seed,
                             positions=plan.positions if seed is not None else None)
        results = await _run(state, job, arrived)
    body: dict[str, Any] = {"translations": translation.assemble(
        plan, results, settings.n_best, req.scores)}
    if seed is not None:
        body["seed"] = seed
    return JSONResponse(body)


async def attention(request: Request) -> JSONResponse:
    arrived = time.monotonic()
    state = _state(request)
    translator, limits = state.require_ready(), state.limits
    req = errors.parse(AttentionRequest, await _read_json(request, limits, arrived))
    try:
        check_text(req.q, "q", limits.max_chars)
    except TextError as e:
        raise ApiError(e.status, str(e), field="q") from None
    if LINE_BREAK.search(req.q) or not req.q.strip():
        raise ApiError(422, "q: one non-empty line of text", field="q")
    try:
        future = state.batcher.call(lambda: _attention(translator, req.q))
    except Stopped:
        raise state.not_ready() from None
    try:
        body = await asyncio.wait_for(asyncio.wrap_future(future), limits.timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(504, f"no answer within {limits.timeout_s:g} s (--timeout-s)",
                       reason="timeout") from None
    except ValueError as e:  # e.g. the tokenizer keeps nothing of q
        raise ApiError(422, f"q: {e}", field="q") from None
    return JSONResponse(body)


async def _read_json(request: Request, limits: ServeLimits, arrived: float) -> Any:
    """The body as JSON, which must all have come within the request's --timeout-s."""
    left = max(0.0, arrived + limits.timeout_s - time.monotonic())
    return await errors.read_json(request, limits.max_body_bytes, left)


async def _run(state: ServerState, job: PendingRequest, arrived: float) -> list:
    """Queues the job and waits for its results: 503 when the queue is full, 504 past
    the timeout, 500 when its batch failed."""
    try:
        state.batcher.submit(job)
    except QueueFull as e:
        state.metrics.rejected.labels("queue_full").inc()
        raise ApiError(503, str(e), reason="queue_full",
                       headers={"Retry-After": str(e.retry_after)}) from None
    except Stopped:
        raise state.not_ready() from None
    # Whatever happens to the waiter, the future's outcome is collected (no warnings).
    job.future.add_done_callback(lambda f: f.cancelled() or f.exception())
    timeout = state.limits.timeout_s
    try:
        return await asyncio.wait_for(asyncio.shield(job.future),
                                      max(0.0, arrived + timeout - time.monotonic()))
    except asyncio.TimeoutError:
        job.abandon()
        state.metrics.rejected.labels("timeout").inc()
        raise ApiError(504, f"no translation within {timeout:g} s (--timeout-s); the "
                            "server is busy", reason="timeout") from None
    except Exception as e:  # the batch failed: this request, not the server
        raise ApiError(500, f"translation failed: {type(e).__name__}: {e}",
                       reason="batch_failed") from None


def _attention(translator: Translator, line: str) -> dict:
    """The response of POST /v1/attention (on the decoder thread)."""
    from jformer.inference.attention_maps import attention_weights

    weights, labels = attention_weights(translator, line)
    layers = translator.model_cfg.num_decoder_layers
    cross = [np.round(weights[("decoder", i, "cross_attention")].astype(np.float64),
                      5).tolist() for i in range(layers)]
    (text,) = translator.translate([line], method="greedy")
    return {"source": labels["source"], "target": labels["output"], "translation": text,
            "cross_attention": cross}


class _MetricsMiddleware:
    """Counts every HTTP response by route and status, with its latency; answers 431
    to headers over MAX_HEADER_BYTES (h11 refuses them only when they come in pieces)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.monotonic(), [500]

        async def send_and_record(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADER_BYTES:
                await errors.error_response(ApiError(
                    431, f"the request's headers are over {MAX_HEADER_BYTES} bytes",
                    field="headers", headers={"Connection": "close"}))(
                        scope, receive, send_and_record)
                return
            await self.app(scope, receive, send_and_record)
        finally:
            self.metrics.observe_request(scope["path"], status[0], time.monotonic() - start)
