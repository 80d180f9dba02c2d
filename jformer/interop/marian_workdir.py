"""``jformer import marian``: a Hugging Face Marian (OPUS-MT) model directory as a jformer workdir.

    import_marian("opus-mt-en-de", "runs/en-de")
    Translator.from_checkpoint("runs/en-de").translate(["How are you?"])
    # fine-tune: python train.py --config configs/marian.py:runs/en-de --workdir runs/en-de

The workdir holds what any training run leaves: config.json (the model read by
:mod:`jformer.interop.marian`, data.vocab="separate"), the tokenizer files (source.spm,
target.spm, vocab.json, copied as they are) and ``checkpoints/0``: the full train state
at step 0 (the imported weights, a fresh Adam state, the dropout key of train.seed) with
the start of any corpus as its data position. ``Translator.from_checkpoint``, ``jformer
translate / evaluate / serve`` read it like any workdir, and train.py resumes from it:
fine-tuning starts from the imported weights at step 0 of its schedule. The workdir
appears whole or not at all (written beside it, then renamed into place).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

from jformer.config import Config, DataConfig, DecodeConfig, TrainConfig
from jformer.data.tokenizer import Tokenizer
from jformer.inference import check_params
from jformer.interop.marian import convert_params, model_config, read_hf_config, read_weights
from jformer.train.schedules import make_optimizer
from jformer.train.step import train_state_of
from jformer.workdir import files
from jformer.workdir.checkpoint import Checkpointer

TOKENIZER_CONFIG = "tokenizer_config.json"  # Hugging Face's; source_lang, target_lang
START_POSITION = {"epoch": 0, "index": 0}  # no batch drawn yet: the start of any corpus


def import_marian(model_dir: str | os.PathLike, workdir: str | os.PathLike, *,
                  src_lang: str | None = None, tgt_lang: str | None = None,
                  force: bool = False) -> Config:
    """Writes the jformer workdir of a Marian model directory; returns its Config.

    Args:
      model_dir: config.json, model.safetensors or pytorch_model.bin, source.spm,
        target.spm, vocab.json (what OPUS-MT publishes).
      workdir: the folder to write; an existing one is an error unless ``force``
        (then it is replaced).
      src_lang, tgt_lang: data.src_lang / tgt_lang (the source language picks the
        sentence rules that split overlong inputs); default: tokenizer_config.json's
        source_lang / target_lang, else DataConfig's.
    Raises:
      MarianImportError (a ValueError) naming what jformer cannot express;
      FileNotFoundError naming a missing file; FileExistsError for an existing workdir.
    """
    model_dir, workdir = os.fspath(model_dir), os.path.abspath(os.fspath(workdir))
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    if os.path.exists(workdir) and not (force and os.path.isdir(workdir)):
        raise FileExistsError(f"workdir exists: {workdir}; pass --force to replace it")
    hf = read_hf_config(model_dir)
    tokenizer = Tokenizer.load_separate(model_dir)
    model_cfg = model_config(hf, tokenizer)
    params = convert_params(read_weights(model_dir), model_cfg)
    check_params(model_cfg, params)
    config = Config(model_cfg, _data_config(model_dir, tokenizer, model_cfg.max_len,
                                            src_lang, tgt_lang),
                    # Marian (and HF generate) let only EOS among the beam's W best
                    # finish; the exact stopping rule gives HF generate's outputs (tests)
                    TrainConfig(), DecodeConfig(eos_candidates="top_w", stop="exact"))
    parent = os.path.dirname(workdir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(workdir)}.tmp-")
    try:
        for path in files.tokenizer_files(config.data, model_dir):
            shutil.copyfile(path, os.path.join(tmp, os.path.basename(path)))
        files.write_config(tmp, config)
        tx, _ = make_optimizer(config.train, model_cfg.d_model)
        with Checkpointer(files.checkpoint_dir(tmp), keep=1, save_every=1,
                          async_save=False) as ckpt:
            ckpt.save(0, train_state_of(params, tx, config.train.seed), START_POSITION,
                      force=True)
        files.replace_directory(tmp, workdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return config


def _data_config(model_dir: str, tokenizer: Tokenizer, max_len: int, src_lang: str | None,
                 tgt_lang: str | None) -> DataConfig:
    """data.vocab="separate", the languages (arguments, else tokenizer_config.json) and
    training lengths within the model's positions (DataConfig's, or model.max_len)."""
    langs = {}
    path = os.path.join(model_dir, TOKENIZER_CONFIG)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            hf_tok = json.load(f)
        langs = {k: hf_tok[h] for k, h in (("src_lang", "source_lang"),
                                           ("tgt_lang", "target_lang"))
                 if isinstance(hf_tok.get(h), str) and hf_tok[h]}
    langs.update({k: v for k, v in (("src_lang", src_lang), ("tgt_lang", tgt_lang)) if v})
    # data.vocab_size: how many pieces each side's model has (the larger, if they differ);
    # a record of the imported models, which training takes as they are.
    lengths = dict.fromkeys(("max_source_len", "max_target_len", "pack_len"),
                            min(DataConfig.max_source_len, max_len))
    return DataConfig(vocab="separate", vocab_size=max(tokenizer.side_vocab_sizes().values()),
                      **lengths, **langs)

