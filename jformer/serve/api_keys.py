"""The API keys of ``jformer serve --api-keys FILE``, which the LibreTranslate routes ask for.

The file holds one key per line; blank lines and lines starting with ``#`` are skipped,
and the space around a key is dropped. It is read once, when the server starts.
"""
from __future__ import annotations

import hmac
import os
from typing import Iterable


class ApiKeys:
    """A set of keys; ``key in keys`` compares in constant time per key."""

    def __init__(self, keys: Iterable[str]):
        self._keys = tuple(dict.fromkeys(keys))
        if not self._keys:
            raise ValueError("no API keys given")
        for key in self._keys:
            if not isinstance(key, str) or not key or any(c.isspace() for c in key):
                raise ValueError(f"an API key must be a non-empty string without spaces; "
                                 f"got {key!r}")

    @classmethod
    def read(cls, path: str | os.PathLike) -> "ApiKeys":
        """The keys of ``path``; FileNotFoundError or ValueError naming the file (and
        the line) when it is missing, holds no key, or a line holds a space inside."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--api-keys: no such file: {path}")
        keys = []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                key = line.strip()
                if not key or key.startswith("#"):
                    continue
                if any(c.isspace() for c in key):
                    raise ValueError(f"--api-keys {path} line {number}: a key holds a "
                                     "space; one key per line")
                keys.append(key)
        if not keys:
            raise ValueError(f"--api-keys {path}: no keys in the file (one per line)")
        return cls(keys)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        given = key.encode("utf-8", "surrogatepass")
        found = False
        for known in self._keys:  # every key compared: the time says nothing of which
            found |= hmac.compare_digest(given, known.encode("utf-8"))
        return found

    def __len__(self) -> int:
        return len(self._keys)
