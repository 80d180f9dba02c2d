"""Every file jformer reads or writes in a workdir, by name, with its one reader/writer.

A training workdir holds::

    config.json        the resolved Config (write_config / load_config)
    spm.model          the sentencepiece model (data.vocab_path overrides it), spm.vocab
    source.spm         with data.vocab="separate" (Marian's layout), instead of spm.model:
    target.spm           each side's sentencepiece model, and the joint vocabulary that
    vocab.json           numbers their pieces (data.vocab_path: a folder holding them)
    spm.json           what the sentencepiece model(s) were learned from (jformer.data.pipeline)
    checkpoints/       orbax checkpoints (jformer.workdir.checkpoint)
    metrics.jsonl      one JSON row per log interval or evaluation (jformer.train.progress)
    evaluations.jsonl  a test set's scores per ``jformer evaluate --record`` (with their
                       sacreBLEU signatures; read by the exports' model cards)
    tensorboard/       TensorBoard events
    .train.lock        held by the training process (jformer.train.run_control)

Text files are UTF-8, split at "\\n" only (a stray "\\r" inside a line stays, so parallel
files keep lining up; universal newlines would split there); trailing "\\r" and a
leading byte-order mark are dropped. Writes go to a temporary file in the same folder,
are flushed to disk, then renamed over the target: a crash never leaves half a file.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import zlib
from typing import Any, Callable, Iterator, Mapping

CONFIG_FILENAME = "config.json"
SPM_FILENAME = "spm.model"
SPM_RECORD = "spm.json"
SEPARATE_SPM = {"source": "source.spm", "target": "target.spm"}  # data.vocab="separate"
JOINT_VOCAB = "vocab.json"
CHECKPOINTS_DIRNAME = "checkpoints"
METRICS_FILENAME = "metrics.jsonl"
EVALUATIONS_FILENAME = "evaluations.jsonl"  # jformer evaluate --record: test-set scores
TENSORBOARD_DIRNAME = "tensorboard"
LOCK_FILENAME = ".train.lock"
BOM = "\ufeff"


def checkpoint_dir(workdir: str | os.PathLike) -> str:
    """``<workdir>/checkpoints``."""
    return os.path.join(os.fspath(workdir), CHECKPOINTS_DIRNAME)


def tokenizer_path(data_cfg: Any, workdir: str | os.PathLike) -> str:
    """What ``Tokenizer.load`` reads: ``data.vocab_path`` when set, else
    ``<workdir>/spm.model``; with data.vocab="separate" a folder (data.vocab_path, else
    the workdir) holding source.spm, target.spm and vocab.json."""
    if data_cfg.vocab == "separate":
        return data_cfg.vocab_path or os.fspath(workdir)
    return data_cfg.vocab_path or os.path.join(os.fspath(workdir), SPM_FILENAME)


def tokenizer_files(data_cfg: Any, workdir: str | os.PathLike) -> list[str]:
    """The files the tokenizer is read from (:func:`tokenizer_path` and, for a folder,
    the three files in it)."""
    path = tokenizer_path(data_cfg, workdir)
    if data_cfg.vocab != "separate":
        return [path]
    return [os.path.join(path, name) for name in (*SEPARATE_SPM.values(), JOINT_VOCAB)]


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` under a temporary name in ``path``'s folder, flushed to disk,
    then renames it over ``path``."""
    path = os.fspath(path)
    out_dir = os.path.dirname(os.path.abspath(path))
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".tmp-" + os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def replace_directory(new: str | os.PathLike, out: str | os.PathLike) -> None:
    """Puts the finished directory ``new`` at ``out`` (replacing an old one there): its
    files are flushed to disk first, then renamed into place, so ``out`` is whole or
    absent (with an old one, it is briefly absent between the two renames)."""
    new, out = os.fspath(new), os.fspath(out)
    for root, _, names in os.walk(new):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
    if not os.path.exists(out):
        os.replace(new, out)
        return
    old = new + ".old"
    os.replace(out, old)
    os.replace(new, out)
    shutil.rmtree(old)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """``obj`` as indented, key-sorted JSON, written atomically."""
    write_atomically(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def decode_line(raw: bytes, name: str, line_no: int) -> str:
    """Line ``line_no`` (1-based) of ``name``, decoded and stripped of its line end
    (and of a byte-order mark on line 1). Invalid UTF-8 is a ValueError naming the
    input, the line and the byte."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name} line {line_no}: not valid UTF-8 ({e.reason} at byte "
                         f"{e.start + 1} of the line)") from None
    if line_no == 1 and text.startswith(BOM):
        text = text[1:]
    return text.rstrip("\r\n")


def decode_lines(body: bytes, name: str, first_line_no: int) -> list[str]:
    """The lines of ``body`` (lines ``first_line_no``, ... of ``name``, split at b"\\n"),
    each as :func:`decode_line` gives it. Decoded whole (UTF-8 never holds a b"\\n"
    inside a character, so that is decoding line by line), and line by line only to
    name the line of an error."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return [decode_line(raw, name, first_line_no + i)
                for i, raw in enumerate(body.split(b"\n"))]
    lines = text.split("\n")
    if first_line_no == 1 and text.startswith(BOM):
        lines[0] = lines[0][1:]
    return [line.rstrip("\r") for line in lines] if "\r" in text else lines


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a UTF-8 text file (``.gz``: gzipped), without line ends."""
    path = os.fspath(path)
    with open(path, "rb") as f:  # a missing file: the OSError names it
        data = f.read()
    if path.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"cannot read {path}: {e}") from e
    if not data:
        return []
    return decode_lines(data[:-1] if data.endswith(b"\n") else data, path, 1)


def iter_byte_blocks(path: str | os.PathLike, block_bytes: int = 1 << 24
                     ) -> Iterator[tuple[int, bytes]]:
    """(number of its first line, body): a file (``.gz``: gzipped) as runs of whole lines,
    about ``block_bytes`` each, read in bounded memory. A body's lines are
    ``body.split(b"\\n")``, line ends not included; the lines of all bodies are those of
    :func:`read_lines`, undecoded. A missing file: the OSError names it."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    line_no, rest = 1, b""
    try:
        with opener(path, "rb") as f:
            while True:
                data = f.read(block_bytes)
                if not data:
                    break
                data, cut = rest + data, data.rfind(b"\n")
                if cut < 0:
                    rest = data
                    continue
                cut += len(rest)  # the last line end, in rest + data
                body, rest = data[:cut], data[cut + 1:]
                yield line_no, body
                line_no += body.count(b"\n") + 1
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    if rest:
        yield line_no, rest


def iter_line_blocks(path: str | os.PathLike, block_bytes: int = 1 << 24
                     ) -> Iterator[list[str]]:
    """The lines of :func:`read_lines`, a block at a time (about ``block_bytes`` of text
    each), so a file of any size is read in bounded memory; the same errors, naming the
    file and line."""
    for line_no, body in iter_byte_blocks(path, block_bytes):
        yield decode_lines(body, os.fspath(path), line_no)


def load_config(workdir: str | os.PathLike):
    """``<workdir>/config.json`` (written by training) as a validated :class:`Config`."""
    from jformer.config import from_config_dict

    path = os.path.join(os.fspath(workdir), CONFIG_FILENAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file not found: {path} (is {os.fspath(workdir)} a "
                                f"training workdir?)")
    with open(path, encoding="utf-8") as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"cannot parse {path}: {e}") from e
    return from_config_dict(raw)


def write_config(workdir: str | os.PathLike, cfg: Any) -> None:
    """``<workdir>/config.json``: what inference needs to rebuild the model."""
    from jformer.config import to_dict

    write_json(os.path.join(os.fspath(workdir), CONFIG_FILENAME), to_dict(cfg))


def append_evaluation(workdir: str | os.PathLike, row: Mapping[str, Any]) -> None:
    """Appends one JSON row to ``<workdir>/evaluations.jsonl`` (``jformer evaluate
    --record``: a test set's scores, their sacreBLEU signatures and what produced them)."""
    with open(os.path.join(os.fspath(workdir), EVALUATIONS_FILENAME), "a",
              encoding="utf-8") as f:
        f.write(json.dumps(dict(row), sort_keys=True) + "\n")


def read_evaluations(workdir: str | os.PathLike) -> list[dict]:
    """The rows of ``<workdir>/evaluations.jsonl`` in file order ([] without the file);
    a line that is not a JSON object is a ValueError naming the file and line."""
    path = os.path.join(os.fspath(workdir), EVALUATIONS_FILENAME)
    if not os.path.isfile(path):
        return []
    return [row for _, row in jsonl_rows(path)]


def jsonl_rows(path: str, what: str = "a JSON object",
               check: Callable[[dict], Any] | None = None) -> list[tuple[int, dict]]:
    """(line number, row) for each non-blank line of a JSON-lines file, in file order.

    A line that is not a JSON object, or whose row ``check`` rejects (by raising
    ValueError, KeyError or TypeError), is a ValueError naming the file, the line and
    ``what`` it should be, with the start of the line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise TypeError(f"a JSON {type(row).__name__}, not an object")
                if check is not None:
                    check(row)
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: not {what} ({e}): {line[:80]!r}") from None
            rows.append((number, row))
    return rows
