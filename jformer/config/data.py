"""Where the parallel text comes from, its vocabulary, and how it is batched."""
from __future__ import annotations

import dataclasses

from jformer.config.fields import check, check_choice, check_positive, is_number

VOCABS = ("shared", "separate")
# sentencepiece's models: bpe (merges), unigram (a piece language model), char (one piece
# per character: vocab_size only caps it, the rarest characters fall back to bytes)
VOCAB_MODEL_TYPES = ("bpe", "unigram", "char")


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
    vocab_model_type: str = "bpe"  # bpe | unigram | char (README: Choosing a vocabulary)
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
    # keep the train split encoded in <workdir>/data, memory-mapped by later starts and by
    # every host (jformer.data.encoded_cache); False: read and encode it on every start
    encoded_cache: bool = True
    # subword regularization of the train split: every epoch segments each sentence
    # afresh, a BPE model dropping each merge with this probability (BPE-dropout), a
    # unigram model sampling with this smoothing (jformer.data.resegment); 0: one fixed
    # segmentation. Reads the split into memory on every start (no encoded cache).
    subword_dropout: float = 0.0
    seed: int = 0  # shuffling seed

    def __post_init__(self) -> None:
        s = "data"
        check_choice(s, "source", self.source, ("demo", "text", "tfds"))
        check_choice(s, "text_format", self.text_format, ("text", "tsv"))
        check_choice(s, "vocab_model_type", self.vocab_model_type, VOCAB_MODEL_TYPES)
        check_choice(s, "vocab", self.vocab, VOCABS)
        check_choice(s, "overlong", self.overlong, ("drop", "truncate"))
        for name in ("vocab_size", "max_source_len", "max_target_len", "max_tokens",
                     "pack_len", "demo_num_train", "demo_num_eval", "demo_num_test"):
            check_positive(s, name, getattr(self, name))
        check(is_number(self.subword_dropout) and 0.0 <= self.subword_dropout < 1.0,
              f"{s}.subword_dropout", "a probability in [0, 1)", self.subword_dropout)
        check(is_number(self.vocab_character_coverage)
              and 0.0 < self.vocab_character_coverage <= 1.0, f"{s}.vocab_character_coverage",
              "a fraction in (0, 1]", self.vocab_character_coverage)

