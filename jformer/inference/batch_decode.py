"""One batch of sources to hypotheses, as one compiled program (encoder, cache, search).

:func:`decode_batch` runs the encoder once, projects the cross-attention keys and values
once per source, and runs a search of :mod:`jformer.search` over the cached decoder step;
:func:`decode_batch_parallel` splits the batch over the devices of a one-axis mesh.
:class:`SearchSpec` holds the static settings (part of the jit cache key); the length
penalty and the sampling temperature are traced, so sweeping them reuses the program.
"""
from __future__ import annotations

import collections
import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jformer import search
from jformer.config import ModelConfig
from jformer.mesh import AXIS
from jformer.kernels import rows_matmul
from jformer.kernels.decode_cache import reorder_slots
from jformer.model import DecodeCache, Transformer
from jformer.model.layers import dtype_of, kernels_of
from jformer.types import NEG_INF, Array, PyTree

_TRACES: collections.Counter = collections.Counter()  # (inputs shape, spec) -> traces


@dataclasses.dataclass(frozen=True)
class SearchSpec:
    """The static (compile-time) settings of one search; part of the jit cache key.

    The length-penalty ``alpha`` and the sampling ``temperature`` are not here: they are
    traced arguments of :func:`decode_batch`, so sweeping them does not recompile.
    """

    method: str = "greedy"  # greedy | beam | sample
    beam_size: int = 1
    max_len: int = 32  # output positions (the cache length)
    min_len: int = 0  # EOS forbidden before this position (benchmarks force lengths)
    top_k: int = 0
    chunk_size: int = 8
    n_best: int = 1  # beam: stop a row once this many finished ones can't be beaten
    eos_candidates: str = "all"  # beam: which of the 2W candidates may finish (all | top_w)


def trace_count() -> int:
    """How many times the batch decoder has been traced (= compiled) in this process."""
    return sum(_TRACES.values())


def output_matrix(model_cfg: ModelConfig, params: PyTree) -> Array | None:
    """For "cpu" kernels, the tied output embedding transposed to [D, V] once (None for an
    untied output, or plain kernels).

    Tied logits are ``y [N, D] @ embedding [V, D]^T``; XLA:CPU's dot transposes the [V, D]
    matrix at every decode step, while it reads a [D, V] copy in place. The embedding
    lookup keeps reading rows of the [V, D] matrix.
    """
    if not model_cfg.tie_output or not model_cfg.cpu_kernels:
        return None
    # In the compute dtype (as output_layer gives it): a bf16 step reads it unconverted.
    return _output_DV(model_cfg, params)


@functools.partial(jax.jit, static_argnums=0)
def _output_DV(model_cfg: ModelConfig, params: PyTree) -> Array:
    """The output projection's weights (tied: the embedding) as [D, V], compute dtype."""
    return Transformer(model_cfg).apply({"params": params},
                                        method=Transformer.output_layer)[0].T


def packed_weights(model_cfg: ModelConfig, params: PyTree) -> PyTree | None:
    """For "cpu" kernels computing in float32 on the CPU, the decoder's weight matrices
    packed once for :mod:`jformer.kernels.rows_matmul` (its variable collection); None
    otherwise, or where its library cannot be built (decoding then keeps XLA's dot)."""
    if (not model_cfg.cpu_kernels or dtype_of(model_cfg) != jnp.float32
            or jax.default_backend() != "cpu" or not rows_matmul.available()):
        return None
    return rows_matmul.pack_decoder(params["decoder"], _output_DV(model_cfg, params))


# Decode steps of at most this many rows (batch x beam) read the packed weights, larger
# ones XLA's dot: measured small float32 against XLA's dot, the kernel gave 1.2-3x at 1-32
# rows, 1.15-1.25x at 64 and 1.01-1.04x at 128 (kernels/README.md, "Decode steps over
# packed weights"); past 128 it is not measured.
PACKED_ROWS_MAX = 128


def make_step_fn(model: Transformer, params: PyTree, cache: DecodeCache,
                 valid_B: Array | None = None, output_DV: Array | None = None,
                 packed: PyTree | None = None) -> tuple[search.StepFn, PyTree]:
    """The cached decoder step as a :mod:`jformer.search.loop` step function.

    Returns (step_fn, state). ``state`` is the self-attention cache (self_k, self_v, slot),
    the only per-hypothesis part; cross-attention K/V and the source mask [B, ...] are
    closed over, so ``step_fn`` takes any N = B*G rows (row b*G + g belongs to source b)
    of a cache with N rows. A "cpu" slot-addressed cache (``init_decode_state(...,
    beam_size=W)``) takes N = B*W rows and goes to beam search with
    ``reorder=``:func:`reorder_beam_state`.
    PAD and BOS are never valid outputs, so their logits are set to NEG_INF before the
    softmax (a generated PAD would vanish from the text and be masked as padding by
    teacher forcing; a vocabulary without BOS, bos_id -1, bans PAD alone).
    Rows whose ``valid_B`` is False (batch padding) get logits that force EOS.
    ``output_DV``: :func:`output_matrix` of the params ("cpu" kernels).
    ``packed``: :func:`packed_weights` of the params, read by steps of at most
    ``PACKED_ROWS_MAX`` rows.
    """
    cfg = model.cfg
    vocab_V = jnp.arange(cfg.vocab_size)
    banned_V = (vocab_V == cfg.pad_id) | (vocab_V == cfg.bos_id)
    forced_eos_V = jnp.where(vocab_V == cfg.eos_id, 0.0, NEG_INF).astype(jnp.float32)

    def step_fn(tokens_N: Array, step: Array, state: PyTree) -> tuple[Array, PyTree]:
        self_k, self_v, slot = state
        if slot is not None and tokens_N.shape[0] != slot.shape[0] * slot.shape[1]:
            raise ValueError(
                f"the slot-addressed cache holds {slot.shape[1]} hypotheses for each of "
                f"{slot.shape[0]} sources ({slot.shape[0] * slot.shape[1]} rows); the "
                f"search stepped {tokens_N.shape[0]}: init_decode_state's beam_size must "
                "be the search's beam_size")
        full = cache.replace(self_k=self_k, self_v=self_v, slot=slot)
        variables = {"params": params}
        if packed is not None and tokens_N.shape[0] <= PACKED_ROWS_MAX:
            variables[rows_matmul.COLLECTION] = packed
        logits_NV, new = model.apply(variables, tokens_N, step, full, output_DV,
                                     method=Transformer.decode_step)
        logits_NV = jnp.where(banned_V, NEG_INF, logits_NV)
        if valid_B is not None:
            # [B] -> [N]: the G hypotheses of a source share its flag.
            valid_N = jnp.repeat(valid_B, tokens_N.shape[0] // valid_B.shape[0])
            logits_NV = jnp.where(valid_N[:, None], logits_NV, forced_eos_V)
        return logits_NV, (new.self_k, new.self_v, new.slot)

    return step_fn, (cache.self_k, cache.self_v, cache.slot)


def reorder_beam_state(state: PyTree, parent_BW: Array) -> PyTree:
    """Beam search's ``reorder`` for a slot-addressed state: remaps the slot table only."""
    self_k, self_v, slot_BWT = state
    return self_k, self_v, reorder_slots(slot_BWT, parent_BW)


def encode_and_init(model: Transformer, params: PyTree, inputs_BS: Array,
                    max_len: int, beam_size: int | None = None) -> DecodeCache:
    """Runs the encoder once and builds the cache (cross K/V projected once per source);
    ``beam_size``: self-attention buffers for that many hypotheses per source."""
    variables = {"params": params}
    encoded_BSD = model.apply(variables, inputs_BS, method=Transformer.encode)
    return model.apply(variables, encoded_BSD, inputs_BS, max_len, beam_size,
                       method=Transformer.init_decode_state)


# XLA:CPU's copy insertion by default copies every loop-carried decode buffer at each step
# when the step both reads it and updates it in place; its region analysis orders the
# reads first and drops those copies. A CPU option: other backends ignore it.
DECODE_COMPILER_OPTIONS = {"xla_cpu_copy_insertion_use_region_analysis": True}


def decode_program(params: PyTree, output_DV: Array | None, inputs_BS: Array, valid_B: Array,
                 rng: Array, alpha: jax.typing.ArrayLike = 0.0,
                 temperature: jax.typing.ArrayLike = 1.0, packed: PyTree | None = None, *,
                 model_cfg: ModelConfig, spec: SearchSpec) -> search.DecodeResult:
    """Encode + init cache + search for one batch, as one compiled program.

    Args:
      params: the model parameters.
      output_DV: :func:`output_matrix` of the params (computed once per model).
      inputs_BS: int32 [batch, src_len] source ids (EOS-terminated, pad_id-padded).
      valid_B: bool [batch]; False rows are padding and finish at once.
      rng: PRNG keys [batch], row b's sampling key (used by sampling only; a single
        key gives row b ``fold_in(rng, b)``, see :func:`search.row_keys`).
      alpha: beam search's length-penalty exponent (>= 0, checked by the caller).
      temperature: sampling's temperature (> 0, checked by the caller).
      packed: :func:`packed_weights` of the params (computed once per model), or None.
    Returns:
      DecodeResult with tokens int32 [batch, beam, spec.max_len] and scores, lengths,
      finished [batch, beam] (beam = 1 for greedy and sampling).
    """
    _TRACES[(inputs_BS.shape, spec)] += 1  # runs only while tracing
    model, kernels = Transformer(model_cfg), kernels_of(model_cfg)
    # Beams of "cpu" kernels keep slot-addressed buffers; plain beams tile the row cache.
    slots = spec.method == "beam" and kernels == "cpu"
    cache = encode_and_init(model, params, inputs_BS, spec.max_len,
                            spec.beam_size if slots else None)
    step_fn, state = make_step_fn(model, params, cache, valid_B, output_DV, packed)
    # The searches' first input: BOS, or PAD under model.decoder_start="pad" (Marian).
    ids = dict(bos_id=model_cfg.start_id, eos_id=model_cfg.eos_id, pad_id=model_cfg.pad_id)
    common = dict(batch_size=inputs_BS.shape[0], max_len=spec.max_len,
                  chunk_size=spec.chunk_size, min_len=spec.min_len, kernels=kernels, **ids)
    if spec.method == "beam":
        return search.beam_search(step_fn, state, beam_size=spec.beam_size, alpha=alpha,
                                  reorder=reorder_beam_state if slots else None,
                                  n_best=spec.n_best, eos_candidates=spec.eos_candidates,
                                  **common)
    if spec.method == "sample":
        out = search.sample(step_fn, state, rng, temperature=temperature,
                            top_k=spec.top_k, **common)
    else:
        out = search.greedy_search(step_fn, state, **common)
    # [B, ...] -> [B, 1, ...]: one hypothesis per row, like a beam of width 1.
    return out._replace(tokens=out.tokens[:, None], scores=out.scores[:, None],
                        lengths=out.lengths[:, None], finished=out.finished[:, None])


# The compiled program. Inside another traced function (a shard_map, jax.export) call
# decode_program: compiler options belong to the outermost jit only.
decode_batch = jax.jit(decode_program, static_argnames=("model_cfg", "spec"),
                       compiler_options=DECODE_COMPILER_OPTIONS)


@functools.partial(jax.jit, static_argnames=("model_cfg", "spec", "mesh"),
                   compiler_options=DECODE_COMPILER_OPTIONS)
def decode_batch_parallel(params: PyTree, output_DV: Array | None, inputs_BS: Array,
                          valid_B: Array, rng: Array, alpha: jax.typing.ArrayLike = 0.0,
                          temperature: jax.typing.ArrayLike = 1.0,
                          packed: PyTree | None = None, *, model_cfg: ModelConfig,
                          spec: SearchSpec,
                          mesh: jax.sharding.Mesh) -> search.DecodeResult:
    """:func:`decode_batch` data-parallel over the devices of a one-axis ``('data',)`` mesh.

    Each device decodes its contiguous share of the batch rows (B must be a multiple of
    the device count) with replicated parameters, on its own: its own early exit, no
    collectives, results identical to one device's up to float rounding (the compiled
    products may differ; each row samples with its own key of ``rng``, so sampling
    gives what one device gives, too). ``num_steps`` is the largest over the devices.
    """
    def local(p, o, x, v, r, a, t, w):
        out = decode_program(p, o, x, v, r, a, t, w, model_cfg=model_cfg, spec=spec)
        return out._replace(num_steps=out.num_steps[None])  # [1] per device -> [devices]

    rows = P(AXIS)
    keys_B = search.row_keys(rng, inputs_BS.shape[0])
    out = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), rows, rows, rows, P(), P(), P()),
                        out_specs=search.DecodeResult(rows, rows, rows, rows, rows),
                        check_vma=False)(params, output_DV, inputs_BS, valid_B, keys_B,
                                         jnp.float32(alpha), jnp.float32(temperature),
                                         packed)
    return out._replace(num_steps=out.num_steps.max())
