"""Shared by the data tests: a small demo DataConfig, a workdir whose train split (and
tokenizer) is built once per module, and a 400-piece tokenizer of demo sentences."""
import pytest

from jformer.config import DataConfig
from jformer.data import demo, pipeline
from jformer.data.tokenizer import Tokenizer

CFG = DataConfig(source="demo", demo_num_train=600, demo_num_eval=37, demo_num_test=23,
                 vocab_size=400, max_source_len=64, max_target_len=64, max_tokens=1024)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def train(workdir):
    return pipeline.build_pipeline(CFG, workdir, "train", num_devices=2)


TOK_VOCAB = 400


def demo_sentences(n: int = 300) -> list[str]:
    """Sources, then targets, of the first n demo training pairs."""
    pairs = demo.generate_pairs(0, n, 0, 0)["train"]
    return [s for s, _ in pairs] + [t for _, t in pairs]


@pytest.fixture(scope="session")
def tok(tmp_path_factory) -> Tokenizer:
    """A TOK_VOCAB-piece tokenizer of demo_sentences(); tests only read it."""
    prefix = tmp_path_factory.mktemp("spm") / "spm"
    return Tokenizer.train(demo_sentences(), prefix, TOK_VOCAB, num_threads=2)
