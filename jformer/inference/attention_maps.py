"""Attention heatmaps and the positional-encoding matrix, as PNG files.

The weights come from the model itself: the sentence is translated (greedy), then the
teacher-forced model runs on (source, output) with ``mutable=["intermediates"]``, where
every ``MultiHeadAttention`` sows its weights [batch, heads, queries, keys] under
``encoder/layer_i/self_attention``, ``decoder/layer_i/self_attention`` and
``decoder/layer_i/cross_attention``.

Axis labels are sentencepiece pieces. Encoder rows and columns: the source pieces
(EOS included). Decoder rows: the output piece each position predicts; decoder
self-attention columns: the decoder inputs (BOS, then the outputs shifted right);
cross-attention columns: the source pieces.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import os
import warnings
from typing import Any

import jax
import numpy as np

from jformer.model import relative as relpos
from jformer.model.embeddings import sinusoid_table
from jformer.model.transformer import Transformer, shift_right
from jformer.inference.results import OverlongWarning
from jformer.inference.translator import Translator

KINDS = (("encoder", "self_attention"), ("decoder", "self_attention"),
         ("decoder", "cross_attention"))


def attention_weights(translator: Translator, sentence: str
                      ) -> tuple[dict[tuple[str, int, str], np.ndarray], dict[str, list[str]]]:
    """Translates ``sentence`` greedily and collects every attention map.

    Returns:
      weights: {(stack, layer, kind): float32 [heads, queries, keys]} for the one sentence.
      labels: pieces for "source", "decoder_in" (BOS + outputs[:-1]) and "output".
    """
    if not sentence.strip():
        raise ValueError("sentence must not be empty")
    if translator.decode_cfg.overlong in ("split", "sentences"):
        # One encoder pass shows one source: the maps are of the truncated sentence,
        # and so must its translation be (a split one could be longer than the model).
        translator = copy.copy(translator)
        translator.decode_cfg = dataclasses.replace(translator.decode_cfg,
                                                    overlong="truncate")
    cfg, tok = translator.model_cfg, translator.tokenizer
    (source_S,) = translator.encode_sources([sentence])  # warns if it truncates
    if source_S is None:
        raise ValueError(f"sentence {sentence!r} has no tokens: the tokenizer drops all "
                         "of it")
    with warnings.catch_warnings():  # the truncation was reported just above
        warnings.simplefilter("ignore", OverlongWarning)
        output_T = translator.translate([sentence], method="greedy",
                                        return_scores=True)[0].ids
    inputs_1S, targets_1T = source_S[None], output_T[None]
    model = Transformer(cfg, translator.ops)
    forward = jax.jit(functools.partial(model.apply, mutable=["intermediates"]))
    _, state = forward({"params": translator.params}, inputs_1S, targets_1T)
    tree = state["intermediates"]
    weights = {}
    for stack, kind in KINDS:
        num_layers = cfg.num_encoder_layers if stack == "encoder" else cfg.num_decoder_layers
        for i in range(num_layers):
            (w_1HLM,) = tree[stack][f"layer_{i}"][kind]["attention_weights"]
            weights[(stack, i, kind)] = np.asarray(w_1HLM[0], np.float32)
    decoder_in_T = np.asarray(shift_right(targets_1T, cfg.start_id))[0]
    pieces = lambda ids: [tok.id_to_piece(int(i)) for i in ids]  # noqa: E731
    labels = {"source": pieces(source_S), "decoder_in": pieces(decoder_in_T),
              "output": pieces(output_T)}
    return weights, labels


def plot_heads(weights_HLM: np.ndarray, row_labels: list[str], col_labels: list[str],
               title: str, path: str) -> None:
    """One PNG with a grid of heatmaps, one per head, weights [heads, rows, cols]."""
    from matplotlib.figure import Figure  # no pyplot: no global state, Agg canvas

    heads, rows, cols = weights_HLM.shape
    ncols = min(heads, 4)
    nrows = -(-heads // ncols)
    cell = max(2.5, 0.22 * max(rows, cols))
    fig = Figure(figsize=(cell * ncols + 1, cell * nrows + 1), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for h, ax in enumerate(axes):
        if h >= heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights_HLM[h], cmap="viridis", vmin=0.0, vmax=1.0,
                          aspect="auto", interpolation="nearest")
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xticks(range(cols), col_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(rows), row_labels, fontsize=7)
    fig.colorbar(image, ax=list(axes[:heads]), shrink=0.6)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)


def positional_matrix(translator: Translator) -> tuple[np.ndarray, str]:
    """The positional encodings [max_len, d_model] the model adds, and a title; with
    relative positions, which add none, the first encoder layer's relative key vectors
    [2k + 1, head_dim] (row r: offset r - k)."""
    cfg = translator.model_cfg
    if cfg.positional == "relative":
        keys = translator.params["encoder"]["layer_0"]["self_attention"][relpos.KEYS]
        return (np.asarray(keys, np.float32), f"relative position keys (encoder layer 0; "
                f"rows: offsets -{cfg.relative_clip}..{cfg.relative_clip})")
    if cfg.positional == "learned":
        table = translator.params["encoder"]["positional"]["table"]
        return np.asarray(table, np.float32), "learned positional embeddings (encoder)"
    interleaved = cfg.positional == "sinusoidal"
    layout = "interleaved sin/cos" if interleaved else "concatenated sin | cos"
    return sinusoid_table(cfg.max_len, cfg.d_model, interleaved), f"sinusoidal ({layout})"


def plot_matrix(matrix: np.ndarray, title: str, path: str, xlabel: str, ylabel: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 6), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="RdBu", aspect="auto", interpolation="nearest")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(image, ax=ax)
    fig.savefig(path, dpi=100)


def write_attention_maps(translator: Translator, sentence: str, out_dir: str) -> list[str]:
    """Writes one PNG per layer and kind, plus positional.png; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    weights, labels = attention_weights(translator, sentence)
    axes: dict[str, Any] = {
        ("encoder", "self_attention"): (labels["source"], labels["source"]),
        ("decoder", "self_attention"): (labels["output"], labels["decoder_in"]),
        ("decoder", "cross_attention"): (labels["output"], labels["source"]),
    }
    paths = []
    for (stack, layer, kind), w_HLM in sorted(weights.items()):
        rows, cols = axes[(stack, kind)]
        path = os.path.join(out_dir, f"{stack}_layer{layer}_{kind}.png")
        plot_heads(w_HLM, rows, cols, f"{stack} layer {layer} {kind.replace('_', '-')}", path)
        paths.append(path)
    table, title = positional_matrix(translator)
    path = os.path.join(out_dir, "positional.png")
    plot_matrix(table, title, path, xlabel="dimension", ylabel="position")
    return paths + [path]
