"""``jformer export <format>``: write a trained model in another engine's format.

    jformer export ctranslate2 --workdir runs/demo --out demo-ct2 [--quantization int8]

One sub-subcommand per format (a ``(name, help, add_arguments, run)`` entry of
:data:`FORMATS`), so further formats sit beside ``ctranslate2``.
"""
from __future__ import annotations

import argparse

from jformer.cli.common import add_model_args
from jformer.interop import CT2_QUANTIZATIONS

NAME = "export"
HELP = "export a trained model for another inference engine (ctranslate2)"


def _ct2_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--out", required=True,
                   help="CTranslate2 model directory to write (model.bin, config.json, "
                        "shared_vocabulary.json, spm.model)")
    p.add_argument("--quantization", choices=CT2_QUANTIZATIONS, default="float32",
                   help="weight type of the export (CTranslate2 picks the compute type "
                        "when it loads the model: compute_type=...)")
    p.add_argument("--force", action="store_true", help="replace an existing --out directory")


def _ct2_run(args: argparse.Namespace) -> None:
    try:
        from jformer.interop import ctranslate2 as ct2_export
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "ctranslate2":
            raise
        raise SystemExit("jformer export: error: exporting to CTranslate2 needs the "
                         "ctranslate2 package: pip install 'jformer[export]'") from None
    out = ct2_export.export_workdir(args.workdir, args.out, checkpoint_dir=args.checkpoint,
                                    step=args.step, quantization=args.quantization,
                                    force=args.force)
    print(f"exported {args.workdir} to {out} (CTranslate2, {args.quantization})")


FORMATS = (("ctranslate2", "a CTranslate2 model directory (ctranslate2.Translator)",
            _ct2_arguments, _ct2_run),)


def add_arguments(p: argparse.ArgumentParser) -> None:
    formats = p.add_subparsers(dest="export_format", required=True, metavar="FORMAT")
    for name, help_text, add, run_format in FORMATS:
        sub = formats.add_parser(name, help=help_text, description=help_text)
        add(sub)
        sub.set_defaults(export_run=run_format)


def run(args: argparse.Namespace) -> None:
    args.export_run(args)
