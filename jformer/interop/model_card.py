"""The short model card (README.md) every export writes, from what the workdir records.

    text = model_card(model, engine="Hugging Face transformers (MarianMTModel)",
                      usage="...", front_matter={"library_name": "transformers"})

What it reports, and where each figure comes from:

- languages: config.json's ``data.src_lang`` and ``data.tgt_lang`` (or the export's
  ``languages`` argument, e.g. ``--source-lang``);
- the model: config.json's ``model`` section;
- data: config.json's ``data`` section (the demo corpus, text files or a TFDS dataset);
- training: the exported checkpoint's step and folder; metrics.jsonl's wall-clock time
  up to that step (resumed invocations added, jformer.workdir.metrics.read_metrics);
- validation: metrics.jsonl's BLEU and chrF at that step (or the last before it), as
  training computed them: sacreBLEU's defaults on ``data.eval_split`` (metrics.jsonl
  keeps numbers only, so no signature);
- test scores: evaluations.jsonl (``jformer evaluate --record``), each with its
  sacreBLEU signatures, the file scored and the step, for this checkpoint folder;
- the jformer version that exported it.

Nothing is invented: a figure the workdir does not record is named as missing.
"""
from __future__ import annotations

import importlib.metadata
import os
from typing import Any, Mapping

from jformer.interop.exports import WorkdirModel
from jformer.data.languages import name as language_name
from jformer.workdir.metrics import read_metrics
from jformer.workdir import files

CARD_FILE = "README.md"


def jformer_version() -> str:
    try:
        return importlib.metadata.version("jformer")
    except importlib.metadata.PackageNotFoundError:  # a checkout on PYTHONPATH
        return "unknown"



def languages_of(model: WorkdirModel, source: str | None = None,
                 target: str | None = None) -> tuple[str, str]:
    """(source, target) codes: the arguments, else config.json's data.src_lang/tgt_lang."""
    data = model.config.data
    return source or data.src_lang, target or data.tgt_lang


def describe_model(model: WorkdirModel) -> str:
    m = model.config.model
    vocab = ("one shared" if model.config.data.vocab == "shared"
             else "a joint (source.spm + target.spm)")
    return (f"{m.norm}-LN Transformer: d_model {m.d_model}, {m.num_heads} heads, "
            f"{m.num_encoder_layers} encoder + {m.num_decoder_layers} decoder layers, "
            f"d_ff {m.d_ff}, {m.activation}, {m.positional} positions up to {m.max_len} "
            f"tokens, {vocab} vocabulary of {m.vocab_size} sentencepiece pieces.")


def describe_data(model: WorkdirModel) -> str:
    d = model.config.data
    if d.source == "demo":
        return (f"jformer's synthetic English-German demo corpus (jformer.data.demo): "
                f"{d.demo_num_train} training pairs, seed {d.demo_seed}.")
    if d.source == "tfds":
        return (f"TensorFlow Datasets {d.tfds_name}: split {d.tfds_train_split} for "
                f"training, {d.tfds_eval_split} for validation.")
    return (f"Text files {d.text_pattern} ({d.text_format}): split {d.train_split} for "
            f"training, {d.eval_split} for validation.")


def training_rows(model: WorkdirModel) -> tuple[float | None, dict | None]:
    """(wall-clock seconds of training up to the checkpoint's step, the validation row at
    or before it) from metrics.jsonl; None where it records none."""
    try:
        rows = read_metrics(model.workdir)
    except FileNotFoundError:
        return None, None
    upto = [r for r in rows if r["step"] <= model.step]
    times = [r["time_s"] for r in upto if r.get("kind") == "train"]
    evals = [r for r in upto if r.get("kind") in ("eval", "final") and "bleu" in r]
    return (max(times) if times else None), (evals[-1] if evals else None)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def score_lines(model: WorkdirModel) -> list[str]:
    """Markdown table rows: validation (metrics.jsonl) and test (evaluations.jsonl)."""
    out = ["| set | step | BLEU | chrF | sacreBLEU signatures |", "|---|---|---|---|---|"]
    _, val = training_rows(model)
    if val is not None:
        out.append(f"| validation ({model.config.data.eval_split}) | {val['step']} | "
                   f"{val['bleu']:.2f} | {val.get('chrf', float('nan')):.2f} | not "
                   f"recorded (training's sacreBLEU defaults) |")
    for row in files.read_evaluations(model.workdir):
        if row.get("checkpoint_dir") != model.checkpoint_dir or row.get("step") != model.step:
            continue  # another checkpoint's scores
        search = row.get("search", {})
        out.append(f"| {os.path.basename(row.get('src', '?'))} ({row.get('lines', '?')} "
                   f"lines; {search.get('method', '?')}, beam {search.get('beam', '?')}, "
                   f"alpha {search.get('alpha', '?')}) | {row['step']} | {row['bleu']:.2f} | "
                   f"{row['chrf']:.2f} | `{row['bleu_signature']}`; "
                   f"`{row['chrf_signature']}` |")
    if len(out) == 2:
        return ["No scores recorded: the workdir's metrics.jsonl has no validation BLEU at "
                "or before this step, and no `jformer evaluate --record` scored this "
                "checkpoint."]
    return out


def model_card(model: WorkdirModel, *, engine: str, usage: str,
               languages: tuple[str, str] | None = None,
               front_matter: Mapping[str, Any] | None = None, notes: str = "") -> str:
    """README.md text for an export of ``model`` for ``engine``; ``usage``: Markdown of
    how to run it; ``front_matter``: YAML keys (Hugging Face's model card metadata)."""
    source, target = languages or languages_of(model)
    seconds, _ = training_rows(model)
    trained = (f"{model.step} steps; {_minutes(seconds)} of training (wall clock, "
               "metrics.jsonl)" if seconds is not None
               else f"{model.step} steps; the workdir has no metrics.jsonl timing")
    ckpt = os.path.relpath(model.checkpoint_dir, model.workdir)
    lines = []
    if front_matter:
        lines += ["---", *_yaml(front_matter), "---", ""]
    lines += [f"# {language_name(source)} to {language_name(target)} translation "
              f"({source} → {target}), trained with jformer", "",
              f"A Transformer (Vaswani et al., 2017) trained with jformer and exported "
              f"for {engine} by jformer {jformer_version()}.", "",
              "## Model", "", describe_model(model), "",
              "## Data", "", describe_data(model), "",
              "## Training", "",
              f"Checkpoint: step {model.step} of `{ckpt}` in the workdir; {trained}.", "",
              "## Scores", "", *score_lines(model), ""]
    if notes:
        lines += ["## Notes", "", notes, ""]
    lines += ["## Use", "", usage.strip(), ""]
    return "\n".join(lines)


def _yaml(meta: Mapping[str, Any]) -> list[str]:
    """Flat YAML: scalars and lists of scalars (all the card's metadata needs)."""
    out = []
    for key, value in meta.items():
        if isinstance(value, (list, tuple)):
            out += [f"{key}:"] + [f"- {v}" for v in value]
        else:
            out.append(f"{key}: {value}")
    return out


def write_card(directory: str, model: WorkdirModel, **kwargs: Any) -> str:
    """Writes :func:`model_card` as ``<directory>/README.md``; returns its path."""
    path = os.path.join(directory, CARD_FILE)
    files.write_atomically(path, model_card(model, **kwargs).encode("utf-8"))
    return path
