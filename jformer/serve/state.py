"""What the routes of one server share, and the path every translation takes.

:class:`ServerState` holds the phase (loading -> ready -> draining, or failed), the
model, the batcher, the metrics, the language pair and the API keys. :func:`translate`
is the one way from a :class:`TranslateRequest` to its translations (settings, lines,
a batcher job, the answer), so /v1/translate and the LibreTranslate routes
(jformer.serve.libretranslate) get the same limits, batching and metrics.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from jformer.inference import Translator
from jformer.serve import html_texts, translation
from jformer.serve.api_keys import ApiKeys
from jformer.serve.batcher import Batcher, PendingRequest, QueueFull, Stopped
from jformer.serve.constraints import line_constraints
from jformer.serve.errors import ApiError
from jformer.serve.languages import LanguagePair
from jformer.serve.limits import ServeLimits
from jformer.serve.loading import default_settings, warm_up
from jformer.serve.metrics import Metrics
from jformer.serve.schemas import TranslateRequest

logger = logging.getLogger("jformer.serve")
Loader = Callable[[], "tuple[Translator, dict[str, Any]]"]


class ServerState:
    """What the routes share: the phase, the model, the batcher and the metrics.

    phase: loading -> ready -> draining, or loading -> failed (``error`` says why;
    ``on_failure`` is called, e.g. to stop the server). ``languages``: the model's pair,
    from the description ``load`` gives (its source_lang and target_lang; None when it
    names none). ``api_keys``: the keys the LibreTranslate routes ask for (None: none).
    """

    def __init__(self, load: Loader, limits: ServeLimits, devices: int,
                 on_failure: Callable[[BaseException], None] | None,
                 api_keys: ApiKeys | None = None):
        self.load, self.limits, self.devices = load, limits, devices
        self.on_failure = on_failure
        self.api_keys = api_keys
        self.languages: LanguagePair | None = None
        self.metrics = Metrics()
        # max_batch is set once the model (and its decode.batch_size) is loaded.
        self.batcher = Batcher(max_batch=limits.max_batch or 1,
                               max_batch_tokens=limits.max_batch_tokens,
                               max_wait_s=limits.max_wait_ms / 1000.0,
                               max_queue=limits.max_queue, metrics=self.metrics)
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
        self.languages = LanguagePair.from_info(info)
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


async def run_job(state: ServerState, job: PendingRequest, arrived: float) -> list:
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
                                      time_left(state.limits, arrived))
    except asyncio.TimeoutError:
        job.abandon()
        state.metrics.rejected.labels("timeout").inc()
        raise ApiError(504, f"no translation within {timeout:g} s (--timeout-s); the "
                            "server is busy", reason="timeout") from None
    except Exception as e:  # the batch failed: this request, not the server
        raise ApiError(500, f"translation failed: {type(e).__name__}: {e}",
                       reason="batch_failed") from None


async def translate(state: ServerState, translator: Translator, req: TranslateRequest,
                    arrived: float) -> tuple[list, int | None]:
    """The translations of ``req`` (one per text, as :func:`translation.assemble` gives
    them) and its sampling seed (None unless method "sample"), or the ApiError that
    refuses it (422 option, 413 limit, 503 queue, 504 timeout, 500 failed batch)."""
    if req.format == "html":  # its sentences as plain texts, then put back together
        pages, plain = html_texts.plain_request(req, translator, state.limits)
        results, seed = await translate(state, translator, plain, arrived)
        return html_texts.assemble(pages, results, req), seed
    settings, seed = translation.resolve_settings(req, translator, state.limits)
    texts = [req.q] if isinstance(req.q, str) else req.q
    plan = translation.plan(texts, translator, state.limits, single=isinstance(req.q, str))
    results: list = []
    if plan.sentences:
        prefixes = translation.line_prefixes(req, plan, translator, settings)
        phrases = line_constraints(req, plan, translator, settings)
        job = PendingRequest(plan.sentences, plan.lengths, plan.buckets, settings,
                             asyncio.get_running_loop(), seed=seed,
                             positions=plan.positions if seed is not None else None,
                             prefixes=prefixes, constraints=phrases)
        results = await run_job(state, job, arrived)
        if req.alignments:  # forced decoding of the outputs, between batches
            from jformer.inference.alignment import attach

            results = await on_decoder(
                state, lambda: attach(translator, plan.sentences, results), arrived)
    return translation.assemble(plan, results, settings.n_best, req.scores,
                                req.alignments), seed


async def on_decoder(state: ServerState, fn: Callable[[], Any], arrived: float) -> Any:
    """``fn()`` run on the decoder thread between batches (a model call that is not a
    translation); 503 while not ready, 504 past the request's --timeout-s; an ApiError
    it raises reaches the client."""
    try:
        future = state.batcher.call(fn)
    except Stopped:
        raise state.not_ready() from None
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future),
                                      time_left(state.limits, arrived))
    except asyncio.TimeoutError:
        raise ApiError(504, f"no answer within {state.limits.timeout_s:g} s (--timeout-s)",
                       reason="timeout") from None


async def read_body(request, limits: ServeLimits, arrived: float) -> Any:
    """The body as JSON, which must all have come within the request's --timeout-s."""
    from jformer.serve import errors

    return await errors.read_json(request, limits.max_body_bytes, time_left(limits, arrived))


def time_left(limits: ServeLimits, arrived: float) -> float:
    """Seconds left of the request's --timeout-s (its body must come within them)."""
    return max(0.0, arrived + limits.timeout_s - time.monotonic())
