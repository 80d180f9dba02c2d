"""configs/multi30k.py with its encoder and shared embedding started from the
bert_multi30k pretraining checkpoint (and its vocabulary):

    python train.py --config configs/multi30k_from_bert.py --workdir runs/m30k_from_bert
    python train.py --config configs/multi30k.py --workdir runs/m30k_plain \
        --config.data.vocab_path=runs/bert_multi30k/spm.model   # the plain recipe

Refused, naming what differs, when the pretrained encoder or vocabulary does not fit.
"""
import ml_collections

from configs import multi30k

PRETRAINED = "runs/bert_multi30k"


def get_config() -> ml_collections.ConfigDict:
    c = multi30k.get_config()
    c.task = t = ml_collections.ConfigDict()
    t.kind = "translation"
    t.init_from = PRETRAINED
    t.init_step = 0  # the latest checkpoint
    c.data.vocab_path = PRETRAINED + "/spm.model"
    return c
