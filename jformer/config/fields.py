"""``ConfigError`` and the field checks every config section runs in ``__post_init__``.

Each check raises :class:`ConfigError` naming the field as ``section.name``, what was
expected and what was given.
"""
from __future__ import annotations

import math
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


def check(cond: bool, field: str, expected: str, got: Any) -> None:
    if not cond:
        raise ConfigError(f"config field {field!r}: expected {expected}; got {got!r}")


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, a string, NaN or an infinity)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_rate(section: str, name: str, value: float) -> None:
    check(is_number(value) and 0.0 <= value < 1.0, f"{section}.{name}", "a rate in [0, 1)",
          value)


def check_number(section: str, name: str, value: float, low: float, *,
                 strict: bool = False, note: str = "") -> None:
    """value is a finite number >= low (> low when strict)."""
    ok = is_number(value) and (value > low if strict else value >= low)
    check(ok, f"{section}.{name}", f"a finite number {'>' if strict else '>='} {low}{note}",
          value)


JAX_SEED_LIMIT = 2 ** 32  # jax.random.key keeps 32 bits: a larger seed repeats a smaller one


def check_seed(section: str, name: str, value: int, limit: int = 2 ** 63) -> None:
    check(is_int(value) and 0 <= value < limit, f"{section}.{name}",
          f"an int in [0, 2**{limit.bit_length() - 1})", value)


def check_choice(section: str, name: str, value: str, choices: tuple[str, ...]) -> None:
    check(value in choices, f"{section}.{name}", f"one of {choices}", value)


def check_positive(section: str, name: str, value: int) -> None:
    check(isinstance(value, int) and value > 0, f"{section}.{name}", "a positive int", value)
