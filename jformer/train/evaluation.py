"""Validation during and after training: loss and perplexity on every process, BLEU and
chrF of beam-search translations on process 0."""
from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from jformer.inference import Translator, scoring


def host_params(params):
    """One host copy of replicated (possibly multi-process) parameters, as numpy."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), params)

def eval_sums(job, params, batches=None) -> dict[str, float]:
    """The compiled eval step's metric sums over ``batches`` (default: one pass of the
    validation split).

    params: one copy, as ``job.dp.get_state`` gives it; placed here once in the layout
    the compiled eval step takes (per-device copies stacked under pmap; under shard_map
    already-replicated parameters stay where they are).
    """
    params = job.dp.put_state(params)
    totals: dict[str, float] = {}
    for batch in job.eval_data.batches.epoch_batches(0) if batches is None else batches:
        _, m = job.eval_step(params, job.dp.put_batch(batch))
        for k, v in job.dp.get_metrics(m).items():
            totals[k] = totals.get(k, 0.0) + v
    return totals

def evaluate_loss(job, params) -> dict[str, float]:
    """Validation loss (label-smoothed), token-level NLL and perplexity (params: one
    copy, as ``job.dp.get_state`` gives it)."""
    totals = eval_sums(job, params)
    tokens = max(totals.get("tokens", 0.0), 1.0)
    nll = totals.get("nll", 0.0) / tokens
    return {"loss": totals.get("loss", 0.0) / tokens, "nll": nll,
            "perplexity": math.exp(min(nll, 50.0)), "accuracy": totals.get("correct", 0.0) / tokens}

def evaluate_bleu(job, params, num_sentences: int, num_samples: int = 0) -> dict[str, Any]:
    """sacreBLEU and chrF of beam-search translations of validation sentences (process 0)."""
    pairs = job.eval_data.examples
    if num_sentences:
        pairs = pairs[:num_sentences]
    translator = Translator(job.cfg.model, host_params(params), job.train_data.tokenizer,
                            job.cfg.decode, source_lang=job.cfg.data.src_lang,
                            compile_cache="off")  # training leaves the process's cache as set
    hyps = translator.translate([s for s, _ in pairs], beam_size=job.cfg.decode.beam_size,
                                alpha=job.cfg.decode.alpha)
    scores = scoring.corpus_scores(hyps, [t for _, t in pairs])
    scores["samples"] = [(s, h, t) for (s, t), h in zip(pairs[:num_samples], hyps)]
    return scores

def evaluate(job, params, num_samples: int = 0) -> dict[str, Any]:
    """Validation loss and perplexity (all processes), BLEU and chrF (process 0).

    params: one copy, as ``job.dp.get_state`` gives it.
    """
    scores: dict[str, Any] = evaluate_loss(job, params)
    if jax.process_index() == 0:
        scores.update(evaluate_bleu(job, params, job.cfg.train.eval_bleu_sentences,
                                    num_samples=num_samples))
    return scores
