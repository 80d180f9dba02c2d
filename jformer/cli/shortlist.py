"""``jformer shortlist``: learn a vocabulary shortlist from a run's training pairs
(:mod:`jformer.inference.shortlist`); ``--shortlist FILE`` then restricts each decode
batch's output layer to it."""
from __future__ import annotations

import argparse
import os

NAME = "shortlist"
HELP = "learn a vocabulary shortlist (source piece -> likely target pieces) from the run's training pairs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True, help="training run folder (config.json, spm.model)")
    p.add_argument("--out", default=None,
                   help="output file (default: <workdir>/shortlist.npz)")
    p.add_argument("--top", type=int, default=20,
                   help="target pieces kept per source piece, by p(target | source)")
    p.add_argument("--frequent", type=int, default=100,
                   help="the most frequent target pieces, which every batch keeps")
    p.add_argument("--score", choices=("p", "dice"), default="p",
                   help="how a source piece's targets are ranked: p(target | source), or "
                        "Dice's 2 c(s, t) / (c(s) + c(t)), which favours rarer targets")
    p.add_argument("--max-pairs", type=int, default=1_000_000,
                   help="learn from the first N training pairs (0: all)")


def run(args: argparse.Namespace) -> None:
    from jformer.data.sources import load_split
    from jformer.data.tokenizer import Tokenizer
    from jformer.inference import shortlist
    from jformer.workdir import files

    if not os.path.isdir(args.workdir):
        raise FileNotFoundError(f"workdir not found: {args.workdir}")
    if args.top < 1 or args.frequent < 0 or args.max_pairs < 0:
        raise ValueError(f"--top must be >= 1, --frequent and --max-pairs >= 0; got "
                         f"{args.top}, {args.frequent}, {args.max_pairs}")
    config = files.load_config(args.workdir)
    tokenizer = Tokenizer.load(files.tokenizer_path(config.data, args.workdir))
    pairs = load_split(config.data, "train")
    if args.max_pairs:
        pairs = pairs[:args.max_pairs]
    if not pairs:
        raise ValueError(f"{args.workdir}: the run's training split has no pairs to learn from")
    sources = tokenizer.encode([s for s, _ in pairs], add_eos=False, side="source")
    targets = tokenizer.encode([t for _, t in pairs], add_eos=False, side="target")
    cfg = config.model
    learned = shortlist.learn(zip(sources, targets), cfg.vocab_size, args.top, args.frequent,
                              exclude=[i for i in (cfg.pad_id, cfg.bos_id) if i >= 0],
                              score=args.score)
    out = args.out or os.path.join(args.workdir, "shortlist.npz")
    learned.save(out)
    sizes = [len(learned.targets[learned.offsets[s]:learned.offsets[s + 1]])
             for s in range(cfg.vocab_size)]
    print(f"learned a shortlist from {len(pairs)} pairs: {len(learned.frequent)} frequent "
          f"pieces, up to {args.top} per source piece ({sum(sizes)} entries); wrote {out}")
