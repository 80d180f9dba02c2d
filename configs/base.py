"""Transformer base (paper, Table 3, row "base"): N=6, d_model=512, d_ff=2048, h=8.

Every field is overridable from the command line, e.g.
``python train.py --config configs/base.py --config.train.num_steps=1000``.
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()

    c.model = m = ml_collections.ConfigDict()
    m.vocab_size = 37000  # shared BPE vocabulary, WMT14 En-De (paper 5.1); tokenizer sets it
    m.d_model = 512  # paper 3: d_model
    m.num_heads = 8  # paper 3.2.2: h
    m.num_encoder_layers = 6  # paper 3.1: N
    m.num_decoder_layers = 6  # paper 3.1: N
    m.d_ff = 2048  # paper 3.3: inner FFN width
    m.dropout_rate = 0.1  # paper 5.4: P_drop (sublayer outputs, embeddings + positions)
    m.attention_dropout_rate = 0.0  # dropout on attention weights (tensor2tensor option)
    m.relu_dropout_rate = 0.0  # dropout on the FFN hidden layer (tensor2tensor option)
    m.positional = "sinusoidal"  # paper 3.5; or sinusoidal_concat | learned | relative
    m.relative_clip = 16  # positional="relative": Shaw et al. (2018)'s clip distance k
    # None: self-attention over every position; w: at most w positions away (causal: w back)
    m.attention_window = ml_collections.config_dict.placeholder(int)
    m.max_len = 256  # positions covered (tokens)
    m.norm = "post"  # paper 3.1: LayerNorm(x + Sublayer(x)); "pre" normalises the input
    m.activation = "relu"  # paper 3.3; or gelu
    m.share_embeddings = True  # paper 3.4: source and target share one embedding
    m.tie_output = True  # paper 3.4: pre-softmax projection = embedding^T
    m.output_bias = False  # a learned bias [V] on tied logits (Marian's final_logits_bias)
    m.layer_norm_epsilon = 1e-6
    m.dtype = "float32"  # activations dtype inside the model (train.compute_dtype sets it)
    m.ops = "auto"  # plain: stock JAX/Flax | cpu: jformer.kernels' CPU set | auto: by platform
    m.decoder_start = "bos"  # the decoder's first input: bos (paper) | pad (Marian)
    m.pad_id = 0  # tokenizer sets it
    m.bos_id = 2  # tokenizer sets it
    m.eos_id = 3  # tokenizer sets it

    c.data = d = ml_collections.ConfigDict()
    d.source = "tfds"  # demo | text | tfds
    d.src_lang = "en"
    d.tgt_lang = "de"
    d.tfds_name = "wmt14_translate/de-en"  # paper 5.1: WMT 2014 English-German
    d.tfds_data_dir = ""  # empty: TFDS default
    d.tfds_train_split = "train"
    d.tfds_eval_split = "validation"  # newstest2013 (paper 6.2 uses it as dev)
    d.tfds_test_split = "test"  # newstest2014
    d.text_pattern = ""  # for source=text: e.g. "data/{split}.{lang}"
    d.text_format = "text"  # text | tsv (source<TAB>target)
    d.train_split = "train"
    d.eval_split = "valid"
    d.test_split = "test"
    d.demo_seed = 0
    d.demo_num_train = 40000
    d.demo_num_eval = 1000
    d.demo_num_test = 1000
    d.vocab = "shared"  # one sentencepiece model for both sides | separate (Marian's)
    d.vocab_size = 37000  # paper 5.1: ~37000 shared BPE tokens
    d.vocab_model_type = "bpe"  # bpe | unigram | char (README: Choosing a vocabulary)
    d.vocab_character_coverage = 1.0
    d.vocab_sample_size = 1_000_000  # sentences used to learn the vocabulary
    d.vocab_path = ""  # empty: <workdir>/spm.model (trained when missing)
    d.max_source_len = 256  # tokens incl. EOS; longer pairs are dropped (or truncated)
    d.max_target_len = 256
    d.overlong = "drop"  # drop | truncate
    d.max_tokens = 25000  # paper 5.1: ~25000 source + 25000 target tokens per batch
    d.pack = False  # pack several pairs per row
    d.pack_len = 256  # row length when packing
    d.shuffle_buffer = 0
    d.encoded_cache = True  # keep the train split encoded in <workdir>/data (memory-mapped)
    d.subword_dropout = 0.0  # BPE-dropout of the train split, fresh every epoch; 0: off
    d.seed = 0

    c.train = t = ml_collections.ConfigDict()
    t.seed = 0
    t.num_steps = 100_000  # paper 5.2: base trained 100k steps
    t.max_minutes = 0.0  # wall-clock budget (data, compile, steps, evaluations); 0 = none
    t.warmup_steps = 4000  # paper 5.3
    t.schedule = "rsqrt"  # rsqrt (paper eq. 3) | linear (BERT: warm-up, then linear to 0)
    t.learning_rate = 1e-4  # peak rate of the linear schedule; rsqrt: unused
    t.learning_rate_scale = 1.0  # lrate = scale * d_model^-0.5 * min(step^-0.5, step*warmup^-1.5)
    t.adam_b1 = 0.9  # paper 5.3
    t.adam_b2 = 0.98  # paper 5.3
    t.adam_eps = 1e-9  # paper 5.3
    t.weight_decay = 0.0
    t.weight_decay_mask = "all"  # all | matrices (no decay of biases and LayerNorms)
    t.label_smoothing = 0.1  # paper 5.4: eps_ls
    t.grad_clip_norm = 0.0  # global-norm clipping; 0 disables
    t.accum_steps = 1  # micro-batches accumulated per optimizer update
    t.parallelism = "shard_map"  # shard_map (jit over a 'data' mesh) | pmap
    # float32 | bfloat16 (params, optimizer state stay float32) | auto (bfloat16 where the
    # devices compute it natively, else float32; jformer/train/precision.py)
    t.compute_dtype = "float32"
    t.log_every = 100  # steps
    t.eval_every = 5000  # steps
    t.eval_bleu_sentences = 1000  # validation sentences decoded for BLEU; 0 = all
    t.checkpoint_every = 5000  # steps (paper 6.1: checkpoints every 10 minutes)
    t.keep_checkpoints = 5  # paper 6.1: average of the last 5 checkpoints
    # also keep the K of best validation best_metric, every evaluated step checkpointed
    # (jformer average-checkpoints --best K); 0: only the last keep_checkpoints
    t.keep_best = 0
    t.best_metric = "bleu"  # bleu (higher is better) | loss (lower): keep_best, early stop
    t.early_stop_evals = 0  # stop once N validations in a row missed the best; 0: never
    t.ema_decay = 0.0  # moving average of the params (validation and readers use it); 0: none
    t.async_checkpoints = True
    t.coordinator_address = ""  # host:port for multi-host; empty = single process
    t.num_processes = 1
    t.process_id = 0

    c.decode = e = ml_collections.ConfigDict()
    e.beam_size = 4  # paper 6.1
    e.alpha = 0.6  # paper 6.1: length penalty
    e.max_len_a = 1.0  # max output length = a * source length + b
    e.max_len_b = 50  # paper 6.1: input length + 50
    e.temperature = 1.0  # sampling only
    e.top_k = 0  # sampling only; 0 = full distribution
    e.batch_size = 64  # sentences per decode batch
    e.length_buckets = (16, 32, 64, 128, 256)  # source lengths are padded up to these
    e.overlong = "split"  # sources over model.max_len: split (translated whole) | truncate | error
    e.memory_limit = "0"  # "2GB", "512MiB" or bytes: the most one decode batch's KV cache
    # may take per device (batches shrink to fit); "0" = no limit. A string, so that
    # --config.decode.memory_limit=2GB overrides it
    e.eos_candidates = "top_w"  # beam: the W best may finish (fairseq, CT2) | all: the 2W
    e.stop = "full"  # beam: done once beam_size finished (or exact holds) | exact: once
    # nothing alive can win
    e.shrink_floor = 8  # batches drop finished sentences in halving stages to this; 0: never
    e.continuous = False  # beam search refills each device's slots as sentences finish
    e.dtype = "auto"  # auto (float32 on a CPU) | model | float32 | bfloat16 | int8
    # word alignments: the decoder layer whose cross-attention is read and its head
    # (None: the last layer; the mean over heads)
    e.alignment_layer = ml_collections.config_dict.placeholder(int)
    e.alignment_head = ml_collections.config_dict.placeholder(int)
    e.shortlist = ""  # a vocabulary shortlist file (jformer shortlist); "": none
    return c
