"""Multi30k English->German (Task 1, image captions) trained on a 2-core CPU.

    python train.py --config configs/multi30k.py --workdir runs/multi30k \
        --config.data.text_pattern=../shared/data/multi30k/{split}.{lang}
    jformer average-checkpoints --workdir runs/multi30k --best 5 --out runs/multi30k/best5

The data is read from plain text files by path and never copied into the repository;
the sentencepiece vocabulary is learned from the training side. German->English:
``--config.data.src_lang=de --config.data.tgt_lang=en``.
"""
import ml_collections

from configs import small


def get_config() -> ml_collections.ConfigDict:
    c = small.get_config()  # d_model 256, 3+3 layers, 4 heads, d_ff 1024
    m = c.model
    m.dropout_rate = 0.3  # a small corpus (29k pairs) overfits quickly; paper Table 3 (D)
    m.max_len = 128
    # Pre-LN (a final LayerNorm per stack) learns faster early and ended 1.1 BLEU above
    # post-LN in the same hour (docs/results.md); model.norm="post" is the paper's layout.
    m.norm = "pre"

    d = c.data
    d.source = "text"
    d.text_pattern = "../shared/data/multi30k/{split}.{lang}"
    d.train_split, d.eval_split, d.test_split = "train", "valid", "test2016"
    d.vocab_size = 8000  # joint BPE over both languages
    d.vocab_sample_size = 100_000
    d.max_source_len = d.max_target_len = 64
    d.pack = True  # ~96% of batch slots hold real tokens (bench/bench_data.py)
    d.pack_len = 64
    d.max_tokens = 4096  # 64 rows x 64 tokens

    t = c.train
    # bfloat16 products with float32 accumulation and float32 master weights where the
    # machine computes bfloat16 natively (an accelerator; a CPU with AVX512_BF16 or AMX:
    # 1.4-5x float32's speed), else float32 (an AVX-512 CPU without them takes 1.5x as
    # long per bfloat16 step; jformer/train/precision.py). Validation BLEU within 0.33 of
    # float32 at every step measured (+0.28 at 1,000, -0.03 at 2,000; docs/results.md).
    # decode.dtype "auto" (the default) decodes in float32 on a CPU, where that is
    # faster, and in the model's dtype on an accelerator (no BLEU lost either way).
    t.compute_dtype = "auto"
    t.max_minutes = 60.0  # the budget: wall-clock minutes from start (vocab, compile, evals)
    t.num_steps = 100_000  # a cap; the budget ends the run first (~1 s/step on 2 cores)
    t.warmup_steps = 1000
    t.learning_rate_scale = 2.0  # peak lr 2 * 256^-0.5 * 1000^-0.5 = 3.95e-3 at step 1000
    t.label_smoothing = 0.1
    t.log_every = 50
    # Validation BLEU at every checkpoint, and the 5 best checkpoints kept and averaged
    # (jformer average-checkpoints --best 5): with a wall-clock budget a faster machine
    # trains past the best steps, and averaging its last 5 would score lower than a
    # slower machine's. While BLEU still climbs the best 5 are the last 5 (paper 6.1).
    t.eval_every = 200
    t.eval_bleu_sentences = 0  # all 1014 validation sentences
    t.checkpoint_every = 200
    t.keep_checkpoints = 5  # the newest 5 (resuming; --last 5)
    t.keep_best = 5  # and the 5 of best validation BLEU (--best 5)

    e = c.decode
    e.beam_size = 4
    e.alpha = 0.6
    e.length_buckets = (16, 32, 64, 128)
    return c
