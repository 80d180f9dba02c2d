"""Span extraction (questions about the demo documents) from the bert_demo checkpoint.

    python train.py --config configs/bert_demo_span.py --workdir runs/bert_demo_span
    printf 'Where does Anna live?\tAnna lives in Vienna. She has two cats.\n' | \
        jformer predict --workdir runs/bert_demo_span

Start and end vectors over the context's pieces (BERT paper 4.2); scored by SQuAD's
exact match and token F1 of the answer texts.
"""
import ml_collections

from configs import bert_demo


def get_config() -> ml_collections.ConfigDict:
    c = bert_demo.get_config()
    c.task.kind = "span"
    c.task.init_from = "runs/bert_demo"
    f = c.finetune
    f.source = "demo"
    f.demo_num_train = 200  # documents (~1400 questions)
    f.batch_size = 32
    f.max_answer_len = 16
    t = c.train
    t.num_steps = 400
    t.warmup_steps = 40
    t.learning_rate = 5e-4
    t.log_every = 25
    t.eval_every = 100
    t.checkpoint_every = 100
    return c
