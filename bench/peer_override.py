"""Runs a peer script of ../shared/bench with another training batch or an added model
config, leaving the script itself as it is.

    python bench/peer_override.py SCRIPT [--train-batch N] [--big] -- ARGS...

The peer scripts fix their training batch (``TRAIN_BATCH = 64``) and know the small and
base configs only. bench/scaling.py measures training at other batch sizes and the
paper's big model, so it loads the script as a module, sets ``TRAIN_BATCH`` and adds
"big" to its ``CONFIGS`` (in the script's own keys: 1024 wide, 16 heads, 4096 feed-
forward, 6 + 6 layers, a 32,768 vocabulary, as jformer's bench/bench_train.py "big"),
then calls its ``main()`` with ARGS as its command line. Both scripts read these globals
when a worker runs, so the worker measures exactly what it always does, at that shape.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

# "big" in each peer script's own config keys (its "base" with the paper's big sizes).
BIG = {
    "peer_flax_wmt.py": dict(vocab=32768, d_model=1024, heads=16, ff=4096, layers=6,
                             max_len=256, dropout=0.1),
    "peer_torch.py": dict(vocab=32768, d_model=1024, heads=16, ffn=4096, enc_layers=6,
                          dec_layers=6),
}


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: peer_override.py SCRIPT [--train-batch N] [--big] -- ARGS")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("script")
    p.add_argument("--train-batch", type=int, default=None)
    p.add_argument("--big", action="store_true", help='add the "big" config')
    args = p.parse_args(argv[:cut])
    if os.path.basename(args.script) not in BIG:
        p.error(f"SCRIPT must be one of {sorted(BIG)}; got {args.script!r}")
    if args.train_batch is not None and args.train_batch < 1:
        p.error(f"--train-batch must be >= 1; got {args.train_batch}")
    return args, argv[cut + 1:]


def load(script: str, train_batch: int | None, big: bool):
    """The peer script as a module (its ``__main__`` block not run), overridden."""
    spec = importlib.util.spec_from_file_location("peer_script", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules["peer_script"] = module  # dataclasses and pickling look it up there
    spec.loader.exec_module(module)
    for name in ("TRAIN_BATCH", "CONFIGS", "main"):
        if not hasattr(module, name):
            raise SystemExit(f"{script} has no {name}: not a peer script this wrapper "
                             f"knows")
    if train_batch is not None:
        module.TRAIN_BATCH = train_batch
    if big:
        module.CONFIGS["big"] = dict(BIG[os.path.basename(script)])
    return module


def main(argv: list[str] | None = None) -> None:
    args, rest = _parse(sys.argv[1:] if argv is None else argv)
    module = load(args.script, args.train_batch, args.big)
    sys.argv = [args.script] + rest
    module.main()


if __name__ == "__main__":
    main()
