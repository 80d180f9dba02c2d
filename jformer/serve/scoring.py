"""POST /v1/score: how likely the model finds given translations (forced decoding,
:meth:`jformer.inference.Translator.score`), run on the decoder thread between batches."""
from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from jformer.serve import errors
from jformer.serve.errors import ApiError
from jformer.serve.schemas import ScoreRequest
from jformer.serve.state import on_decoder, read_body
from jformer.serve.text import TextError, check_text


async def score(request: Request) -> JSONResponse:
    arrived = time.monotonic()
    state = request.app.state.jformer
    translator, limits = state.require_ready(), state.limits
    req = errors.parse(ScoreRequest, await read_body(request, limits, arrived))
    if len(req.q) != len(req.targets):
        raise ApiError(422, f"targets: one per line of q ({len(req.q)}); got "
                            f"{len(req.targets)}", field="targets")
    if len(req.q) > limits.max_sentences:
        raise ApiError(413, f"q: {len(req.q)} lines, more than the limit of "
                            f"{limits.max_sentences} (--max-sentences)", field="q")
    for name, texts in (("q", req.q), ("targets", req.targets)):
        for i, text in enumerate(texts):
            try:
                check_text(text, f"{name}[{i}]", limits.max_chars)
            except TextError as e:
                raise ApiError(e.status, str(e), field=e.field) from None
    scores = await on_decoder(state, lambda: _score(translator, req), arrived)
    return JSONResponse({"scores": scores})


def _score(translator, req: ScoreRequest) -> list[dict[str, Any]]:
    from jformer.inference.forced import TooLong

    try:
        scored = translator.score(req.q, req.targets, alpha=req.alpha)
    except TooLong as e:
        field = f"{'q' if e.side == 'sources' else 'targets'}[{e.index}]"
        raise ApiError(422, f"{field}: {str(e).split(' ', 1)[1]}", field=field) from None
    out = []
    for s in scored:
        one: dict[str, Any] = {"score": s.score, "log_prob": s.total, "mean": s.mean}
        if req.tokens:
            one["tokens"] = [{"piece": translator.tokenizer.id_to_piece(int(i)),
                              "log_prob": float(lp)} for i, lp in zip(s.ids, s.log_probs)]
        out.append(one)
    return out
