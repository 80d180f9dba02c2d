"""JSON errors and request-body parsing.

Every error the server answers is ``{"error": {"code": <HTTP status>, "reason": <word>,
"message": <text naming the field>, "field": <field or null>}}``:

    400 invalid_json       the body is not UTF-8 JSON (the message says where), or it
                           nests arrays and objects deeper than MAX_DEPTH
    404 not_found          unknown path
    405 method_not_allowed
    408 body_timeout       the body did not arrive within --timeout-s (it stalled)
    413 too_large          body, line count or text length over a --max-* limit
    415 unsupported_media  Content-Type is not application/json
    431 headers_too_large  the headers are over 16 KiB together
    422 invalid_request    wrong type, unknown field, option out of range, bad text
    500 internal           a failed batch or a bug (the server goes on serving)
    503 not_ready | draining | queue_full   (with Retry-After)
    504 timeout            no answer within --timeout-s
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("jformer.serve")
MAX_DEPTH = 32  # arrays and objects in one another; a request needs 2 ({"q": [...]})
# An over-limit body is read and thrown away up to this size, so that the client, which
# sends its whole body before it reads, gets its 413 rather than a reset connection.
DISCARD_BYTES = 64 << 20

_REASONS = {400: "invalid_json", 404: "not_found", 405: "method_not_allowed",
            408: "body_timeout", 413: "too_large", 415: "unsupported_media",
            422: "invalid_request", 431: "headers_too_large", 500: "internal",
            503: "unavailable", 504: "timeout"}


class ApiError(Exception):
    """An error answered as JSON with ``status``; ``headers`` e.g. Retry-After."""

    def __init__(self, status: int, message: str, *, field: str | None = None,
                 reason: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.reason = reason or _REASONS.get(status, "error")
        self.headers = headers


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=error.status, headers=error.headers)


def error_body(error: ApiError) -> dict[str, Any]:
    """The JSON of an error: {"error": {code, reason, message, field}}."""
    # A message may quote the client's text: a lone surrogate (from a JSON escape)
    # cannot be UTF-8 encoded, so it is written as its escape instead.
    return {"error": {"code": error.status, "reason": error.reason,
                      "message": printable(error.message),
                      "field": None if error.field is None else printable(error.field)}}


def install_handlers(app: FastAPI) -> None:
    """Answers every error, FastAPI's and Starlette's included, in the JSON form above."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no such path: {request.method} {request.url.path}",
                   405: f"method {request.method} is not allowed on {request.url.path}"}
        return error_response(ApiError(exc.status_code,
                                       message.get(exc.status_code, str(exc.detail)),
                                       headers=getattr(exc, "headers", None)))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError
                                ) -> JSONResponse:
        return error_response(validation_error(exc.errors()))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))


def printable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (a lone surrogate) as its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def field_name(loc: tuple) -> str:
    """pydantic's location as a field path: ('q', 'list[str]', 2) -> 'q[2]'."""
    name = ""
    for part in loc:
        if part == "body":
            continue
        if isinstance(part, int):
            name += f"[{part}]"
        elif "[" in str(part) or part in ("str", "int", "float", "bool"):
            continue  # the union member pydantic tried, not a field
        else:
            name += ("." if name else "") + str(part)
    return name or "body"


def validation_error(errors: list[dict[str, Any]]) -> ApiError:
    """A 422 naming the first failing field (and how many more there are)."""
    # A union (q: str | list[str]) fails once per member; a wrong item of the list is
    # the more telling error when the body has a list.
    errors = sorted(errors, key=lambda e: -len(e.get("loc", ())))
    first = errors[0]
    field = _clip(field_name(tuple(first.get("loc", ()))))  # an unknown key may be long
    message = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    elif "input" in first and first.get("type") != "missing":
        message += f"; got {_short(first['input'])}"
    # Fields by their top-level name: a union's members are one field.
    fields = {str(e["loc"][0]) for e in errors if e.get("loc")}
    more = f" (and {len(fields) - 1} more field(s))" if len(fields) > 1 else ""
    return ApiError(422, f"{field}: {message}{more}", field=field)


def _short(value: Any) -> str:
    return _clip(json.dumps(value, ensure_ascii=False, default=repr))


def _clip(text: str, most: int = 60) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


async def read_json(request: Request, max_bytes: int, timeout_s: float) -> Any:
    """The request body as JSON: 415 unless Content-Type is application/json (UTF-8),
    then :func:`read_body`'s and :func:`parse_json`'s errors."""
    check_json_type(request.headers.get("content-type", ""))
    return parse_json(await read_body(request, max_bytes, timeout_s))


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The request body: 413 over ``max_bytes`` (answered once the body is read, so the
    client reads it), 408 when it has not all come within ``timeout_s``."""
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > DISCARD_BYTES:  # not worth reading: close after the 413
        raise _too_large(size, max_bytes, close=True)
    try:
        body, received = await asyncio.wait_for(_read_body(request, max_bytes), timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, f"the body did not all arrive within the request's "
                            f"{timeout_s:.3g} s (--timeout-s)",
                       field="body", headers={"Connection": "close"}) from None
    if body is None:
        raise _too_large(max(received, size or 0), max_bytes,
                         close=received > DISCARD_BYTES)
    return bytes(body)


def parse_json(body: bytes) -> Any:
    """``body`` as JSON: 400 for invalid UTF-8 or JSON (naming the byte, or line and
    column), a key twice in one object, or nesting deeper than MAX_DEPTH."""
    text = decode_utf8(body)
    too_deep = ApiError(400, f"the body nests arrays and objects more than {MAX_DEPTH} "
                             "deep", field="body")
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:  # past the interpreter's stack: deeper than MAX_DEPTH anyway
        raise too_deep from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"the body is not valid JSON: {e.msg} at line {e.lineno} "
                            f"column {e.colno}", field="body") from None
    if _deeper_than(data, MAX_DEPTH):
        raise too_deep
    return data


def decode_utf8(body: bytes) -> str:
    """``body`` as text; 400 naming the first byte that is not UTF-8."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the body is not valid UTF-8: {e.reason} at byte {e.start} "
                            "(0-based)",
                       field="body") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the body, refused when it names a key twice (which would win?)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ApiError(400, f"the body is not valid JSON: the key {_short(twice)} appears "
                            "twice in one object", field=_clip(twice))
    return obj


def check_json_type(value: str) -> None:
    """415 unless ``value`` (a Content-Type) is application/json, in UTF-8."""
    media, *params = value.split(";")
    if media.strip().lower() != "application/json":
        got = media.strip() or "no Content-Type"
        raise ApiError(415, f"Content-Type must be application/json; got {got} (curl: "
                            "add -H 'Content-Type: application/json')", field="Content-Type")
    for param in params:  # parameters other than charset are ignored
        name, _, charset = param.partition("=")
        charset = charset.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise ApiError(415, f"the body must be UTF-8; got {param.strip()}",
                           field="Content-Type")


async def _read_body(request: Request, max_bytes: int) -> tuple[bytearray | None, int]:
    """(body, bytes received); body None when it was over ``max_bytes`` (what came
    beyond it was read and dropped, up to DISCARD_BYTES)."""
    body: bytearray | None = bytearray()
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > max_bytes:
            body = None
            if received > DISCARD_BYTES:
                break
        elif body is not None:
            body += chunk
    return body, received


def _deeper_than(data: Any, most: int) -> bool:
    """Whether arrays and objects nest more than ``most`` deep (no recursion)."""
    level = [data]  # the values at one depth: the top, then what the top holds, ...
    for _ in range(most):
        level = [v for item in level if isinstance(item, (list, dict))
                 for v in (item.values() if isinstance(item, dict) else item)]
    return any(isinstance(v, (list, dict)) for v in level)


def json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _too_large(size: int, limit: int, close: bool = False) -> ApiError:
    return ApiError(413, f"the body has {size} bytes or more, more than the limit of "
                         f"{limit} (--max-body-bytes)", field="body",
                    headers={"Connection": "close"} if close else None)


def parse(model: type[pydantic.BaseModel], data: Any) -> Any:
    """``data`` validated as ``model``; a 422 naming the field otherwise."""
    if not isinstance(data, dict):
        raise ApiError(422, f"the body must be a JSON object; got {json_type(data)} "
                            f"{_short(data)}", field="body")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        raise validation_error(e.errors()) from None
