"""Config sections of encoder pretraining and fine-tuning (and of warm starts).

``task`` says what a run trains (translation, the pretraining objectives, or a
fine-tuning head) and which pretraining checkpoint it starts from; ``bert`` holds the
encoder-only model's own choices; ``pretrain`` and ``finetune`` their data. All are
optional in a config: config.json files of translation runs have none of them.
"""
from __future__ import annotations

import dataclasses

from jformer.config.fields import (check, check_choice, check_number, check_positive,
                                   check_rate, is_int, is_number)

TASK_KINDS = ("translation", "pretrain", "classify", "tag", "span")


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """What a run trains, and the checkpoint it may start from."""

    kind: str = "translation"  # translation | pretrain (MLM + NSP) | classify | tag | span
    init_from: str = ""  # a pretraining workdir whose encoder (and embedding) start this run
    init_step: int = 0  # its checkpoint step (0: the latest)

    def __post_init__(self) -> None:
        check_choice("task", "kind", self.kind, TASK_KINDS)
        check(is_int(self.init_step) and self.init_step >= 0, "task.init_step",
              "an int >= 0 (0: the latest checkpoint)", self.init_step)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The encoder-only model's own choices (jformer.model.bert; BERT paper 3.1, A.2)."""

    type_vocab_size: int = 2  # segment (token-type) embeddings; 0: none
    embedding_norm: bool = True  # LayerNorm over token + position + segment embeddings
    scale_embeddings: bool = False  # token lookups x sqrt(d_model), as the translation model
    init_std: float = 0.02  # truncated-normal std of every weight matrix; 0: jformer's inits
    pooler: bool = True  # tanh(W h_[CLS] + b) feeds NSP and classification; False: h_[CLS]
    num_labels: int = 2  # classes or tags of a fine-tuning head; set from the labels

    def __post_init__(self) -> None:
        check(is_int(self.type_vocab_size) and self.type_vocab_size >= 0,
              "bert.type_vocab_size", "an int >= 0 (0: no segment embeddings)",
              self.type_vocab_size)
        check_number("bert", "init_std", self.init_std, 0, note=" (0: jformer's initialisers)")
        check_positive("bert", "num_labels", self.num_labels)


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Masked LM + next-sentence examples (google-research/bert create_pretraining_data)."""

    source: str = "demo"  # demo (jformer.data.demo.documents) | text
    train_files: tuple[str, ...] = ()  # one sentence per line, a blank line between documents
    eval_files: tuple[str, ...] = ()
    demo_seed: int = 0
    demo_num_train: int = 20000  # documents
    demo_num_eval: int = 400
    max_seq_len: int = 128  # tokens, [CLS] and [SEP]s included
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1  # chance of a shorter target length
    whole_word_mask: bool = False  # mask all pieces of a word (sentencepiece's word starts)
    next_sentence: bool = True  # NSP: B is a random segment half the time; False: MLM only
    batch_size: int = 256  # sequences per global batch

    def __post_init__(self) -> None:
        s = "pretrain"
        check_choice(s, "source", self.source, ("demo", "text"))
        for name in ("demo_num_train", "demo_num_eval", "max_predictions_per_seq",
                     "batch_size"):
            check_positive(s, name, getattr(self, name))
        check(is_int(self.max_seq_len) and self.max_seq_len >= 5, f"{s}.max_seq_len",
              "an int >= 5 ([CLS] A [SEP] B [SEP] with a token in A and B)", self.max_seq_len)
        check(is_number(self.masked_lm_prob) and 0 < self.masked_lm_prob < 1,
              f"{s}.masked_lm_prob", "a rate in (0, 1)", self.masked_lm_prob)
        check_rate(s, "short_seq_prob", self.short_seq_prob)


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """Labelled examples for the classify / tag / span heads (jformer.data.finetuning)."""

    source: str = "demo"  # demo (from demo documents) | files | bitext (data.text_pattern)
    train_file: str = ""  # files: TSV, see jformer.data.finetuning for each kind's columns
    eval_file: str = ""
    test_file: str = ""  # optional: the final evaluation also scores it
    labels: tuple[str, ...] = ()  # class or tag names; empty: those of the train file, sorted
    demo_seed: int = 0
    demo_num_train: int = 1000  # documents
    demo_num_eval: int = 200
    demo_num_test: int = 200
    bitext_seed: int = 0  # which length-matched sentence each false pair takes
    max_seq_len: int = 128
    max_answer_len: int = 30  # span: longest answer predicted, in tokens
    batch_size: int = 32  # examples per global batch

    def __post_init__(self) -> None:
        s = "finetune"
        check_choice(s, "source", self.source, ("demo", "files", "bitext"))
        for name in ("demo_num_train", "demo_num_eval", "demo_num_test", "max_answer_len",
                     "batch_size"):
            check_positive(s, name, getattr(self, name))
        check(is_int(self.max_seq_len) and self.max_seq_len >= 4, f"{s}.max_seq_len",
              "an int >= 4", self.max_seq_len)

