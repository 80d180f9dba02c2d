"""Export as an Argos Translate package: a ``.argosmodel`` that ``argostranslate`` installs.

    export_workdir("runs/demo", "translate-en_de-1_0.argosmodel")   # the CLI's call

    import argostranslate.package, argostranslate.translate
    argostranslate.package.install_from_path("translate-en_de-1_0.argosmodel")
    argostranslate.translate.translate("The number is five.", "en", "de")

The package is a zip of one folder (``translate-<from>_<to>-<version>``) holding what
Argos Translate 1.11's loader reads (argostranslate/package.py, ``Package.__init__``;
translate.py, ``PackageTranslation`` and ``apply_packaged_translation``):

- ``metadata.json``: package_version, argos_version, from_code, from_name, to_code,
  to_name, type "translate" (``IPackage.load_metadata_from_json``);
- ``model/``: the CTranslate2 model (:mod:`jformer.interop.ctranslate2`: sources get
  their EOS from the model's config, PAD and BOS are never generated), its sinusoid
  tables long enough for Argos's unlimited output (:data:`ARGOS_MAX_DECODING_LENGTH`;
  learned positions stop at model.max_len, where CTranslate2 raises an error);
- ``sentencepiece.model``: the model Argos segments sources and joins outputs with
  (``SentencePieceTokenizer``): jformer's one shared model, so its pieces are jformer's;
- ``README.md``: the model card (:mod:`jformer.interop.model_card`).

No sentence-boundary model is packaged: Argos then uses MiniSBD for the source language
(``MiniSBDSentencizer``), which downloads its model on first use. Argos decodes with
CTranslate2's beam search (settings.beam_size, 4 by default, length_penalty 0.2), not
jformer's GNMT-penalised one; greedy search (ARGOS_BEAM_SIZE=1) gives jformer's greedy
translations exactly (tests/interop/test_argos.py).

A workdir with separate source and target models (``data.vocab="separate"``, an imported
OPUS-MT model) is refused: a package has one sentencepiece model for both sides.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile

from jformer.interop.ctranslate2 import ExportError, JformerConverter, check_exportable
from jformer.interop.exports import WorkdirModel, output_file, read_workdir
from jformer.interop.model_card import language_name, languages_of, write_card

METADATA, SPM_NAME, MODEL_DIR = "metadata.json", "sentencepiece.model", "model"
ARGOS_VERSION = "1.9"  # the package format of Argos Translate 1.9 on (what 1.11 reads)
# Argos calls translate_batch without max_decoding_length: CTranslate2's default, 256
# output tokens. The sinusoid tables are written this long (the same formula past
# model.max_len), so a long output ends there instead of in CTranslate2's error.
ARGOS_MAX_DECODING_LENGTH = 256


def package_name(source: str, target: str, version: str) -> str:
    """argospm's name of a package: ``translate-en_de-1_0``."""
    return f"translate-{source}_{target}-{version.replace('.', '_')}"


def metadata(source: str, target: str, version: str) -> dict:
    return {"package_version": version, "argos_version": ARGOS_VERSION, "type": "translate",
            "from_code": source, "from_name": language_name(source),
            "to_code": target, "to_name": language_name(target), "links": []}


ARGOS_USAGE = """```python
import argostranslate.package, argostranslate.translate
argostranslate.package.install_from_path("{out}")
print(argostranslate.translate.translate("...", "{source}", "{target}"))
```

Installed packages are what Argos Translate and LibreTranslate translate with. Argos
splits text into sentences with MiniSBD, whose model it downloads on first use."""


def write_package(folder: str, model: WorkdirModel, languages: tuple[str, str],
                  version: str, quantization: str | None, out_name: str) -> None:
    """Writes the package's files into the existing, empty ``folder``."""
    if model.tokenizer.separate:
        raise ExportError(f"data.vocab={model.config.data.vocab!r}: an Argos Translate "
                          "package has one sentencepiece model for source and target; "
                          "this workdir segments them with two (source.spm, target.spm)")
    positions = ARGOS_MAX_DECODING_LENGTH + 1  # the decoder start takes a position
    JformerConverter.from_model(model, positions).convert(os.path.join(folder, MODEL_DIR),
                                                          quantization=quantization)
    with open(model.tokenizer_path, "rb") as src, \
            open(os.path.join(folder, SPM_NAME), "wb") as dst:
        dst.write(src.read())
    with open(os.path.join(folder, METADATA), "w", encoding="utf-8") as f:
        json.dump(metadata(*languages, version), f, indent=2, ensure_ascii=False)
        f.write("\n")
    write_card(folder, model, engine=f"Argos Translate (CTranslate2, "
               f"{quantization or 'float32'} weights)", languages=languages,
               usage=ARGOS_USAGE.format(out=out_name, source=languages[0],
                                        target=languages[1]))


def zip_folder(folder: str, zip_path: str, top: str) -> None:
    """``folder``'s files under the top folder ``top`` of a new zip archive."""
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, _, names in sorted(os.walk(folder)):
            for name in sorted(names):
                path = os.path.join(root, name)
                archive.write(path, os.path.join(top, os.path.relpath(path, folder)))


def export_workdir(workdir: str | os.PathLike, out: str | os.PathLike, *,
                   checkpoint_dir: str | None = None, step: int | None = None,
                   source_lang: str | None = None, target_lang: str | None = None,
                   package_version: str = "1.0", quantization: str | None = None,
                   force: bool = False) -> str:
    """Writes the Argos Translate package ``out`` (a zip; name it ``.argosmodel``) of a
    workdir's checkpoint (latest, or ``step``; from ``checkpoint_dir`` if given).

    ``source_lang``, ``target_lang``: metadata.json's codes (default: config.json's
    data.src_lang / tgt_lang). The file appears whole or not at all; an existing ``out``
    is an error unless ``force``. Returns ``out``.
    """
    if not (isinstance(package_version, str) and package_version.strip()):
        raise ValueError(f"--package-version must be a version such as 1.0; got "
                         f"{package_version!r}")
    with output_file(out, force) as tmp_zip:
        model = read_workdir(workdir, checkpoint_dir, step, check=check_exportable,
                             error=ExportError)
        languages = languages_of(model, source_lang, target_lang)
        with tempfile.TemporaryDirectory(dir=os.path.dirname(tmp_zip)) as folder:
            write_package(folder, model, languages, package_version, quantization,
                          os.path.basename(os.fspath(out)))
            zip_folder(folder, tmp_zip, package_name(*languages, package_version))
    return os.path.abspath(os.fspath(out))
