"""Fixtures the command-line tests share: one tiny workdir per test process, and
PAIRS (tests/cli/test_cli.py) as a source and a target file."""
import pytest

from tests.cli.test_cli import PAIRS
from tests.inference.test_translator import tiny_workdir


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A workdir of tests/inference/test_translator.py's tiny model (its checkpoint at
    step 10); tests read it and write nothing into it."""
    return tiny_workdir(tmp_path_factory.mktemp("tiny_run"))


@pytest.fixture
def pair_files(tmp_path):
    """(source file, target file): PAIRS' English and German sides, a line each."""
    src, tgt = tmp_path / "test.en", tmp_path / "test.de"
    src.write_text("".join(en + "\n" for en, _ in PAIRS))
    tgt.write_text("".join(de + "\n" for _, de in PAIRS))
    return src, tgt
