"""Arguments and helpers shared by the subcommands that load a trained model."""
from __future__ import annotations

import argparse
from typing import Callable

from jformer.config import DECODE_DTYPES, OVERLONG_POLICIES


def add_model_args(p: argparse.ArgumentParser, workdir_help: str | None = None) -> None:
    """--workdir (required unless ``workdir_help`` says what its absence means),
    --checkpoint and --step."""
    p.add_argument("--workdir", required=workdir_help is None,
                   help=workdir_help or "training run folder (config.json, spm.model, "
                                        "checkpoints/)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="checkpoint directory to use instead of <workdir>/checkpoints "
                        "(e.g. an averaged checkpoint)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")


def add_compile_cache_arg(p: argparse.ArgumentParser) -> None:
    """--compile-cache DIR|off (jformer.inference.compile_cache)."""
    p.add_argument("--compile-cache", metavar="DIR|off", default=None,
                   help="persistent XLA compilation cache: a second run loads its programs "
                        "instead of compiling them (default: $JFORMER_COMPILE_CACHE, else "
                        "~/.cache/jformer/xla; off: none)")


def add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=int, default=None, help="beam size (1: greedy); "
                   "default: the run's decode.beam_size")
    p.add_argument("--alpha", type=float, default=None, help="length penalty exponent")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per decode batch")
    p.add_argument("--max-len", type=int, default=None,
                   help="max output tokens (default: decode.max_len_a * len + max_len_b)")
    p.add_argument("--method", choices=("beam", "greedy", "sample"), default="beam")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k best")
    p.add_argument("--seed", type=int, default=0,
                   help="sampling seed; a line's sample depends only on it and the line's "
                        "number (not on --devices or batching)")
    p.add_argument("--overlong", choices=OVERLONG_POLICIES, default=None,
                   help="lines over model.max_len tokens: split (at sentences, clauses, "
                        "spaces; translated whole), truncate or error; sentences: every "
                        "line cut at its sentences, and overlong ones split (default: the "
                        "run's decode.overlong)")
    p.add_argument("--eos-candidates", choices=("all", "top_w"), default=None,
                   help="beam search: which of a step's 2W candidates may finish with EOS; "
                        "all (Flax WMT) or top_w (fairseq, Hugging Face, CTranslate2, "
                        "Marian: their outputs exactly); default: the run's "
                        "decode.eos_candidates")
    p.add_argument("--stop", choices=("exact", "full"), default=None,
                   help="beam search: when a sentence is done; exact (once no alive "
                        "hypothesis can beat its best finished one; Flax WMT, T5X) or full "
                        "(once beam-size hypotheses have finished, as fairseq, Marian, "
                        "CTranslate2, or sooner where exact holds; with top_w); default: "
                        "the run's decode.stop")
    p.add_argument("--shrink-floor", type=int, default=None, metavar="N",
                   help="greedy and beam batches drop finished sentences in halving stages "
                        "down to N sentences (0: never; default: the run's "
                        "decode.shrink_floor)")
    p.add_argument("--continuous", action=argparse.BooleanOptionalAction, default=None,
                   help="beam search: decode in slots each device refills as sentences "
                        "finish (continuous batching) instead of batches (default: the "
                        "run's decode.continuous)")
    p.add_argument("--memory-limit", default=None, metavar="SIZE",
                   help="most bytes a decode batch's KV cache may take per device, e.g. "
                        "2GB or 512MiB: batches shrink to fit (default: the run's "
                        "decode.memory_limit; 0: none)")
    p.add_argument("--dtype", choices=DECODE_DTYPES, default=None,
                   help="decoding precision: auto (float32 on a CPU, the run's model.dtype "
                        "on an accelerator), model (the run's model.dtype), float32, or "
                        "bfloat16 (bf16 weight matrices, activations and KV cache); "
                        "default: the run's decode.dtype")
    p.add_argument("--shortlist", default=None, metavar="FILE",
                   help="a vocabulary shortlist (jformer shortlist): each batch's output "
                        "layer restricted to the target pieces its sources make likely "
                        "(default: the run's decode.shortlist; '' for none)")
    p.add_argument("--devices", type=int, default=None,
                   help="decode on this many local devices, each taking whole batches "
                        "in turn (on a CPU: its cores split into that many devices, one "
                        "search each). Default: on a CPU, one device per core this "
                        "process may use (the largest power of two of them that divides "
                        "the batch size); on an accelerator, 1")


def auto_cpu_devices(batch_size: int, cores: int | None = None) -> int:
    """--devices' default on a CPU: the largest power of two that is at most ``cores``
    (default: the cores this process may use) and divides ``batch_size``. XLA:CPU then
    runs that many searches side by side, each on whole batches (a server's, on its share
    of each batch): on the 2-core Zen 4, the Multi30k model's test2016 at beam 4 took
    14.5 s end to end instead of 18.1 s with the batches split, with the same output, and
    less since they are not (jformer.inference.placement)."""
    import os

    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    devices = 1
    while devices * 2 <= cores and batch_size % (devices * 2) == 0:
        devices *= 2
    return devices


def claim_devices(args: argparse.Namespace) -> None:
    """Sets ``args.devices`` (``--devices``, or :func:`auto_cpu_devices` where it was not
    given) and asks jax for that many CPU devices. Call it before anything creates a jax
    array: jax's device count is fixed when its CPU backend starts (accelerators are
    unaffected). In a process whose backend already runs (tests, a notebook), its
    devices are kept and the default is capped at the CPU devices it has. A second call
    (``load_translator`` after ``translate``'s own) changes nothing."""
    import jax

    explicit = getattr(args, "devices", 1) is not None
    if not explicit:
        args.devices = auto_cpu_devices(args.batch_size or _run_batch_size(args))
    if args.devices > 1:
        try:
            jax.config.update("jax_num_cpu_devices", args.devices)
        except RuntimeError:  # jax already running (in-process use): keep its devices
            pass
    if not explicit:  # never more than there are, and 1 on an accelerator
        cpu = jax.default_backend() == "cpu"
        args.devices = min(args.devices, len(jax.local_devices())) if cpu else 1
        while args.devices & (args.devices - 1):  # a power of two, still a divisor
            args.devices &= args.devices - 1


def _run_batch_size(args: argparse.Namespace) -> int:
    """The run's decode.batch_size; DecodeConfig's default where the run cannot be read
    (loading it then reports why, naming the path)."""
    from jformer.config import DecodeConfig
    from jformer.workdir import files

    try:
        return files.load_config(args.workdir).decode.batch_size
    except (OSError, ValueError):
        return DecodeConfig().batch_size


def load_translator(args: argparse.Namespace):
    # deferred (a fast --help); the programs first, read while the rest imports
    from jformer.inference import compile_cache, programs

    if hasattr(args, "devices"):
        claim_devices(args)
    devices = getattr(args, "devices", 1)
    cache = getattr(args, "compile_cache", None)
    store = programs.open_recent(compile_cache.in_use(cache), args.workdir, args.checkpoint,
                                 args.step, devices)
    from jformer.inference import Translator

    return Translator.from_checkpoint(args.workdir, checkpoint_dir=args.checkpoint,
                                      step=args.step, devices=devices,
                                      decode_cfg=decode_overrides(args), compile_cache=cache,
                                      program_store=store)


def decode_overrides(args: argparse.Namespace):
    """The run's decode config with --overlong / --eos-candidates / --stop / --memory-limit /
    --dtype / --shrink-floor / --continuous / --shortlist applied (None if none was given:
    the run's own)."""
    import dataclasses

    from jformer.workdir import files

    changes = {name: getattr(args, name) for name in ("overlong", "eos_candidates", "stop",
                                                      "memory_limit", "dtype",
                                                      "alignment_layer", "alignment_head",
                                                      "shrink_floor", "continuous",
                                                      "shortlist")
               if getattr(args, name, None) is not None}
    if not changes:
        return None
    if "memory_limit" in changes and changes["memory_limit"].isdigit():
        changes["memory_limit"] = int(changes["memory_limit"])
    return dataclasses.replace(files.load_config(args.workdir).decode, **changes)


def search_kwargs(args: argparse.Namespace) -> dict:
    from jformer.config import JAX_SEED_LIMIT
    from jformer.inference.keys import seed_key

    if not 0 <= args.seed < JAX_SEED_LIMIT:
        raise ValueError(f"--seed must be an int in [0, 2**32) (a larger one would repeat a "
                         f"smaller one's samples); got {args.seed}")
    kwargs = dict(beam_size=args.beam, alpha=args.alpha, batch_size=args.batch_size,
                  max_len=args.max_len, method=args.method, temperature=args.temperature,
                  top_k=args.top_k, rng=seed_key(args.seed))
    if getattr(args, "prefix_bias_beta", None) is not None:
        kwargs["prefix_bias_beta"] = args.prefix_bias_beta
    return kwargs


# One sub-subcommand per format: (name, help, add_arguments(parser), run(args)).
Format = tuple[str, str, Callable[[argparse.ArgumentParser], None],
               Callable[[argparse.Namespace], None]]


def add_formats(p: argparse.ArgumentParser, formats: tuple[Format, ...]) -> None:
    """``jformer export FORMAT`` / ``jformer import FORMAT``: a required sub-subcommand per
    entry of ``formats``; :func:`run_format` then calls the chosen one's ``run``."""
    sub = p.add_subparsers(dest="format", required=True, metavar="FORMAT")
    for name, help_text, add, run in formats:
        parser = sub.add_parser(name, help=help_text, description=help_text)
        add(parser)
        parser.set_defaults(format_run=run)


def run_format(args: argparse.Namespace) -> None:
    args.format_run(args)


def read_parallel(args: argparse.Namespace, first: str, second: str) -> tuple[list[str], list[str]]:
    """The lines of two parallel files, the flags ``--<first>`` and ``--<second>``; a
    ValueError names both files when their line counts differ or they are empty."""
    from jformer.workdir.files import read_lines

    a_path, b_path = getattr(args, first), getattr(args, second)
    a, b = read_lines(a_path), read_lines(b_path)
    if len(a) != len(b):
        raise ValueError(f"--{first} {a_path} has {len(a)} lines but --{second} {b_path} "
                         f"has {len(b)}")
    if not a:
        raise ValueError(f"--{first} {a_path} and --{second} {b_path} are empty: nothing "
                         f"to score")
    return a, b
