"""Inference: a :class:`Translator` that turns sentences into translations.

    translator = Translator.from_checkpoint("runs/demo")         # latest checkpoint
    translator.translate(["The number is five."], beam_size=4)  # -> ["Die Zahl ist fünf."]
    Translator(cfg.model, params, tokenizer, cfg.decode)        # in memory (validation BLEU)

Sentences are encoded, grouped into length buckets and batches (:mod:`.buckets`),
decoded by compiled batch programs (:mod:`.batch_decode`) on the devices, which take
whole batches in turn or split each one (:mod:`.placement`), launched ahead of the host's
reading (:mod:`.launches`), and returned in input order.
A sentence longer than model.max_len is cut into pieces that fit (:mod:`.segment`;
``decode.overlong``), whose translations are joined back; ``decode.memory_limit`` caps
the rows of a batch so its cache fits (:mod:`.memory`).
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jformer import search
from jformer.config import DecodeConfig, ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.inference.batch_decode import (CHUNK_SIZE, SearchSpec, encode_and_init,
                                            make_step_fn, prepare)
from jformer.inference import alignment, forced, html_format, memory, placement, prefixes
from jformer.inference import compile_cache as xla_cache, continuous_launches, programs
from jformer.inference.constraints import encode_constraints, for_sources
from jformer.inference.buckets import output_len, source_buckets
from jformer.inference.keys import key_source
from jformer.inference import shortlist as shortlists
from jformer.inference.precision import for_decoding, int8
from jformer.inference.restore import check_params, load_workdir
from jformer.inference.settings import SearchSettings, check_positive_int
from jformer.inference.sources import Pieces, Sources, encode
from jformer.inference.launches import Pending, launch
from jformer.inference.results import sentence_results
from jformer.model import Transformer
from jformer.ops import resolve
from jformer.types import Array, PyTree

class Translator:
    """Translates sentences with a Transformer, its params and its tokenizer.

    Args:
      model_cfg: the model's config (special ids and vocab size must match the tokenizer).
      params: the model parameters (e.g. ``TrainState.params`` or a restored checkpoint).
      tokenizer: the sentencepiece :class:`Tokenizer` the model was trained with.
      decode_cfg: search defaults, batch size, length buckets, overlong policy, memory
        limit.
      chunk_size: decode steps between early-exit checks (:data:`CHUNK_SIZE`).
      devices: decode on this many local devices. On a CPU,
        ``jax.config.update("jax_num_cpu_devices", n)`` before jax starts makes n devices
        of its cores, one search each (``jformer translate --devices``).
      parallel: how batches use the devices (:mod:`.placement`): "batches", each batch
        whole on one device and the devices side by side (throughput: files), or
        "split", each batch split over them (a single batch's latency: a server; batch
        sizes must then be multiples of ``devices``).
      source_lang: the sources' language (ISO 639 code), for the sentence rules that
        split overlong sources.
      compile_cache: JAX's persistent compilation cache (:mod:`.compile_cache`): None
        for ``$JFORMER_COMPILE_CACHE`` or ``~/.cache/jformer/xla``, a directory, or
        "off". A process that already set a cache directory keeps its own.
      program_store: the compiled programs' store (default: a new one in the cache's
        ``programs/``); ``from_checkpoint`` opens one that reads its last programs early.
      portable: decode with none of jformer's native kernels (XLA's products and
        attention), the forms a ``jformer export jax`` program runs: its hypotheses are
        the export's. With int8, the native path's can differ from them by a quantization
        step, where float32 rounding puts an activation on the other side of one.
    """

    def __init__(self, model_cfg: ModelConfig, params: PyTree, tokenizer: Tokenizer,
                 decode_cfg: DecodeConfig | None = None, *, chunk_size: int = CHUNK_SIZE,
                 devices: int = 1, parallel: str = "batches", source_lang: str = "en",
                 compile_cache: str | None = None,
                 program_store: programs.ProgramStore | None = None,
                 portable: bool = False):
        tok_ids = (tokenizer.vocab_size, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id)
        cfg_ids = (model_cfg.vocab_size, model_cfg.pad_id, model_cfg.bos_id, model_cfg.eos_id)
        if tok_ids != cfg_ids:
            raise ValueError(f"tokenizer (vocab_size, pad, bos, eos) = {tok_ids} does not "
                             f"match the model config's {cfg_ids}")
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int; got {chunk_size!r}")
        local = jax.local_devices()
        if not isinstance(devices, int) or not 1 <= devices <= len(local):
            raise ValueError(f"devices must be an int in [1, {len(local)}] (the local "
                             f"devices: {local[0].platform} x {len(local)}); got {devices!r}")
        self.compile_cache = xla_cache.enable(compile_cache)  # before anything compiles
        self.decode_cfg = decode_cfg or DecodeConfig()
        model_cfg, params = for_decoding(model_cfg, self.decode_cfg, params)
        self.model_cfg = model_cfg
        self.tokenizer = tokenizer
        self.chunk_size = chunk_size
        self.source_lang = source_lang
        # the decode programs, kept compiled by:
        self.programs = program_store or programs.ProgramStore(
            self.compile_cache and f"{self.compile_cache}/programs")
        self.ops = resolve(model_cfg, int8=int8(self.decode_cfg))  # model.ops, once
        # The params once, not per batch: on each device, or replicated over a mesh
        # (training may hand over mesh-replicated params, which would make every decode
        # run once per device); the devices are the placement's.
        self.placement = placement.place(
            parallel, local[:devices], params,
            functools.partial(prepare, Transformer(model_cfg, self.ops), portable=portable),
            queue=not self.decode_cfg.memory_limit_bytes)
        self.params, self.prepared = self.placement.params[0], self.placement.prepared[0]
        self.buckets = source_buckets(self.decode_cfg, model_cfg.max_len)
        self.shortlist = (shortlists.load(self.decode_cfg.shortlist, model_cfg.vocab_size)
                          if self.decode_cfg.shortlist else None)
        # every list keeps EOS and UNK (read only with a shortlist)
        self.shortlist_always = () if self.shortlist is None else (model_cfg.eos_id,
                                                                 tokenizer.unk_id)
        # decode.continuous: each beam search's slots, shared by the calls
        self._slot_decoders: dict = {}

    @classmethod
    def from_checkpoint(cls, workdir: str | os.PathLike, checkpoint_dir: str | None = None,
                        step: int | None = None, decode_cfg: DecodeConfig | None = None,
                        **kwargs: Any) -> "Translator":
        """Loads config.json, the tokenizer and the params of a training workdir.

        Args:
          workdir: the run folder (config.json, spm.model, checkpoints/).
          checkpoint_dir: a checkpoint directory to read instead of <workdir>/checkpoints,
            e.g. the output of ``jformer average-checkpoints``.
          step: the checkpoint step; None for the latest.
          decode_cfg: overrides the run's decode section.
        The programs this checkpoint ran last (:meth:`.programs.ProgramStore.read_recent`)
        start loading before its params do.
        """
        cache = xla_cache.in_use(kwargs.get("compile_cache"))
        if kwargs.get("program_store") is None:
            kwargs["program_store"] = programs.open_recent(cache, workdir, checkpoint_dir, step,
                                                           kwargs.get("devices", 1))
        config, tokenizer, params = load_workdir(workdir, checkpoint_dir, step, cache)
        check_params(config.model, params, cache)
        kwargs.setdefault("source_lang", config.data.src_lang)
        return cls(config.model, params, tokenizer, decode_cfg or config.decode, **kwargs)

    @property
    def in_flight(self) -> int:
        """Batches launched and not yet read, at most (:mod:`.placement`): what
        ``translate(..., wait=False)`` callers may keep under way."""
        return self.placement.in_flight

    def slot_decoder(self, settings: SearchSettings, batch_size: int):
        """The :class:`.continuous_launches.SlotDecoder` of a search (made on first use,
        then shared by every call of these settings and batch size; idle ones, which hold
        no device memory, are dropped then). Each busy one holds its own slots, each
        within decode.memory_limit."""
        key = (settings, batch_size)
        if key not in self._slot_decoders:
            for idle in [k for k, d in self._slot_decoders.items() if not d.busy]:
                del self._slot_decoders[idle]
            self._slot_decoders[key] = continuous_launches.SlotDecoder(self, settings,
                                                                      batch_size)
        return self._slot_decoders[key]

    def continuous_for(self, settings: SearchSettings) -> bool:
        """Whether a call of these settings, with no target prefix or constraint,
        decodes in slots (:func:`.continuous_launches.eligible`)."""
        return continuous_launches.eligible(self, settings, [], [])

    def slots_busy(self) -> bool:
        """Whether sources of some call wait or decode in slots (decode.continuous)."""
        return any(d.busy for d in self._slot_decoders.values())

    def step_slots(self) -> None:
        """One round of every busy slot decoder (:meth:`.continuous_launches.SlotDecoder.
        step`): finished sources are handed to their calls, waiting ones admitted."""
        for decoder in list(self._slot_decoders.values()):
            if decoder.busy:
                decoder.step()

    # ------------------------------------------------------------------ encoding
    def encode_sources(self, sentences: Sequence[str]) -> list[np.ndarray | None]:
        """EOS-terminated int32 ids per sentence (None for an empty one, or one that
        encodes to nothing, e.g. only a zero-width space), one sequence each: an overlong
        source is rejected with decode.overlong="error", else truncated with an
        :class:`OverlongWarning` (``translate`` splits it instead under "split")."""
        policy = "error" if self.decode_cfg.overlong == "error" else "truncate"
        return [pieces[0] for pieces, _ in self._encode(sentences, policy)]

    def _encode(self, sentences: Sequence[str], policy: str) -> list[Pieces]:
        """Per sentence: its pieces' ids and their Segmentation (:func:`.sources.encode`)."""
        return encode(self.tokenizer, sentences, policy, self.model_cfg.max_len,
                      self.model_cfg.eos_id, self.source_lang)

    def rows_for_batch(self, batch_size: int, bucket: int, spec: SearchSpec) -> int:
        """batch_size, or fewer sentences (a multiple of the devices a batch is split
        over): so that a decode step on one device stays within the rows its prepared
        weights serve fastest (``Ops.cache.rows_max``: the CPU kernels' packed products
        take 128 rows, so 32 sentences at beam 4), and each device's share of the cache
        fits decode.memory_limit."""
        devices = self.placement.rows_multiple
        beam = spec.hypotheses
        fast = self.ops.cache.rows_max(self.prepared)
        if fast is not None:
            batch_size = min(batch_size, max(1, fast // beam) * devices)
        limit = self.decode_cfg.memory_limit_bytes
        if not limit:
            return batch_size
        fit = memory.rows_within_limit(limit, f"decode.memory_limit="
                                       f"{self.decode_cfg.memory_limit!r}", self.model_cfg,
                                       beam, spec.max_len, bucket)
        return min(batch_size, fit * devices)

    # ------------------------------------------------------------------ translation
    def translate(self, sentences: Sequence[str], beam_size: int | None = None,
                  alpha: float | None = None, max_len: int | None = None, n_best: int = 1,
                  return_scores: bool = False, method: str = "beam",
                  temperature: float | None = None, top_k: int | None = None,
                  rng: Array | None = None, batch_size: int | None = None,
                  target_prefix: Sequence[str | None] | None = None,
                  prefix_bias_beta: float | None = None,
                  return_alignments: bool = False,
                  constraints: Sequence[Sequence[str] | None] | None = None,
                  format: str = "text", wait: bool = True) -> list | Pending:
        """Translates ``sentences``; results come back in input order.

        Args:
          sentences: source strings; an empty (or blank) one gives "" without decoding.
          beam_size, alpha: beam width and length-penalty exponent (default: decode_cfg).
            beam_size 1 runs greedy search (:class:`SearchSettings` says why).
          max_len: max output tokens, EOS included (default: the bucket's a * len + b
            rule); more than model.max_len is capped there, with a warning.
          n_best: hypotheses per sentence (beam search: <= beam_size; else 1). Beam
            search keeps a sentence going until its n_best best finished hypotheses
            can't be beaten, so all n_best are finished unless max_len cuts them off
            (``Hypothesis.finished`` says which).
          return_scores: return :class:`Hypothesis` (text, score, ids, finished) instead
            of str.
          method: "beam" | "greedy" | "sample".
          temperature, top_k: sampling settings (default: decode_cfg).
          rng: sampling key (default: key 0): sentence i samples with
            ``fold_in(rng, i)``, so its sample depends on the key and its place in
            ``sentences`` only, not on batching, bucketing or ``devices``; or one key
            per sentence, [len(sentences)] (e.g. to continue a stream's numbering).
          batch_size: the most rows per compiled batch (default: decode_cfg.batch_size);
            a batch with fewer sentences runs on fewer rows (:func:`padded_rows`), and
            decode.memory_limit may cut it further so the cache fits.
          target_prefix: per sentence, text its translation must begin with (None or ""
            for none), in the target vocabulary; every method keeps it, and the
            prefix's log-probability counts in the score (:mod:`jformer.search.prefix`).
            A split sentence's prefix goes to its first piece.
          prefix_bias_beta: None forces the prefixes; a float in (0, 1) only biases the
            search towards them (CTranslate2's ``prefix_bias_beta``).
          return_alignments: return :class:`Hypothesis` with ``alignment``, the word
            pairs (source, output) of its cross-attention (:mod:`.alignment`).
          constraints: per sentence, None or target phrases its translation must contain
            (beam search only; :mod:`.constraints` says the limits and errors).
          format: "text", or "html": each sentence is HTML, its inline tags and
            placeholders put back around their words by word alignment
            (:mod:`.html_format`; not with target_prefix, constraints, alignments).
          wait: False returns a :class:`.launches.Pending` as soon as the first batches
            are launched (html: once translated); its ``result()`` is what
            ``wait=True`` returns. The devices decode while the caller works.
        Returns:
          per sentence a str (or Hypothesis); with n_best > 1 a list of them, best first
          (an empty input gives a one-element list).

        A sentence over model.max_len tokens, with decode.overlong="split" (the default),
        is cut into pieces that fit (:func:`.segment.split_to_fit`); its pieces are
        decoded in the same batches as the other sentences, and its result joins one
        hypothesis per piece with the separators the pieces were cut at:
        :func:`join_hypotheses` (text joined; score the sum of the pieces' scores; ids
        concatenated; finished if every piece finished). The n_best results are the
        n_best highest-scoring such combinations. Piece j of sentence i samples with
        ``fold_in(key_i, j)``. "truncate" keeps the first model.max_len tokens with an
        :class:`OverlongWarning`; "error" raises :class:`OverlongError`.
        """
        if html_format.check_format(format):  # this method's arguments, by name
            out = html_format.translate(self, sentences, locals())
            return out if wait else Pending.done(out)
        settings = SearchSettings.of(self.decode_cfg, method=method, beam_size=beam_size,
                                     alpha=alpha, n_best=n_best, max_len=max_len,
                                     temperature=temperature, top_k=top_k)
        batch_size = self._batch_size(batch_size)
        key_data, fold_first = key_source(rng, len(sentences))
        if max_len is not None and max_len > self.model_cfg.max_len:
            warnings.warn(f"max_len={max_len} is more than the model's positions "
                          f"(model.max_len={self.model_cfg.max_len}); outputs are capped "
                          f"at {self.model_cfg.max_len} tokens", stacklevel=2)
        beta = prefixes.check_beta(prefix_bias_beta)
        wanted = prefixes.encode_prefixes(self.tokenizer, target_prefix, len(sentences))
        phrases = encode_constraints(self.tokenizer, constraints, len(sentences),
                                     settings.method)
        encoded = self._encode(sentences, self.decode_cfg.overlong)
        sources = Sources.of(encoded)
        first = [wanted[o] if j == 0 else None for o, j in zip(sources.owner, sources.piece)]
        cons = for_sources(phrases, sources.owner, sources.piece)
        for i, ids in enumerate(sources.ids):  # empty, with a prefix or constraints: decode
            if ids is None and (first[i] is not None or cons[i] is not None):
                sources.ids[i] = np.array([self.model_cfg.eos_id], np.int32)
        batches = launch(self, sources, settings, batch_size, key_data, fold_first, first,
                         beta, cons)

        def finish() -> list:
            results = sentence_results(encoded, batches.finish(), settings.n_best,
                                       self.model_cfg.eos_id,
                                       return_scores or return_alignments)
            return (alignment.attach(self, sentences, results) if return_alignments
                    else results)
        pending = Pending(finish, batches.ready)
        return pending.result() if wait else pending

    def score(self, sources: Sequence[str], targets: Sequence[str],
              alpha: float | None = None,
              batch_size: int | None = None) -> list[forced.TargetScore]:
        """Forced decoding (:mod:`.forced`): how likely the model finds each given
        translation. Per pair, in input order, a :class:`forced.TargetScore`: the
        target's ids (EOS included), their log-probabilities, their sum (``total``),
        mean (``mean``, a confidence) and ``score``, the sum under beam search's length
        penalty ``alpha`` (default decode.alpha). A side over model.max_len tokens is
        an error naming it."""
        settings = SearchSettings.of(self.decode_cfg, alpha=alpha)
        src_ids, tgt_ids = forced.encode_pairs(self.tokenizer, sources, targets,
                                               self.model_cfg.max_len)
        return forced.score_ids(self.model_cfg, self.ops, self.params, src_ids, tgt_ids,
                                self.buckets, self._batch_size(batch_size),
                                settings.penalty_alpha)

    def align(self, sources: Sequence[str], targets: Sequence[str],
              batch_size: int | None = None) -> list[alignment.Alignment]:
        """Word alignments ((source word, target word) pairs) of given translations,
        from the teacher-forced model's cross-attention (:mod:`.alignment`)."""
        src, tgt = forced.encode_pairs(self.tokenizer, sources, targets,
                                       self.model_cfg.max_len)
        return alignment.align_ids(self, src, tgt, self._batch_size(batch_size))

    def _batch_size(self, batch_size: int | None) -> int:
        """``batch_size`` (default: decode.batch_size), checked against the devices."""
        batch_size = self.decode_cfg.batch_size if batch_size is None else batch_size
        check_positive_int("batch_size", batch_size)
        split = self.placement.rows_multiple
        if batch_size % split:
            raise ValueError(f"batch_size must be a multiple of devices={split} "
                             f"(each device decodes an equal share); got {batch_size}")
        return batch_size

    def output_positions(self, bucket: int, max_len: int | None) -> int:
        """Output positions for a source bucket: the a * len + b rule, or ``max_len``
        capped at model.max_len."""
        if max_len is None:
            return output_len(bucket, self.model_cfg, self.decode_cfg, self.chunk_size)
        return min(max_len, self.model_cfg.max_len)

    def step_fn(self, inputs_BS: Array, max_len: int) -> tuple[search.StepFn, PyTree]:
        """(step_fn, state) over the cache for source ids [B, S], as the searches use it."""
        model = Transformer(self.model_cfg, self.ops)
        init = jax.jit(lambda p, q, x: encode_and_init(model, p, x, max_len, prepared=q))
        cache = init(self.params, self.prepared, jnp.asarray(inputs_BS))
        return make_step_fn(model, self.params, cache, prepared=self.prepared)
