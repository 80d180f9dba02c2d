"""The figures of docs/transformer.md: positional encodings, masks, embeddings, attention.

``write_figures(out_dir, translator)`` writes them all (``jformer figures``). The numbers
each figure draws come from small functions, here and in
:mod:`jformer.inference.embedding_space`, that the tests check
(tests/inference/test_figures.py); the ``plot_*`` functions only draw. Every figure is a
``matplotlib.figure.Figure`` on the Agg canvas (no pyplot, no global state), saved as a
small PNG.

Without a model only the positional-encoding figures are made (the sinusoid needs just
d_model and a length); the mask, embedding and attention figures need a trained model's
tokenizer and parameters.
"""
from __future__ import annotations

import functools
import io
import os
from collections.abc import Sequence

import numpy as np

from jformer.data import demo
from jformer.data.packing import first_fit, packed_batch
from jformer.data.ragged import RaggedArray
from jformer.data.tokenizer import Tokenizer
from jformer.inference.embedding_space import embedding_panels
from jformer.model import masks
from jformer.model.embeddings import sinusoid_table
from jformer.workdir.files import write_atomically

DPI = 100
DEFAULT_SENTENCE = "I see twenty-one red apples."
PE_FIGURES = ("pe_matrix.png", "pe_slices.png", "pe_dot_products.png")
MODEL_FIGURES = ("masks.png", "embeddings_pca.png", "attention_encoder_self.png",
                 "attention_decoder_self.png", "attention_cross.png")
_COLOURS = {"number": "tab:red", "month": "tab:blue", "weekday": "tab:purple",
            "colour": "tab:green", "noun": "tab:grey"}


# ----------------------------------------------------------------------- the numbers
def pe_dot_products(d_model: int, centres: Sequence[int], max_offset: int,
                    sin_only: bool = False, projection: np.ndarray | None = None
                    ) -> np.ndarray:
    """PE(p)^T A PE(p + k) for p in ``centres`` and k = -max_offset .. max_offset.

    A is ``projection`` [d, d] (a query-key product W_q^T W_k), or the identity: the
    plain dot product. ``sin_only`` keeps only the sine dimensions (the table without its
    cosines). Returns float64 [len(centres), 2 * max_offset + 1].
    """
    if min(centres) < max_offset:
        raise ValueError(f"every centre must be >= max_offset={max_offset}; got {centres}")
    table = sinusoid_table(max(centres) + max_offset + 1, d_model).astype(np.float64)
    if sin_only:
        table = table[:, 0::2]
    a = np.eye(table.shape[1]) if projection is None else projection
    offsets = np.arange(-max_offset, max_offset + 1)
    return np.stack([table[p + offsets] @ (a.T @ table[p]) for p in centres])


def rotation_commuting_projection(d_model: int, seed: int = 0) -> np.ndarray:
    """A = blockdiag(a_i I + b_i J) [d, d], J = [[0, 1], [-1, 0]], a_i, b_i ~ N(0, 1): a
    query-key product that commutes with the shift rotations, so PE(p)^T A PE(p+k)
    depends on k alone, and through the b_i on its sign."""
    rng = np.random.default_rng(seed)
    a_i, b_i = rng.normal(size=(2, d_model // 2))
    out = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        out[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[a_i[i], b_i[i]], [-b_i[i], a_i[i]]]
    return out


def packed_example(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], num_pairs: int = 3,
                   pad: int = 3, start_id: int | None = None) -> dict:
    """The ``num_pairs`` shortest of ``pairs`` packed into one row, and its masks.

    Packing is jformer.data's (first_fit, packed_batch); the row is ``pad`` or more
    slots longer than the longer side, so both sides end in padding. Returns the batch
    (int32 [1, pack_len] arrays), ``masks``: {name: bool [queries, keys]} for "padding"
    (real query and key, what an unpacked batch uses), "encoder", "decoder" and "cross"
    (the masks the model builds from the packed batch), and the pieces of the source,
    the targets and the decoder inputs. ``start_id``: the decoder's first input
    (``ModelConfig.start_id``; default the tokenizer's BOS).
    """
    if len(pairs) < num_pairs:
        raise ValueError(f"need at least {num_pairs} pairs; got {len(pairs)}")
    src_rows = tokenizer.encode_lists([s for s, _ in pairs], add_eos=True)
    tgt_rows = tokenizer.encode_lists([t for _, t in pairs], add_eos=True, side="target")
    longest = [max(len(s), len(t)) for s, t in zip(src_rows, tgt_rows)]
    chosen = sorted(np.argsort(longest, kind="stable")[:num_pairs].tolist())
    src = RaggedArray.from_rows([src_rows[i] for i in chosen])
    tgt = RaggedArray.from_rows([tgt_rows[i] for i in chosen])
    pack_len = int(max(src.lengths.sum(), tgt.lengths.sum())) + pad
    order = np.arange(num_pairs)
    row_of = first_fit(src.lengths, tgt.lengths, order, pack_len)
    batch = packed_batch(src, tgt, order, row_of, 1, pack_len, tokenizer.pad_id)
    inputs, targets = batch["inputs"], batch["targets"]
    src_valid, tgt_valid = inputs != tokenizer.pad_id, targets != tokenizer.pad_id
    # The decoder reads BOS, then the targets shifted right, BOS again at each pair's start.
    start_id = tokenizer.bos_id if start_id is None else start_id
    decoder_in = np.where(batch["targets_position"] == 0, start_id,
                          np.roll(targets, 1, axis=1))
    decoder_in = np.where(tgt_valid, decoder_in, tokenizer.pad_id)
    return {
        "batch": batch,
        "masks": {
            "padding": _row_0(masks.padding_mask(src_valid, src_valid)),
            "encoder": _row_0(masks.encoder_mask(inputs, tokenizer.pad_id,
                                                 batch["inputs_segmentation"])),
            "decoder": _row_0(masks.decoder_mask(targets, tokenizer.pad_id,
                                                 batch["targets_segmentation"])),
            "cross": _row_0(masks.cross_mask(targets, inputs, tokenizer.pad_id,
                                             batch["targets_segmentation"],
                                             batch["inputs_segmentation"])),
        },
        "source_pieces": [tokenizer.id_to_piece(int(i)) for i in inputs[0]],
        "target_pieces": [tokenizer.id_to_piece(int(i)) for i in targets[0]],
        "decoder_input_pieces": [tokenizer.id_to_piece(int(i)) for i in decoder_in[0]],
    }


def _row_0(mask) -> np.ndarray:
    """A mask [1, 1, queries, keys] as a numpy bool [queries, keys]."""
    return np.asarray(mask)[0, 0]


# ----------------------------------------------------------------------- drawing
def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # deferred: importing this module stays cheap

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig, path: str) -> str:
    """Writes the figure atomically as a 256-colour PNG (a third of the RGBA size; Pillow
    comes with matplotlib) without a version stamp: the same inputs give the same bytes."""
    from PIL import Image

    rgba, png = io.BytesIO(), io.BytesIO()
    fig.savefig(rgba, format="png", dpi=DPI)
    rgba.seek(0)
    with Image.open(rgba) as image:
        image.convert("RGB").quantize(256).save(png, format="png", optimize=True)
    write_atomically(path, png.getvalue())
    return path


def plot_pe_matrix(d_model: int, max_len: int, path: str) -> str:
    """The table [position, dimension] as a heatmap."""
    fig = _figure(7, 4)
    ax = fig.subplots()
    image = ax.imshow(sinusoid_table(max_len, d_model), cmap="RdBu", vmin=-1, vmax=1,
                      aspect="auto", interpolation="nearest")
    ax.set(xlabel="dimension j  (even j = 2i: sin,  odd j = 2i+1: cos)", ylabel="position",
           title=f"Sinusoidal positional encodings, d_model={d_model}, positions "
                 f"0..{max_len - 1}")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return _save(fig, path)


def plot_pe_slices(d_model: int, max_len: int, path: str) -> str:
    """Left: PE(pos, j) along pos for one sin/cos pair and two other sines; right: the
    sines and cosines of a few positions along the pair index i."""
    table = sinusoid_table(max_len, d_model)
    fig = _figure(10, 3.6)
    left, right = fig.subplots(1, 2)
    quarter = d_model // 8  # a pair whose wavelength is a few dozen positions
    for j, style in ((0, "-"), (2 * quarter, "-"), (2 * quarter + 1, "--"),
                     (d_model // 2, "-")):
        i = j // 2
        wavelength = 2 * np.pi * 10000 ** (2 * i / d_model)
        left.plot(table[:, j], style, lw=1.2,
                  label=f"j={j}: {'sin' if j % 2 == 0 else 'cos'}, i={i}, wavelength "
                        f"{wavelength:.0f}")
    left.set(xlabel="position", ylabel="PE(pos, j)",
             title="Along position: one column j per curve")
    left.set(ylim=(-2.0, 1.1), yticks=np.linspace(-1, 1, 5))  # legend below the curves
    left.legend(fontsize=7, loc="lower center", ncol=2)
    i = np.arange(d_model // 2)
    for pos, colour in zip(sorted({3, max_len // 4, max_len - 1}), ("C0", "C1", "C2")):
        right.plot(i, table[pos, 0::2], "-", color=colour, lw=1, label=f"pos={pos}: sin")
        right.plot(i, table[pos, 1::2], ":", color=colour, lw=1.2, label=f"pos={pos}: cos")
    right.set(xlabel="pair index i (dimensions 2i, 2i+1)", ylabel="PE(pos, 2i) and PE(pos, 2i+1)",
              title="Along dimension: one row per colour")
    right.set(ylim=(-2.0, 1.1), yticks=np.linspace(-1, 1, 5))
    right.legend(fontsize=7, loc="lower center", ncol=3)
    return _save(fig, path)


def plot_pe_dot_products(d_model: int, path: str, max_offset: int = 48) -> str:
    """PE(p)^T A PE(p+k) against k for three p: the dot product (A = I) of sin+cos and of
    sines only, and sin+cos through a rotation-commuting A."""
    centres = (max_offset, max_offset + 17, max_offset + 60)
    offsets = np.arange(-max_offset, max_offset + 1)
    fig = _figure(14, 3.8)
    panels = (
        ("sin and cos: the 3 curves coincide\n(k alone matters) and are even in k",
         "PE(p) · PE(p+k)", {}),
        ("sines only: the curve changes with p", "PE(p) · PE(p+k), sine dimensions",
         {"sin_only": True}),
        ("through A = blockdiag(a_i I + b_i J): the curves\ncoincide, but k and -k differ",
         "PE(p)ᵀ A PE(p+k)", {"projection": rotation_commuting_projection(d_model)}))
    for ax, (title, ylabel, kwargs) in zip(fig.subplots(1, 3, sharex=True), panels):
        dots = pe_dot_products(d_model, centres, max_offset, **kwargs)
        for p, row, style in zip(centres, dots, ("-", "--", ":")):
            ax.plot(offsets, row, style, lw=1.5, label=f"p={p}")
        ax.axvline(0, color="k", lw=0.5)
        ax.set(xlabel="offset k", ylabel=ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"Scores of positional encodings against the offset k, d_model={d_model}")
    return _save(fig, path)


def plot_masks(example: dict, path: str) -> str:
    """The four masks of a packed row, pieces on the axes, pair borders drawn."""
    from matplotlib.colors import ListedColormap

    batch = example["batch"]
    src_seg, tgt_seg = batch["inputs_segmentation"][0], batch["targets_segmentation"][0]
    src, tgt, dec_in = (example[k] for k in ("source_pieces", "target_pieces",
                                              "decoder_input_pieces"))
    panels = (("padding", ("padding alone: real query × real key\n(lets the pairs see "
                           "each other)"), src, src, src_seg, src_seg, "source"),
              ("encoder", "encoder self-attention:\npadding ∧ same pair", src, src,
               src_seg, src_seg, "source"),
              ("decoder", "decoder self-attention:\ncausal ∧ padding ∧ same pair", tgt,
               dec_in, tgt_seg, tgt_seg, "decoder input"),
              ("cross", "cross-attention:\npadding ∧ same pair", tgt, src, tgt_seg, src_seg,
               "source"))
    fig = _figure(10, 10.6)
    cmap = ListedColormap(["#f4f4f4", "#2166ac"])
    for ax, (name, title, rows, cols, row_seg, col_seg, keys) in zip(
            fig.subplots(2, 2).ravel(), panels):
        ax.imshow(example["masks"][name], cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
        for seg, line in ((col_seg, ax.axvline), (row_seg, ax.axhline)):
            for b in np.flatnonzero(np.diff(seg)) + 0.5:
                line(b, color="tab:orange", lw=0.8)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=6)
        ax.set_yticks(range(len(rows)), rows, fontsize=6)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(f"key: {keys} piece", fontsize=8)
        ax.set_ylabel("query: source piece" if rows is src
                      else "query: the target piece it predicts", fontsize=8)
    fig.suptitle(f"Masks of one packed row: {src_seg.max()} demo pairs in {len(src)} slots\n"
                 "(blue: may attend; orange lines: pair borders; the last slots are padding)")
    return _save(fig, path)


def plot_embeddings(panels: dict[str, dict], path: str) -> str:
    """One panel per language: its words at their PCA coordinates, coloured by category."""
    fig = _figure(6 * len(panels), 6)
    for ax, (language, panel) in zip(np.atleast_1d(fig.subplots(1, len(panels))),
                                     panels.items()):
        coords, labels = panel["coords"], np.asarray(panel["labels"])
        for name in dict.fromkeys(panel["labels"]):
            m = labels == name
            ax.scatter(coords[m, 0], coords[m, 1], s=16, color=_COLOURS.get(name, "k"),
                       label=name + (" (not labelled)" if name == "noun" else ""))
        for (x, y), w, name in zip(coords, panel["words"], labels):
            if name != "noun":  # the nouns are the background: unlabelled, less clutter
                ax.annotate(w, (x, y), fontsize=7, color=_COLOURS.get(name, "k"),
                            xytext=(2, 2), textcoords="offset points")
        explained = panel["explained"]
        words_are = ("one-piece words" if panel["one_piece"]
                     else "all words, each the mean of its pieces")
        ax.set(xlabel=f"principal axis 1 ({explained[0]:.0%} of the variance)",
               ylabel=f"principal axis 2 ({explained[1]:.0%})",
               title=f"{language} ({words_are})")
        ax.legend(fontsize=8, loc="best")
    fig.suptitle("Learned token embeddings projected on their two principal axes "
                 "(PCA of each language's words)")
    return _save(fig, path)


def plot_attention(weights: dict, stack: str, kind: str, rows: list[str], cols: list[str],
                   title: str, path: str) -> str:
    """A grid of heatmaps: one row per layer, one column per head ([heads, q, k] each)."""
    layers = sorted(layer for s, layer, k in weights if (s, k) == (stack, kind))
    heads = weights[(stack, layers[0], kind)].shape[0]
    cell = max(2.2, 0.17 * max(len(rows), len(cols)))
    fig = _figure(cell * heads + 1.2, cell * len(layers) + 0.8)
    axes = np.asarray(fig.subplots(len(layers), heads, squeeze=False))
    for r, layer in enumerate(layers):
        for h in range(heads):
            ax = axes[r, h]
            image = ax.imshow(weights[(stack, layer, kind)][h], cmap="viridis", vmin=0, vmax=1,
                              interpolation="nearest", aspect="auto")
            ax.set_title(f"layer {layer}, head {h}", fontsize=8)
            ax.set_xticks(range(len(cols)), cols if r == len(layers) - 1 else [],
                          rotation=90, fontsize=7)
            ax.set_yticks(range(len(rows)), rows if h == 0 else [], fontsize=7)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


# ----------------------------------------------------------------------- the whole set
def write_figures(out_dir: str, translator=None, *, d_model: int = 512, max_len: int = 256,
                  sentence: str = DEFAULT_SENTENCE) -> tuple[list[str], list[str]]:
    """Writes the figures into ``out_dir``; returns (paths, one-line findings).

    With a :class:`~jformer.inference.Translator` the positional figures use its
    d_model and max_len and the model figures are made too; without one, only the
    positional figures, for ``d_model`` and ``max_len``.
    """
    os.makedirs(out_dir, exist_ok=True)
    if translator is not None:
        d_model, max_len = translator.model_cfg.d_model, translator.model_cfg.max_len
    if d_model < 2 or d_model % 2 or max_len < 2:
        raise ValueError(f"d_model must be even and >= 2, max_len >= 2; got d_model="
                         f"{d_model}, max_len={max_len}")
    out = functools.partial(os.path.join, out_dir)
    paths = [plot_pe_matrix(d_model, max_len, out("pe_matrix.png")),
             plot_pe_slices(d_model, max_len, out("pe_slices.png")),
             plot_pe_dot_products(d_model, out("pe_dot_products.png"))]
    if translator is None:
        return paths, []
    more, findings = _model_figures(translator, sentence, out)
    return paths + more, findings


def _model_figures(translator, sentence: str, out) -> tuple[list[str], list[str]]:
    from jformer.inference.attention_maps import attention_weights

    tok = translator.tokenizer
    pairs = demo.generate_pairs(0, 0, 100, 0)["eval"]
    paths = [plot_masks(packed_example(tok, pairs, start_id=translator.model_cfg.start_id),
                        out("masks.png"))]
    panels = embedding_panels(tok, _token_embedding(translator))
    paths.append(plot_embeddings(panels, out("embeddings_pca.png")))
    findings = []
    for language, panel in panels.items():
        words_are = "one-piece words" if panel["one_piece"] else "means of pieces"
        findings.append(f"embeddings, {language} ({words_are}): nearest other word in the "
                        "same category: " + ", ".join(
                            f"{name} {a}/{n}" for name, (a, n) in panel["agreement"].items()))
    weights, labels_by_axis = attention_weights(translator, sentence)
    src, dec_in, output = (labels_by_axis[k] for k in ("source", "decoder_in", "output"))
    eos = tok.id_to_piece(tok.eos_id)
    text = "".join(output).removesuffix(eos).replace("▁", " ").strip()
    source, predicted = "source pieces", "the output piece each position predicts"
    for stack, kind, rows, cols, axes, name in (
            ("encoder", "self_attention", src, src, (source, source),
             "attention_encoder_self.png"),
            ("decoder", "self_attention", output, dec_in, (predicted, "decoder inputs"),
             "attention_decoder_self.png"),
            ("decoder", "cross_attention", output, src, (predicted, source),
             "attention_cross.png")):
        title = (f"{stack} {kind.replace('_', '-')}: {sentence!r} -> {text!r} (greedy)\n"
                 f"rows (queries): {axes[0]}; columns (keys): {axes[1]}")
        paths.append(plot_attention(weights, stack, kind, rows, cols, title, out(name)))
    return paths, findings


def _token_embedding(translator) -> np.ndarray:
    """The source-side token embedding [vocab, d_model] (the shared one by default)."""
    params = translator.params
    name = "shared_embedding" if "shared_embedding" in params else "source_embedding"
    return np.asarray(params[name]["embedding"], np.float32)
