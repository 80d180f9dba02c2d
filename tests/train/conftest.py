"""Fixtures of the training tests."""
import pytest

from jformer import train as train_lib
from tests.train_helpers import tiny_config


@pytest.fixture(scope="module")
def shared_vocab(tmp_path_factory):
    """Train the sentencepiece model once per module; every run copies it into its
    workdir (tests.train_helpers.workdir_with_vocab)."""
    work = tmp_path_factory.mktemp("vocab")
    train_lib.build_job(tiny_config(), str(work))
    return str(work / "spm.model")
