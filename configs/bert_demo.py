"""The CPU demo of encoder pretraining: a small BERT on the generated demo documents.

    python train.py --config configs/bert_demo.py --workdir runs/bert_demo

Stories of a few sentences about one person (jformer.data.demo_documents) whose
sentences refer back to each other, so next-sentence prediction is learnable; the
fine-tuning demos (configs/bert_demo_tag.py, bert_demo_span.py,
bert_demo_classify.py) start from this run's checkpoint.
"""
import ml_collections

from configs import bert_base


def get_config() -> ml_collections.ConfigDict:
    c = bert_base.get_config()
    m = c.model
    m.d_model = 128
    m.num_heads = 4
    m.num_encoder_layers = 3
    m.d_ff = 512
    m.max_len = 64
    m.vocab_size = 1000

    d = c.data
    d.vocab_size = 1000  # the demo language is small
    d.vocab_sample_size = 100_000
    d.vocab_character_coverage = 1.0

    p = c.pretrain
    p.source = "demo"
    p.demo_num_train = 20000  # documents (~160k sentences)
    p.demo_num_eval = 400
    p.max_seq_len = 64
    p.max_predictions_per_seq = 10
    p.batch_size = 64

    f = c.finetune
    f.source = "demo"
    f.max_seq_len = 64

    t = c.train
    t.num_steps = 4000
    t.warmup_steps = 400
    t.learning_rate = 1e-3  # a small model on a small language takes a large rate
    t.log_every = 50
    t.eval_every = 500
    t.checkpoint_every = 500
    t.keep_checkpoints = 3
    return c
