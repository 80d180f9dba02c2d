"""Shared by the data tests: a small demo DataConfig and a workdir whose train split (and
tokenizer) is built once per module."""
import pytest

from jformer.config import DataConfig
from jformer.data import pipeline

CFG = DataConfig(source="demo", demo_num_train=600, demo_num_eval=37, demo_num_test=23,
                 vocab_size=400, max_source_len=64, max_target_len=64, max_tokens=1024)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def train(workdir):
    return pipeline.build_pipeline(CFG, workdir, "train", num_devices=2)
