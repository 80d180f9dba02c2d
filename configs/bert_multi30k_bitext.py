"""Bitext filtering on Multi30k: is B a translation of A? From the bert_multi30k checkpoint.

    python train.py --config configs/bert_multi30k_bitext.py --workdir runs/bitext_pretrained
    # the same budget from a random initialisation, with the same vocabulary:
    python train.py --config configs/bert_multi30k_bitext.py --workdir runs/bitext_random \
        --config.task.init_from= --config.data.vocab_path=runs/bert_multi30k/spm.model

Every English caption of a split paired with its German one ("translation") and with
another German caption of nearly the same length ("not_translation"): 58k training
pairs, 2,028 validation, 2,000 test2016, half of each true. The final evaluation scores
test2016 (``test_accuracy``). Then, to filter a corpus:
``paste a.en a.de | jformer predict --workdir runs/bitext_pretrained --scores``.
"""
import ml_collections

from configs import bert_multi30k


def get_config() -> ml_collections.ConfigDict:
    c = bert_multi30k.get_config()
    c.task.kind = "classify"
    c.task.init_from = "runs/bert_multi30k"
    f = c.finetune
    f.source = "bitext"
    f.max_seq_len = 96  # [CLS] English [SEP] German [SEP]: 99.9% of pairs fit
    f.batch_size = 32
    t = c.train
    t.num_steps = 400  # 12,800 pairs, a fifth of an epoch
    t.warmup_steps = 40
    t.learning_rate = 2e-4
    t.log_every = 50
    t.eval_every = 200
    t.checkpoint_every = 200
    return c
