"""Request and response bodies of the /v1 API (pydantic; also the OpenAPI schema at /docs).

Requests are strict: a field of the wrong JSON type ("4" for 4, true for 1), an unknown
field, NaN or an infinity is a 422 naming the field. Limits that depend on the server
(``--max-beam``, the model's length) are checked after parsing, in jformer.serve.app.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from jformer.config import JAX_SEED_LIMIT as SEED_LIMIT  # jax.random.key keeps 32 bits


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TranslateRequest(_Strict):
    """POST /v1/translate. Options left out take the model's decode config."""

    q: str | list[str] = Field(description="a text, or a list of texts; each line of a "
                               "text is translated and the line breaks are kept")
    method: Literal["beam", "greedy", "sample"] = Field("beam", description="search")
    beam_size: int | None = Field(None, ge=1, description="beam width (method beam; at "
                                  "most the server's --max-beam)")
    alpha: float | None = Field(None, ge=0, le=10, allow_inf_nan=False,
                                description="length penalty exponent (method beam)")
    n_best: int = Field(1, ge=1, description="hypotheses per text, best first (method "
                        "beam; at most beam_size); > 1 returns scores")
    max_len: int | None = Field(None, ge=1, description="max output tokens per line, EOS "
                                "included (at most the model's max_len)")
    temperature: float | None = Field(None, gt=0, le=100, allow_inf_nan=False,
                                      description="sampling temperature (method sample)")
    top_k: int | None = Field(None, ge=0, description="sample among the k most likely "
                              "tokens; 0: all (method sample)")
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT, description="sampling seed "
                             "(method sample): line i of the request, counting lines of "
                             "all texts in order, samples with fold_in(key(seed), i); left "
                             "out: a random seed, returned in the response")
    scores: bool = Field(False, description="return each hypothesis with its score")
    target_prefix: str | list[str | None] | None = Field(
        None, description="per text (a string when q is one): what its translation must "
                          "begin with (its first line's, for a text of several lines); "
                          "null or \"\": none")
    prefix_bias_beta: float | None = Field(
        None, gt=0, lt=1, allow_inf_nan=False, description="only bias the search towards "
        "target_prefix, by this weight in (0, 1), instead of forcing it")
    alignments: bool = Field(False, description="return each hypothesis with its word "
                             "alignment, from cross-attention (implies scores)")
    constraints: list[str] | list[list[str] | None] | None = Field(
        None, description="per text (a list of strings when q is one): target phrases its "
                          "translation must contain (method beam; a text of one line; at "
                          "most 8 phrases of 16 tokens each)")
    format: Literal["text", "html"] = Field(
        "text", description="html: each text is HTML; its text is translated a sentence at "
        "a time and its inline tags and placeholders ({name}, %s, ...) are put back around "
        "the words they enclosed, by word alignment (not with alignments, target_prefix or "
        "constraints)")


class ScoreRequest(_Strict):
    """POST /v1/score: forced decoding of given translations."""

    q: list[str] = Field(description="source lines")
    targets: list[str] = Field(description="a translation per source line")
    alpha: float | None = Field(None, ge=0, le=10, allow_inf_nan=False,
                                description="length penalty exponent of score (default: "
                                            "the model's decode.alpha)")
    tokens: bool = Field(False, description="also return each target piece with its "
                                            "log-probability")


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="sum over the text's lines of log-prob (beam: "
                         "divided by the length penalty)")
    finished: bool = Field(description="every line ended with EOS (not cut at max_len)")
    alignment: str | None = Field(None, description="with alignments: Moses 'i-j' pairs, "
                                  "source word i (whitespace-separated words of the text, "
                                  "counted over its lines) to output word j")


class TranslateResponse(BaseModel):
    translations: list[str] | list[list[Hypothesis]] = Field(
        description="one per text, in input order: a string, or with scores / n_best > 1 "
                    "a list of n_best hypotheses, best first")
    seed: int | None = Field(None, description="the sampling seed used (method sample)")


class AttentionRequest(_Strict):
    """POST /v1/attention: one line, translated greedily."""

    q: str = Field(description="one line of source text")


class AttentionResponse(BaseModel):
    source: list[str] = Field(description="source pieces, EOS included (columns)")
    target: list[str] = Field(description="output pieces, EOS included (rows)")
    translation: str
    cross_attention: list[list[list[list[float]]]] = Field(
        description="[layer][head][target][source] weights; each row sums to 1")


class ErrorDetail(BaseModel):
    code: int = Field(description="the HTTP status")
    reason: str = Field(description="a stable machine-readable word, e.g. queue_full")
    message: str = Field(description="what went wrong, naming the field")
    field: str | None = Field(None, description="the request field at fault, e.g. q[1]")


class ErrorResponse(BaseModel):
    error: ErrorDetail
