"""The CPU demo of encoder pretraining: a small BERT on the generated demo documents.

    python train.py --config configs/bert_demo.py --workdir runs/bert_demo

Stories of a few sentences about one person (jformer.data.demo.documents) whose
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
    # Pre-LN, no dropout and twice the rate: next-sentence prediction (telling the
    # story's name in B from another story's) then leaves its ~0.66 plateau at step
    # ~2,000 and reaches 0.92 in 10 minutes; BERT's post-LN, dropout 0.1 and 1e-3 got
    # 0.80 (docs/bert.md). Ten minutes are ~4.6 passes over the 20,000 stories, each
    # cut and masked afresh, so dropout is not needed.
    m.norm = "pre"
    m.dropout_rate = 0.0
    m.attention_dropout_rate = 0.0

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
    t.learning_rate = 2e-3  # a small pre-LN model on a small language takes a large rate
    t.log_every = 50
    t.eval_every = 500
    t.checkpoint_every = 500
    t.keep_checkpoints = 3
    return c
