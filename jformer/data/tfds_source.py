"""TFDS translation datasets (wmt14_translate/de-en, wmt17_translate/de-en, ...).

Reads a prepared dataset only (``download=False``): preparing WMT takes hours and
network access, so it is an explicit, separate step (``tfds build``) rather than a side
effect of starting a training run. Importing TensorFlow Datasets imports TensorFlow,
so this module imports it only when a TFDS source is read.
"""
from __future__ import annotations

import logging
from typing import Iterator

from jformer.data.corpus import ParallelCorpus, make_corpus

_log = logging.getLogger(__name__)
_READ_BATCH = 4096  # examples per tf.data batch while reading (fewer Python round trips)


def _not_prepared(name: str, split: str, data_dir: str) -> FileNotFoundError:
    where = data_dir or "the TFDS default data dir (~/tensorflow_datasets)"
    flag = f" --data_dir {data_dir}" if data_dir else ""
    return FileNotFoundError(
        f"TFDS dataset {name!r} (split {split!r}) is not prepared in {where}. Prepare it once, "
        f"online, with `tfds build {name}{flag}`, or set data.tfds_data_dir to a folder that "
        f"already holds it.")


def _require_tensorflow() -> None:
    """TFDS finds, builds and reads datasets through TensorFlow, which the core install
    leaves out; without it TFDS reports every dataset as unknown."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        raise ValueError("data.source='tfds' needs TensorFlow, which TensorFlow Datasets "
                         "reads datasets with: pip install -e '.[tfds]' (tensorflow-cpu; "
                         "or the TensorFlow build for your accelerator)") from None


def load_tfds(name: str, split: str, src_lang: str, tgt_lang: str, data_dir: str = ""
              ) -> ParallelCorpus:
    """Pairs (src_lang text, tgt_lang text) of split ``split`` of TFDS dataset ``name``.

    Raises FileNotFoundError (with the command that prepares it) when the dataset is not
    prepared in data_dir, and ValueError for an unknown dataset, split or language.
    """
    sources: list[str] = []
    targets: list[str] = []
    for src, tgt in iter_tfds(name, split, src_lang, tgt_lang, data_dir):
        sources += src
        targets += tgt
    return make_corpus(sources, targets, origin(name, split, src_lang, tgt_lang))


def origin(name: str, split: str, src_lang: str, tgt_lang: str) -> str:
    """How messages name the split's examples."""
    return f"tfds {name} {split} ({src_lang}-{tgt_lang}, example numbers are 1-based)"


def iter_tfds(name: str, split: str, src_lang: str, tgt_lang: str, data_dir: str = ""
              ) -> Iterator[tuple[list[str], list[str]]]:
    """:func:`load_tfds`' texts as they are read, a few thousand examples at a time
    (source texts, target texts); its errors. An empty split is a ValueError."""
    _require_tensorflow()
    import tensorflow_datasets as tfds  # heavy: imported on use

    try:
        builder = tfds.builder(name, data_dir=data_dir or None)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise ValueError(f"data.tfds_name: unknown TFDS dataset {name!r} "
                         f"({str(e).splitlines()[0]})") from e
    langs = list(builder.info.features.keys())
    for field, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang not in langs:
            raise ValueError(f"data.{field}: {name} has languages {langs}; got {lang!r}")
    try:
        ds = builder.as_dataset(split=split, shuffle_files=False)
    except AssertionError as e:  # TFDS asserts that the prepared files exist
        raise _not_prepared(name, split, data_dir) from e
    except (KeyError, ValueError) as e:
        raise ValueError(f"TFDS dataset {name!r}: cannot read split {split!r} ({e}); "
                         f"available: {list(builder.info.splits)}") from e
    seen = 0
    for batch in tfds.as_numpy(ds.batch(_READ_BATCH)):
        texts: tuple[list[str], list[str]] = ([], [])
        for side, lang in zip(texts, (src_lang, tgt_lang)):
            for raw in batch[lang]:
                try:
                    side.append(raw.decode("utf-8"))
                except UnicodeDecodeError as e:
                    raise ValueError(f"TFDS {name} {split}: invalid UTF-8 in the {lang} text "
                                     f"of example {seen + len(side) + 1}: {e}") from e
        seen += len(texts[0])
        yield texts
    if not seen:
        raise ValueError(f"empty corpus: TFDS {name} split {split!r} has no examples")
