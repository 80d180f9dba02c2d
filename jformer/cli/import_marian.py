"""``jformer import <format>``: bring a model trained elsewhere into a jformer workdir.

    jformer import marian opus-mt-en-de --workdir runs/en-de [--src-lang en --tgt-lang de]

One sub-subcommand per format (a ``(name, help, add_arguments, run)`` entry of
:data:`FORMATS`), like ``jformer export``. ``marian`` reads a Hugging Face Marian
(OPUS-MT) model directory (:mod:`jformer.interop.marian_workdir`).
"""
from __future__ import annotations

import argparse

from jformer.cli.common import add_formats, run_format

NAME = "import"
HELP = "import a model trained elsewhere as a jformer workdir (marian: OPUS-MT)"


def _marian_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="DIR",
                   help="Hugging Face Marian model directory: config.json, model.safetensors "
                        "or pytorch_model.bin, source.spm, target.spm, vocab.json")
    p.add_argument("--workdir", required=True,
                   help="jformer workdir to write (config.json, the tokenizer files, "
                        "checkpoints/0)")
    p.add_argument("--src-lang", default=None,
                   help="source language, ISO 639 (default: tokenizer_config.json's)")
    p.add_argument("--tgt-lang", default=None,
                   help="target language (default: tokenizer_config.json's)")
    p.add_argument("--force", action="store_true", help="replace an existing --workdir")


def _marian_run(args: argparse.Namespace) -> None:
    from jformer.interop.marian_workdir import import_marian

    try:
        config = import_marian(args.model_dir, args.workdir, src_lang=args.src_lang,
                               tgt_lang=args.tgt_lang, force=args.force)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("safetensors", "torch"):
            raise
        raise SystemExit(f"jformer import: error: reading Marian weights needs {e.name}: "
                         "pip install 'jformer[marian]'") from None
    m = config.model
    print(f"imported {args.model_dir} to {args.workdir}: d_model {m.d_model}, "
          f"{m.num_encoder_layers}+{m.num_decoder_layers} layers, vocabulary "
          f"{m.vocab_size}, {config.data.src_lang}->{config.data.tgt_lang}")


FORMATS = (("marian", "a Hugging Face Marian (OPUS-MT) model directory",
            _marian_arguments, _marian_run),)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_formats(p, FORMATS)


run = run_format
