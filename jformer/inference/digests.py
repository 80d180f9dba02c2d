"""What jformer's kept programs and shapes are keyed on: its own source
(:func:`source_digest`) and a text of settings that is the same in every process
(:func:`stable`)."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]  # jformer/


@functools.cache
def source_digest() -> str:
    """sha256 over jformer's source files (path and bytes), computed once a process."""
    digest = hashlib.sha256()
    for path in sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".cc", ".h")):
        digest.update(str(path.relative_to(PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def stable(obj: Any) -> str:
    """A text for ``obj`` that is the same in every process (no memory addresses):
    functions and classes by module and name, partials, dataclasses and tuples by their
    parts; anything else by ``repr``."""
    if isinstance(obj, functools.partial):
        return (f"partial({stable(obj.func)}, {', '.join(map(stable, obj.args))}, "
                f"{', '.join(f'{k}={stable(v)}' for k, v in sorted(obj.keywords.items()))})")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = ", ".join(f"{f.name}={stable(getattr(obj, f.name))}"
                           for f in dataclasses.fields(obj))
        return f"{type(obj).__module__}.{type(obj).__qualname__}({fields})"
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}({', '.join(map(stable, obj))})"
    if isinstance(obj, dict):
        return f"dict({', '.join(f'{stable(k)}: {stable(v)}' for k, v in obj.items())})"
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    return repr(obj)
