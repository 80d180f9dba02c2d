"""Subword tokenizer: a thin, validated wrapper around sentencepiece.

Shared (``data.vocab = "shared"``): one model and its ids for source and target (paper
5.1). Separate (``"separate"``, Marian's layout): a source and a target model whose
pieces one joint vocabulary numbers (:mod:`jformer.data.joint_vocab`); ``encode`` reads
the source side and ``decode`` writes the target side unless told ``side=``. Both kinds
have one interface, so the Translator, the data pipeline and the server need no special
case; :meth:`Tokenizer.load` tells them apart (a model file, or a folder holding
source.spm, target.spm and vocab.json). Models are trained with
``pad_id=0, unk_id=1, bos_id=2, eos_id=3`` and byte fallback, so no input is ever out of
vocabulary (unknown characters become UTF-8 byte pieces); the ids are nevertheless read
back from the loaded model, never assumed.

Model types (``MODEL_TYPES``): ``"bpe"`` learns merges of adjacent symbols, ``"unigram"``
a piece language model, ``"char"`` one piece per character of the corpus (those within
``character_coverage``); byte fallback is on for all three, so a character a model lacks
becomes its UTF-8 byte pieces and decodes back exactly.

Vocabulary size is a hard limit: training gives exactly ``vocab_size`` pieces or raises
a ``ValueError`` saying how large the corpus allows it to be (sentencepiece's soft limit
would silently give a smaller vocabulary than the config asks for; pass
``hard_vocab_limit=False`` to accept that). A char model has at most the special, byte
and character pieces; a smaller ``vocab_size`` keeps the most frequent characters.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import re
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from jformer.config import VOCAB_MODEL_TYPES
from jformer.data import joint_vocab, spm_calls
from jformer.data.joint_vocab import SIDES, JointVocab
from jformer.workdir import files
from jformer.workdir.files import write_atomically

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # used only when training a model
WORD_START = "\u2581"  # sentencepiece's marker of a piece that begins a word
NUM_BYTE_PIECES = 256
NUM_SPECIAL = 4
MODEL_TYPES = VOCAB_MODEL_TYPES  # ("bpe", "unigram", "char")

_log = logging.getLogger(__name__)


def _default_threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _sample(sentences: Sequence[str], sample_size: int, seed: int) -> list[str]:
    """A deterministic sample of at most sample_size non-empty sentences, in corpus order."""
    if sample_size <= 0 or len(sentences) <= sample_size:
        return [s for s in sentences if s]
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(sentences), size=sample_size, replace=False))
    return [sentences[i] for i in keep if sentences[i]]


def training_record(sentences: Sequence[str], vocab_size: int, model_type: str = "bpe",
                    character_coverage: float = 1.0, sample_size: int = 1_000_000,
                    seed: int = 0, user_defined_symbols: Sequence[str] = ()) -> dict:
    """What :meth:`Tokenizer.train` with these arguments learns from: its settings, the
    number of sentences it draws and their SHA-256. Training is deterministic, so equal
    records mean the same model; a saved record tells whether an existing model was
    learned from the corpus and settings at hand. ``user_defined_symbols`` are recorded
    only when there are some (records of models without them keep their keys)."""
    corpus = _sample(list(sentences), sample_size, seed)
    digest = hashlib.sha256()
    for sentence in corpus:  # length-prefixed: sentences may hold any character
        data = sentence.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    record = {"vocab_size": vocab_size, "model_type": model_type,
              "character_coverage": float(character_coverage), "sentences": len(corpus),
              "sha256": digest.hexdigest()}
    if user_defined_symbols:
        record["user_defined_symbols"] = list(user_defined_symbols)
    return record


class Tokenizer:
    """A loaded sentencepiece model, or two through a joint vocabulary (``joint``).
    Build with :meth:`train`, :meth:`train_separate` or :meth:`load`."""

    def __init__(self, processor: spm.SentencePieceProcessor, path: str = "", *,
                 joint: JointVocab | None = None):
        self._sp = processor  # the shared model, or the source side's
        self._joint = joint
        self.path = path
        if joint is None and (self._sp.eos_id() < 0 or self._sp.pad_id() < 0):
            raise ValueError(f"sentencepiece model {path or '<memory>'} must define EOS and "
                             f"PAD ids; got eos_id={self._sp.eos_id()}, "
                             f"pad_id={self._sp.pad_id()}")

    # ------------------------------------------------------------------ construction
    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """A sentencepiece model file, or a folder with source.spm, target.spm and
        vocab.json (``files.tokenizer_path`` gives the one a workdir uses)."""
        path = os.fspath(path)
        if os.path.isdir(path):
            return cls.load_separate(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"sentencepiece model not found: {path}")
        processor = spm.SentencePieceProcessor()
        try:
            processor.Load(path)
        except (OSError, RuntimeError) as e:
            raise ValueError(f"cannot load sentencepiece model {path}: {e}") from e
        return cls(processor, path)

    @classmethod
    def train(cls, sentences: Iterable[str], model_prefix: str | os.PathLike,
              vocab_size: int, model_type: str = "bpe", character_coverage: float = 1.0,
              sample_size: int = 1_000_000, seed: int = 0, hard_vocab_limit: bool = True,
              num_threads: int | None = None, suffix: str = ".model",
              user_defined_symbols: Sequence[str] = ()) -> "Tokenizer":
        """Trains a model on ``sentences`` and writes ``<model_prefix><suffix>`` and
        ``<model_prefix>.vocab`` (its pieces and scores, for reading).

        ``user_defined_symbols`` (e.g. BERT's ``[CLS]``, ``[SEP]``, ``[MASK]``) become
        pieces of their own, right after the four special ids (ids 4, 5, ...); text
        holding one encodes to it.

        Deterministic (the same bytes for the same input): at most ``sample_size`` sentences
        are drawn with ``seed`` (kept in corpus order) and fed in memory through
        sentencepiece's sentence_iterator with its own shuffling off. The files appear
        atomically (written under a temporary name, then renamed), so several processes
        training the same model cannot leave a torn file.
        """
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}; got {model_type!r}")
        user_defined_symbols = list(user_defined_symbols)
        special = NUM_SPECIAL + len(user_defined_symbols)
        min_size = NUM_BYTE_PIECES + special + 1
        if not isinstance(vocab_size, int) or vocab_size < min_size:
            raise ValueError(
                f"vocab_size must be >= {min_size} with byte fallback ({NUM_BYTE_PIECES} byte "
                f"pieces + {special} special ids + the corpus characters); got {vocab_size!r}")
        if not 0.0 < character_coverage <= 1.0:
            raise ValueError(f"character_coverage must be in (0, 1]; got {character_coverage}")
        corpus = _sample(list(sentences), sample_size, seed)
        if not corpus:
            raise ValueError("cannot train a tokenizer on an empty corpus (no non-empty "
                             "sentences)")
        model_bytes = _run_trainer(corpus, vocab_size, model_type, character_coverage, seed,
                                   hard_vocab_limit, num_threads or _default_threads(),
                                   user_defined_symbols)
        model_prefix = os.fspath(model_prefix)
        write_atomically(model_prefix + suffix, model_bytes)
        tokenizer = cls.load(model_prefix + suffix)
        vocab = "".join(f"{tokenizer.id_to_piece(i)}\t{tokenizer._sp.GetScore(i)}\n"
                        for i in range(tokenizer.vocab_size))
        write_atomically(model_prefix + ".vocab", vocab.encode("utf-8"))  # for reading
        _log.info("trained %s tokenizer %s%s: %d pieces from %d sentences", model_type,
                  model_prefix, suffix, tokenizer.vocab_size, len(corpus))
        return tokenizer

    @classmethod
    def load_separate(cls, folder: str | os.PathLike) -> "Tokenizer":
        """Source and target models and their joint vocabulary, from ``folder`` (a
        workdir with data.vocab="separate", or a Hugging Face Marian model folder)."""
        folder = os.fspath(folder)
        models = joint_vocab.load_models(folder, files.SEPARATE_SPM)
        ids = joint_vocab.read_vocab_json(os.path.join(folder, files.JOINT_VOCAB))
        return cls(models["source"], folder, joint=JointVocab(ids, models))

    @classmethod
    def train_separate(cls, source: Sequence[str], target: Sequence[str],
                       folder: str | os.PathLike, vocab_size: int, **options) -> "Tokenizer":
        """Trains a source and a target model (each as :meth:`train`, ``vocab_size``
        pieces, the same ``options``) and numbers their pieces in one vocab.json
        (:func:`joint_vocab.joint_ids`), all in ``folder``."""
        folder = os.fspath(folder)
        sides = {}
        for side, sentences in zip(SIDES, (source, target)):
            prefix, suffix = os.path.splitext(os.path.join(folder, files.SEPARATE_SPM[side]))
            sides[side] = cls.train(sentences, prefix, vocab_size, suffix=suffix, **options)
        ids = joint_vocab.joint_ids(*([t.id_to_piece(i) for i in range(t.vocab_size)]
                                      for t in sides.values()))
        files.write_json(os.path.join(folder, files.JOINT_VOCAB), ids)
        return cls.load_separate(folder)

    # ------------------------------------------------------------------ special ids
    @property
    def pad_id(self) -> int:
        return self._joint.pad_id if self._joint else self._sp.pad_id()

    @property
    def unk_id(self) -> int:
        return self._joint.unk_id if self._joint else self._sp.unk_id()

    @property
    def bos_id(self) -> int:
        """BOS, or -1 if the vocabulary has none (Marian's: its decoder starts from PAD)."""
        return self._joint.bos_id if self._joint else self._sp.bos_id()

    @property
    def eos_id(self) -> int:
        return self._joint.eos_id if self._joint else self._sp.eos_id()

    @property
    def vocab_size(self) -> int:
        return len(self._joint.pieces) if self._joint else self._sp.vocab_size()

    @property
    def separate(self) -> bool:
        """Whether source and target have their own sentencepiece models."""
        return self._joint is not None

    def side_vocab_sizes(self) -> dict[str, int]:
        """Pieces of each side's sentencepiece model (the one model twice when shared)."""
        models = self._joint.models if self._joint else dict.fromkeys(SIDES, self._sp)
        return {side: m.GetPieceSize() for side, m in models.items()}

    def id_to_piece(self, i: int) -> str:
        return self._joint.pieces[int(i)] if self._joint else self._sp.IdToPiece(int(i))

    def piece_to_id(self, piece: str) -> int:
        """The id of ``piece``; ValueError if the vocabulary has no such piece."""
        i = self._sp.PieceToId(piece)
        if i == self.unk_id and piece != self.id_to_piece(self.unk_id):
            raise ValueError(f"sentencepiece model {self.path or '<memory>'} has no piece "
                             f"{piece!r}")
        return i

    def ordinary_ids(self, exclude: Sequence[int] = ()) -> np.ndarray:
        """int32 ids of the pieces text is made of: not control, unknown, unused or byte
        pieces, nor the ids in ``exclude`` (e.g. user-defined specials)."""
        sp, skip = self._sp, set(int(i) for i in exclude)
        return np.asarray([i for i in range(self.vocab_size) if i not in skip and not (
            sp.IsControl(i) or sp.IsUnknown(i) or sp.IsUnused(i) or sp.IsByte(i))], np.int32)

    def word_starts(self) -> np.ndarray:
        """bool [vocab]: the piece begins a word (it starts with sentencepiece's U+2581
        marker); the other pieces continue the word before them."""
        return np.asarray([self._sp.IdToPiece(i).startswith(WORD_START)
                           for i in range(self.vocab_size)])

    def encode_with_offsets(self, texts: Sequence[str]
                            ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per text: (ids int32 [n], begin int32 [n], end int32 [n]) without EOS, where
        ``text[begin[i]:end[i]]`` is the text piece i stands for (character offsets; a
        word-start marker alone, or a byte piece of a character split over several, may
        cover no characters: begin == end)."""
        if isinstance(texts, str):
            raise ValueError("texts must be a sequence of strings, not one string")
        out = []
        for text, proto in zip(texts, self._sp.Encode(list(texts), return_type="proto")):
            # sentencepiece gives UTF-8 byte offsets; char_at[b] is the character at byte b.
            data = text.encode("utf-8")
            char_at = np.cumsum([0] + [(b & 0xC0) != 0x80 for b in data])[:-1] \
                if data else np.zeros(0, np.int64)
            char_at = np.append(char_at, len(text))
            pieces = proto.pieces
            out.append((np.asarray([p.id for p in pieces], np.int32),
                        np.asarray([char_at[p.begin] for p in pieces], np.int32),
                        np.asarray([char_at[p.end] for p in pieces], np.int32)))
        return out

    # ------------------------------------------------------------------ encode / decode
    def encode(self, texts: Sequence[str], add_eos: bool = True,
               num_threads: int | None = None, *, side: str = "source") -> list[np.ndarray]:
        """Batched encoding: one int32 [len] array per text (EOS appended if add_eos).
        ``side``: "source" or "target" (which model segments, when they are separate)."""
        ids = self.encode_lists(texts, add_eos, num_threads, side=side)
        return [np.asarray(row, dtype=np.int32) for row in ids]

    def encode_lists(self, texts: Sequence[str], add_eos: bool = True,
                     num_threads: int | None = None, *, side: str = "source"
                     ) -> list[list[int]]:
        """Like :meth:`encode` but returns plain lists (what sentencepiece gives back)."""
        _check_side(side)
        if isinstance(texts, str):
            raise ValueError("texts must be a sequence of strings, not one string")
        texts = list(texts)
        if not texts:
            return []
        threads = num_threads or _default_threads()
        if self._joint:
            return self._joint.encode(texts, side, add_eos, threads)
        return spm_calls.each(self._sp.Encode, texts, threads, out_type=int, add_eos=add_eos)

    def sample_lists(self, texts: Sequence[str], alpha: float, add_eos: bool = True, *,
                     side: str = "source") -> list[list[int]]:
        """:meth:`encode_lists` with sentencepiece's sampling at ``alpha``, a text at a time
        in this thread: after ``spm.set_random_generator_seed(s)``, the same ids again."""
        _check_side(side)
        if isinstance(texts, str):
            raise ValueError("texts must be a sequence of strings, not one string")
        sampling = {"enable_sampling": True, "alpha": alpha, "nbest_size": -1}
        if self._joint:
            return self._joint.sample(texts, side, add_eos, sampling)
        return [self._sp.Encode(text, out_type=int, add_eos=add_eos, **sampling)
                for text in texts]

    def decode(self, rows: Sequence[Sequence[int]] | np.ndarray,
               num_threads: int | None = None, *, side: str = "target") -> list[str]:
        """Decodes id rows (a list of sequences or an int [batch, len] array).

        Each row is cut at its first EOS; PAD and BOS ids are dropped. ``side``: whose
        model joins the pieces, when source and target have their own.
        """
        _check_side(side)
        if isinstance(rows, np.ndarray):
            if rows.ndim != 2:
                raise ValueError(f"rows must be an int [batch, len] array; got shape "
                                 f"{rows.shape}")
            cleaned = self._clean_2d(rows)
        else:
            cleaned = [self._clean_2d(_row(r))[0] for r in rows]
        if not cleaned:
            return []
        threads = num_threads or _default_threads()
        if self._joint:
            return spm_calls.each(self._joint.models[side].Decode,
                                  self._joint.to_spm(cleaned, side), threads)
        return spm_calls.each(self._sp.Decode, cleaned, threads)

    def _clean_2d(self, ids_BL: np.ndarray) -> list[list[int]]:
        """Rows of ids_BL [batch, len] cut before the first EOS, without PAD/BOS."""
        if not np.issubdtype(ids_BL.dtype, np.integer):
            raise ValueError(f"ids must be integers; got dtype {ids_BL.dtype}")
        if ids_BL.shape[1] == 0:  # nothing to decode (argmax needs a column)
            return [[] for _ in range(ids_BL.shape[0])]
        is_eos_BL = ids_BL == self.eos_id
        first_eos_B = np.where(is_eos_BL.any(axis=1), is_eos_BL.argmax(axis=1), ids_BL.shape[1])
        keep_BL = np.arange(ids_BL.shape[1])[None, :] < first_eos_B[:, None]
        keep_BL &= (ids_BL != self.pad_id) & (ids_BL != self.bos_id)
        flat = ids_BL[keep_BL].astype(np.int64).tolist()
        ends = np.cumsum(keep_BL.sum(axis=1)).tolist()
        return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}; got {side!r}")


def _row(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """One id sequence as a [1, len] array; an empty one is [1, 0] int (not float)."""
    row = np.asarray(ids)
    return (row if row.size else row.astype(np.int64)).reshape(1, -1)


def _run_trainer(corpus: list[str], vocab_size: int, model_type: str,
                 character_coverage: float, seed: int, hard_vocab_limit: bool,
                 num_threads: int, user_defined_symbols: Sequence[str] = ()) -> bytes:
    """Runs SentencePieceTrainer in memory (no path ends up inside the model, so equal
    inputs give equal bytes); turns its capacity errors into clear ValueErrors."""
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(corpus), model_writer=model, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, byte_fallback=True,
            input_sentence_size=0, shuffle_input_sentence=False,
            hard_vocab_limit=hard_vocab_limit, num_threads=num_threads,
            user_defined_symbols=list(user_defined_symbols),
            # Long lines (TSV dumps, documents) would otherwise be skipped silently.
            max_sentence_length=1 << 16, minloglevel=2)
    except RuntimeError as e:
        msg = str(e)
        corpus_desc = _describe(corpus)
        too_high = re.search(r"Vocabulary size too high \((\d+)\).*<= (\d+)", msg)
        if too_high:
            raise _too_large(vocab_size, too_high.group(2), corpus_desc) from e
        too_low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
        if too_low:
            raise ValueError(
                f"vocab_size={vocab_size} is too small for this corpus ({corpus_desc}): it "
                f"needs at least {too_low.group(2)} pieces for its characters, special ids "
                f"and the {NUM_BYTE_PIECES} byte-fallback pieces. Use a larger vocab_size or "
                f"a lower character_coverage.") from e
        raise ValueError(f"sentencepiece training failed ({corpus_desc}, "
                         f"vocab_size={vocab_size}): {msg}") from e
    # A char model takes vocab_size as a cap: it silently stops at the corpus' characters.
    built = spm.SentencePieceProcessor(model_proto=model.getvalue()).GetPieceSize()
    if hard_vocab_limit and built != vocab_size:
        raise _too_large(vocab_size, built, _describe(corpus))
    return model.getvalue()


def _describe(corpus: list[str]) -> str:
    return (f"{len(corpus)} sentences, {sum(map(len, corpus))} characters, "
            f"{len(set(''.join(corpus)))} distinct characters")


def _too_large(vocab_size: int, most: int | str, corpus_desc: str) -> ValueError:
    return ValueError(
        f"vocab_size={vocab_size} is too large for this corpus ({corpus_desc}): "
        f"sentencepiece can build at most {most} pieces from it. Use a smaller "
        f"vocab_size (data.vocab_size) or a larger corpus.")
