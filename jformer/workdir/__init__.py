"""A training workdir on disk: its file names, atomic writes, checkpoints, averaging.

    files        every file name in a workdir and its one reader/writer (config.json,
                 the tokenizer files, metrics.jsonl, the lock), atomic writes, JSON,
                 UTF-8 text lines
    checkpoint   orbax checkpoints of the train state and data position, the newest and
                 (train.keep_best) the best by validation kept; restore_params (the
                 params, or their moving average where train.ema_decay kept one)
    metrics      metrics.jsonl read back: its rows, validation figures by step, the best
    averaging    the mean of the last K checkpoints' params (paper 6.1), or of the best K
                 by validation, written as a params-only checkpoint that restore_params
                 reads
    flat         a params tree under flat names ("decoder/.../kernel") and back
    tree_diff    where two trees of arrays differ, one line each, for errors

A foundation: it imports nothing of jformer above jformer.config and jformer.types.
Reading a whole run for inference (config, tokenizer and params together) needs the
tokenizer, so it lives above, in jformer.inference.restore.

Import the modules, not this package: ``from jformer.workdir import files`` (importing
the package loads neither jax nor orbax).
"""
