"""BERT-base (Devlin et al., 2019, section 3): L=12, H=768, A=12, ~110M parameters.

Pretraining on text files (one sentence per line, a blank line between documents):

    python train.py --config configs/bert_base.py --workdir runs/bert_base \
        --config.pretrain.train_files='("books.txt", "wiki.txt")' \
        --config.pretrain.eval_files='("heldout.txt",)'

The recipe of the paper (A.2) and google-research/bert's run_pretraining.py: sequences
of 128 tokens with at most 20 predictions (the paper's first 90% of steps; its last
10% use 512 and 80: ``--config.pretrain.max_seq_len=512
--config.pretrain.max_predictions_per_seq=80``), batches of 256 sequences, Adam with
decoupled weight decay 0.01 (not of biases and LayerNorms), lr 1e-4 warmed up over
10k steps and decayed linearly, gradient clipping at 1.0, dropout 0.1 everywhere, GELU.
"""
import ml_collections

from configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    c.task = t = ml_collections.ConfigDict()
    t.kind = "pretrain"  # translation | pretrain | classify | tag | span
    t.init_from = ""  # a pretraining workdir to start from (fine-tuning, translation)
    t.init_step = 0  # its checkpoint (0: the latest)

    m = c.model
    m.vocab_size = 30522  # BERT's uncased WordPiece size; the tokenizer sets it
    m.d_model = 768  # H
    m.num_heads = 12  # A
    m.num_encoder_layers = 12  # L
    m.d_ff = 3072  # 4H
    m.dropout_rate = 0.1  # hidden_dropout_prob
    m.attention_dropout_rate = 0.1  # attention_probs_dropout_prob
    m.relu_dropout_rate = 0.0
    m.positional = "learned"  # max_position_embeddings x H, initialised like the rest
    m.max_len = 512  # max_position_embeddings
    m.norm = "post"
    m.activation = "gelu"  # hidden_act (the tanh approximation, as BERT's code)
    m.layer_norm_epsilon = 1e-12
    # Unused by the encoder-only model: num_decoder_layers, share_embeddings, tie_output.

    c.bert = b = ml_collections.ConfigDict()
    b.type_vocab_size = 2  # segments A and B
    b.embedding_norm = True  # LayerNorm(token + position + segment) before dropout
    b.scale_embeddings = False  # BERT adds the embeddings unscaled
    b.init_std = 0.02  # initializer_range: truncated normal for every weight matrix
    b.pooler = True  # tanh(W h_[CLS] + b) for NSP and classification
    b.num_labels = 2  # fine-tuning heads; set from the labels

    d = c.data
    d.source = "text"  # unused by pretraining (pretrain.* name its data)
    d.vocab_size = 30522
    d.vocab_model_type = "bpe"
    d.vocab_sample_size = 10_000_000  # sentences the vocabulary is learned from
    d.vocab_character_coverage = 0.9999

    c.pretrain = p = ml_collections.ConfigDict()
    p.source = "text"  # demo | text
    p.train_files = ()  # one sentence per line, a blank line between documents
    p.eval_files = ()
    p.demo_seed = 0
    p.demo_num_train = 20000
    p.demo_num_eval = 400
    p.max_seq_len = 128
    p.max_predictions_per_seq = 20  # ~ max_seq_len * masked_lm_prob
    p.masked_lm_prob = 0.15
    p.short_seq_prob = 0.1
    p.whole_word_mask = False
    p.next_sentence = True
    p.batch_size = 256  # sequences per global batch

    c.finetune = f = ml_collections.ConfigDict()
    f.source = "files"  # demo | files | bitext
    f.train_file = ""
    f.eval_file = ""
    f.test_file = ""
    f.labels = ()  # empty: the train file's, sorted
    f.demo_seed = 0
    f.demo_num_train = 1000
    f.demo_num_eval = 200
    f.demo_num_test = 200
    f.bitext_seed = 0
    f.max_seq_len = 128
    f.max_answer_len = 30
    f.batch_size = 32  # the paper's fine-tuning batch: 16 or 32

    tr = c.train
    tr.num_steps = 1_000_000
    tr.schedule = "linear"  # warm-up, then linear decay to 0 at num_steps
    tr.learning_rate = 1e-4
    tr.warmup_steps = 10_000
    tr.adam_b1 = 0.9
    tr.adam_b2 = 0.999
    tr.adam_eps = 1e-6
    tr.weight_decay = 0.01
    tr.weight_decay_mask = "matrices"  # no decay of biases and LayerNorms
    tr.grad_clip_norm = 1.0
    tr.label_smoothing = 0.0  # unused by the encoder tasks
    tr.log_every = 100
    tr.eval_every = 10_000
    tr.checkpoint_every = 10_000
    tr.keep_checkpoints = 3
    return c
