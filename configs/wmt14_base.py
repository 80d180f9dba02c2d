"""WMT14 English-German, Transformer base: the paper's recipe, ready to launch.

``python train.py --config configs/wmt14_base.py --workdir runs/wmt14_base
--config.train.accum_steps=A`` after ``tfds build wmt14_translate/de-en`` (once, online).

Batch (paper 5.1): ``data.max_tokens`` is the budget of the GLOBAL batch of one
optimizer step, about 25,000 source and 25,000 target tokens (rows x padded length,
both sides padded alike), whatever the device count. ``train.accum_steps`` only splits
it: each device computes ``max_tokens / (devices x accum_steps)`` tokens per
micro-batch, so pick the smallest A whose micro-batch fits memory. The paper's 8 P100s
held about 3,125 tokens each: A = 8 / devices reproduces that (1 GPU: 8, 2: 4, 4: 2,
8: 1); a device with more memory takes larger micro-batches (a smaller A), and
``jformer memory --config configs/wmt14_base.py`` prints the parameters, Adam state and
activations per token to size them.
devices x A must stay <= 97 (25,000 // 256, the widest bucket): raise max_tokens past that.

Schedule and evaluation as the paper: 100k steps, 4,000 warm-up steps, Adam (0.9, 0.98,
1e-9), label smoothing 0.1, dropout 0.1; newstest2013 (TFDS ``validation``) for
validation and newstest2014 (TFDS ``test``) for the test score, decoded with beam 4,
alpha 0.6 and at most source length + 50 tokens. Checkpoints every 1,500 steps (the
paper's 10 minutes at 0.4 s a step), the last 5 kept for ``jformer average-checkpoints
--last 5`` (paper 6.1).
"""
import ml_collections

from configs import base


def recipe(c: ml_collections.ConfigDict, *, checkpoint_every: int,
           keep_checkpoints: int) -> ml_collections.ConfigDict:
    """The WMT14 En-De data and the paper's batch, schedule and decoding on config ``c``."""
    d = c.data
    d.source = "tfds"
    d.tfds_name = "wmt14_translate/de-en"  # paper 5.1
    d.src_lang, d.tgt_lang = "en", "de"
    d.tfds_train_split = "train"
    d.tfds_eval_split = "validation"  # newstest2013 (paper 6.2: development set)
    d.tfds_test_split = "test"  # newstest2014 (paper Table 2)
    d.vocab_size = 37000  # paper 5.1: shared BPE, about 37,000 tokens
    d.max_tokens = 25000  # paper 5.1: per optimizer step, all devices and micro-batches
    t = c.train
    t.accum_steps = 1  # micro-batches per step: 8 // devices gives the paper's 3,125 each
    t.warmup_steps = 4000  # paper 5.3
    t.adam_b1, t.adam_b2, t.adam_eps = 0.9, 0.98, 1e-9  # paper 5.3
    t.label_smoothing = 0.1  # paper 5.4
    t.checkpoint_every = checkpoint_every  # paper 6.1: every 10 minutes
    t.keep_checkpoints = keep_checkpoints  # paper 6.1: averaged for the test score
    t.eval_every = 5000
    e = c.decode
    e.beam_size = 4  # paper 6.1
    e.alpha = 0.6  # paper 6.1
    e.max_len_a, e.max_len_b = 1.0, 50  # paper 6.1: input length + 50
    return c


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    c.train.num_steps = 100_000  # paper 5.2
    c.model.dropout_rate = 0.1  # paper 5.4
    return recipe(c, checkpoint_every=1500, keep_checkpoints=5)
