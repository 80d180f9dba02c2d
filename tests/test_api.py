"""The public API in jformer/__init__.py resolves to the objects it names."""
import subprocess
import sys

import jformer


def test_every_public_name_resolves():
    for name in jformer.__all__:
        obj = getattr(jformer, name)
        assert obj.__name__ == name, name


def test_importing_jformer_does_not_import_jax():
    code = "import sys, jformer, jformer.cli; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_names_resolve_the_same_after_every_subpackage_is_imported():
    """No public name equals a subpackage's, so import order cannot change what it means."""
    code = ("import importlib, pkgutil, jformer\n"
            "for m in pkgutil.iter_modules(jformer.__path__):\n"
            "    m.name.startswith('_') or importlib.import_module('jformer.' + m.name)\n"
            "print(sorted(n for n in jformer.__all__ if getattr(jformer, n).__name__ != n))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
