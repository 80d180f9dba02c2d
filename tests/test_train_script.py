"""train.py's start-up: the huge-page malloc restart (Linux) and its opt-outs."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = "import os, train; train.use_hugepage_malloc(); print(os.environ.get('GLIBC_TUNABLES'))"


def probe(**env_overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "JFORMER_MALLOC")}
    env.update(env_overrides)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunable")
def test_restarts_once_with_hugepage_malloc():
    assert probe() == "glibc.malloc.hugetlb=1"


def test_opt_outs_keep_the_environment():
    assert probe(JFORMER_MALLOC="default") == "None"
    assert probe(GLIBC_TUNABLES="glibc.malloc.arena_max=2") == "glibc.malloc.arena_max=2"
