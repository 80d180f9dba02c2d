"""``format: "html"`` on /v1/translate (and LibreTranslate's /translate): each text is HTML.

Its sentences (jformer.inference.html_format: block-level tags cut it, inline tags and
placeholders stay with their sentence) are translated as the texts of one plain /v1
request (:func:`plain_request`), with their word alignments, through the same limits,
batching and metrics (jformer.serve.state.translate); then each sentence's tags and
placeholders are put back by its alignment and the text put together (:func:`assemble`).
With method "sample", line i of ``seed``'s numbering is sentence i, counted over all
texts. ``alignments``, ``target_prefix`` and ``constraints`` steer one plain sentence:
with format "html" they are a 422 naming the field.
"""
from __future__ import annotations

import numpy as np

from jformer.data.alignments import parse_moses
from jformer.inference import Translator
from jformer.inference.html_format import HtmlText, join_pages, overlong, prepare
from jformer.inference.results import Hypothesis
from jformer.serve.errors import ApiError
from jformer.serve.limits import ServeLimits
from jformer.serve.schemas import TranslateRequest
from jformer.serve.text import TextError, check_text

REFUSED = ("alignments", "target_prefix", "constraints")


def plain_request(req: TranslateRequest, translator: Translator, limits: ServeLimits
                  ) -> tuple[list[HtmlText], TranslateRequest]:
    """A format "html" request's texts cut into sentences, and the plain request of
    those sentences (with scores and alignments); a 422 naming a field that steers plain
    sentences, the 413 or 422 of a text jformer.serve.text refuses, a 413 for a
    sentence longer than the model takes."""
    for name in REFUSED:
        if getattr(req, name) not in (None, False):
            raise ApiError(422, f"{name}: not with format \"html\" (it steers one plain "
                                f"sentence)", field=name)
    single = isinstance(req.q, str)
    texts = [req.q] if single else req.q
    for t, text in enumerate(texts):
        try:
            check_text(text, "q" if single else f"q[{t}]", limits.max_chars)
        except TextError as e:
            raise ApiError(e.status, str(e), field=e.field) from None
    pages = [prepare(text) for text in texts]
    too_long = overlong(translator, pages)
    if too_long is not None:
        name = "q" if single else f"q[{too_long[0]}]"
        raise ApiError(413, f"{name}: {too_long[1]}", field=name)
    plain = [s.text for page in pages for s in page.sentences]
    return pages, req.model_copy(update=dict(q=plain, format="text", scores=True,
                                             alignments=True))


def assemble(pages: list[HtmlText], results: list, req: TranslateRequest) -> list:
    """The response's translations: per text, its sentences' answers (the plain
    request's, {text, score, finished, alignment} each) filled into it; a string, or
    with scores or n_best > 1, n_best hypotheses {text, score, finished}."""
    out = []
    for hyps in join_pages(pages, [[_hypothesis(h) for h in hyps] for hyps in results],
                           req.n_best):
        answer = [{"text": h.text, "score": h.score, "finished": h.finished} for h in hyps]
        out.append(answer if req.scores or req.n_best > 1 else answer[0]["text"])
    return out


def _hypothesis(answer: dict) -> Hypothesis:
    """A /v1 hypothesis ({text, score, finished, alignment}) as the Translator's."""
    return Hypothesis(answer["text"], answer["score"], np.zeros(0, np.int32),
                      answer["finished"], parse_moses(answer["alignment"]))
