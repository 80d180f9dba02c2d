"""What every export shares: the trained model read from a workdir, the output folder
written whole or not at all, and the refusal of model fields an export does not know.

    source = read_workdir("runs/demo", step=None)      # config, tokenizer, params, step
    with output_directory("demo-out", force=False) as tmp:
        ...write the files into tmp...                  # renamed to demo-out at the end
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from typing import Any, Iterable, Iterator

from jformer.config import Config, ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.inference import check_params
from jformer.types import PyTree
from jformer.workdir import checkpoint, files

# ModelConfig fields that do not change what inference computes in float32: dropout, the
# compute dtype, and the kernel switch (both sets compute the same function).
INFERENCE_NEUTRAL_FIELDS = frozenset({
    "dropout_rate", "attention_dropout_rate", "relu_dropout_rate", "dtype", "ops"})


def unknown_fields(cfg: ModelConfig, known: Iterable[str], export: str) -> list[str]:
    """A problem line for each field of ``cfg`` that is neither in ``known`` nor
    inference-neutral and holds other than its default: a field added to ModelConfig
    after an exporter was written would otherwise be exported silently, as a model that
    computes something else."""
    known = set(known) | INFERENCE_NEUTRAL_FIELDS
    problems = []
    for field in dataclasses.fields(cfg):
        if field.name in known:
            continue
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory() if field.default_factory is not dataclasses.MISSING
                   else dataclasses.MISSING)
        value = getattr(cfg, field.name)
        if default is dataclasses.MISSING or value != default:
            problems.append(f"model.{field.name}={value!r}: the {export} export does not "
                            f"express this field (only its default "
                            f"{'(none)' if default is dataclasses.MISSING else repr(default)})")
    return problems


@dataclasses.dataclass(frozen=True)
class WorkdirModel:
    """A trained model as a workdir holds it: its config, tokenizer and one checkpoint."""

    workdir: str
    config: Config
    tokenizer: Tokenizer
    tokenizer_path: str  # files.tokenizer_path: spm.model, or the separate models' folder
    params: PyTree
    checkpoint_dir: str
    step: int


def read_workdir(workdir: str | os.PathLike, checkpoint_dir: str | None = None,
                 step: int | None = None, check: Any = None,
                 error: type[ValueError] = ValueError) -> WorkdirModel:
    """Reads config.json, the tokenizer and a checkpoint's params (latest, or ``step``;
    from ``checkpoint_dir`` instead of <workdir>/checkpoints if given).

    ``check(model_cfg)`` runs before any weight is read (an exporter's refusals).
    ``error`` (a ValueError) if config.json's ids or vocabulary size do not match the
    tokenizer.
    """
    workdir = os.fspath(workdir)
    if not os.path.isdir(workdir):
        raise FileNotFoundError(f"workdir not found: {workdir}")
    config = files.load_config(workdir)
    if check is not None:
        check(config.model)
    path = files.tokenizer_path(config.data, workdir)
    tokenizer = Tokenizer.load(path)
    check_tokenizer(config.model, tokenizer, workdir, error)
    ckpt = os.path.abspath(checkpoint_dir or files.checkpoint_dir(workdir))
    step = checkpoint.resolve_step(ckpt, step)
    params = checkpoint.restore_params(ckpt, step)
    check_params(config.model, params)
    return WorkdirModel(os.path.abspath(workdir), config, tokenizer, path, params, ckpt,
                        int(step))


def check_tokenizer(model_cfg: ModelConfig, tokenizer: Tokenizer, workdir: str,
                    error: type[ValueError] = ValueError) -> None:
    for name in ("vocab_size", "pad_id", "bos_id", "eos_id"):
        got = getattr(tokenizer, name)
        if getattr(model_cfg, name) != got:
            raise error(f"model.{name}={getattr(model_cfg, name)} in {workdir}/"
                             f"config.json does not match the tokenizer {tokenizer.path} "
                             f"({got})")


@contextlib.contextmanager
def output_directory(out: str | os.PathLike, force: bool = False) -> Iterator[str]:
    """Yields an empty temporary folder beside ``out``, renamed to ``out`` when the block
    ends without an error (removed if it raises). An existing ``out`` is an error unless
    ``force`` (then it is replaced), checked before the block runs."""
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not (force and os.path.isdir(out)):
        raise FileExistsError(f"output exists: {out}" + ("" if os.path.isdir(out) else
                              " (not a directory)") + "; pass --force to replace a directory")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.tmp-")
    try:
        yield tmp
        files.replace_directory(tmp, out)  # flushes the files, then renames
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def output_file(out: str | os.PathLike, force: bool = False) -> Iterator[str]:
    """Like :func:`output_directory` for one file: yields a temporary path beside ``out``,
    flushed and renamed to ``out`` when the block ends without an error."""
    out = os.path.abspath(os.fspath(out))
    if os.path.exists(out) and not (force and os.path.isfile(out)):
        raise FileExistsError(f"output exists: {out}" + ("" if os.path.isfile(out) else
                              " (not a file)") + "; pass --force to replace a file")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), prefix=f".{os.path.basename(out)}.tmp-")
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
