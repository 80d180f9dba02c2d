"""/v1/translate's ``constraints``: per text, target phrases its translation must contain
(:mod:`jformer.inference.constraints`), checked here so that a bad value is a 422 naming
its field (``constraints``, ``constraints[t]``, ``constraints[t][j]``) before anything
is queued. A text with constraints must have exactly one line to translate (which line
of several holds a term is unknown); only method "beam" takes them.
"""
from __future__ import annotations

from jformer.inference import Translator
from jformer.inference.constraints import ConstraintError, encode_constraints
from jformer.inference.settings import SearchSettings
from jformer.serve.errors import ApiError
from jformer.serve.schemas import TranslateRequest


def line_constraints(req: TranslateRequest, plan, translator: Translator,
                     settings: SearchSettings) -> list[list[str] | None] | None:
    """Per sentence to decode (``plan``: :class:`jformer.serve.translation.Plan`), its
    phrases (None: none), or None when the request has none."""
    if req.constraints is None:
        return None
    single = isinstance(req.q, str)
    given = [req.constraints] if single else req.constraints
    shape_ok = (all(isinstance(p, str) for p in req.constraints) if single else
                len(req.constraints) == len(req.q)
                and all(c is None or isinstance(c, list) for c in req.constraints))
    if not shape_ok:
        raise ApiError(422, "constraints: one list of phrases per text of q (a list of "
                            "strings when q is one string)", field="constraints")
    lines: dict[int, list[int]] = {}
    for j, (t, _) in enumerate(plan.where):
        lines.setdefault(t, []).append(j)
    out: list[list[str] | None] = [None] * len(plan.sentences)
    for t, phrases in enumerate(given):
        if not phrases:
            continue
        name = "constraints" if single else f"constraints[{t}]"
        if len(lines.get(t, ())) != 1:
            raise ApiError(422, f"{name}: its text has {len(lines.get(t, ()))} lines to "
                                "translate; constraints need exactly one", field=name)
        j = lines[t][0]
        try:
            [ids] = encode_constraints(translator.tokenizer, [phrases], 1, settings.method)
        except ConstraintError as e:
            field = e.field.replace("constraints[0]", name, 1)
            raise ApiError(422, f"{field}: {e.problem}", field=field) from None
        room = translator.output_positions(plan.buckets[j], settings.max_len)
        need = sum(len(p) for p in ids) + 1
        if need > room:
            raise ApiError(422, f"{name}: {need} tokens (EOS included), but its output "
                                f"holds {room}", field=name)
        out[j] = list(phrases)
    return out
