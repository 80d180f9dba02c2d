"""Decoding speed: generated tokens/s with the KV cache vs recomputing the prefix.

    python bench/bench_decode.py [--configs small,base] [--batches 1,32] [--beams 1,4]
        [--dtype float32|bfloat16] [--devices N] [--quick] [--no-floor] [--json PATH]

Random float32 parameters (nothing is downloaded; ``--dtype bfloat16`` computes in bf16
over them, as ``model.dtype=bfloat16`` does), source length 32, EXACTLY 32
generated tokens per sentence: EOS is forbidden until the end (min_len = max_len), so
every search runs all its steps; beam search counts 32 tokens per sentence, not per
beam. "cached" times ``jformer.inference.translator.decode_batch`` (encoder + cache init + search,
one compiled program); "recompute" is the baseline defined here: a step function that
re-runs the teacher-forced decoder over the whole (fixed-size) output buffer at every
step. Both must pick the same tokens (checked and printed). ``--devices N`` makes N CPU
devices of the cores (``jax_num_cpu_devices``) and decodes every batch that N divides
data-parallel over them (``decode_batch_parallel``: one search per device, as
CTranslate2's inter_threads runs one per worker); batch 1 stays on one. Times are the median of
--repeats calls after a warm-up, with ``block_until_ready``; compilation is timed
separately (AOT lower + compile). Then the batch 1 weight-read bounds: the float32 weights
every decode step reads (decoder layers + output matrix) over the DRAM read rate, and
over the rate of re-reading an array of their size, which stays in the L3 (``--no-floor``
skips them). Last,
the cache vs recompute ratio at 64 tokens. ``--json`` writes the rows; peers (the Flax WMT
example, Hugging Face Marian, CTranslate2) are measured beside them, in the same run, by
``bench/compare.py``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from jformer import search as decode  # noqa: E402
from jformer.ops import resolve, transformer  # noqa: E402
from jformer.search.beam import beam_search  # noqa: E402
from jformer.config import ModelConfig  # noqa: E402
from jformer.model.masks import NEG_INF  # noqa: E402
from jformer.model.transformer import Transformer  # noqa: E402
from jformer.workdir.files import write_json  # noqa: E402
from jformer.mesh import make_mesh  # noqa: E402
from jformer.inference.batch_decode import SearchSpec, decode_batch, decode_batch_parallel  # noqa: E402

CONFIGS = {
    "small": ModelConfig(vocab_size=8192, d_model=256, num_heads=4, d_ff=1024,
                         num_encoder_layers=3, num_decoder_layers=3, dropout_rate=0.0),
    "base": ModelConfig(vocab_size=32768, d_model=512, num_heads=8, d_ff=2048,
                        num_encoder_layers=6, num_decoder_layers=6, dropout_rate=0.0),
}
SRC_LEN, GEN_LEN, RATIO_LEN, ALPHA = 32, 32, 64, 0.6
RECOMPUTE_MAX_ROWS = {"small": 32, "base": 4}  # --recompute auto: batch * beam limit
TARGET_CACHE_RATIO = 5.0


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="small,base")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--repeats", type=int, default=5, help="timed calls (median)")
    p.add_argument("--chunk-size", type=int, default=8)
    p.add_argument("--ops", default="auto", choices=("auto", "plain", "cpu"),
                   help="model.ops of the decoded model")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "int8"),
                   help="compute dtype (the references are float32); int8: float32 "
                        "activations and int8 step products (decode.dtype=int8)")
    p.add_argument("--devices", type=int, default=1,
                   help="CPU devices to split the cores into; batches they divide are "
                        "decoded data-parallel over them")
    p.add_argument("--rows-kernel", default="on", choices=("on", "off"),
                   help="on: few-row float32 steps of \"cpu\" kernels read packed weights "
                        "(jformer.kernels.rows_matmul), as Translator does; off: XLA's dot")
    p.add_argument("--shortlist", type=int, default=0, metavar="C",
                   help="decode over a vocabulary shortlist of C ids (decode.shortlist; "
                        "0: the full vocabulary)")
    p.add_argument("--recompute", default="auto", choices=("auto", "all", "none"),
                   help="auto: time the recompute baseline only where it takes seconds "
                        "(and the 64-token ratio at batch 1)")
    p.add_argument("--quick", action="store_true",
                   help="small config, 3 repeats, recompute only at batch 1 greedy")
    p.add_argument("--no-floor", dest="floor", action="store_false",
                   help="skip the batch 1 weight-read bounds (two bandwidth probes)")
    p.add_argument("--json", default="", metavar="PATH",
                   help="also write the rows (tokens/s under 'cached') as JSON")
    return p.parse_args()


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def recompute_search(params, inputs_BS, *, model_cfg: ModelConfig, spec: SearchSpec):
    """The baseline: every step re-runs the teacher-forced decoder on the output buffer."""
    model = transformer(model_cfg)
    variables = {"params": params}
    batch, width = inputs_BS.shape[0], spec.beam_size
    encoded_BSD = model.apply(variables, inputs_BS, method=Transformer.encode)
    # Constants of the step (not search state, so beam search does not reorder them);
    # [B, ...] -> [B*W, ...] rows b*W + w, like the search's own tiling.
    encoded_ND = jnp.repeat(encoded_BSD, width, axis=0)
    inputs_NS = jnp.repeat(inputs_BS, width, axis=0)
    vocab_V = jnp.arange(model_cfg.vocab_size)
    banned_V = (vocab_V == model_cfg.pad_id) | (vocab_V == model_cfg.bos_id)

    def step_fn(tokens_N, step, prefix_NT):
        # prefix_NT holds the outputs so far; unwritten slots hold BOS (not PAD, which
        # teacher forcing would mask as padding). Position step sees outputs < step only.
        prefix_NT = jnp.where(step > 0, jax.lax.dynamic_update_slice(
            prefix_NT, tokens_N[:, None], (0, jnp.maximum(step - 1, 0))), prefix_NT)
        logits_NTV = model.apply(variables, encoded_ND, inputs_NS, prefix_NT,
                                 method=Transformer.decode)
        logits_NV = jax.lax.dynamic_index_in_dim(logits_NTV, step, axis=1, keepdims=False)
        return jnp.where(banned_V, NEG_INF, logits_NV), prefix_NT

    prefix_BT = jnp.full((batch, spec.max_len), model_cfg.bos_id, jnp.int32)
    common = dict(batch_size=batch, max_len=spec.max_len, chunk_size=spec.chunk_size,
                  min_len=spec.min_len, bos_id=model_cfg.bos_id, eos_id=model_cfg.eos_id,
                  pad_id=model_cfg.pad_id)
    if spec.method == "beam":
        return beam_search(step_fn, prefix_BT, beam_size=width, alpha=ALPHA, **common).tokens
    return decode.greedy_search(step_fn, prefix_BT, **common).tokens[:, None]


_RECOMPUTE = jax.jit(recompute_search, static_argnames=("model_cfg", "spec"))


def _time(compiled, args, repeats: int, stat=statistics.median) -> float:
    """``stat`` (default: the median) of ``repeats`` timed calls after a warm-up."""
    jax.block_until_ready(compiled(*args))  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return stat(times)


def _compile(jitted, args, **static):
    start = time.perf_counter()
    compiled = jitted.lower(*args, **static).compile()
    return compiled, time.perf_counter() - start


def prepare(name: str, params, batch: int, beam: int, gen_len: int, chunk_size: int,
            dtype: str = "float32", devices: int = 1, rows_kernel: bool = True,
            shortlist: int = 0):
    """The compiled cached search of one setting, ready to time: (compiled, args, spec,
    row), ``row`` being the setting's table row with its compile_s and no speed yet."""
    int8 = dtype == "int8"
    cfg = dataclasses.replace(CONFIGS[name], dtype="float32" if int8 else dtype)
    rng = np.random.default_rng(batch * 7 + beam)
    inputs_BS = rng.integers(4, cfg.vocab_size, (batch, SRC_LEN)).astype(np.int32)
    inputs_BS[:, -1] = cfg.eos_id
    spec = SearchSpec("beam" if beam > 1 else "greedy", beam, max_len=gen_len,
                      min_len=gen_len, chunk_size=chunk_size)
    # Prepared once per model, like Translator does (not part of a decode call).
    # (rows_kernel off: as a portable program, without the packed weights)
    model = Transformer(cfg, resolve(cfg, int8=int8))
    prepared = jax.block_until_ready(
        model.ops.cache.prepare(model, params, portable=not rows_kernel))
    args = (params, prepared, inputs_BS, np.ones(batch, bool), jax.random.key(0),
            np.float32(ALPHA if beam > 1 else 0.0), np.float32(1.0))
    if shortlist:  # the output layer over the first `shortlist` ids (EOS among them)
        args += (None, np.float32(0.0), None, None, np.arange(shortlist, dtype=np.int32))
    static = dict(model_cfg=cfg, ops=model.ops, spec=spec)
    split = devices > 1 and batch % devices == 0
    if split:
        mesh = make_mesh(jax.devices()[:devices])
        replicated = NamedSharding(mesh, PartitionSpec())
        args = (jax.device_put(params, replicated), jax.device_put(prepared, replicated),
                *args[2:])
        compiled, compile_s = _compile(decode_batch_parallel, args, mesh=mesh, **static)
    else:
        compiled, compile_s = _compile(decode_batch, args, **static)
    row = dict(config=name, batch=batch, beam=beam, compile_s=compile_s,
               devices=devices if split else ("1" if devices == 1 else f"1 of {devices}"),
               cached=None, recompute=None, same=None)
    return compiled, args, spec, row


def measure(name: str, params, batch: int, beam: int, gen_len: int, repeats: int,
            recompute: bool, chunk_size: int, dtype: str = "float32", devices: int = 1,
            rows_kernel: bool = True, shortlist: int = 0) -> dict:
    """Tokens/s of the cached search (and of the recompute baseline if asked)."""
    compiled, args, spec, row = prepare(name, params, batch, beam, gen_len, chunk_size, dtype,
                                        devices, rows_kernel, shortlist)
    row["cached"] = batch * gen_len / _time(compiled, args, repeats)
    if recompute:
        cfg = dataclasses.replace(CONFIGS[name], dtype=dtype)
        r_args = (params, args[2])
        r_compiled, _ = _compile(_RECOMPUTE, r_args, model_cfg=cfg, spec=spec)
        row["recompute"] = batch * gen_len / _time(r_compiled, r_args, repeats)
        cached_tokens = np.asarray(compiled(*args).tokens)
        row["same"] = bool(np.array_equal(cached_tokens, np.asarray(r_compiled(*r_args))))
    return row


def read_bandwidth(total_bytes: int = 256 * 2 ** 20, repeats: int = 10) -> float:
    """Best GB/s of a jitted max-reduction over a float32 array of ``total_bytes``,
    read again and again: 256 MB (far over the caches) gives the DRAM rate; an array of
    one decode step's weights (18.5 MiB for small, under the 32 MB L3) gives the rate at
    which a step can re-read weights that stayed in the cache since the last step."""
    data = jnp.ones((total_bytes // 4,), jnp.float32)
    compiled = jax.jit(jnp.max).lower(data).compile()
    return data.nbytes / 1e9 / _time(compiled, (data,), repeats, stat=min)


def step_weight_bytes(cfg: ModelConfig, params) -> int:
    """float32 bytes every decode step reads whatever the batch: all decoder layers'
    weights (the cross K/V projections excepted: they run once per source) and the
    [D, V] output matrix. The encoder and embedding lookups are left out."""
    leaves = jax.tree_util.tree_leaves_with_path(params["decoder"])
    layer_bytes = sum(x.size * 4 for path, x in leaves
                      if "layer_" in jax.tree_util.keystr(path)
                      and getattr(path[-1], "key", None) != "kv_kernel")
    return layer_bytes + cfg.vocab_size * cfg.d_model * 4


def _want_recompute(args: argparse.Namespace, name: str, batch: int, beam: int,
                    gen_len: int) -> bool:
    if args.dtype == "int8" or args.shortlist:  # the baseline is float32, full vocabulary
        return False
    if args.recompute != "auto":
        return args.recompute == "all"
    if args.quick or gen_len > GEN_LEN:
        return batch * beam == 1
    # The baseline re-runs the decoder on every buffer position at every step, so its
    # cost grows with rows x length^2: skip the settings that would take minutes.
    return batch * beam <= RECOMPUTE_MAX_ROWS[name]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def print_table(rows: list[dict]) -> None:
    print("\n| config | batch | beam | devices | cached tok/s | recompute tok/s | "
          "cache/recompute | same tokens | compile s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = None if r["recompute"] is None else r["cached"] / r["recompute"]
        print(f"| {r['config']} | {r['batch']} | {r['beam']} | {r['devices']} | "
              f"{_fmt(r['cached'])} | "
              f"{_fmt(r['recompute'])} | {'-' if ratio is None else f'{ratio:.1f}x'} | "
              f"{'-' if r['same'] is None else ('yes' if r['same'] else 'NO')} | "
              f"{r['compile_s']:.1f} |")


def print_memory_floor(configs: list[str], rows: list[dict]) -> None:
    """Batch 1 reads every decoder weight (float32) each step. Prints the tokens/s that
    allows when the weights come from DRAM and when they stay in the L3 between steps
    (the read rate of a weights-sized array); measured rates above the DRAM bound show
    the weights stay cached."""
    dram = read_bandwidth()
    print(f"\nBatch 1 weight reads: each step reads the decoder's float32 weights (decoder "
          f"layers + output matrix). Bounds on a sentence's tokens/s from reading them "
          f"alone (encoder, cache, top-k and compute not counted): from DRAM "
          f"({dram:.1f} GB/s, 256 MB read repeatedly) and from cache (the rate of reading "
          f"an array of the weights' size repeatedly):\n")
    print("| config | weights read per step | DRAM-bound tok/s | cache read GB/s | "
          "cache-bound tok/s | measured (batch 1) | weights read at |")
    print("|---|---|---|---|---|---|---|")
    for name in configs:
        cfg = CONFIGS[name]
        dummy = jnp.zeros((1, 4), jnp.int32)
        shapes = jax.eval_shape(lambda: transformer(cfg).init(jax.random.key(0), dummy,
                                                              dummy))["params"]
        step_bytes = step_weight_bytes(cfg, shapes)
        cached = read_bandwidth(step_bytes, repeats=30)
        batch1 = [r for r in rows if r["config"] == name and r["batch"] == 1]
        measured = "; ".join(f"beam {r['beam']}: {r['cached']:,.0f}" for r in batch1) or "-"
        reads = "; ".join(f"beam {r['beam']}: {step_bytes / 1e9 * r['cached']:.1f} GB/s"
                          for r in batch1) or "-"
        print(f"| {name} | {step_bytes / 2 ** 20:.1f} MiB | {dram * 1e9 / step_bytes:,.0f} | "
              f"{cached:.1f} | {cached * 1e9 / step_bytes:,.0f} | {measured} | {reads} |")


def main(args: argparse.Namespace) -> None:
    if args.devices > 1:  # before jax starts its CPU backend
        jax.config.update("jax_num_cpu_devices", args.devices)
    configs = ["small"] if args.quick else args.configs.split(",")
    for name in CONFIGS:  # every measurement below builds its model from these
        CONFIGS[name] = dataclasses.replace(CONFIGS[name], ops=args.ops)
    repeats = 3 if args.quick else args.repeats
    # what the resolved set does with --rows-kernel on: a set that packs nothing (a CPU
    # without AVX-512F, rows_matmul.fits_cpu) decodes over XLA's dot either way
    packs = args.rows_kernel == "on" and getattr(resolve(CONFIGS[configs[0]]).cache,
                                                 "pack", False)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPUs; "
          f"{args.dtype}, random params, source length {SRC_LEN}, {GEN_LEN} generated tokens "
          f"per sentence, median of {repeats} calls, model.ops {args.ops}, "
          f"rows kernel {args.rows_kernel} (packed weights: {'yes' if packs else 'no'}), "
          f"shortlist {args.shortlist or 'none'}")
    rows, ratio_rows = [], []
    for name in configs:
        cfg = CONFIGS[name]
        dummy = jnp.zeros((1, 4), jnp.int32)
        params = jax.jit(transformer(cfg).init)(jax.random.key(0), dummy, dummy)["params"]
        for batch in _ints(args.batches):
            for beam in _ints(args.beams):
                row = measure(name, params, batch, beam, GEN_LEN, repeats,
                              _want_recompute(args, name, batch, beam, GEN_LEN),
                              args.chunk_size, args.dtype, args.devices,
                              args.rows_kernel == "on", args.shortlist)
                rows.append(row)
                print(f"  {name} batch {batch} beam {beam}: {row['cached']:,.0f} tok/s "
                      f"cached, {_fmt(row['recompute'])} recompute", flush=True)
        for batch in _ints(args.batches):
            if _want_recompute(args, name, batch, 1, RATIO_LEN):
                ratio_rows.append(measure(name, params, batch, 1, RATIO_LEN, repeats, True,
                                          args.chunk_size, args.dtype, 1,
                                          args.rows_kernel == "on"))
    print_table(rows)
    if args.json:
        write_json(args.json, {"dtype": args.dtype, "src_len": SRC_LEN, "gen_len": GEN_LEN,
                               "rows": rows, "ratio_rows": ratio_rows})
    if args.floor:
        print_memory_floor(configs, rows)
    if not ratio_rows:
        return
    print(f"\nCache vs recompute at {RATIO_LEN} generated tokens (greedy); target >= "
          f"{TARGET_CACHE_RATIO:.0f}x:\n")
    print("| config | batch | cached tok/s | recompute tok/s | ratio | same tokens | target |")
    print("|---|---|---|---|---|---|---|")
    for r in ratio_rows:
        ratio = r["cached"] / r["recompute"]
        print(f"| {r['config']} | {r['batch']} | {_fmt(r['cached'])} | {_fmt(r['recompute'])} "
              f"| {ratio:.1f}x | {'yes' if r['same'] else 'NO'} | "
              f"{'met' if ratio >= TARGET_CACHE_RATIO else 'MISSED'} |")


if __name__ == "__main__":
    main(_parse())
