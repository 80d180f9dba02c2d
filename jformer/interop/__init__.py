"""Roads out of jformer into other inference engines.

:mod:`jformer.interop.ctranslate2` converts a trained workdir into a CTranslate2 model
directory. The modules here import their engine at import time, so each needs its
optional extra (``pip install 'jformer[export]'``); nothing in jformer imports them
except the command line, and only when asked to export. This file imports nothing, so
the command line's ``--help`` lists the choices below without the engines.
"""

# CTranslate2 weight types an export may hold (CTranslate2's own, less its legacy int16).
CT2_QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                     "float16", "bfloat16")
