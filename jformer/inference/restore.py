"""A training workdir read for inference: its config, tokenizer and checkpointed params
(the files themselves are jformer.workdir's).

    config, tokenizer, params = load_workdir("runs/demo")
    load_workdir("runs/demo", cache_dir=compile_cache.in_use())  # params kept beside

The one reader behind ``Translator.from_checkpoint`` and
``EncoderPredictor.from_checkpoint``; :func:`check_params` names where restored params do
not fit a model config.
"""
from __future__ import annotations

import hashlib
import json
import os

import flax
import jax
import jax.numpy as jnp
import numpy as np

from jformer.config import Config, ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.inference.digests import source_digest, stable
from jformer.model import Transformer
from jformer.types import PyTree
from jformer.inference import params_cache
from jformer.workdir import files


def load_workdir(workdir: str | os.PathLike, checkpoint_dir: str | None = None,
                 step: int | None = None,
                 cache_dir: str | None = None) -> tuple[Config, Tokenizer, PyTree]:
    """(config.json's Config, the run's tokenizer, the params of one checkpoint).

    Args:
      workdir: the run folder (config.json, the tokenizer files, checkpoints/).
      checkpoint_dir: a checkpoint directory to read instead of <workdir>/checkpoints,
        e.g. the output of ``jformer average-checkpoints``.
      step: the checkpoint step; None for the latest.
      cache_dir: a compile cache directory (None: none): the params are read from, or
        else kept in, its copy of this checkpoint (:mod:`.params_cache`).
    Raises:
      FileNotFoundError naming a missing workdir; config and checkpoint errors name
      their file.
    """
    workdir = os.fspath(workdir)
    if not os.path.isdir(workdir):
        raise FileNotFoundError(f"workdir not found: {workdir}")
    config = files.load_config(workdir)
    tokenizer = Tokenizer.load(files.tokenizer_path(config.data, workdir))
    directory = checkpoint_dir or files.checkpoint_dir(workdir)
    folder = cache_dir and params_cache.step_folder(directory, step)
    params = folder and params_cache.read(cache_dir, folder)
    if params is None:
        from jformer.workdir import checkpoint  # orbax: imported only when it reads

        params = checkpoint.restore_params(directory, step)
        if folder:
            params_cache.write(cache_dir, folder, params)
    return config, tokenizer, params


def check_params(model_cfg: ModelConfig, params: PyTree,
                 cache_dir: str | os.PathLike | None = None) -> None:
    """Raises ValueError naming the paths where ``params`` does not fit the model.

    ``cache_dir`` (a compile cache directory, or None): the model's parameter shapes are
    read from ``<cache_dir>/param_shapes`` when an earlier process traced this config
    with the same jformer source, jax and flax, instead of tracing ``Transformer.init``
    again (a third of a second for a base-sized model)."""
    want = expected_shapes(model_cfg, cache_dir)
    got = _shapes(params)
    problems = [f"{p}: missing" for p in sorted(want.keys() - got.keys())]
    problems += [f"{p}: unexpected" for p in sorted(got.keys() - want.keys())]
    problems += [f"{p}: shape {got[p]}, model expects {want[p]}"
                 for p in sorted(want.keys() & got.keys()) if want[p] != got[p]]
    if problems:
        raise ValueError(f"checkpoint params do not fit the model config ({len(problems)} "
                         f"problems): {'; '.join(problems[:8])}")


def _shapes(tree: PyTree) -> dict[str, tuple[int, ...]]:
    return {jax.tree_util.keystr(p): tuple(np.shape(x))
            for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def expected_shapes(model_cfg: ModelConfig, cache_dir: str | os.PathLike | None = None
                    ) -> dict[str, tuple[int, ...]]:
    """{parameter path: shape} of ``Transformer(model_cfg)``: traced, or read from
    ``<cache_dir>/param_shapes/<key>.json``, whose key covers jformer's source, the jax and
    flax versions and the config. A missing or unreadable entry is traced and written
    (atomically; a cache that cannot be written is skipped)."""
    path = None
    if cache_dir is not None:
        key = hashlib.sha256("\n".join([
            source_digest(), jax.__version__, flax.__version__, stable(model_cfg)]).encode())
        path = os.path.join(os.fspath(cache_dir), "param_shapes", f"{key.hexdigest()[:32]}.json")
        try:
            with open(path, encoding="utf-8") as f:
                return {name: tuple(shape) for name, shape in json.load(f).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            pass  # not there yet, or not readable: trace it
    dummy = jax.ShapeDtypeStruct((1, 2), jnp.int32)
    shapes = _shapes(jax.eval_shape(
        lambda a: Transformer(model_cfg).init(jax.random.key(0), a, a), dummy)["params"])
    if path is not None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            files.write_json(path, {name: list(shape) for name, shape in shapes.items()})
        except OSError:
            pass  # a read-only cache: the next process traces again
    return shapes
