"""``jformer memory``: what a model's training and decoding take, before they start.

    jformer memory --workdir runs/demo
    jformer memory --config configs/big.py --batch 64 --beam 4 --src-len 256 --tgt-len 256

Prints parameters, gradients, Adam's moments, training activations (an estimate per
token and for one batch of data.max_tokens) and the decode cache of one batch
(jformer.inference.memory; the formulas are in docs/memory.md). Nothing is
initialised: only shapes are computed.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

NAME = "memory"
HELP = "print parameter, optimizer, activation and KV-cache memory of a model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--workdir", help="training run folder (its config.json)")
    src.add_argument("--config", help="config file, e.g. configs/base.py (the vocabulary "
                                      "is data.vocab_size)")
    p.add_argument("--batch", type=int, default=None,
                   help="sentences per decode batch (default: decode.batch_size)")
    p.add_argument("--beam", type=int, default=None, help="beam size (1: greedy or "
                   "sampling; default: decode.beam_size)")
    p.add_argument("--src-len", type=int, default=None,
                   help="source tokens (default: model.max_len)")
    p.add_argument("--tgt-len", type=int, default=None,
                   help="target tokens / output positions (default: model.max_len)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                   help="activation and cache dtype (default: model.dtype)")


def run(args: argparse.Namespace) -> None:
    config, name = _load(args)
    m, e = config.model, config.decode
    batch = e.batch_size if args.batch is None else args.batch
    beam = e.beam_size if args.beam is None else args.beam
    src_len = m.max_len if args.src_len is None else args.src_len
    tgt_len = m.max_len if args.tgt_len is None else args.tgt_len
    dtype = m.dtype if args.dtype is None else args.dtype
    for flag, value in (("--batch", batch), ("--beam", beam), ("--src-len", src_len),
                        ("--tgt-len", tgt_len)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1; got {value}")
    print(f"{name}: d_model {m.d_model}, {m.num_encoder_layers}+{m.num_decoder_layers} "
          f"layers, {m.num_heads} heads, d_ff {m.d_ff}, vocab {m.vocab_size}, {dtype}")
    for label, n, note in memory_rows(config, batch, beam, src_len, tgt_len, dtype):
        print(f"  {label:<44} {_fmt(n):>10} {n:>16,.0f}  {note}".rstrip())


def memory_rows(config, batch: int, beam: int, src_len: int, tgt_len: int, dtype: str
                ) -> list[tuple[str, float, str]]:
    """(label, bytes, note) rows of the table."""
    from jformer.inference import memory

    train = memory.training_bytes(config.model, src_len, tgt_len, dtype)
    per = train.per_token
    rows = max(1, config.data.max_tokens // max(src_len, tgt_len))
    cache = memory.cache_parts(config.model, batch, beam, tgt_len, dtype, src_len)
    count = memory.param_count(config.model)
    return [
        (f"parameters ({count / 1e6:.1f}M, float32)", train.params, ""),
        ("gradients (float32)", train.gradients, ""),
        ("Adam moments (2 x float32)", train.adam, ""),
        ("training activations / source token", per.source,
         f"estimate at {src_len} source tokens"),
        ("training activations / target token", per.target,
         f"estimate at {tgt_len} target tokens"),
        (f"training activations, max_tokens={config.data.max_tokens}",
         rows * (src_len * per.source + tgt_len * per.target),
         f"{rows} rows; per device / (devices x accum_steps)"),
        ("decode cache: self-attention K/V", cache.self_kv,
         f"batch {batch} x beam {beam} x {tgt_len} positions"),
        ("decode cache: cross-attention K/V", cache.cross_kv,
         f"batch {batch} x {src_len} source positions"),
        ("decode cache: tables", cache.tables, "source mask, beam slots"),
        ("decode cache: total", cache.total, "per device: its share of the batch"),
    ]


def _fmt(n: float) -> str:
    from jformer.inference.memory import format_bytes
    return format_bytes(n)


def _load(args: argparse.Namespace):
    """(Config, name) from --workdir's config.json or a --config file."""
    from jformer.workdir import files

    if args.workdir is not None:
        return files.load_config(args.workdir), args.workdir
    path = args.config
    if not os.path.isfile(path):
        raise FileNotFoundError(2, "No such file", path)
    # Config files import their siblings as `configs.base`: the folder above is the root.
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    sys.path.insert(0, root)
    try:
        spec = importlib.util.spec_from_file_location("_jformer_memory_config", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(root)
    if not hasattr(module, "get_config"):
        raise ValueError(f"{path}: a config file defines get_config()")
    from jformer.train.config_checks import validate_config

    raw = module.get_config()
    return validate_config(raw, vocab_size=raw.data.vocab_size), path
