"""Roads out of jformer into other inference engines.

:mod:`jformer.interop.ctranslate2` converts a trained workdir into a CTranslate2 model
directory. The modules here import their engine at import time, so each needs its
optional extra (``pip install 'jformer[export]'``); nothing in jformer imports them
except the command line, and only when asked to export.
"""
