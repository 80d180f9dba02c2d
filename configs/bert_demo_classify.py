"""Single-sentence classification on the demo documents, from the bert_demo checkpoint:
is the sentence as generated, or is its verb in the wrong number ("Anna have two cats.")?

    python train.py --config configs/bert_demo_classify.py --workdir runs/bert_demo_classify
    echo "She have three dogs." | jformer predict --workdir runs/bert_demo_classify
"""
import ml_collections

from configs import bert_demo


def get_config() -> ml_collections.ConfigDict:
    c = bert_demo.get_config()
    c.task.kind = "classify"
    c.task.init_from = "runs/bert_demo"
    f = c.finetune
    f.source = "demo"
    f.demo_num_train = 200  # documents (~1600 sentences)
    f.batch_size = 32
    t = c.train
    t.num_steps = 300
    t.warmup_steps = 30
    t.learning_rate = 5e-4
    t.log_every = 25
    t.eval_every = 100
    t.checkpoint_every = 100
    return c
