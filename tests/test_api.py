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
