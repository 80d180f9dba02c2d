"""From a translate request to batcher jobs and back to the response body.

A request's texts are checked and split into lines (jformer.serve.text); lines are
numbered across all texts in order (line i samples with fold_in(key(seed), i)); blank
lines, and lines the tokenizer keeps nothing of, translate to "" without decoding; the
others are tokenized once here to find their length bucket. The answers of a text's
lines are joined with its own line breaks.
"""
from __future__ import annotations

import dataclasses
import logging
import secrets

from jformer.inference import Translator, bucket_for
from jformer.data.alignments import to_moses
from jformer.inference.settings import SearchSettings
from jformer.serve.errors import ApiError
from jformer.serve.limits import ServeLimits
from jformer.serve.schemas import SEED_LIMIT, TranslateRequest
from jformer.serve.text import TextError, check_text, join_lines, split_lines

logger = logging.getLogger("jformer.serve")


def resolve_settings(req: TranslateRequest, translator: Translator, limits: ServeLimits
                     ) -> tuple[SearchSettings, int | None]:
    """The request's search settings (defaults from decode config) and sampling seed;
    a 422 naming the option that is out of range for this server or model."""
    cfg, model_max_len = translator.decode_cfg, translator.model_cfg.max_len
    beam_size = cfg.beam_size if req.beam_size is None else req.beam_size
    if beam_size > limits.max_beam:
        raise ApiError(422, f"beam_size: at most {limits.max_beam} (--max-beam); got "
                            f"{beam_size}", field="beam_size")
    widest = beam_size if req.method == "beam" else 1
    if req.n_best > widest:
        raise ApiError(422, f"n_best: at most {widest} for method {req.method!r} with "
                            f"beam_size {beam_size}; got {req.n_best}", field="n_best")
    if req.max_len is not None and req.max_len > model_max_len:
        raise ApiError(422, f"max_len: at most the model's max_len, {model_max_len}; got "
                            f"{req.max_len}", field="max_len")
    vocab = translator.model_cfg.vocab_size
    if req.top_k is not None and req.top_k > vocab:
        raise ApiError(422, f"top_k: at most the vocabulary size, {vocab}; got "
                            f"{req.top_k}", field="top_k")
    try:  # the Translator's own defaults and rules (jformer.inference.settings)
        settings = SearchSettings.of(cfg, method=req.method, beam_size=beam_size,
                                     alpha=req.alpha, n_best=req.n_best, max_len=req.max_len,
                                     temperature=req.temperature, top_k=req.top_k)
    except ValueError as e:
        name = str(e).split()[0] if str(e) else ""
        raise ApiError(422, str(e), field=name if name in type(req).model_fields else None) from None
    if req.prefix_bias_beta is not None:
        if req.target_prefix is None:
            raise ApiError(422, "prefix_bias_beta: needs target_prefix",
                           field="prefix_bias_beta")
        settings = dataclasses.replace(settings, prefix_bias_beta=req.prefix_bias_beta)
    seed = None
    if req.method == "sample":
        seed = secrets.randbelow(SEED_LIMIT) if req.seed is None else req.seed
    return settings, seed


@dataclasses.dataclass
class Plan:
    """A request's texts as lines, and the lines to decode."""

    lines: list[list[str]]  # per text, its lines
    breaks: list[list[str]]  # per text, the line breaks between them
    where: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (text, line)
    sentences: list[str] = dataclasses.field(default_factory=list)  # to decode
    positions: list[int] = dataclasses.field(default_factory=list)  # line number in request
    lengths: list[int] = dataclasses.field(default_factory=list)  # source ids, EOS included
    buckets: list[int] = dataclasses.field(default_factory=list)


def plan(texts: list[str], translator: Translator, limits: ServeLimits,
         single: bool) -> Plan:
    """Checks and splits ``texts`` (``single``: q was one string, named "q" not "q[0]");
    413 over --max-chars or --max-sentences, or a line longer than the model takes
    when decode.overlong is "error"; 422 for text that is not text."""
    name = (lambda t: "q") if single else (lambda t: f"q[{t}]")  # noqa: E731
    result = Plan([], [])
    for t, text in enumerate(texts):
        try:
            check_text(text, name(t), limits.max_chars)
        except TextError as e:
            raise ApiError(e.status, str(e), field=e.field) from None
        lines, breaks = split_lines(text)
        result.lines.append(lines)
        result.breaks.append(breaks)
    total = sum(len(lines) for lines in result.lines)
    if total > limits.max_sentences:
        raise ApiError(413, f"q: {total} lines in {len(texts)} text(s), more than the limit "
                            f"of {limits.max_sentences} (--max-sentences)", field="q")
    position = 0
    candidates = []
    for t, lines in enumerate(result.lines):
        for n, line in enumerate(lines):
            if line.strip():
                candidates.append((t, n, line, position))
            position += 1
    # One thread: a request's few lines on the event loop, not a pool racing the decoder.
    encoded = translator.tokenizer.encode([c[2] for c in candidates], add_eos=True,
                                          num_threads=1)
    max_len = translator.model_cfg.max_len
    for (t, n, line, position), ids in zip(candidates, encoded):
        length = len(ids)
        if length == 1:  # EOS alone: nothing the tokenizer keeps (e.g. a zero-width space)
            continue
        if length > max_len:
            where = f"{name(t)} line {n + 1}"
            if translator.decode_cfg.overlong == "error":
                raise ApiError(413, f"{where}: {length} tokens (EOS included), more than "
                                    f"the model's max_len={max_len}", field=name(t))
            logger.info("%s: %d tokens, more than model.max_len=%d (decode.overlong=%s)",
                        where, length, max_len, translator.decode_cfg.overlong)
        result.where.append((t, n))
        result.sentences.append(line)
        result.positions.append(position)
        result.lengths.append(min(length, max_len))
        result.buckets.append(bucket_for(min(length, max_len), translator.buckets))
    return result


def line_prefixes(req: TranslateRequest, p: Plan, translator: Translator,
                  settings: SearchSettings) -> list[str | None] | None:
    """Per sentence to decode, its target prefix: a text's goes to its first line with
    something to translate. A 422 names ``target_prefix`` when it does not pair up with
    ``q``, its text has nothing to translate, or it leaves its output no room."""
    if req.target_prefix is None:
        return None
    single = isinstance(req.q, str)
    if single != isinstance(req.target_prefix, str) or (
            not single and len(req.target_prefix) != len(req.q)):
        raise ApiError(422, "target_prefix: one per text of q (a string when q is one)",
                       field="target_prefix")
    given = [req.target_prefix] if single else req.target_prefix
    out: list[str | None] = [None] * len(p.sentences)
    first: dict[int, int] = {}
    for j, (t, _) in enumerate(p.where):
        first.setdefault(t, j)
    for t, prefix in enumerate(given):
        if not prefix or not prefix.strip():
            continue
        name = "target_prefix" if single else f"target_prefix[{t}]"
        if t not in first:
            raise ApiError(422, f"{name}: its text has nothing to translate", field=name)
        j = first[t]
        tokens = len(translator.tokenizer.encode([prefix], add_eos=False, side="target",
                                                 num_threads=1)[0])
        room = translator.output_positions(p.buckets[j], settings.max_len)
        if tokens >= room:
            raise ApiError(422, f"{name}: {tokens} tokens, but its output holds {room} "
                                f"(EOS included)", field=name)
        out[j] = prefix
    return out


def assemble(p: Plan, results: list[list], n_best: int, with_scores: bool,
             alignments: bool = False) -> list:
    """The response's translations: per text, a string, or (with scores, alignments or
    n_best > 1) n_best hypotheses {text, score, finished[, alignment]}; hypothesis k of a
    text joins hypothesis k of each of its lines, its score the sum of theirs, its
    alignment theirs with word indices counted over the text's lines."""
    decoded = dict(zip(p.where, results))
    out = []
    for t, (lines, breaks) in enumerate(zip(p.lines, p.breaks)):
        hyps = []
        for k in range(n_best):
            texts, score, finished, links = [], 0.0, True, []
            src_words = tgt_words = 0  # words of the text's lines so far
            for n, line in enumerate(lines):
                h = decoded.get((t, n))
                if h is None:  # blank: nothing decoded
                    texts.append("")
                    continue
                texts.append(_one_line(h[k].text))
                score += h[k].score
                finished = finished and h[k].finished
                if alignments:
                    links += [(i + src_words, j + tgt_words) for i, j in h[k].alignment]
                    src_words += len(line.split())
                    tgt_words += len(texts[-1].split())
            hyp = {"text": join_lines(texts, breaks), "score": score, "finished": finished}
            if alignments:
                hyp["alignment"] = to_moses(links)
            hyps.append(hyp)
        out.append(hyps if with_scores or alignments or n_best > 1 else hyps[0]["text"])
    return out


def _one_line(text: str) -> str:
    # A byte-fallback piece can decode to a line break: keep the text's line layout.
    return text.replace("\r", " ").replace("\n", " ")
