"""Export the jitted translate search with ``jax.export``: a directory that translates with
only jax, numpy and sentencepiece (the loader is in docs/interop.md, "jax.export").

    export_workdir("runs/demo", "runs/demo-jax", buckets=(16, 32), batch_rows=8,
                   method="beam", beam_size=4, platforms=("cpu", "cuda"))  # the CLI's call

The directory holds

- ``manifest.json``: what a loader needs (:func:`manifest`): the program file of each
  platform and source bucket, ``batch_rows``, ``max_output_len`` per bucket, the special
  ids, ``method``, ``beam_size``, the default ``alpha``, the model config, jax's version;
- ``params.npz``: the parameters, one float array per path ("decoder/layer_0/...");
- ``spm.model``: the sentencepiece model (sources: its ids plus EOS; outputs: its ids);
- ``<platform>/bucket_<S>.jaxexport``: one ``jax.export`` serialization per platform and
  source bucket S of

      program(params, inputs_BS, alpha[, prefix_BP[, prefix_beta]][, constraints_BCL])
          -> (tokens_BT, scores_B, finished_B)

  params: the dict of ``params.npz``. The parameters are an argument, not constants: the
  programs hold no weights, and any checkpoint of the same model config runs through
  them. inputs_BS: int32 [batch_rows, S], a row per source: its ids, EOS, then PAD; a
  row whose first id is PAD or EOS is no sentence (batch padding, or an empty source) and
  yields EOS at once. alpha: float32 [], beam search's length-penalty exponent (paper
  6.1). tokens_BT: int32 [batch_rows, T], T = ``max_output_len[S]``, the best
  hypothesis, its EOS included, PAD after it (sentencepiece's decode drops PAD and EOS);
  scores_B: float32 its score (log-prob, GNMT-penalised under beam search); finished_B:
  bool, it ended in EOS.

  Steering, where the export was asked for it (``manifest.json``'s ``call`` names the
  arguments): prefix_BP: int32 [batch_rows, prefix_len], each row's target prefix
  (target ids, no BOS or EOS), -1 past its end (a row of -1: none); every output begins
  with its prefix (``--prefix-len``), or, with ``--prefix-bias``, leans towards it by
  prefix_beta: float32 [] in (0, 1) (CTranslate2's ``prefix_bias_beta``).
  constraints_BCL: int32 [batch_rows, C, L], each row's target phrases (-1 padding; a row
  of -1: none), each of which its output contains (``--constraints C,L``: beam search
  with dynamic beam allocation; a phrase ends at a word boundary).

With a vocabulary shortlist (``--shortlist FILE``; :mod:`jformer.inference.shortlist`)
the directory also holds ``shortlist.npz`` and ``<platform>/bucket_<S>_shortlist.jaxexport``,
the same programs with one more argument last, shortlist_C: int32 [C], C =
``manifest["shortlist"]["size"]``: the only ids the steps score (the others get no
probability). A loader builds it per batch by the Translator's rule: the sorted union of
EOS, UNK, the file's ``frequent`` ids and the list of every id of the batch's sources
(EOS included), padded with EOS to C; a batch whose union is longer than C runs the
full-vocabulary program. The outputs are then the Translator's with that shortlist.

Each program is :meth:`Translator.translate`'s batch for its bucket: :func:`decode_batch`
(encoder, cross K/V once per source, cache, greedy or beam search) with the SearchSpec
the Translator builds for the same settings, the output length of its rule
(:func:`jformer.inference.buckets.output_len`, or a fixed ``max_len``), and its dummy-row
convention; so the outputs are the Translator's (tests/interop/test_jax_export.py). Each
platform's programs are lowered with the model config resolved for that platform
(:meth:`ModelConfig.for_platform`: the "cpu" kernels on the CPU, stock JAX on cuda, rocm
and tpu, :func:`jformer.ops.resolve`); what that set prepares from the parameters
(:func:`jformer.inference.batch_decode.prepare`: none for the stock set) is computed inside
the program from its params argument, once per call (outside the search loop).
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from jformer.config import DecodeConfig, ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.inference import check_params
from jformer.inference.batch_decode import decode_program, prepare
from jformer.model import Transformer
from jformer.ops import resolve
from jformer.inference.constraints import phrase_ends
from jformer.inference.precision import decoding_config
from jformer.interop.exports import output_directory, read_workdir
from jformer.interop.jax_export_settings import ExportSettings, default_settings
from jformer.interop.model_card import write_card
from jformer.search import length_penalty
from jformer.types import Array, PyTree
from jformer.workdir import files
from jformer.workdir.flat import flatten_params, unflatten_params

FORMAT, FORMAT_VERSION = "jformer-jax-export", 1
MANIFEST, PARAMS, TOKENIZER = "manifest.json", "params.npz", "spm.model"
SHORTLIST = "shortlist.npz"  # jformer.inference.shortlist's file, as ``jformer shortlist``'s
DEFAULT_SHORTLIST_SIZE = 1024  # --shortlist-size (smaller vocabularies: below half of it)


# ------------------------------------------------------------------------ programs
def search_program(model_cfg: ModelConfig, settings: ExportSettings, out_len: int,
                   phrase_ends_V: np.ndarray | None = None
                   ) -> Callable[..., tuple[Array, Array, Array]]:
    """``settings.call()`` of one bucket, for ``model_cfg`` as resolved for the target
    platform (module docstring). phrase_ends_V: with constraints, the target pieces that
    may follow a phrase (:func:`jformer.inference.constraints.phrase_ends`), a constant
    of the program."""
    spec, ops = settings.spec(out_len), resolve(model_cfg, int8=settings.int8)
    penalise = spec.method == "greedy" and settings.method == "beam"  # beam of width 1
    pad, eos = model_cfg.pad_id, model_cfg.eos_id

    def program(params_flat: dict, inputs_BS: Array, alpha: Array, *steering: Array):
        steer = dict(zip(settings.steering(), steering, strict=True))
        if settings.constraint_count:
            steer["phrase_ends_V"] = jnp.asarray(phrase_ends_V)
        params = unflatten_params(params_flat)
        # A row that is no sentence runs as the Translator's dummy rows: EOS, then PAD.
        valid_B = (inputs_BS[:, 0] != pad) & (inputs_BS[:, 0] != eos)
        dummy_S = jnp.full(inputs_BS.shape[1:], pad, jnp.int32).at[0].set(eos)
        inputs_BS = jnp.where(valid_B[:, None], inputs_BS, dummy_S)
        # Greedy and beam search draw no randomness: the key is a placeholder.
        # portable: the program must run where jformer's native library is not loaded
        # (the forms a Translator(portable=True) decodes with)
        prepared = prepare(Transformer(model_cfg, ops), params, portable=True)
        out = decode_program(params, prepared, inputs_BS, valid_B, jax.random.key(0), alpha,
                             jnp.float32(1.0), **steer, model_cfg=model_cfg, ops=ops,
                             spec=spec)
        tokens_BT, length_B = out.tokens[:, 0], out.lengths[:, 0]
        tokens_BT = jnp.where(jnp.arange(out_len) < length_B[:, None], tokens_BT, pad)
        scores_B = out.scores[:, 0]
        if penalise:
            scores_B = scores_B / length_penalty(length_B, alpha)
        return tokens_BT, scores_B.astype(jnp.float32), out.finished[:, 0]

    return program


def export_program(model_cfg: ModelConfig, params_flat: Mapping[str, Any],
                   settings: ExportSettings, bucket: int, out_len: int,
                   platform: str, phrase_ends_V: np.ndarray | None = None
                   ) -> export.Exported:
    """One (bucket, platform) program, lowered with ``model_cfg.for_platform(platform)``;
    only the shapes and dtypes of ``params_flat`` are used."""
    cfg = model_cfg.for_platform(platform)
    avals = ({k: jax.ShapeDtypeStruct(np.shape(v), v.dtype) for k, v in params_flat.items()},
             jax.ShapeDtypeStruct((settings.batch_rows, bucket), jnp.int32),
             jax.ShapeDtypeStruct((), jnp.float32), *settings.steering_avals())
    program = jax.jit(search_program(cfg, settings, out_len, phrase_ends_V))
    return export.export(program, platforms=[platform])(*avals)


def program_file(platform: str, bucket: int, shortlist: bool = False) -> str:
    return f"{platform}/bucket_{bucket}{'_shortlist' if shortlist else ''}.jaxexport"


# ------------------------------------------------------------------------ the directory
def manifest(model_cfg: ModelConfig, settings: ExportSettings, out_lens: Mapping[int, int],
             tokenizer: Tokenizer, params_flat: Mapping[str, Any],
             source: Mapping[str, Any]) -> dict:
    """manifest.json: everything a loader needs besides the files it names."""
    full = settings.full_vocabulary()
    shortlisted = settings.shortlist_size and {
        "file": SHORTLIST, "size": settings.shortlist_size, "call": settings.call(),
        "programs": {p: {str(b): program_file(p, b, True) for b in settings.buckets}
                     for p in settings.platforms}}
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "jax_version": jax.__version__,
        "call": full.call(),
        "programs": {p: {str(b): program_file(p, b) for b in settings.buckets}
                     for p in settings.platforms},
        "shortlist": shortlisted or None,
        "ops": {p: model_cfg.for_platform(p).ops for p in settings.platforms},
        "params": PARAMS, "tokenizer": TOKENIZER,
        "param_shapes": {k: f"{v.dtype}{list(np.shape(v))}".replace(" ", "")
                         for k, v in params_flat.items()},
        "buckets": list(settings.buckets), "batch_rows": settings.batch_rows,
        "max_output_len": {str(b): n for b, n in out_lens.items()},
        "method": settings.method, "beam_size": settings.beam_size,
        "alpha": float(settings.alpha), "max_len": settings.max_len,
        "eos_candidates": settings.rules.eos_candidates, "stop": settings.rules.stop,
        "prefix_len": settings.prefix_len, "prefix_bias": settings.prefix_bias,
        "constraint_count": settings.constraint_count,
        "constraint_len": settings.constraint_len, "int8": settings.int8,
        "pad_id": model_cfg.pad_id, "bos_id": model_cfg.bos_id,
        "eos_id": model_cfg.eos_id, "unk_id": tokenizer.unk_id,
        "vocab_size": model_cfg.vocab_size,
        "model": dataclasses.asdict(model_cfg), "source": dict(source),
    }


def write_export(directory: str, model_cfg: ModelConfig, params: PyTree,
                 tokenizer: Tokenizer, settings: ExportSettings, decode_cfg: DecodeConfig,
                 source: Mapping[str, Any] | None = None,
                 shortlist_path: str | None = None) -> None:
    """Writes the export's files into the existing, empty ``directory``; with
    ``settings.shortlist_size``, ``shortlist_path``'s file and a shortlisted program per
    platform and bucket too."""
    if bool(settings.shortlist_size) != bool(shortlist_path):
        raise ValueError("a shortlisted export needs both a shortlist file and its size "
                         f"(--shortlist, --shortlist-size); got {shortlist_path!r}, "
                         f"{settings.shortlist_size}")
    settings.check(model_cfg)
    check_params(model_cfg, params)
    flat = flatten_params(params)
    out_lens = settings.output_lengths(model_cfg, decode_cfg)
    short = [b for b, n in out_lens.items() if settings.prefix_len >= n]
    if short:
        raise ValueError(f"--prefix-len {settings.prefix_len} leaves no room for EOS in "
                         f"bucket {short[0]}'s {out_lens[short[0]]} output positions: "
                         "export shorter prefixes, or raise --max-len")
    ends_V = phrase_ends(tokenizer) if settings.constraint_count else None
    for platform in settings.platforms:
        os.makedirs(os.path.join(directory, platform))
        for bucket, shortlisted in itertools.product(settings.buckets, (False, True)):
            if shortlisted and not settings.shortlist_size:
                continue
            exported = export_program(
                model_cfg, flat, settings if shortlisted else settings.full_vocabulary(),
                bucket, out_lens[bucket], platform, ends_V)
            name = program_file(platform, bucket, shortlisted)
            with open(os.path.join(directory, name), "wb") as f:
                f.write(exported.serialize())
    if shortlist_path:
        shutil.copyfile(shortlist_path, os.path.join(directory, SHORTLIST))
    with open(os.path.join(directory, PARAMS), "wb") as f:
        np.savez(f, **flat)
    shutil.copyfile(tokenizer.path, os.path.join(directory, TOKENIZER))
    info = manifest(model_cfg, settings, out_lens, tokenizer, flat, source or {})
    with open(os.path.join(directory, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def export_workdir(workdir: str | os.PathLike, out: str | os.PathLike, *,
                   checkpoint_dir: str | None = None, step: int | None = None,
                   force: bool = False, dtype: str | None = None,
                   shortlist: str | None = None, **overrides: Any) -> str:
    """Exports a workdir's checkpoint (latest, or ``step``; from ``checkpoint_dir``
    instead of <workdir>/checkpoints if given) into the directory ``out``.

    ``dtype``: decode.dtype (None: the run's); "int8" quantizes inside each program, once
    per call, from the float32 params. ``shortlist``: a shortlist file (None: the run's
    decode.shortlist; "": none); with one, the export also holds shortlisted programs
    taking ``shortlist_C`` int32 [``shortlist_size``] (default 1024). ``overrides``: :class:`ExportSettings` fields (None
    keeps the run's default: :func:`default_settings`). The directory appears whole or not at all (written under a
    temporary name beside ``out``, then renamed); an existing ``out`` is an error unless
    ``force`` (then it is replaced). Returns ``out``.
    """
    with output_directory(out, force) as tmp:
        workdir = os.fspath(workdir)
        if not os.path.isdir(workdir):
            raise FileNotFoundError(f"workdir not found: {workdir}")
        config = files.load_config(workdir)
        if dtype is not None:
            config = dataclasses.replace(config, decode=dataclasses.replace(config.decode,
                                                                            dtype=dtype))
        shortlist = config.decode.shortlist if shortlist is None else shortlist
        if shortlist and overrides.get("shortlist_size") is None:
            overrides["shortlist_size"] = default_shortlist_size(config.model.vocab_size)
        elif not shortlist and overrides.get("shortlist_size"):
            raise ValueError("--shortlist-size needs --shortlist FILE")
        settings = default_settings(config.model, config.decode, **overrides)  # before reading
        if shortlist:  # a missing or foreign file, named before the checkpoint is read
            from jformer.inference import shortlist as shortlists

            shortlists.load(shortlist, config.model.vocab_size)
        model = read_workdir(workdir, checkpoint_dir, step)
        # decode.dtype's compute dtype (jformer.inference.precision); params.npz stays
        # float32 and each program's products cast the weights they read.
        model_cfg = decoding_config(config.model, config.decode, settings.platforms)
        source = {"workdir": model.workdir, "checkpoint_dir": model.checkpoint_dir,
                  "step": model.step}
        write_export(tmp, model_cfg, model.params, model.tokenizer, settings, config.decode,
                     source, shortlist or None)
        write_card(tmp, model, engine=f"jax.export ({settings.method}, platforms "
                   f"{', '.join(settings.platforms)})", usage=JAX_USAGE)
    return os.path.abspath(os.fspath(out))


def default_shortlist_size(vocab_size: int) -> int:
    """--shortlist-size's default: DEFAULT_SHORTLIST_SIZE, or the largest of the
    Translator's list sizes below half a smaller vocabulary (where a shortlist pays)."""
    from jformer.inference.shortlist import SIZES

    fits = [s for s in SIZES if s <= DEFAULT_SHORTLIST_SIZE and 2 * s < vocab_size]
    if not fits:
        raise ValueError(f"a {vocab_size}-piece vocabulary is too small for a shortlist "
                         f"(a list of {SIZES[0]} would be half of it or more)")
    return fits[-1]


JAX_USAGE = """Load `manifest.json`, `params.npz` and a program with `jax.export.deserialize`,
then call `program(params, inputs_BS, alpha)`: the loader of a few lines, without
jformer, is in jformer's docs/interop.md ("jax.export"). Sources are sentencepiece ids
of `spm.model` plus EOS, padded with PAD to the program's bucket."""


def load_programs(directory: str | os.PathLike, platform: str = "cpu",
                  shortlist: bool = False) -> dict[int, export.Exported]:
    """The deserialized programs of one platform, by bucket (for tests and Python users;
    the docs' loader does the same in a few lines without jformer); ``shortlist``: the
    shortlisted ones."""
    directory = os.fspath(directory)
    with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
        info = json.load(f)
    if info.get("format") != FORMAT:
        raise ValueError(f"{directory}/{MANIFEST} is not a {FORMAT} manifest")
    if platform not in info["programs"]:
        raise ValueError(f"{directory} holds no programs for platform {platform!r}; it has "
                         f"{sorted(info['programs'])}")
    if shortlist and not info.get("shortlist"):
        raise ValueError(f"{directory} holds no shortlisted programs (export with "
                         f"--shortlist FILE)")
    out = {}
    table = info["shortlist"]["programs"] if shortlist else info["programs"]
    for bucket, name in table[platform].items():
        with open(os.path.join(directory, name), "rb") as f:
            out[int(bucket)] = export.deserialize(bytearray(f.read()))
    return out
