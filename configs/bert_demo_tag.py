"""Token tagging on the demo documents, from the bert_demo pretraining checkpoint.

    python train.py --config configs/bert_demo_tag.py --workdir runs/bert_demo_tag
    echo "Anna lives in Vienna." | jformer predict --workdir runs/bert_demo_tag

Tags (BIO) of names, cities, counts, dates, clock times and prices; scored by entity F1.
"""
import ml_collections

from configs import bert_demo


def get_config() -> ml_collections.ConfigDict:
    c = bert_demo.get_config()
    c.task.kind = "tag"
    c.task.init_from = "runs/bert_demo"  # its encoder and vocabulary
    f = c.finetune
    f.source = "demo"
    f.demo_num_train = 200  # documents (~1600 tagged sentences)
    f.batch_size = 32
    t = c.train
    t.num_steps = 300
    t.warmup_steps = 30
    t.learning_rate = 5e-4
    t.log_every = 25
    t.eval_every = 100
    t.checkpoint_every = 100
    return c
