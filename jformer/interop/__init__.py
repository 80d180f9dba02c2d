"""Roads out of jformer into other inference engines, and into jformer from other toolkits.

:mod:`jformer.interop.ctranslate2` converts a trained workdir into a CTranslate2 model
directory (it imports CTranslate2: ``pip install 'jformer[export]'``);
:mod:`jformer.interop.ctranslate2_search` holds the ``translate_batch`` options under
which the export searches as jformer does (no import of CTranslate2).
:mod:`jformer.interop.jax_export` writes the translate search as ``jax.export``
programs that jax, numpy and sentencepiece load without jformer.
:mod:`jformer.interop.marian` reads a Hugging Face Marian (OPUS-MT) model directory as
a jformer config and params, :mod:`jformer.interop.marian_workdir` writes it as a
workdir (safetensors, or torch for pytorch_model.bin: ``pip install 'jformer[marian]'``).
Nothing in jformer imports these modules except the command line, and only when asked
to export or import. This file imports nothing, so ``jformer export --help`` lists the
choices below without the engines.
"""

# CTranslate2 weight types an export may hold (CTranslate2's own, less its legacy int16).
CT2_QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                     "float16", "bfloat16")
