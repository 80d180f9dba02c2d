"""jformer.data.tfds_source: TFDS translation datasets, read through TensorFlow, and the
errors a user meets without it."""
import dataclasses
import subprocess
import sys

import pytest

from jformer.config import DataConfig
from jformer.data import sources

_WMT = "wmt14_translate/de-en"


@pytest.fixture
def tfds():
    pytest.importorskip("tensorflow", reason="TFDS reads datasets through TensorFlow: "
                        "pip install -e '.[tfds]'")
    import tensorflow_datasets
    return tensorflow_datasets


def test_without_tensorflow_the_error_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` fails
    with pytest.raises(ValueError, match=r"data.source='tfds' needs TensorFlow.*"
                                         r"pip install -e '\.\[tfds\]'"):
        sources.load_split(DataConfig(source="tfds", tfds_name=_WMT,
                                      tfds_data_dir=str(tmp_path)), "train")


def test_train_py_without_tensorflow_is_one_line(tmp_path):
    """The README's WMT14 command with the core install only: one line naming the extra."""
    code = ("import sys; sys.modules['tensorflow'] = None; sys.argv = ['train.py', "
            "'--config', 'configs/demo.py', '--config.data.source=tfds', "
            f"'--config.data.tfds_data_dir={tmp_path}', '--workdir', '{tmp_path / 'w'}']; "
            "import train; train.run()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ,
                                           "JFORMER_MALLOC": "default"})
    assert out.returncode == 1
    lines = [line for line in out.stderr.splitlines() if line.startswith("train.py:")]
    assert len(lines) == 1 and "pip install -e '.[tfds]'" in lines[0], out.stderr[-2000:]




def test_tfds_with_mock_data(tfds):
    cfg = DataConfig(source="tfds", tfds_name=_WMT)
    with tfds.testing.mock_data(num_examples=9, policy=tfds.testing.MockPolicy.USE_CODE):
        en_de = sources.load_corpus(cfg, "train")
        de_en = sources.load_split(dataclasses.replace(cfg, src_lang="de", tgt_lang="en"),
                                   "train")
        valid = sources.load_corpus(cfg, "eval")
    assert len(en_de.pairs) + en_de.num_skipped == 9
    assert all(isinstance(s, str) and s and t for s, t in en_de.pairs)
    assert de_en == [(t, s) for s, t in en_de.pairs]
    assert len(valid.pairs) + valid.num_skipped == 9
    assert "validation" in valid.origin and "train" in en_de.origin


def test_tfds_streams_the_pairs_of_loading_whole(tfds, monkeypatch):
    from jformer.data import tfds_source
    from jformer.data.streamed import CorpusStream

    monkeypatch.setattr(tfds_source, "_READ_BATCH", 4)  # several tf.data batches
    cfg = DataConfig(source="tfds", tfds_name=_WMT)
    with tfds.testing.mock_data(num_examples=11, policy=tfds.testing.MockPolicy.USE_CODE):
        whole = sources.load_corpus(cfg, "train")
        stream = CorpusStream(cfg, "train")
        chunks = list(stream.chunks())
    assert len(chunks) == 3  # 11 examples, 4 a read and [p for c in chunks for p in c] == whole.pairs
    assert (stream.num_pairs, stream.num_skipped) == (len(whole.pairs), whole.num_skipped)


def test_tfds_unprepared_says_how_to_prepare(tfds, tmp_path):
    cfg = DataConfig(source="tfds", tfds_name=_WMT, tfds_data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError,
                       match=rf"not prepared in {tmp_path}.*`tfds build {_WMT} --data_dir "
                             rf"{tmp_path}`.*data.tfds_data_dir"):
        sources.load_split(cfg, "train")


def test_tfds_unknown_dataset_or_language(tfds, tmp_path):
    with pytest.raises(ValueError, match="unknown TFDS dataset 'no_such_dataset'"):
        sources.load_split(DataConfig(source="tfds", tfds_name="no_such_dataset",
                                      tfds_data_dir=str(tmp_path)), "train")
    with pytest.raises(ValueError, match=r"data.tgt_lang: .* has languages \['de', 'en'\]"):
        sources.load_split(DataConfig(source="tfds", tfds_name=_WMT, tgt_lang="fr",
                                      tfds_data_dir=str(tmp_path)), "train")
