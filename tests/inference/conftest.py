"""Fixtures the inference tests share, one per test process: the tiny model of
tests/inference/test_translator.py (``build_setup``) and a Translator of it with DECODE and
CHUNK, so its compiled programs serve every module that decodes it."""
import pytest

from jformer.inference.translator import Translator
from tests.inference.test_translator import CHUNK, DECODE, build_setup


@pytest.fixture(scope="session")
def setup(tmp_path_factory):
    """(ModelConfig, params, Tokenizer) of the tiny model; tests only read them."""
    return build_setup(str(tmp_path_factory.mktemp("spm")))


@pytest.fixture(scope="session")
def translator(setup):
    cfg, params, tok = setup
    return Translator(cfg, params, tok, DECODE, chunk_size=CHUNK)
