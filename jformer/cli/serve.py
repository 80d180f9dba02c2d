"""``jformer serve``: the HTTP translation API, web page and metrics for a trained model.

    jformer serve --workdir runs/demo [--checkpoint DIR] [--host 127.0.0.1] [--port 8000]

Binds loopback by default (put a reverse proxy in front to expose it). Bad paths fail
before the port is bound; the model then loads and compiles while /v1/health answers
(/v1/ready turns 200 when done). SIGTERM drains the requests in flight and exits 0.
docs/serving.md has the API, the limits and a process-manager unit.
"""
from __future__ import annotations

import argparse
import dataclasses

from jformer.cli.common import add_compile_cache_arg, add_model_args

NAME = "serve"
HELP = "serve a trained model over HTTP: JSON API, web page, Prometheus metrics"

# ServeLimits field -> (type, help); the flag is the field with dashes.
LIMIT_FLAGS = {
    "max_body_bytes": (int, "largest request body in bytes (over it: 413)"),
    "max_sentences": (int, "most lines per request, over all its texts (413)"),
    "max_chars": (int, "most characters per text (413)"),
    "max_beam": (int, "largest beam_size a request may ask for (422)"),
    "max_batch": (int, "sentences per decoder batch (default: the run's "
                       "decode.batch_size)"),
    "max_batch_tokens": (int, "padded source tokens per decoder batch"),
    "max_wait_ms": (float, "how long a batch waits for more sentences once one is "
                           "queued"),
    "max_queue": (int, "sentences waiting for a batch; beyond it: 503 with Retry-After"),
    "timeout_s": (float, "per-request deadline in seconds (504)"),
    "warmup_buckets": (int, "compile the default search for this many of the smallest "
                            "length buckets, every batch size, before ready (0: none; "
                            "default: every bucket)"),
    "drain_notice_s": (float, "on SIGTERM, keep listening this long first, /v1/ready "
                              "answering 503, so a load balancer sees the drain"),
    "drain_s": (float, "on SIGTERM, how long requests in flight may take to finish"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jformer.serve.limits import ServeLimits

    add_model_args(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default loopback; 0.0.0.0 exposes the server)")
    p.add_argument("--port", type=int, default=8000, help="0: a free port (see --port-file)")
    p.add_argument("--port-file", metavar="PATH", default=None,
                   help="once listening, write the bound port to this file")
    p.add_argument("--devices", type=int, default=1,
                   help="decode each batch data-parallel over this many local devices "
                        "(--max-batch must be a multiple; with --continuous each device "
                        "holds its own slots)")
    p.add_argument("--continuous", action=argparse.BooleanOptionalAction, default=None,
                   help="beam requests join running slots as other sentences finish "
                        "(continuous batching) instead of waiting for a batch (default: "
                        "the run's decode.continuous)")
    defaults = ServeLimits()
    limits = p.add_argument_group("limits and batching")
    for name, (kind, text) in LIMIT_FLAGS.items():
        default = getattr(defaults, name)
        shown = "" if default is None else f" (default {default})"
        limits.add_argument("--" + name.replace("_", "-"), type=kind, default=default,
                            metavar="N" if kind is int else "X",
                            help=text + shown)
    libre = p.add_argument_group("LibreTranslate API (POST /translate, /detect, GET "
                                 "/languages)")
    libre.add_argument("--languages", metavar="SRC:TGT", default=None,
                       help="the language codes the model reads and writes, e.g. en:de "
                            "(default: the run's data.src_lang and data.tgt_lang)")
    libre.add_argument("--api-keys", metavar="FILE", default=None,
                       help="answer /translate and /detect only with one of these keys "
                            "(one per line) in api_key; 403 otherwise")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument("--no-access-log", action="store_true", help="no line per request")
    add_compile_cache_arg(p)


def run(args: argparse.Namespace) -> None:
    try:
        import fastapi, prometheus_client, swagger_ui_bundle, uvicorn  # noqa: E401, F401
    except ImportError as e:
        raise ValueError(f"needs the serve extra: pip install -e '.[serve]' (missing: "
                         f"{e.name})") from None
    import logging
    import warnings

    import jax

    from jformer.inference import OverlongWarning, compile_cache
    from jformer.serve import create_app
    from jformer.serve.api_keys import ApiKeys
    from jformer.serve.languages import LanguagePair
    from jformer.serve.limits import ServeLimits
    from jformer.serve.loading import ModelSource
    from jformer.serve.server import serve

    limits = ServeLimits(**{f.name: getattr(args, f.name)
                            for f in dataclasses.fields(ServeLimits)})
    if args.max_batch is not None and args.max_batch % args.devices:
        raise ValueError(f"--max-batch ({args.max_batch}) must be a multiple of --devices "
                         f"({args.devices})")
    if not 0 <= args.port < 65536:
        raise ValueError(f"--port must be in [0, 65535]; got {args.port}")
    languages = None if args.languages is None else LanguagePair.parse(args.languages)
    api_keys = None if args.api_keys is None else ApiKeys.read(args.api_keys)
    source = ModelSource(args.workdir, args.checkpoint, args.step, args.devices, languages,
                         args.continuous)
    source.check()  # a wrong path fails here, before the port is bound
    if args.devices > 1:  # before jax starts its CPU backend (cli.common.load_translator)
        try:
            jax.config.update("jax_num_cpu_devices", args.devices)
        except RuntimeError:
            pass
    compile_cache.enable(args.compile_cache)  # the process's; the Translator keeps it
    logging.getLogger("absl").setLevel(logging.ERROR)
    # The server logs overlong lines under their request field (jformer.serve.translation);
    # the Translator's warning would name a row of a shared batch.
    warnings.filterwarnings("ignore", category=OverlongWarning)
    app = create_app(source.load, limits, devices=args.devices, api_keys=api_keys)
    error = serve(app, args.host, args.port, log_level=args.log_level,
                  access_log=not args.no_access_log, port_file=args.port_file)
    if error is not None:
        raise error if isinstance(error, (OSError, ValueError)) else RuntimeError(
            f"loading the model failed: {type(error).__name__}: {error}")
