"""The language pair a server translates, as codes and English names.

A workdir records its pair in config.json (``data.src_lang``, ``data.tgt_lang``; every
run has them: DataConfig's defaults are en and de, ``jformer import marian`` takes them
from the model). ``jformer serve --languages SRC:TGT`` names them instead, for a run
that left the defaults on another pair. The LibreTranslate routes
(jformer.serve.libretranslate) serve exactly this pair.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

# A BCP 47-like code: a 2-3 letter language, then optional subtags (pt-BR, zh-Hans).
_CODE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*")


@dataclasses.dataclass(frozen=True)
class LanguagePair:
    """The codes of the language a model reads (``source``) and writes (``target``)."""

    source: str
    target: str

    def __post_init__(self) -> None:
        for name in ("source", "target"):
            code = getattr(self, name)
            if not isinstance(code, str) or not _CODE.fullmatch(code) or code == "auto":
                raise ValueError(f"the {name} language must be a code such as en or pt-BR "
                                 f"(not auto); got {code!r}")

    @classmethod
    def parse(cls, text: str) -> "LanguagePair":
        """``"en:de"`` -> LanguagePair("en", "de") (``jformer serve --languages``)."""
        source, sep, target = text.partition(":")
        if not sep:
            raise ValueError(f"--languages must be SOURCE:TARGET, e.g. en:de; got {text!r}")
        try:
            return cls(source.strip(), target.strip())
        except ValueError as e:
            raise ValueError(f"--languages {text!r}: {e}") from None

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> "LanguagePair | None":
        """The pair a model description names (source_lang, target_lang), or None when
        it names none or not a valid one."""
        try:
            return cls(info.get("source_lang"), info.get("target_lang"))
        except ValueError:
            return None

    def matches(self, source: str, target: str) -> bool:
        """Whether ``source`` -> ``target`` is this pair (codes compared ignoring case)."""
        return (source.lower(), target.lower()) == (self.source.lower(),
                                                    self.target.lower())

    def knows(self, code: str) -> bool:
        """Whether ``code`` is one of the pair's two languages (ignoring case)."""
        return code.lower() in (self.source.lower(), self.target.lower())
