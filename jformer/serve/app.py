"""The ASGI application: routes, start-up (load, warm up, ready) and shutdown (drain).

    POST /v1/translate   translations, batched with other requests (jformer.serve.batcher)
    POST /v1/translate/stream   one line's translation as server-sent events, as it
                         grows (jformer.serve.streaming)
    POST /v1/attention   cross-attention weights of one line, per layer and head
    GET  /v1/health      liveness: 200 while the decoder thread lives
    GET  /v1/ready       200 once the model is loaded and warmed; 503 before and draining
    GET  /v1/model       config, vocabulary, checkpoint step, languages, limits
    GET  /metrics        Prometheus text format (jformer.serve.metrics)
    GET  /               the web page (static/, no build step, no CDN)
    GET  /docs           OpenAPI page (Swagger UI served from swagger-ui-bundle, no CDN)
    POST /translate, POST /detect, GET /languages   LibreTranslate's API
                         (jformer.serve.libretranslate)

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
from jformer.serve import errors, libretranslate
from jformer.serve.api_keys import ApiKeys
from jformer.serve.errors import ApiError
from jformer.serve.limits import ServeLimits
from jformer.serve.loading import describe
from jformer.serve.metrics import Metrics
from jformer.serve.schemas import (AttentionRequest, AttentionResponse, ErrorResponse,
                                   ScoreRequest, TranslateRequest, TranslateResponse)
from jformer.serve.scoring import score
from jformer.serve.state import Loader, ServerState, on_decoder, read_body
from jformer.serve.state import translate as translate_texts
from jformer.serve.streaming import translate_stream
from jformer.serve.text import LINE_BREAK, TextError, check_text

logger = logging.getLogger("jformer.serve")
STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
MAX_HEADER_BYTES = 16 << 10  # names and values, all headers together
_ERRORS = {code: {"model": ErrorResponse} for code in (400, 408, 413, 415, 422, 500, 503,
                                                             504)}


def create_app(load: Loader | Translator, limits: ServeLimits | None = None, *,
               devices: int = 1, on_failure: Callable[[BaseException], None] | None = None,
               api_keys: ApiKeys | None = None) -> FastAPI:
    """The server for a model: ``load()`` gives (Translator, description for /v1/model)
    on the decoder thread at start-up; a Translator already in memory works too.

    The description's source_lang and target_lang are the pair the LibreTranslate
    routes serve (jformer.serve.libretranslate); ``api_keys``, if given, are the keys
    those routes ask for (``--api-keys``)."""
    if isinstance(load, Translator):
        translator = load
        load = lambda: (translator, describe(translator))  # noqa: E731
    state = ServerState(load, limits or ServeLimits(), devices, on_failure, api_keys)

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
    libretranslate.add_routes(app)
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
    app.add_api_route("/v1/translate/stream", translate_stream, methods=["POST"],
                      summary="Translate one line, streamed as server-sent events",
                      responses={200: {"content": {"text/event-stream": {}}}, **_ERRORS},
                      openapi_extra=_body(TranslateRequest))
    app.add_api_route("/v1/score", score, methods=["POST"],
                      summary="Score given translations (forced decoding)",
                      responses=_ERRORS, openapi_extra=_body(ScoreRequest))
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
    req = errors.parse(TranslateRequest, await read_body(request, limits, arrived))
    translations, seed = await translate_texts(state, translator, req, arrived)
    body: dict[str, Any] = {"translations": translations}
    if seed is not None:
        body["seed"] = seed
    return JSONResponse(body)


async def attention(request: Request) -> JSONResponse:
    arrived = time.monotonic()
    state = _state(request)
    translator, limits = state.require_ready(), state.limits
    req = errors.parse(AttentionRequest, await read_body(request, limits, arrived))
    try:
        check_text(req.q, "q", limits.max_chars)
    except TextError as e:
        raise ApiError(e.status, str(e), field="q") from None
    if LINE_BREAK.search(req.q) or not req.q.strip():
        raise ApiError(422, "q: one non-empty line of text", field="q")
    try:
        body = await on_decoder(state, lambda: _attention(translator, req.q), arrived)
    except ValueError as e:  # e.g. the tokenizer keeps nothing of q
        raise ApiError(422, f"q: {e}", field="q") from None
    return JSONResponse(body)


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
