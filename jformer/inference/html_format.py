"""``format="html"``: texts with markup, translated a sentence at a time, their inline
tags and placeholders carried over by word alignment.

    translator.translate(['<p>Click <b>the red button</b>, {name}.</p>'], format="html")
    # -> ['<p>Klicken Sie <b>den roten Knopf</b>, {name}.</p>']

A text is cut at its block-level tags, comments, and inside <pre>/<textarea> at every
tag, as :func:`jformer.inference.markup.split` does (script and style kept, entities
decoded for the model and escaped in the answer); each piece between those tags is one
sentence with its inline tags (a <pre>'s piece: one per line). Each sentence is translated
without its tags and placeholders, with its word alignment, and they are put back
(:mod:`.inline_markup`). So the text of the answer, tags and placeholders taken out, is
the translation of the text the model read.

A text's hypothesis k joins hypothesis k of each of its sentences: its score is the sum
of theirs, finished when all are, its ids theirs concatenated. Sampling: sentence j of
text i draws with ``fold_in(key_i, j)``, key_i the key text i would have as plain text.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

import jax
import numpy as np

from jformer.inference import inline_markup, markup
from jformer.inference.results import Hypothesis
from jformer.search import row_keys

FORMATS = ("text", "html")
_BREAK = re.compile(r"(\r\n|\r|\n)")


def check_format(format: str) -> bool:
    """True for "html", False for "text"; a ValueError naming ``format`` otherwise."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}; got {format!r}")
    return format == "html"


@dataclasses.dataclass
class HtmlText:
    """A text cut into sentences with inline tags; ``sentences[k].text`` is what the
    model translates."""

    page: markup.Markup
    lines: list[list[inline_markup.Sentence]]  # per segment of the page, its lines
    breaks: list[list[str]]  # per segment, the line breaks between its lines

    @property
    def sentences(self) -> list[inline_markup.Sentence]:
        return [s for lines in self.lines for s in lines]

    def fill(self, outputs: Sequence[tuple[str, Any]]) -> str:
        """The text with sentence k's tags put into ``outputs[k]``, a (translation,
        alignment) pair."""
        if len(outputs) != len(self.sentences):
            raise ValueError(f"{len(self.sentences)} sentences need as many translations; "
                             f"got {len(outputs)}")
        it = iter(outputs)
        segments = []
        for lines, breaks in zip(self.lines, self.breaks):
            done = [inline_markup.render(s, *next(it)) for s in lines]
            segments.append("".join(a + b for a, b in zip(done, breaks + [""])))
        return self.page.fill(segments)


def prepare(text: str) -> HtmlText:
    """``text`` cut into its sentences (see the module doc)."""
    page = markup.split(text, inline=True)
    lines, breaks = [], []
    for segment, keep in zip(page.segments, page.keep_lines):
        parts = _BREAK.split(segment) if keep else [segment]
        lines.append([inline_markup.parse(p) for p in parts[0::2]])
        breaks.append(parts[1::2])
    return HtmlText(page, lines, breaks)


def join(page: HtmlText, hyps: Sequence[Sequence[Hypothesis]], n_best: int
         ) -> list[Hypothesis]:
    """``n_best`` hypotheses of a page from its sentences' n-best lists: hypothesis k
    fills the page with hypothesis k of each sentence (text as HTML, scores summed,
    finished when all are, ids concatenated); a sentence with fewer (an empty one has
    one) gives its last."""
    out = []
    for k in range(n_best):
        mine = [h[min(k, len(h) - 1)] for h in hyps]
        text = page.fill([(h.text, h.alignment or ()) for h in mine])
        ids = [h.ids for h in mine] or [np.zeros(0, np.int32)]
        out.append(Hypothesis(text, float(sum(h.score for h in mine)),
                              np.concatenate(ids).astype(np.int32),
                              all(h.finished for h in mine)))
    return out


def join_pages(pages: Sequence[HtmlText], hyps: Sequence[Sequence[Hypothesis]],
               n_best: int) -> list[list[Hypothesis]]:
    """Per page, its ``n_best`` hypotheses (:func:`join`), from ``hyps``: the n-best
    lists of every page's sentences, page after page, in order."""
    out, start = [], 0
    for page in pages:
        end = start + len(page.sentences)
        out.append(join(page, hyps[start:end], n_best))
        start = end
    return out


PASSED_ON = ("beam_size", "alpha", "max_len", "method", "temperature", "top_k", "rng",
             "batch_size")  # to each sentence's translation
REFUSED = ("target_prefix", "prefix_bias_beta", "constraints", "return_alignments")


def translate(translator, texts: Sequence[str], args: dict[str, Any]) -> list:
    """``translator.translate(texts, format="html", **args)``, ``args`` by name: those
    in PASSED_ON go to each sentence's translation; those in REFUSED steer one plain
    sentence, and must be None or False here."""
    n_best, return_scores = args["n_best"], args["return_scores"]
    options = {name: args[name] for name in PASSED_ON}
    for name in REFUSED:
        value = args[name]
        if value not in (None, False):
            raise ValueError(f"{name} does not go with format='html' (it steers one "
                             f"plain sentence); got {value!r}")
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise ValueError("sentences must be a sequence of str")
    pages = [prepare(t) for t in texts]
    plain = [s.text for page in pages for s in page.sentences]
    too_long = overlong(translator, pages)
    if too_long is not None:
        raise ValueError(f"sentences[{too_long[0]}]: {too_long[1]}")
    options["rng"] = _sentence_keys(options["rng"], pages)
    results = translator.translate(plain, n_best=n_best, return_alignments=True, **options)
    out = []
    for hyps in join_pages(pages, [r if n_best > 1 else [r] for r in results], n_best):
        hyps = hyps if return_scores else [h.text for h in hyps]
        out.append(hyps if n_best > 1 else hyps[0])
    return out


def overlong(translator, pages: list[HtmlText]) -> tuple[int, str] | None:
    """(text index, what is wrong) for the first text with a sentence over
    model.max_len tokens (its alignment reads a source whole, so it cannot be split),
    or None."""
    limit = translator.model_cfg.max_len
    owner = [i for i, page in enumerate(pages) for _ in page.sentences]
    plain = [s.text for page in pages for s in page.sentences]
    for i, ids in zip(owner, translator.tokenizer.encode(plain, add_eos=True,
                                                         num_threads=1)):
        if len(ids) > limit:
            return i, (f"a sentence of {len(ids)} tokens (EOS included), more than "
                       f"model.max_len={limit}; format 'html' aligns each sentence whole")
    return None


def _sentence_keys(rng: Any, pages: list[HtmlText]) -> jax.Array | None:
    """Sentence j of text i: ``fold_in(key_i, j)``, key_i text i's key of ``rng`` (one key
    folded with i, or the texts' own keys); None when there is no sentence."""
    owner = np.array([(i, j) for i, page in enumerate(pages)
                      for j in range(len(page.sentences))], np.uint32).reshape(-1, 2)
    if not len(owner):
        return None
    keys = row_keys(jax.random.key(0) if rng is None else rng, len(pages))
    return jax.vmap(jax.random.fold_in)(keys[owner[:, 0]], owner[:, 1])
