"""Byte counts written for people: "2GB", "512MiB", "1.5 GB" (decode.memory_limit)."""
from __future__ import annotations

import re

_BYTE_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
               "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_bytes(value: int | str) -> int:
    """A byte count: an int >= 0, or a string such as "2GB" (10^9), "512MiB" (2^20),
    "1.5 GB" or "4096"; units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, any case."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"expected a byte count >= 0; got {value}")
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", value)
        if match and match.group(2).lower() in _BYTE_UNITS:
            return int(float(match.group(1)) * _BYTE_UNITS[match.group(2).lower()])
    raise ValueError(f"expected a byte count: an int >= 0 or a string like '2GB' or "
                     f"'512MiB' (units {', '.join(u for u in _BYTE_UNITS if u)}); got "
                     f"{value!r}")
