"""``jformer export <format>``: write a trained model in another engine's format.

    jformer export ctranslate2 --workdir runs/demo --out demo-ct2 [--quantization int8]
    jformer export jax --workdir runs/demo --out demo-jax [--buckets 16,32] [--batch 8]
        [--method greedy|beam] [--beam 4] [--platforms cpu,cuda,tpu]
    jformer export huggingface --workdir runs/demo --out demo-hf [--license apache-2.0]
    jformer export argos --workdir runs/demo --out demo.argosmodel [--source-lang en]

Every export writes a model card (README.md) from what the workdir records
(jformer.interop.model_card).

One sub-subcommand per format (a ``(name, help, add_arguments, run)`` entry of
:data:`FORMATS`), so further formats sit beside ``ctranslate2``.
"""
from __future__ import annotations

import argparse

from jformer.cli.common import add_formats, add_model_args, run_format
from jformer.config import DECODE_DTYPES
from jformer.interop import CT2_QUANTIZATIONS

NAME = "export"
HELP = ("export a trained model for another inference engine (ctranslate2, huggingface, "
        "argos) or as serialized JAX programs (jax)")


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
    ct2_export = _needs("ctranslate2", "export", "exporting to CTranslate2")
    out = ct2_export.export_workdir(args.workdir, args.out, checkpoint_dir=args.checkpoint,
                                    step=args.step, quantization=args.quantization,
                                    force=args.force)
    print(f"exported {args.workdir} to {out} (CTranslate2, {args.quantization})")


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints; got {text!r}")


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _jax_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--out", required=True,
                   help="directory to write (manifest.json, params.npz, spm.model, "
                        "<platform>/bucket_<S>.jaxexport)")
    p.add_argument("--buckets", type=_ints, default=None, metavar="S,S,...",
                   help="padded source lengths, one program each (default: the run's "
                        "decode.length_buckets capped at model.max_len, plus model.max_len)")
    p.add_argument("--batch", type=int, default=8,
                   help="rows of every program's batch (default: 8)")
    p.add_argument("--method", choices=("beam", "greedy"), default="beam")
    p.add_argument("--beam", type=int, default=None,
                   help="beam size (default: the run's decode.beam_size; 1: greedy search "
                        "with the beam's length-penalised score)")
    p.add_argument("--alpha", type=float, default=None,
                   help="the length penalty the manifest suggests (default: the run's "
                        "decode.alpha; the programs take it as an argument)")
    p.add_argument("--max-len", type=int, default=None,
                   help="max output tokens, EOS included, for every bucket (default: "
                        "decode.max_len_a * bucket + max_len_b, as jformer translate)")
    p.add_argument("--platforms", type=_names, default=("cpu",), metavar="P,P,...",
                   help="platforms to lower for: cpu, cuda, rocm, tpu (default: cpu); "
                        "no such device is needed to export")
    p.add_argument("--prefix-len", type=int, default=None, metavar="P",
                   help="the programs take target prefixes of up to P tokens (prefix_BP "
                        "int32 [batch, P], -1 past each; outputs begin with them)")
    p.add_argument("--prefix-bias", action="store_true",
                   help="with --prefix-len: the prefixes bias the search by a prefix_beta "
                        "argument in (0, 1) instead of being forced")
    p.add_argument("--constraints", type=_ints, default=None, metavar="C,L",
                   help="the programs take lexical constraints, C phrases of up to L "
                        "tokens per sentence (constraints_BCL int32 [batch, C, L], -1 "
                        "padding); each output contains its phrases (--method beam)")
    p.add_argument("--dtype", choices=DECODE_DTYPES, default=None,
                   help="decode.dtype of the programs (default: the run's); int8: int8 "
                        "encoder and decode-step products, quantized inside each program")
    p.add_argument("--shortlist", default=None, metavar="FILE",
                   help="a vocabulary shortlist (jformer shortlist): the export also holds "
                        "programs taking shortlist_C, the only ids a batch's steps score "
                        "(default: the run's decode.shortlist; '' for none)")
    p.add_argument("--shortlist-size", type=int, default=None, metavar="C",
                   help="with --shortlist: the shortlisted programs' C (default 1024, or "
                        "below half a smaller vocabulary); a batch whose list is longer "
                        "runs the full-vocabulary programs")
    p.add_argument("--force", action="store_true", help="replace an existing --out directory")


def _jax_run(args: argparse.Namespace) -> None:
    from jformer.interop import jax_export

    out = jax_export.export_workdir(
        args.workdir, args.out, checkpoint_dir=args.checkpoint, step=args.step,
        force=args.force, buckets=args.buckets, batch_rows=args.batch, method=args.method,
        beam_size=args.beam, alpha=args.alpha, max_len=args.max_len,
        platforms=args.platforms, prefix_len=args.prefix_len, dtype=args.dtype,
        prefix_bias=args.prefix_bias or None, shortlist=args.shortlist,
        shortlist_size=args.shortlist_size, **_constraint_settings(args.constraints))
    print(f"exported {args.workdir} to {out} (jax.export, {args.method}, platforms "
          f"{','.join(args.platforms)})")


def _constraint_settings(counts: tuple[int, ...] | None) -> dict:
    """--constraints C,L as ExportSettings fields (checked there)."""
    if counts is None:
        return {}
    if len(counts) != 2:
        raise ValueError(f"--constraints must be two ints C,L (phrases per sentence, "
                         f"tokens per phrase); got {','.join(map(str, counts))}")
    return {"constraint_count": counts[0], "constraint_len": counts[1]}


def _languages(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source-lang", default=None,
                   help="source language code (default: the run's data.src_lang)")
    p.add_argument("--target-lang", default=None,
                   help="target language code (default: the run's data.tgt_lang)")


def _hf_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--out", required=True,
                   help="folder to write: config.json, generation_config.json, "
                        "model.safetensors, source.spm, target.spm, vocab.json, "
                        "tokenizer_config.json, README.md")
    _languages(p)
    p.add_argument("--license", default=None,
                   help="license identifier for the model card's metadata (e.g. apache-2.0)")
    p.add_argument("--force", action="store_true", help="replace an existing --out directory")


def _needs(module: str, extra: str, what: str):
    """Imports jformer.interop.<module>; a missing engine package exits naming the extra."""
    import importlib

    try:
        return importlib.import_module(f"jformer.interop.{module}")
    except ModuleNotFoundError as e:
        missing = (e.name or "").split(".")[0]
        if missing.startswith("jformer"):
            raise
        raise SystemExit(f"jformer export: error: {what} needs the {missing} package: "
                         f"pip install 'jformer[{extra}]'") from None


def _hf_run(args: argparse.Namespace) -> None:
    import importlib.util

    hf = _needs("huggingface", "marian", "exporting to Hugging Face")
    if importlib.util.find_spec("safetensors") is None:  # imported to write the weights
        raise SystemExit("jformer export: error: exporting to Hugging Face needs the "
                         "safetensors package: pip install 'jformer[marian]'")
    out = hf.export_workdir(args.workdir, args.out, checkpoint_dir=args.checkpoint,
                            step=args.step, source_lang=args.source_lang,
                            target_lang=args.target_lang, license=args.license,
                            force=args.force)
    print(f"exported {args.workdir} to {out} (Hugging Face MarianMTModel)")


def _argos_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--out", required=True,
                   help="package file to write, e.g. translate-en_de.argosmodel")
    _languages(p)
    p.add_argument("--package-version", default="1.0",
                   help="metadata.json's package_version (default: 1.0)")
    p.add_argument("--quantization", choices=CT2_QUANTIZATIONS, default="float32",
                   help="weight type of the CTranslate2 model inside")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")


def _argos_run(args: argparse.Namespace) -> None:
    argos = _needs("argos", "export", "exporting an Argos Translate package")
    out = argos.export_workdir(args.workdir, args.out, checkpoint_dir=args.checkpoint,
                               step=args.step, source_lang=args.source_lang,
                               target_lang=args.target_lang,
                               package_version=args.package_version,
                               quantization=args.quantization, force=args.force)
    print(f"exported {args.workdir} to {out} (Argos Translate package)")


FORMATS = (("ctranslate2", "a CTranslate2 model directory (ctranslate2.Translator)",
            _ct2_arguments, _ct2_run),
           ("jax", "jax.export programs of the translate search, per source bucket and "
                   "platform, with the parameters as an argument (jax, numpy and "
                   "sentencepiece load it)", _jax_arguments, _jax_run),
           ("huggingface", "a Hugging Face transformers MarianMTModel folder "
                           "(from_pretrained loads it without jformer)",
            _hf_arguments, _hf_run),
           ("argos", "an Argos Translate package (.argosmodel: a CTranslate2 model, the "
                     "sentencepiece model, metadata.json)", _argos_arguments, _argos_run))


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_formats(p, FORMATS)


run = run_format
