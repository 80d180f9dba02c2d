"""Roads out of jformer into other inference engines.

:mod:`jformer.interop.ctranslate2` converts a trained workdir into a CTranslate2 model
directory (it imports CTranslate2: ``pip install 'jformer[export]'``);
:mod:`jformer.interop.ctranslate2_search` holds the ``translate_batch`` options under
which the export searches as jformer does (no import of CTranslate2).
:mod:`jformer.interop.jax_export` writes the translate search as ``jax.export``
programs that jax, numpy and sentencepiece load without jformer. Nothing in jformer
imports these modules except the command line, and only when asked to export.
This file imports nothing, so ``jformer export --help`` lists the choices below
without the engines.
"""

# CTranslate2 weight types an export may hold (CTranslate2's own, less its legacy int16).
CT2_QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                     "float16", "bfloat16")
