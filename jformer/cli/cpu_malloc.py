"""glibc malloc on transparent huge pages for XLA:CPU (Linux), shared by train.py and bench/.

XLA:CPU maps each step's scratch memory fresh and pays a page fault for every page of it;
on 2 MiB huge pages that is one fault where 4 KiB pages take 512
(``bench/bench_train.py --malloc hugepages|glibc`` measures the step under either).
glibc reads the setting only at process start, so it goes in the environment of a new
process. It changes nothing on accelerators.
"""
from __future__ import annotations

import os
import sys

HUGEPAGE_ENV = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def use_hugepage_malloc() -> None:
    """Restarts this process once with :data:`HUGEPAGE_ENV` (Linux; interpreter flags kept).

    Skipped when GLIBC_TUNABLES is already set or JFORMER_MALLOC=default.
    """
    if (sys.platform.startswith("linux") and "GLIBC_TUNABLES" not in os.environ
            and os.environ.get("JFORMER_MALLOC", "") != "default"):
        os.execve(sys.executable, sys.orig_argv, dict(os.environ, **HUGEPAGE_ENV))
