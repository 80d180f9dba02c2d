"""A training workdir read for inference: its config, tokenizer and checkpointed params
(the files themselves are jformer.workdir's).

    config, tokenizer, params = load_workdir("runs/demo")

The one reader behind ``Translator.from_checkpoint`` and
``EncoderPredictor.from_checkpoint``.
"""
from __future__ import annotations

import os

from jformer.config import Config
from jformer.data.tokenizer import Tokenizer
from jformer.types import PyTree
from jformer.workdir import checkpoint, files


def load_workdir(workdir: str | os.PathLike, checkpoint_dir: str | None = None,
                 step: int | None = None) -> tuple[Config, Tokenizer, PyTree]:
    """(config.json's Config, the run's tokenizer, the params of one checkpoint).

    Args:
      workdir: the run folder (config.json, the tokenizer files, checkpoints/).
      checkpoint_dir: a checkpoint directory to read instead of <workdir>/checkpoints,
        e.g. the output of ``jformer average-checkpoints``.
      step: the checkpoint step; None for the latest.
    Raises:
      FileNotFoundError naming a missing workdir; config and checkpoint errors name
      their file.
    """
    workdir = os.fspath(workdir)
    if not os.path.isdir(workdir):
        raise FileNotFoundError(f"workdir not found: {workdir}")
    config = files.load_config(workdir)
    tokenizer = Tokenizer.load(files.tokenizer_path(config.data, workdir))
    params = checkpoint.restore_params(checkpoint_dir or files.checkpoint_dir(workdir), step)
    return config, tokenizer, params
