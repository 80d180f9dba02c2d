"""A tiny training config shared by the training-level tests (seconds on a CPU)."""
import shutil

from configs import demo


def tiny_config(**train_overrides):
    c = demo.get_config()
    m = c.model
    m.d_model, m.num_heads, m.num_encoder_layers, m.num_decoder_layers = 32, 2, 1, 1
    m.d_ff, m.max_len = 64, 64
    d = c.data
    d.demo_num_train, d.demo_num_eval, d.demo_num_test = 1500, 24, 24
    d.vocab_size, d.vocab_sample_size = 400, 3000
    d.max_source_len = d.max_target_len = 32
    d.pack, d.pack_len, d.max_tokens = True, 32, 256  # one batch shape: 8 x 32
    t = c.train
    t.num_steps, t.warmup_steps, t.log_every, t.eval_every = 20, 10, 5, 1000
    t.checkpoint_every, t.keep_checkpoints, t.eval_bleu_sentences = 10, 3, 8
    for k, v in train_overrides.items():
        setattr(t, k, v)
    c.decode.length_buckets = (16, 32, 64)
    c.decode.batch_size = 8
    return c


def tiny_bert_config(kind="pretrain", **train_overrides):
    """A tiny encoder on a few demo documents (seconds on a CPU)."""
    from configs import bert_demo

    c = bert_demo.get_config()
    c.task.kind = kind
    m = c.model
    m.d_model, m.num_heads, m.num_encoder_layers, m.d_ff, m.max_len = 32, 2, 1, 64, 48
    d = c.data
    d.vocab_size, d.vocab_sample_size = 400, 5000
    p = c.pretrain
    p.demo_num_train, p.demo_num_eval = 150, 20
    p.max_seq_len, p.max_predictions_per_seq, p.batch_size = 32, 5, 16
    f = c.finetune
    f.demo_num_train, f.demo_num_eval, f.demo_num_test = 20, 6, 6
    f.max_seq_len, f.batch_size = 48, 16
    t = c.train
    t.num_steps, t.warmup_steps, t.log_every, t.eval_every = 20, 5, 5, 1000
    t.checkpoint_every, t.keep_checkpoints = 10, 3
    for k, v in train_overrides.items():
        setattr(t, k, v)
    return c


def workdir_with_vocab(tmp_path, name, vocab):
    """A new workdir ``tmp_path/name`` holding a copy of the sentencepiece model `vocab`."""
    w = tmp_path / name
    w.mkdir()
    shutil.copy(vocab, w / "spm.model")
    return str(w)
