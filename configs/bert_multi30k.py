"""Encoder pretraining on both sides of Multi30k's training text (29k English and 29k
German captions), masked LM only:

    python train.py --config configs/bert_multi30k.py --workdir runs/bert_multi30k

Multi30k's lines are captions of unrelated images, so a caption's successor says
nothing about it: next-sentence prediction is off (RoBERTa trains without it too), and
B is always the true continuation. The encoder is configs/multi30k.py's translation
encoder (d_model 256, 3 layers, 4 heads, d_ff 1024, ReLU, post-LN, sinusoidal
positions, embeddings scaled by sqrt(d_model), no embedding LayerNorm, no segment
embeddings, jformer's initialisers), so this one checkpoint starts both the bitext
classifier (configs/bert_multi30k_bitext.py) and a translation model
(configs/multi30k_from_bert.py).
"""
import ml_collections

from configs import bert_base

DATA = "../shared/data/multi30k"


def get_config() -> ml_collections.ConfigDict:
    c = bert_base.get_config()
    m = c.model
    m.vocab_size = 8000
    m.d_model = 256
    m.num_heads = 4
    m.num_encoder_layers = 3
    m.d_ff = 1024
    m.activation = "relu"
    m.positional = "sinusoidal"
    m.max_len = 128  # configs/multi30k.py's
    m.layer_norm_epsilon = 1e-6  # configs/multi30k.py's
    m.dropout_rate = 0.1
    m.attention_dropout_rate = 0.0

    b = c.bert
    b.type_vocab_size = 0  # none in the translation encoder
    b.embedding_norm = False
    b.scale_embeddings = True
    b.init_std = 0.0  # jformer's initialisers, as the translation model's

    d = c.data
    d.vocab_size = 8000  # joint BPE over both languages, as configs/multi30k.py
    d.vocab_sample_size = 100_000
    d.vocab_character_coverage = 1.0
    d.text_pattern = DATA + "/{split}.{lang}"  # for the bitext fine-tuning
    d.train_split, d.eval_split, d.test_split = "train", "valid", "test2016"

    p = c.pretrain
    p.source = "text"
    p.train_files = (DATA + "/train.en", DATA + "/train.de")  # one document each
    p.eval_files = (DATA + "/valid.en", DATA + "/valid.de")
    p.max_seq_len = 64
    p.max_predictions_per_seq = 10
    p.next_sentence = False
    p.batch_size = 64

    t = c.train
    t.num_steps = 800  # ~2.3 passes over both sides (64 sequences of up to 64 tokens)
    t.warmup_steps = 80
    t.learning_rate = 1e-3
    t.log_every = 50
    t.eval_every = 200
    t.checkpoint_every = 200
    t.keep_checkpoints = 2
    return c
