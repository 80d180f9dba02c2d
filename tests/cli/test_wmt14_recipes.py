"""configs/wmt14_base.py and configs/wmt14_big.py: the paper's settings, and a few steps
of each at its full shape on TFDS mock data (train.py in a subprocess; nothing is
downloaded)."""
import json
import math
import os
import subprocess
import sys

import pytest

from jformer import config as config_lib
from jformer.train import config_checks

from configs import wmt14_base, wmt14_big

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# train.py inside tfds.testing.mock_data, recording each pass over a TFDS split (every
# read, whole or streamed, goes through tfds_source.iter_tfds).
MOCK_TRAIN = """
import json, sys
import tensorflow_datasets as tfds
from jformer.data import tfds_source
import train
read = []
passes = tfds_source.iter_tfds
def recording_iter(name, split, *args, **kwargs):
    read.append([name, split])
    return passes(name, split, *args, **kwargs)
tfds_source.iter_tfds = recording_iter
sys.argv[0] = "train.py"
try:
    with tfds.testing.mock_data(num_examples=16, policy=tfds.testing.MockPolicy.USE_CODE):
        train.run()
finally:
    print("TFDS_READ " + json.dumps(read))
"""

# Budget overrides: 3 steps of one tiny batch (one device), a mock-data vocabulary,
# evaluation at step 2 and the final one at step 3 (loss and one greedy translation), and
# 10 warm-up steps, so that 3 steps move the parameters by more than rounding.
SMALL_RUN = ["--config.train.num_steps=3", "--config.data.max_tokens=256",
             "--config.data.vocab_size=300", "--config.train.warmup_steps=10",
             "--config.train.log_every=1", "--config.train.eval_every=2",
             "--config.train.eval_bleu_sentences=1", "--config.decode.beam_size=1"]


def paper_settings(module):
    """The recipe as training checks it (typed fields, lengths within model.max_len)."""
    return config_checks.validate_config(module.get_config())


def test_recipes_hold_the_paper_settings():
    b, g = paper_settings(wmt14_base), paper_settings(wmt14_big)
    for c in (b, g):
        assert (c.data.source, c.data.tfds_name, c.data.src_lang, c.data.tgt_lang) == (
            "tfds", "wmt14_translate/de-en", "en", "de")
        assert (c.data.tfds_eval_split, c.data.tfds_test_split) == ("validation", "test")
        assert c.data.max_tokens == 25000
        t = c.train
        assert (t.warmup_steps, t.adam_b1, t.adam_b2, t.adam_eps, t.label_smoothing) == (
            4000, 0.9, 0.98, 1e-9, 0.1)
        e = c.decode
        assert (e.beam_size, e.alpha, e.max_len_a, e.max_len_b) == (4, 0.6, 1.0, 50)
    assert (b.model.d_model, b.model.d_ff, b.model.num_heads) == (512, 2048, 8)
    assert (g.model.d_model, g.model.d_ff, g.model.num_heads) == (1024, 4096, 16)
    assert (b.model.dropout_rate, b.train.num_steps, b.train.keep_checkpoints) == (
        0.1, 100_000, 5)
    assert (g.model.dropout_rate, g.train.num_steps, g.train.keep_checkpoints) == (
        0.3, 300_000, 20)


@pytest.mark.slow  # about a minute (base) and two (big) on 2 CPU cores
@pytest.mark.parametrize("recipe, d_model", [("wmt14_base", 512), ("wmt14_big", 1024)])
def test_recipe_trains_at_full_shape_on_mock_wmt14(tmp_path, recipe, d_model):
    pytest.importorskip("tensorflow", reason="TFDS reads through TensorFlow")
    import tensorflow_datasets as tfds

    from jformer.data import sources

    workdir = tmp_path / "run"
    # One CPU device: the full-shape state (3.4 GB for big) is not copied 8 times.
    env = dict(os.environ, JFORMER_MALLOC="default", PYTHONPATH=ROOT,
               XLA_FLAGS="--xla_force_host_platform_device_count=1")
    out = subprocess.run([sys.executable, "-c", MOCK_TRAIN, "--config",
                          f"configs/{recipe}.py", "--workdir", str(workdir), *SMALL_RUN],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    read = json.loads(out.stdout.split("TFDS_READ ")[-1].splitlines()[0])
    # The train split three times as its encoded cache is built (the number of pairs and
    # the vocabulary's sample, as reading it whole would draw it; then encoding), then
    # validation; never test.
    assert read == [["wmt14_translate/de-en", "train"]] * 3 + [
        ["wmt14_translate/de-en", "validation"]]

    saved = json.loads((workdir / "config.json").read_text())["model"]
    assert (saved["d_model"], saved["num_encoder_layers"], saved["num_decoder_layers"]) == (
        d_model, 6, 6)
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert len(train_losses) == 3 and all(math.isfinite(x) for x in train_losses)
    # Evaluation has no dropout: its loss moves only when the parameters do.
    evals = [r["loss"] for r in records if r["kind"] in ("eval", "final")]
    assert len(evals) == 2 and all(math.isfinite(x) for x in evals), records
    assert evals[0] != evals[1]
    assert (workdir / "checkpoints" / "3" / "commit_success.txt").is_file()

    cfg = config_lib.from_config_dict(
        __import__(f"configs.{recipe}", fromlist=["get_config"]).get_config().to_dict())
    with tfds.testing.mock_data(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE):
        test = sources.load_corpus(cfg.data, "test")
    assert "wmt14_translate/de-en test" in test.origin
