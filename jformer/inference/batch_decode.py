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
import numpy as np
from jax.sharding import PartitionSpec as P

from jformer import search
from jformer.config import EXACT_ALL, BeamRules, ModelConfig
from jformer.mesh import AXIS
from jformer.model import DecodeCache, Ops, Transformer
from jformer.model.embeddings import SHORTLIST
from jformer.types import NEG_INF, Array, PyTree

_TRACES: collections.Counter = collections.Counter()  # (inputs shape, spec) -> traces


# Decode steps between early-exit checks (the Translator's default): a batch runs up to
# CHUNK_SIZE - 1 steps past its last finished row, per shrink stage, and the output-length
# rule rounds up to it (buckets.output_len). On the 2-core Zen 4, the Multi30k model's
# test2016 at beam 4 decoded in about 7.0 s with 4 against 8.5 s with 8, and 7.4 s with 2
# (bench/README.md).
CHUNK_SIZE = 4


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
    chunk_size: int = CHUNK_SIZE
    n_best: int = 1  # beam: stop a row once this many finished ones can't be beaten
    # beam: which of the 2W candidates may finish, when a row is done (the run's
    # decode.rules through SearchSettings.spec; EXACT_ALL only for specs built by hand)
    rules: BeamRules = EXACT_ALL
    prefix_len: int = 0  # target prefixes: their padded length P (0: none)
    prefix_bias: bool = False  # soft prefixes (prefix_beta), not forced ones
    constraint_count: int = 0  # lexical constraints (beam): phrases C per row (0: none)
    constraint_len: int = 0  # and their padded length L
    # greedy, beam: drop finished sources, halving the batch down to this many (0: never;
    # jformer.search.shrink). Not with sampling, prefixes or constraints (stage_sizes).
    shrink_floor: int = 0

    @property
    def hypotheses(self) -> int:
        """Rows each source takes in a decode step: beam_size for beam search, else 1."""
        return self.beam_size if self.method == "beam" else 1

    def stage_sizes(self, batch: int) -> tuple[int, ...]:
        """The batch sizes a search of ``batch`` sources goes on with as they finish
        (:func:`search.stage_sizes`): none for sampling, target prefixes and lexical
        constraints, whose per-source keys, prefixes and phrases the search closes over."""
        if self.method == "sample" or self.prefix_len or self.constraint_count:
            return ()
        return search.stage_sizes(batch, self.shrink_floor)


def trace_count() -> int:
    """How many times the batch decoder has been traced (= compiled) in this process."""
    return sum(_TRACES.values())


def prepare(model: Transformer, params: PyTree, portable: bool = False) -> PyTree:
    """What the model's decode steps read besides its params, computed once per model
    (``Ops.cache.prepare``: e.g. weights in another layout); a program's ``prepared``.
    ``portable``: none for jformer's native kernels, whose steps then run XLA's forms, as
    a ``jformer export jax`` program does."""
    return model.ops.cache.prepare(model, params, portable)


def banned_outputs(cfg: ModelConfig) -> Array:
    """bool [V]: the ids no search generates, PAD and BOS; their logits are NEG_INF
    before the softmax (in the searches, and in forced decoding's scores)."""
    vocab_V = jnp.arange(cfg.vocab_size)
    return (vocab_V == cfg.pad_id) | (vocab_V == cfg.bos_id)


def make_step_fn(model: Transformer, params: PyTree, cache: DecodeCache,
                 valid_B: Array | None = None, prepared: PyTree | None = None,
                 shortlist: PyTree | None = None) -> tuple[search.SourceStep, PyTree]:
    """The cached decoder step as a :mod:`jformer.search.loop` step function.

    Returns (step_fn, state). ``state`` is the cache's per-hypothesis part
    (``DecodeCache.search_state``); ``step_fn`` is a :class:`search.SourceStep` whose
    per-source inputs are the rest of the cache (cross-attention K/V and the source mask,
    [B, ...]) and ``valid_B``, so a search may drop finished sources; it takes any
    N = B*G rows (row b*G + g belongs to source b) of a cache with N rows. A cache made
    for W hypotheses per source (``init_decode_state(..., beam_size=W)``) takes N = B*W
    rows and goes to beam search with ``reorder=model.ops.cache.reorder``.
    PAD and BOS are never valid outputs, so their logits are set to NEG_INF before the
    softmax (a generated PAD would vanish from the text and be masked as padding by
    teacher forcing; a vocabulary without BOS, bos_id -1, bans PAD alone).
    Rows whose ``valid_B`` is False (batch padding) get logits that force EOS.
    ``prepared``: :func:`prepare` of the params (None: nothing prepared); each step runs
    the model with the set ``model.ops.for_step(prepared, rows)``, rows those of all B
    sources (a search over fewer of them keeps the whole batch's set, and its outputs).
    ``shortlist``: the collection ``SHORTLIST`` of the layout's ``listed``; the steps
    then compute the logits of its ids only (the layout's ``listed_ops``).
    """
    cfg = model.cfg
    prepared = {} if prepared is None else prepared
    if shortlist is None:
        def step_set(ops: Ops) -> Ops:
            return ops
    else:
        prepared = {**prepared, SHORTLIST: shortlist}

        def step_set(ops: Ops) -> Ops:
            return model.ops.cache.listed_ops(ops, prepared)
    vocab_V = jnp.arange(cfg.vocab_size)
    banned_V = banned_outputs(cfg)
    forced_eos_V = jnp.where(vocab_V == cfg.eos_id, 0.0, NEG_INF).astype(jnp.float32)
    batch = cache.source_valid.shape[0]
    shell, state = split_cache(cache)  # what each source's rows read; the hypotheses' part

    def step_of(sources: tuple[DecodeCache, Array | None]) -> search.StepFn:
        memory, valid_b = sources
        sources_here = memory.source_valid.shape[0]

        def step_fn(tokens_N: Array, step: Array, state: PyTree) -> tuple[Array, PyTree]:
            full = memory.with_search_state(state)
            rows = tokens_N.shape[0]
            if full.rows != sources_here and rows != full.rows:
                raise ValueError(
                    f"the cache holds {full.rows} rows for {sources_here} "
                    f"sources; the search stepped {rows}: init_decode_state's "
                    "beam_size must be the search's beam_size")
            step_ops = step_set(model.ops.for_step(prepared, rows * batch // sources_here))
            logits_NV, new = Transformer(cfg, step_ops).apply(
                {"params": params, **prepared}, tokens_N, step, full,
                method=Transformer.decode_step)
            logits_NV = jnp.where(banned_V, NEG_INF, logits_NV)
            if valid_b is not None:
                # [B] -> [N]: the G hypotheses of a source share its flag.
                valid_N = jnp.repeat(valid_b, rows // sources_here)
                logits_NV = jnp.where(valid_N[:, None], logits_NV, forced_eos_V)
            return logits_NV, new.search_state()

        return step_fn

    return search.SourceStep(step_of, (shell, valid_B)), state


def split_cache(cache: DecodeCache) -> tuple[DecodeCache, PyTree]:
    """(the cache without its per-hypothesis part, that part: ``search_state()``)."""
    state = cache.search_state()
    return cache.with_search_state(jax.tree.map(lambda _: None, state)), state


def encode_and_init(model: Transformer, params: PyTree, inputs_BS: Array,
                    max_len: int, beam_size: int | None = None,
                    prepared: PyTree | None = None,
                    memory_len: int | None = None) -> DecodeCache:
    """Runs the encoder once and builds the cache (cross K/V projected once per source);
    ``beam_size``: self-attention buffers for that many hypotheses per source. With
    ``prepared`` (:func:`prepare`) the encoder runs with the set the cache layout gives
    for it (int8: its products int8); without, with the model's own set (float). The
    cross K/V are projected in the compute dtype. ``memory_len`` (>= S): the memory
    padded to that many positions after the encoder (invalid in the source mask), as
    the slots of :mod:`.continuous` hold sources of every length bucket."""
    variables = {"params": params}
    encoder = model if prepared is None else Transformer(
        model.cfg, model.ops.cache.encoder_ops(model.ops, prepared))
    encoded_BSD = encoder.apply({**variables, **(prepared or {})}, inputs_BS,
                                method=Transformer.encode)
    if memory_len is not None and memory_len != inputs_BS.shape[1]:
        extra = memory_len - inputs_BS.shape[1]
        encoded_BSD = jnp.pad(encoded_BSD, ((0, 0), (0, extra), (0, 0)))
        inputs_BS = jnp.pad(inputs_BS, ((0, 0), (0, extra)), constant_values=model.cfg.pad_id)
    return model.apply(variables, encoded_BSD, inputs_BS, max_len, beam_size,
                       method=Transformer.init_decode_state)


# XLA:CPU's copy insertion by default copies every loop-carried decode buffer at each step
# when the step both reads it and updates it in place; its region analysis orders the
# reads first and drops those copies. A CPU option: other backends ignore it.
DECODE_COMPILER_OPTIONS = {"xla_cpu_copy_insertion_use_region_analysis": True}


def decode_program(params: PyTree, prepared: PyTree, inputs_BS: Array, valid_B: Array,
                   rng: Array, alpha: jax.typing.ArrayLike = 0.0,
                   temperature: jax.typing.ArrayLike = 1.0, prefix_BP: Array | None = None,
                   prefix_beta: jax.typing.ArrayLike = 0.0, constraints_BCL: Array | None = None,
                   phrase_ends_V: Array | None = None, shortlist_C: Array | None = None, *,
                   model_cfg: ModelConfig, ops: Ops, spec: SearchSpec) -> search.DecodeResult:
    """Encode + init cache + search for one batch, as one compiled program.

    Args:
      params: the model parameters.
      prepared: :func:`prepare` of the params for ``ops`` (computed once per model).
      inputs_BS: int32 [batch, src_len] source ids (EOS-terminated, pad_id-padded).
      valid_B: bool [batch]; False rows are padding and finish at once.
      rng: PRNG keys [batch], row b's sampling key (used by sampling only; a single
        key gives row b ``fold_in(rng, b)``, see :func:`search.row_keys`).
      alpha: beam search's length-penalty exponent (>= 0, checked by the caller).
      temperature: sampling's temperature (> 0, checked by the caller).
      prefix_BP: int32 [batch, spec.prefix_len] target prefixes, -1 past each row's
        (:mod:`jformer.search.prefix`); read only when spec.prefix_len > 0.
      prefix_beta: the soft prefixes' bias in (0, 1), with spec.prefix_bias.
      constraints_BCL: int32 [batch, spec.constraint_count, spec.constraint_len]
        lexical constraints, -1 padding (:mod:`jformer.search.constrained`); read only
        when spec.constraint_count > 0 (beam search).
      phrase_ends_V: bool [vocab], the tokens that may follow a constraint (a phrase is
        then a whole word; :func:`search.constrained_beam_search`); None: any.
      shortlist_C: int32 [C], the only ids the steps give logits
        (:mod:`jformer.inference.shortlist`; repeats allowed); None: every id.
      model_cfg, ops: the model and the set of pieces it runs with (static).
    Returns:
      DecodeResult with tokens int32 [batch, beam, spec.max_len] and scores, lengths,
      finished [batch, beam] (beam = 1 for greedy and sampling).
    """
    _TRACES[(inputs_BS.shape, spec)] += 1  # runs only while tracing
    model = Transformer(model_cfg, ops)
    beam = spec.method == "beam"
    cache = encode_and_init(model, params, inputs_BS, spec.max_len,
                            ops.cache.beam_rows(spec.beam_size) if beam else None, prepared)
    shortlist = None if shortlist_C is None else ops.cache.listed(model, params, prepared,
                                                                   shortlist_C)
    step_fn, state = make_step_fn(model, params, cache, valid_B, prepared, shortlist)
    # The searches' first input: BOS, or PAD under model.decoder_start="pad" (Marian).
    ids = dict(bos_id=model_cfg.start_id, eos_id=model_cfg.eos_id, pad_id=model_cfg.pad_id)
    common = dict(batch_size=inputs_BS.shape[0], max_len=spec.max_len,
                  chunk_size=spec.chunk_size, min_len=spec.min_len, **ids)
    if spec.prefix_len:
        common["constrain"] = search.prefix_constraint(
            prefix_BP, prefix_beta if spec.prefix_bias else None)
    # The searches rank with the kernels of the decode steps' set (Ops.for_search).
    ranks = ops.for_search(prepared, inputs_BS.shape[0] * spec.hypotheses)
    common["normalize"] = ranks.log_softmax
    if beam:
        beam_kw = dict(beam_size=spec.beam_size, alpha=alpha, reorder=ops.cache.reorder,
                       n_best=spec.n_best, candidates=ranks.beam_candidates,
                       **spec.rules.search_kwargs(), **common)
        if spec.constraint_count:
            return search.constrained_beam_search(step_fn, state, constraints_BCL,
                                                  phrase_ends=phrase_ends_V, **beam_kw)
        return search.beam_search(step_fn, state, shrink=spec.stage_sizes(inputs_BS.shape[0]),
                                  **beam_kw)
    if spec.method == "sample":
        out = search.sample(step_fn, state, rng, temperature=temperature,
                            top_k=spec.top_k, best_k=ranks.top_k, **common)
    else:
        out = search.greedy_search(step_fn, state, argmax=ranks.argmax,
                                   shrink=spec.stage_sizes(inputs_BS.shape[0]), **common)
    # [B, ...] -> [B, 1, ...]: one hypothesis per row, like a beam of width 1.
    return out._replace(tokens=out.tokens[:, None], scores=out.scores[:, None],
                        lengths=out.lengths[:, None], finished=out.finished[:, None])


# The compiled program. Inside another traced function (a shard_map, jax.export) call
# decode_program: compiler options belong to the outermost jit only.
decode_batch = jax.jit(decode_program, static_argnames=("model_cfg", "ops", "spec"),
                       compiler_options=DECODE_COMPILER_OPTIONS)


@functools.partial(jax.jit, static_argnames=("model_cfg", "ops", "spec", "mesh"),
                   compiler_options=DECODE_COMPILER_OPTIONS)
def decode_batch_parallel(params: PyTree, prepared: PyTree, inputs_BS: Array,
                          valid_B: Array, rng: Array, alpha: jax.typing.ArrayLike = 0.0,
                          temperature: jax.typing.ArrayLike = 1.0,
                          prefix_BP: Array | None = None,
                          prefix_beta: jax.typing.ArrayLike = 0.0,
                          constraints_BCL: Array | None = None,
                          phrase_ends_V: Array | None = None,
                          shortlist_C: Array | None = None, *, model_cfg: ModelConfig,
                          ops: Ops, spec: SearchSpec,
                          mesh: jax.sharding.Mesh) -> search.DecodeResult:
    """:func:`decode_batch` data-parallel over the devices of a one-axis ``('data',)`` mesh.

    Each device decodes its contiguous share of the batch rows (B must be a multiple of
    the device count) with replicated parameters, on its own: its own early exit, no
    collectives, results identical to one device's up to float rounding (the compiled
    products may differ; each row samples with its own key of ``rng``, so sampling
    gives what one device gives, too). ``num_steps`` is the largest over the devices.
    """
    def local(p, w, x, v, r, a, t, f, b, c, e, *shortlist):
        out = decode_program(p, w, x, v, r, a, t, f, b, c, e, *shortlist, model_cfg=model_cfg,
                             ops=ops, spec=spec)
        return out._replace(num_steps=out.num_steps[None])  # [1] per device -> [devices]

    rows = P(AXIS)
    keys_B = search.row_keys(rng, inputs_BS.shape[0])
    if prefix_BP is None:
        prefix_BP = jnp.full((inputs_BS.shape[0], spec.prefix_len), -1, jnp.int32)
    if constraints_BCL is None:
        constraints_BCL = jnp.full((inputs_BS.shape[0], spec.constraint_count,
                                    spec.constraint_len), -1, jnp.int32)
    if phrase_ends_V is None:  # any token may follow a phrase
        phrase_ends_V = jnp.ones((model_cfg.vocab_size,), bool)
    shortlist = () if shortlist_C is None else (shortlist_C,)  # every device: the batch's
    out = jax.shard_map(local, mesh=mesh,
                        in_specs=(P(), P(), rows, rows, rows, P(), P(), rows, P(), rows, P(),
                                  *(P() for _ in shortlist)),
                        out_specs=search.DecodeResult(rows, rows, rows, rows, rows),
                        check_vma=False)(params, prepared, inputs_BS, valid_B, keys_B,
                                         jnp.float32(alpha), jnp.float32(temperature),
                                         prefix_BP, jnp.float32(prefix_beta),
                                         constraints_BCL, phrase_ends_V, *shortlist)
    return out._replace(num_steps=out.num_steps.max())


def batch_inputs(cfg: ModelConfig, rows: list[np.ndarray], bucket: int, batch_size: int,
                 rng: Array, alpha: float, temperature: float, beta: float,
                 prefix_BP: np.ndarray | None, cons_BCL: np.ndarray | None,
                 phrase_ends_V: np.ndarray | None,
                 shortlist_C: np.ndarray | None = None) -> tuple:
    """:func:`decode_batch`'s arguments after the params and prepared weights, for one
    batch: the source ids ``rows`` padded to [batch_size, bucket] (the rows past them:
    empty sources), which rows are real, the keys, then the knobs as traced float32
    scalars (another alpha or temperature reuses the compiled search), the target
    prefixes, the constraints with the pieces that may end a phrase, and the shortlist."""
    inputs_BS = padded_sources(cfg, rows, bucket, batch_size)
    valid_B = np.arange(batch_size) < len(rows)
    return (inputs_BS, valid_B, rng, np.float32(alpha), np.float32(temperature), prefix_BP,
            np.float32(beta), cons_BCL, phrase_ends_V, shortlist_C)


def padded_sources(cfg: ModelConfig, rows: list[np.ndarray], bucket: int,
                   batch_size: int) -> np.ndarray:
    """int32 [batch_size, bucket]: the source ids ``rows``, pad-padded; the rows past
    them are empty sources (EOS alone)."""
    inputs_BS = np.full((batch_size, bucket), cfg.pad_id, np.int32)
    inputs_BS[len(rows):, 0] = cfg.eos_id
    for r, ids in enumerate(rows):
        inputs_BS[r, :len(ids)] = ids
    return inputs_BS
