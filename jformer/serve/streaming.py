"""POST /v1/translate/stream: one line's translation as server-sent events, as it grows.

The body is /v1/translate's, for one line of text (``q`` a string without line breaks;
n_best 1; no scores, target_prefix, prefix_bias_beta, alignments, constraints or
format "html": each is a 422 naming it). The answer is ``text/event-stream``:

    data: {"text": "Ich "}                 greedy / sample: text added (joined: the result)
    data: {"best": "Ich sehe einen"}       beam: the best hypothesis so far (may change)
    event: done
    data: {"translation": "Ich sehe einen Hund.", "steps": 12, "seed": 7}

The ``done`` translation is what /v1/translate answers for the same body (sampling: the
same ``seed``, line 0). Errors found before the stream starts (a bad option, over a
limit, not ready) are the usual JSON 4xx/5xx; one during it is an ``event: error`` whose
data is the error JSON, and the stream ends. The decode runs on the decoder thread a
few steps at a time (:data:`STEPS`, :func:`jformer.inference.stream`), each chunk one
:meth:`Batcher.call` between the batches of other requests, so a stream never holds
the thread for more than a chunk; each chunk must come within --timeout-s.
"""
from __future__ import annotations

import json
import time
from typing import AsyncIterator, Iterator

import jax
from fastapi import Request
from fastapi.responses import StreamingResponse

from jformer.inference import StreamUpdate, stream
from jformer.serve import errors, translation
from jformer.serve.batcher import Stopped
from jformer.serve.errors import ApiError
from jformer.serve.schemas import TranslateRequest
from jformer.serve.state import ServerState, on_decoder, read_body
from jformer.serve.text import LINE_BREAK

STEPS = 2  # decode steps per chunk (per event at most)


async def translate_stream(request: Request) -> StreamingResponse:
    arrived = time.monotonic()
    state: ServerState = request.app.state.jformer
    translator, limits = state.require_ready(), state.limits
    req = errors.parse(TranslateRequest, await read_body(request, limits, arrived))
    _check_one_line(req)
    settings, seed = translation.resolve_settings(req, translator, limits)
    translation.plan([req.q], translator, limits, single=True)  # limits: chars, overlong
    kwargs = settings.translate_kwargs()
    kwargs.pop("n_best", None)  # 1 (checked above)
    rng = None if seed is None else jax.random.key(seed)
    updates = stream(translator, req.q, **kwargs, rng=rng, steps=STEPS)
    first = await on_decoder(state, lambda: next(updates), arrived)  # errors: JSON
    return StreamingResponse(_events(state, updates, first, seed),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-store",
                                      "X-Accel-Buffering": "no"})


def _check_one_line(req: TranslateRequest) -> None:
    """422 for what a stream does not do: several texts or lines, n_best, scores,
    target prefixes (forced or biased), alignments, constraints, HTML. A field it cannot
    honour is refused by name, never ignored."""
    if not isinstance(req.q, str) or LINE_BREAK.search(req.q):
        raise ApiError(422, "q: one line of text (a string without line breaks) for a "
                            "stream", field="q")
    for field, value, default in (("n_best", req.n_best, 1), ("scores", req.scores, False),
                                  ("target_prefix", req.target_prefix, None),
                                  ("prefix_bias_beta", req.prefix_bias_beta, None),
                                  ("alignments", req.alignments, False),
                                  ("constraints", req.constraints, None),
                                  ("format", req.format, "text")):
        if value != default:
            raise ApiError(422, f"{field}: not supported by /v1/translate/stream",
                           field=field)


async def _events(state: ServerState, updates: Iterator[StreamUpdate],
                  update: StreamUpdate, seed: int | None) -> AsyncIterator[str]:
    """The events of the updates, the first already decoded; each next chunk runs on
    the decoder thread. A client that leaves closes the stream there."""
    try:
        while not update.done:
            key = "text" if update.new else "best"
            yield event({key: update.new or update.text})
            update = await on_decoder(state, lambda: next(updates), time.monotonic())
        done = {"translation": update.text, "steps": update.steps}
        yield event(done if seed is None else dict(done, seed=seed), "done")
    except ApiError as e:
        yield event(errors.error_body(e), "error")
    except Exception as e:  # noqa: BLE001 - the stream has started: report, end it
        yield event(errors.error_body(ApiError(500, f"translation failed: "
                                                    f"{type(e).__name__}: {e}")), "error")
    finally:
        try:  # on the decoder thread: a chunk of this stream may be running there
            state.batcher.call(updates.close)
        except Stopped:  # the thread has ended: nothing runs the stream any more
            updates.close()


def event(data: dict, name: str | None = None) -> str:
    """One server-sent event: an optional ``event:`` line, the data as one JSON line."""
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"
