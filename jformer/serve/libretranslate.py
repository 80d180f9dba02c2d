"""LibreTranslate's API beside /v1, so that LibreTranslate's clients talk to jformer as
they are (libretranslatepy, deep-translator, curl lines written for LibreTranslate).

    POST /translate   q (a text or a list of texts), source, target, format ("text" |
                      "html"), alternatives, api_key -> {"translatedText", and
                      "alternatives" when asked, "detectedLanguage" for source "auto"}
    POST /detect      q, api_key -> [{"confidence": 0.0, "language": <model's source>}]
    GET  /languages   [{"code", "name", "targets"}]: the model's two languages

Fields are read as LibreTranslate's app.py reads them: from a JSON body (Content-Type
application/json), else from the query string and an application/x-www-form-urlencoded
body (deep-translator sends the query string, libretranslatepy a form). Fields it does
not know are ignored. Errors are ``{"error": "<message>"}``, in LibreTranslate's words
where it has them: 400 for a bad request (a missing field, a language the model does
not serve, a text or line count over a limit), 403 for a missing or wrong ``api_key``
when the server has ``--api-keys``, 429 "Slowdown" when the queue is full (with
Retry-After), 503 while loading or draining, 504 past --timeout-s.

Translations take jformer's one path (jformer.serve.state.translate): the limits,
batching and metrics of /v1/translate, the model's default search. ``alternatives: n``
asks the beam for n + 1 hypotheses (a beam narrower than n + 1 is widened to n + 1) and
returns the other n, less duplicates and copies of translatedText, as LibreTranslate
does. ``format: "html"`` is /v1's (jformer.serve.html_texts): the text is translated a
sentence at a time, its inline tags put back by word alignment; alternatives are [] then,
as in LibreTranslate.

The server reads one language, so it detects none: source "auto" means the model's
source, and /detect answers it for any text; both say confidence 0.0 (not detected).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import re
import time
import urllib.parse
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from jformer.data.languages import name
from jformer.serve import errors
from jformer.serve.api_keys import ApiKeys
from jformer.serve.errors import ApiError
from jformer.serve.languages import LanguagePair
from jformer.serve.limits import ServeLimits
from jformer.serve.schemas import TranslateRequest
from jformer.serve.state import ServerState, time_left, translate as translate_texts
from jformer.serve.text import TextError, check_text

logger = logging.getLogger("jformer.serve")
ROUTES = ("/translate", "/detect", "/languages")
FORM = "application/x-www-form-urlencoded"
NOT_DETECTED = 0.0  # the confidence of the one language the server reads
_INTEGER = re.compile(r"\s*[-+]?\d+\s*")
Route = Callable[[Request], Awaitable[Any]]


@dataclasses.dataclass(frozen=True)
class LibreRequest:
    """A POST /translate, checked: ``texts`` (one when ``single``: q was a string)."""

    texts: list[str]
    single: bool
    source: str  # as asked: a code of the pair, or "auto"
    html: bool
    alternatives: int


def add_routes(app: FastAPI) -> None:
    tags = ["LibreTranslate"]
    app.add_api_route("/translate", translate, methods=["POST"], tags=tags,
                      summary="Translate (LibreTranslate's API)")
    app.add_api_route("/detect", detect, methods=["POST"], tags=tags,
                      summary="The model's source language (LibreTranslate's API)")
    app.add_api_route("/languages", languages, tags=tags,
                      summary="The model's languages (LibreTranslate's API)")


def _answers_errors(route: Route) -> Route:
    """The route, its errors answered in LibreTranslate's shape (:func:`error_response`)."""

    @functools.wraps(route)
    async def answer(request: Request) -> JSONResponse:
        try:
            return JSONResponse(await route(request))
        except ApiError as e:
            return error_response(e)
        except Exception as e:  # a bug: this request fails, the server goes on
            logger.exception("unexpected error on %s %s", request.method, request.url.path)
            return error_response(ApiError(500, f"Cannot translate text: "
                                                f"{type(e).__name__}: {e}"))

    return answer


def error_response(error: ApiError) -> JSONResponse:
    """``{"error": message}`` with LibreTranslate's status: 400 for what /v1 answers
    415, 422, or 413 over a text or line limit; 429 "Slowdown" for a full queue."""
    status, message = error.status, error.message
    if error.reason == "queue_full":
        status, message = 429, f"Slowdown: {message}"
    elif status in (415, 422) or (status == 413 and error.field != "body"):
        status = 400
    return JSONResponse({"error": errors.printable(message)}, status_code=status,
                        headers=error.headers)


@_answers_errors
async def translate(request: Request) -> dict[str, Any]:
    arrived = time.monotonic()
    state: ServerState = request.app.state.jformer
    translator, pair = state.require_ready(), _pair(state)
    fields = await read_fields(request, state.limits, arrived)
    check_key(state.api_keys, fields)
    ask = parse(fields, pair, state.limits)
    n_best = 1 if ask.html else ask.alternatives + 1
    req = TranslateRequest(q=ask.texts[0] if ask.single else ask.texts, n_best=n_best,
                           beam_size=max(translator.decode_cfg.beam_size, n_best),
                           format="html" if ask.html else "text")
    translations, _ = await translate_texts(state, translator, req, arrived)
    if n_best == 1:
        out, alternatives = translations, [[] for _ in translations]
    else:
        out = [hyps[0]["text"] for hyps in translations]
        alternatives = [others([h["text"] for h in hyps]) for hyps in translations]
    body: dict[str, Any] = {"translatedText": out[0] if ask.single else out}
    if ask.source == "auto":
        detected = {"confidence": NOT_DETECTED, "language": pair.source}
        body["detectedLanguage"] = detected if ask.single else [detected] * len(out)
    if ask.alternatives > 0:
        body["alternatives"] = alternatives[0] if ask.single else alternatives
    return body


@_answers_errors
async def detect(request: Request) -> list[dict[str, Any]]:
    arrived = time.monotonic()
    state: ServerState = request.app.state.jformer
    state.require_ready()
    pair = _pair(state)
    fields = await read_fields(request, state.limits, arrived)
    check_key(state.api_keys, fields)
    if not fields.get("q"):
        raise ApiError(400, _missing("q"), field="q")
    return [{"confidence": NOT_DETECTED, "language": pair.source}]


@_answers_errors
async def languages(request: Request) -> list[dict[str, Any]]:
    state: ServerState = request.app.state.jformer
    state.require_ready()
    pair = _pair(state)
    out = [{"code": pair.source, "name": name(pair.source), "targets": [pair.target]}]
    if pair.target.lower() != pair.source.lower():
        out.append({"code": pair.target, "name": name(pair.target), "targets": []})
    return out


def _pair(state: ServerState) -> LanguagePair:
    if state.languages is None:
        raise ApiError(501, "the served model names no language pair (its description "
                            "has no valid source_lang and target_lang); start jformer "
                            "serve with --languages SOURCE:TARGET")
    return state.languages


async def read_fields(request: Request, limits: ServeLimits, arrived: float
                      ) -> dict[str, Any]:
    """The request's fields: a JSON body's object, else the query string's and a form
    body's fields (each named once); 400 for anything else."""
    body = await errors.read_body(request, limits.max_body_bytes, time_left(limits, arrived))
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json":
        errors.check_json_type(content_type)
        data = errors.parse_json(body)
        if not isinstance(data, dict):
            raise ApiError(400, "Invalid JSON format: the body must be a JSON object",
                           field="body")
        return data
    if body and media != FORM:
        raise ApiError(400, f"Content-Type must be application/json or {FORM}; got "
                            f"{media or 'none'}", field="Content-Type")
    fields: dict[str, str] = {}
    query = request.scope.get("query_string", b"").decode("latin-1")
    for part in (query, errors.decode_utf8(body)):
        try:
            pairs = urllib.parse.parse_qsl(part, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError:
            raise ApiError(400, "Invalid request: a form field is not UTF-8 once its "
                                "%-escapes are decoded", field="body") from None
        for key, value in pairs:
            if key in fields:
                raise ApiError(400, f"Invalid request: {key} parameter given twice (for "
                                    "several texts send a JSON list)", field=key)
            fields[key] = value
    return fields


def check_key(keys: ApiKeys | None, fields: dict[str, Any]) -> None:
    """403 without one of ``keys`` in field api_key (nothing to check when None)."""
    if keys is None:
        return
    key = fields.get("api_key")
    if key is None or key == "":
        raise ApiError(403, "Please contact the server operator to get an API key",
                       field="api_key")
    if key not in keys:
        raise ApiError(403, "Invalid API key", field="api_key")


def parse(fields: dict[str, Any], pair: LanguagePair, limits: ServeLimits) -> LibreRequest:
    """The fields of a POST /translate, checked in LibreTranslate's order and words."""
    q = fields.get("q")
    if not q:
        raise ApiError(400, _missing("q"), field="q")
    if not (isinstance(q, str) or isinstance(q, list) and all(isinstance(t, str)
                                                              for t in q)):
        raise ApiError(400, "Invalid request: q must be a text or a list of texts",
                       field="q")
    source, target = _code(fields, "source"), _code(fields, "target")
    alternatives = _alternatives(fields.get("alternatives"), limits.max_beam - 1)
    single = isinstance(q, str)
    texts = [q] if single else q
    for i, text in enumerate(texts):  # before languages, as LibreTranslate's char limit
        try:
            check_text(text, "q" if single else f"q[{i}]", limits.max_chars)
        except TextError as e:
            raise ApiError(e.status, str(e), field=e.field) from None
    if source.lower() != "auto" and not pair.knows(source):
        raise ApiError(400, f"{source} is not supported", field="source")
    if not pair.knows(target):
        raise ApiError(400, f"{target} is not supported", field="target")
    origin = pair.source if source.lower() == "auto" else source
    if not pair.matches(origin, target):
        raise ApiError(400, f"{name(target)} ({target}) is not available as a target "
                            f"language from {name(origin)} ({origin})", field="target")
    text_format = fields.get("format") or "text"
    if text_format not in ("text", "html"):
        raise ApiError(400, f"{text_format} format is not supported", field="format")
    return LibreRequest(texts, single, "auto" if source.lower() == "auto" else source,
                        text_format == "html", alternatives)


def _missing(field: str) -> str:
    return f"Invalid request: missing {field} parameter"


def _code(fields: dict[str, Any], field: str) -> str:
    value = fields.get(field)
    if not value:
        raise ApiError(400, _missing(field), field=field)
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {field} must be a language code; got "
                            f"{errors.json_type(value)}", field=field)
    return value


def _alternatives(value: Any, most: int) -> int:
    """How many alternatives: an integer (or its digits), 0 below 0, at most ``most``."""
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not (isinstance(value, int) or isinstance(value, str)
                                       and _INTEGER.fullmatch(value)):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number",
                       field="alternatives")
    count = max(0, int(value))
    if count > most:
        raise ApiError(400, f"Invalid request: alternatives parameter must be <= {most} "
                            "(--max-beam less one)", field="alternatives")
    return count


def others(n_best: list[str]) -> list[str]:
    """The alternatives of n-best texts: all but the first, in order, less repeats,
    empty ones and copies of the first (LibreTranslate's ``filter_unique``)."""
    seen = {n_best[0], ""}
    return [t for t in n_best[1:] if not (t in seen or seen.add(t))]

