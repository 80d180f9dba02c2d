"""Package namespaces whose names import on first use (PEP 562).

    __getattr__, __dir__ = lazy.exports(__name__, {"Translator": "translator", ...})

A package that re-exports its modules' names this way can have one light module
imported without the others: ``jformer translate`` imports :mod:`jformer.inference.programs`
(and through it :func:`jformer.kernels.native.cpu_flags`) to start reading its compiled
programs while flax, orbax and the model are still importing.
"""
from __future__ import annotations

import importlib
from typing import Callable


def exports(package: str, where: dict[str, str]) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package``: a name of ``where`` (name ->
    submodule that defines it) is imported from its submodule when first asked for and
    kept; any other name is tried as a submodule (``jformer.inference.scoring``); else
    AttributeError. An ImportError inside a submodule propagates as it is."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        if name not in where:
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":  # the module exists; what it imports not
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
