"""Typed, validated configuration built once from an ``ml_collections`` ConfigDict.

``configs/*.py`` hold the ConfigDicts (configs as code, overridable from the
command line). Library modules never see a ConfigDict: they receive the frozen
dataclasses below, built by :func:`from_config_dict`, which checks every value and
raises ``ValueError`` naming the offending field.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from jformer.config_fields import JAX_SEED_LIMIT  # noqa: F401 (re-exported)
from jformer.config_fields import ConfigError  # noqa: F401 (re-exported)
from jformer.config_fields import check as _check
from jformer.config_fields import check_choice as _check_choice
from jformer.config_fields import check_number as _check_number
from jformer.config_fields import check_positive as _check_positive
from jformer.config_fields import check_rate as _check_rate
from jformer.config_fields import check_seed as _check_seed
from jformer.config_fields import is_int as _is_int
from jformer.config_fields import is_number as _is_number
from jformer.encoder_config import BertConfig, FinetuneConfig, PretrainConfig, TaskConfig
from jformer.units import parse_bytes  # noqa: F401 (re-exported)

POSITIONAL_KINDS = ("sinusoidal", "sinusoidal_concat", "learned")
NORM_KINDS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu", "gelu_exact", "swish")
DECODER_STARTS = ("bos", "pad")
VOCABS = ("shared", "separate")
DTYPES = ("float32", "bfloat16")
SCHEDULES = ("rsqrt", "linear")
KERNELS = ("auto", "plain", "cpu")
OVERLONG_POLICIES = ("split", "truncate", "error")
# Beam search: which of a step's 2W candidates may finish with EOS (jformer.search.beam)
EOS_CANDIDATES = ("all", "top_w")


def resolve_kernels(kernels: str, platform: str | None = None) -> str:
    """``model.kernels`` for a platform: "auto" is "cpu" on the CPU backend and "plain"
    elsewhere; platform None is the default backend (``jax.default_backend()``)."""
    if kernels != "auto":
        return kernels
    if platform is None:
        import jax  # the one place config needs it, to read the default backend

        platform = jax.default_backend()
    return "cpu" if platform == "cpu" else "plain"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of the encoder-decoder Transformer (paper, Table 3)."""

    vocab_size: int = 32000  # shared subword vocabulary (paper 5.1); set from the tokenizer
    d_model: int = 512  # model width (paper 3, d_model)
    num_heads: int = 8  # attention heads (paper 3.2.2, h)
    num_encoder_layers: int = 6  # N (paper 3.1)
    num_decoder_layers: int = 6  # N (paper 3.1)
    d_ff: int = 2048  # inner width of the position-wise FFN (paper 3.3)
    dropout_rate: float = 0.1  # P_drop on sublayer outputs and embeddings (paper 5.4)
    attention_dropout_rate: float = 0.0  # dropout on attention weights (tensor2tensor)
    relu_dropout_rate: float = 0.0  # dropout on the FFN hidden layer (tensor2tensor)
    positional: str = "sinusoidal"  # sinusoidal | sinusoidal_concat | learned (paper 3.5)
    max_len: int = 256  # longest sequence the positional table covers
    norm: str = "post"  # post (paper: LayerNorm(x + Sublayer(x))) | pre
    activation: str = "relu"  # FFN: relu (paper 3.3) | gelu (tanh form) | gelu_exact | swish
    share_embeddings: bool = True  # one embedding for source and target (paper 3.4)
    tie_output: bool = True  # output projection = target embedding^T (paper 3.4)
    output_bias: bool = False  # a learned bias [V] on tied logits (Marian's final_logits_bias)
    layer_norm_epsilon: float = 1e-6
    dtype: str = "float32"  # compute dtype; parameters stay float32
    kernels: str = "auto"  # plain: stock JAX/Flax ops | cpu: jformer.kernels | auto: by platform
    pad_id: int = 0  # from the tokenizer
    bos_id: int = 2  # from the tokenizer; -1: the vocabulary has none (Marian's)
    eos_id: int = 3  # from the tokenizer
    decoder_start: str = "bos"  # the decoder's first input: bos (paper) | pad (Marian)

    def __post_init__(self) -> None:
        s = "model"
        for name in ("vocab_size", "d_model", "num_heads", "num_encoder_layers",
                     "num_decoder_layers", "d_ff", "max_len"):
            _check_positive(s, name, getattr(self, name))
        _check(self.d_model % self.num_heads == 0, f"{s}.d_model",
               f"a multiple of model.num_heads={self.num_heads}", self.d_model)
        for name in ("dropout_rate", "attention_dropout_rate", "relu_dropout_rate"):
            _check_rate(s, name, getattr(self, name))
        _check_choice(s, "positional", self.positional, POSITIONAL_KINDS)
        _check_choice(s, "norm", self.norm, NORM_KINDS)
        _check_choice(s, "activation", self.activation, ACTIVATIONS)
        _check_choice(s, "decoder_start", self.decoder_start, DECODER_STARTS)
        _check(not (self.output_bias and not self.tie_output), f"{s}.output_bias", "False "
               "with model.tie_output=False (an untied projection has its own bias)", True)
        _check_choice(s, "dtype", self.dtype, DTYPES)
        _check_choice(s, "kernels", self.kernels, KERNELS)
        _check_number(s, "layer_norm_epsilon", self.layer_norm_epsilon, 0, strict=True)
        if self.positional != "learned":
            _check(self.d_model % 2 == 0, f"{s}.d_model", "even for sinusoidal positions",
                   self.d_model)
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            none = name == "bos_id" and value == -1 and self.decoder_start == "pad"
            _check(none or 0 <= value < self.vocab_size, f"{s}.{name}", f"an id in [0, "
                   f"vocab_size={self.vocab_size})" + (" (-1, no BOS, needs model.decoder_"
                   "start='pad')" if name == "bos_id" else ""), value)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def start_id(self) -> int:
        """The decoder's first input token: bos_id, or pad_id with decoder_start="pad"."""
        return self.pad_id if self.decoder_start == "pad" else self.bos_id

    @property
    def cpu_kernels(self) -> bool:
        """Whether the model runs jformer.kernels (``kernels`` resolved for the default
        backend when "auto")."""
        return resolve_kernels(self.kernels) == "cpu"

    def for_platform(self, platform: str) -> "ModelConfig":
        """This config with ``kernels`` resolved for ``platform`` ("cpu", "cuda", "tpu"):
        what a program lowered for that platform runs (``jax.export``)."""
        return dataclasses.replace(self, kernels=resolve_kernels(self.kernels, platform))


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it is batched."""

    source: str = "demo"  # demo | text | tfds
    src_lang: str = "en"
    tgt_lang: str = "de"
    # tfds
    tfds_name: str = "wmt14_translate/de-en"
    tfds_data_dir: str = ""  # empty: TFDS default (~/tensorflow_datasets)
    tfds_train_split: str = "train"
    tfds_eval_split: str = "validation"
    tfds_test_split: str = "test"
    # plain text / tsv files: paths with {split} and {lang} placeholders, or a .tsv
    text_pattern: str = ""  # e.g. "data/{split}.{lang}" or "data/{split}.{lang}.gz"
    text_format: str = "text"  # text | tsv
    train_split: str = "train"
    eval_split: str = "valid"
    test_split: str = "test"
    # built-in demo corpus
    demo_seed: int = 0
    demo_num_train: int = 40000
    demo_num_eval: int = 1000
    demo_num_test: int = 1000
    # vocabulary (sentencepiece): shared: one model for both sides (spm.model) | separate:
    # source.spm + target.spm, their pieces mapped through one joint vocab.json (Marian)
    vocab: str = "shared"
    vocab_size: int = 8000  # pieces (with "separate": of each side's model)
    vocab_model_type: str = "bpe"  # bpe | unigram
    vocab_character_coverage: float = 1.0
    vocab_sample_size: int = 1_000_000  # sentences sampled to train the vocabulary (0: all)
    vocab_path: str = ""  # empty: <workdir>/spm.model (separate: <workdir>), trained if absent
    # length filtering and batching
    max_source_len: int = 128  # tokens incl. EOS
    max_target_len: int = 128  # tokens incl. EOS
    overlong: str = "drop"  # drop | truncate
    max_tokens: int = 4096  # token budget per global batch (max(src, tgt) x rows)
    pack: bool = False  # pack several pairs per row (segment ids + positions)
    pack_len: int = 128  # row length when packing
    shuffle_buffer: int = 0  # must stay 0 (training checks): the epoch plan shuffles fully
    seed: int = 0  # shuffling seed

    def __post_init__(self) -> None:
        s = "data"
        _check_choice(s, "source", self.source, ("demo", "text", "tfds"))
        _check_choice(s, "text_format", self.text_format, ("text", "tsv"))
        _check_choice(s, "vocab_model_type", self.vocab_model_type, ("bpe", "unigram"))
        _check_choice(s, "vocab", self.vocab, VOCABS)
        _check_choice(s, "overlong", self.overlong, ("drop", "truncate"))
        for name in ("vocab_size", "max_source_len", "max_target_len", "max_tokens",
                     "pack_len", "demo_num_train", "demo_num_eval", "demo_num_test"):
            _check_positive(s, name, getattr(self, name))
        _check(_is_number(self.vocab_character_coverage)
               and 0.0 < self.vocab_character_coverage <= 1.0, f"{s}.vocab_character_coverage",
               "a fraction in (0, 1]", self.vocab_character_coverage)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation, schedule, checkpointing and evaluation (paper, section 5)."""

    seed: int = 0
    num_steps: int = 100_000  # paper 5.2: 100k steps for base
    max_minutes: float = 0.0  # wall-clock budget per run of train() (0: none); stops early
    warmup_steps: int = 4000  # paper 5.3
    schedule: str = "rsqrt"  # rsqrt (paper eq. 3) | linear (BERT: warm-up, then linear to 0)
    learning_rate_scale: float = 1.0  # multiplies d_model^-0.5 * min(...) (paper eq. 3)
    learning_rate: float = 1e-4  # peak rate of the linear schedule (BERT 1e-4); rsqrt: unused
    adam_b1: float = 0.9  # paper 5.3
    adam_b2: float = 0.98  # paper 5.3
    adam_eps: float = 1e-9  # paper 5.3
    weight_decay: float = 0.0
    weight_decay_mask: str = "all"  # all | kernels (BERT: no decay of biases and LayerNorms)
    label_smoothing: float = 0.1  # paper 5.4
    grad_clip_norm: float = 0.0  # 0: no clipping
    accum_steps: int = 1  # gradient accumulation micro-batches per update
    parallelism: str = "shard_map"  # shard_map | pmap
    compute_dtype: str = "float32"  # float32 | bfloat16 (params and opt state stay f32)
    log_every: int = 50  # steps between progress/TensorBoard scalars
    eval_every: int = 1000  # steps between validation loss + BLEU
    eval_bleu_sentences: int = 500  # validation sentences decoded for BLEU (0: all)
    checkpoint_every: int = 1000  # steps between checkpoints
    keep_checkpoints: int = 5  # last K kept (paper averages the last 5)
    async_checkpoints: bool = True
    # multi-host (jax.distributed.initialize); empty address: single process
    coordinator_address: str = ""
    num_processes: int = 1
    process_id: int = 0

    def __post_init__(self) -> None:
        s = "train"
        for name in ("num_steps", "accum_steps", "log_every", "eval_every",
                     "checkpoint_every", "keep_checkpoints", "num_processes"):
            _check_positive(s, name, getattr(self, name))
        _check(_is_int(self.warmup_steps) and self.warmup_steps >= 0, f"{s}.warmup_steps",
               "an int >= 0", self.warmup_steps)
        _check_number(s, "max_minutes", self.max_minutes, 0, note=" (0: no budget)")
        _check_rate(s, "label_smoothing", self.label_smoothing)
        _check_choice(s, "parallelism", self.parallelism, ("shard_map", "pmap"))
        _check_choice(s, "schedule", self.schedule, SCHEDULES)
        _check_choice(s, "weight_decay_mask", self.weight_decay_mask, ("all", "kernels"))
        _check_number(s, "learning_rate", self.learning_rate, 0, strict=True)
        _check_choice(s, "compute_dtype", self.compute_dtype, DTYPES)
        _check_number(s, "learning_rate_scale", self.learning_rate_scale, 0, strict=True)
        _check(_is_int(self.process_id) and 0 <= self.process_id < self.num_processes,
               f"{s}.process_id",
               f"in [0, num_processes={self.num_processes})", self.process_id)


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """Search settings used by evaluation and ``jformer translate``."""

    beam_size: int = 4  # paper 6.1
    alpha: float = 0.6  # length penalty ((5 + len) / 6)^alpha (paper 6.1)
    max_len_a: float = 1.0  # max output length = a * source length + b (fairseq)
    max_len_b: int = 50  # paper 6.1: input length + 50
    temperature: float = 1.0  # for sampling
    top_k: int = 0  # for sampling; 0: full distribution
    batch_size: int = 64  # sentences per decode batch
    length_buckets: tuple[int, ...] = (16, 32, 64, 128, 256)  # padded source lengths
    # Sources over model.max_len: split (at sentences, clauses, whitespace; translated
    # whole, jformer.inference.segment) | truncate (with a warning) | error
    overlong: str = "split"
    # Most bytes one decode batch's KV cache may take on one device (an int, or a string
    # such as "2GB" or "512MiB"; 0: no limit): batches are cut to fewer rows to fit it
    # (jformer.inference.memory.cache_bytes).
    memory_limit: int | str = 0
    # Beam search: which EOS candidates finish. all: any of the step's 2W best (Flax WMT,
    # T5X) | top_w: only those among the W best (fairseq, Hugging Face, CTranslate2,
    # Marian; gives their outputs exactly). jformer.search.beam says more.
    eos_candidates: str = "all"
    # model: decode in model.dtype | float32 | bfloat16: bf16 weight matrices, activations
    # and KV cache (jformer.inference.precision; its BLEU cost: docs/results.md)
    dtype: str = "model"

    def __post_init__(self) -> None:
        s = "decode"
        _check_choice(s, "dtype", self.dtype, ("model",) + DTYPES)
        _check_positive(s, "beam_size", self.beam_size)
        _check_positive(s, "batch_size", self.batch_size)
        _check_number(s, "alpha", self.alpha, 0)
        _check_number(s, "temperature", self.temperature, 0, strict=True)
        _check(_is_int(self.top_k) and self.top_k >= 0, f"{s}.top_k", "an int >= 0 (0: full "
               "distribution)", self.top_k)
        buckets = self.length_buckets
        _check(isinstance(buckets, (tuple, list)) and len(buckets) > 0
               and all(_is_int(b) and b > 0 for b in buckets) and list(buckets) == sorted(buckets),
               f"{s}.length_buckets", "a non-empty increasing tuple of positive ints", buckets)
        _check_choice(s, "overlong", self.overlong, OVERLONG_POLICIES)
        _check_choice(s, "eos_candidates", self.eos_candidates, EOS_CANDIDATES)
        try:
            parse_bytes(self.memory_limit)
        except ValueError as e:
            raise ConfigError(f"config field '{s}.memory_limit': {e}") from None
        # Max output tokens of a source bucket: max(1, ceil(a * bucket + b)) (translate.
        # output_len). Sources shorter than the smallest bucket are padded to it, so the
        # rule must give that bucket a token: below, the max(1, ...) would silently cut
        # every short sentence to one token.
        _check_number(s, "max_len_a", self.max_len_a, 0)
        _check(_is_int(self.max_len_b), f"{s}.max_len_b", "an int", self.max_len_b)
        shortest = buckets[0]
        _check(math.ceil(self.max_len_a * shortest + self.max_len_b) >= 1, f"{s}.max_len_b",
               f"ceil(decode.max_len_a * {shortest} + decode.max_len_b) >= 1, at least one "
               f"output token for the shortest source bucket (decode.length_buckets[0]="
               f"{shortest}, decode.max_len_a={self.max_len_a})", self.max_len_b)

    @property
    def memory_limit_bytes(self) -> int:
        """decode.memory_limit in bytes (0: no limit)."""
        return parse_bytes(self.memory_limit)


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    decode: DecodeConfig
    # Encoder pretraining and fine-tuning (and task.init_from for translation); optional:
    # config.json files of translation runs have none of them.
    task: TaskConfig = TaskConfig()
    bert: BertConfig = BertConfig()
    pretrain: PretrainConfig = PretrainConfig()
    finetune: FinetuneConfig = FinetuneConfig()


_SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig,
             "decode": DecodeConfig, "task": TaskConfig, "bert": BertConfig,
             "pretrain": PretrainConfig, "finetune": FinetuneConfig}
_OPTIONAL_SECTIONS = ("task", "bert", "pretrain", "finetune")


def _build(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown config field(s) {', '.join(f'{section}.{u}' for u in unknown)}"
                          f"; known fields: {', '.join(sorted(known))}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            v = values[f.name]
            kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kwargs)


def from_config_dict(cfg: Mapping[str, Any], **model_overrides: Any) -> Config:
    """Builds and validates a :class:`Config` from a ConfigDict (or nested dict).

    ``model_overrides`` (e.g. ``vocab_size``, ``pad_id`` from the tokenizer) replace
    model fields before validation.
    """
    raw = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"unknown config section(s) {unknown}; known: {sorted(_SECTIONS)}")
    parts = {}
    for name, cls in _SECTIONS.items():
        values = dict(raw.get(name, {}))
        if name == "model":
            values.update(model_overrides)
        parts[name] = _build(name, cls, values)
    return Config(**parts)


def check_training_config(config: Config) -> None:
    """Checks that matter only to a training run (a config.json loaded for inference
    skips them, so workdirs written by older versions keep loading): fields that only
    training reads (data sampling and seeds, the optimiser, validation BLEU)."""
    d, t = config.data, config.train
    _check(d.shuffle_buffer == 0, "data.shuffle_buffer",
           "0 (batches are shuffled over the whole in-memory epoch; a buffer size would "
           "have no effect)", d.shuffle_buffer)
    _check(_is_int(d.vocab_sample_size) and d.vocab_sample_size >= 0, "data.vocab_sample_size",
           "an int >= 0 (0: all sentences)", d.vocab_sample_size)
    _check_seed("data", "seed", d.seed)
    _check_seed("data", "demo_seed", d.demo_seed)
    _check_seed("train", "seed", t.seed, JAX_SEED_LIMIT)
    for name in ("adam_b1", "adam_b2"):  # Adam's decay rates; 1 would never forget
        _check(_is_number(getattr(t, name)) and 0 <= getattr(t, name) < 1, f"train.{name}",
               "a number in [0, 1)", getattr(t, name))
    _check_number("train", "adam_eps", t.adam_eps, 0, strict=True)  # 0: 0/0 on zero grads
    _check_number("train", "weight_decay", t.weight_decay, 0, note=" (0: none)")
    _check_number("train", "grad_clip_norm", t.grad_clip_norm, 0, note=" (0: no clipping)")
    _check(_is_int(t.eval_bleu_sentences) and t.eval_bleu_sentences >= 0,
           "train.eval_bleu_sentences", "an int >= 0 (0: all validation sentences)",
           t.eval_bleu_sentences)
    check_coordinator(config.train)


def check_coordinator(t: TrainConfig) -> None:
    """A multi-process run needs train.coordinator_address (else every host would run
    as process 0 alone)."""
    if not t.coordinator_address:
        _check(t.num_processes == 1 and t.process_id == 0, "train.coordinator_address",
               f"host:port of process 0 when train.num_processes={t.num_processes} and "
               f"train.process_id={t.process_id} ask for a multi-process run",
               t.coordinator_address)


def to_dict(config: Config) -> dict[str, Any]:
    """Plain nested dict of a :class:`Config` (for writing next to checkpoints).

    A translation run leaves out the encoder-pretraining sections that hold their
    defaults, so its config.json is what it was before they existed."""
    out = dataclasses.asdict(config)
    if config.task.kind == "translation":
        for name in _OPTIONAL_SECTIONS:
            if getattr(config, name) == _SECTIONS[name]():
                del out[name]
    return out
