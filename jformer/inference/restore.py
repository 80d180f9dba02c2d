"""A training workdir read for inference: its config, tokenizer and checkpointed params
(the files themselves are jformer.workdir's).

    config, tokenizer, params = load_workdir("runs/demo")

The one reader behind ``Translator.from_checkpoint`` and
``EncoderPredictor.from_checkpoint``; :func:`check_params` names where restored params do
not fit a model config.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from jformer.config import Config, ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.model import Transformer
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


def check_params(model_cfg: ModelConfig, params: PyTree) -> None:
    """Raises ValueError naming the paths where ``params`` does not fit the model."""
    dummy = jax.ShapeDtypeStruct((1, 2), jnp.int32)
    expected = jax.eval_shape(lambda a: Transformer(model_cfg).init(jax.random.key(0), a, a),
                              dummy)["params"]
    want, got = ({jax.tree_util.keystr(p): tuple(np.shape(x))
                  for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}
                 for tree in (expected, params))
    problems = [f"{p}: missing" for p in sorted(want.keys() - got.keys())]
    problems += [f"{p}: unexpected" for p in sorted(got.keys() - want.keys())]
    problems += [f"{p}: shape {got[p]}, model expects {want[p]}"
                 for p in sorted(want.keys() & got.keys()) if want[p] != got[p]]
    if problems:
        raise ValueError(f"checkpoint params do not fit the model config ({len(problems)} "
                         f"problems): {'; '.join(problems[:8])}")
