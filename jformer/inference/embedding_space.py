"""Where a trained model puts words of a kind: category words of the demo language as
embedding vectors, their nearest neighbours and a 2-D PCA (the embedding figure of
docs/transformer.md, drawn by :mod:`jformer.inference.figures`).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jformer.data import demo
from jformer.data.tokenizer import Tokenizer

CATEGORIES = demo.WORD_CATEGORIES  # words of the demo language by language and category
MIN_WORDS = 4  # fewer one-piece words in a language: use every word, as a mean of pieces


def word_vectors(tokenizer: Tokenizer, embedding_VD: np.ndarray,
                 categories: dict[str, Sequence[str]]
                 ) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Each category word as a vector of the embedding [vocab, d_model].

    A word is encoded as a sentence of its own; its vector is the mean of its pieces'
    rows (the lone word-boundary piece "▁" left out). A word listed twice keeps its
    first category. Returns (words, their categories, float64 vectors [n, d_model],
    pieces per word int [n]).
    """
    words = list(dict.fromkeys(w for ws in categories.values() for w in ws))
    category = {}
    for name, ws in categories.items():
        for w in ws:
            category.setdefault(w, name)
    rows = tokenizer.encode_lists(words, add_eos=False)
    keep = [[i for i in row if tokenizer.id_to_piece(i) != "▁"] for row in rows]
    found = [k for k, ids in enumerate(keep) if ids]
    vectors = np.stack([np.asarray(embedding_VD, np.float64)[keep[k]].mean(0) for k in found])
    return ([words[k] for k in found], [category[words[k]] for k in found], vectors,
            np.array([len(keep[k]) for k in found]))


def neighbour_agreement(vectors_ND: np.ndarray, labels: Sequence[str]
                        ) -> dict[str, tuple[int, int]]:
    """{label: (words whose nearest other word, by cosine, has the same label, words)}."""
    x = vectors_ND / np.linalg.norm(vectors_ND, axis=1, keepdims=True)
    cosine = x @ x.T
    np.fill_diagonal(cosine, -np.inf)
    labels_N = np.asarray(labels)
    same_N = labels_N[cosine.argmax(axis=1)] == labels_N
    return {name: (int(same_N[labels_N == name].sum()), int((labels_N == name).sum()))
            for name in dict.fromkeys(labels)}


def embedding_panels(tokenizer: Tokenizer, embedding_VD: np.ndarray,
                     categories: dict[str, dict[str, Sequence[str]]] = CATEGORIES
                     ) -> dict[str, dict]:
    """Per language: its category words, their 2-D PCA coordinates and neighbour agreement.

    A language's words are those that are one piece of the vocabulary (their own
    embedding row); with fewer than MIN_WORDS of them, all its words, each the mean of
    its pieces (``one_piece`` False). PCA is fitted on each language's words alone.
    """
    panels = {}
    for language, cats in categories.items():
        words, labels, vectors, pieces = word_vectors(tokenizer, embedding_VD, cats)
        one_piece = int((pieces == 1).sum()) >= MIN_WORDS
        if one_piece:
            keep = np.flatnonzero(pieces == 1)
            words, labels, vectors = ([words[k] for k in keep], [labels[k] for k in keep],
                                      vectors[keep])
        coords, explained = pca_2d(vectors)
        panels[language] = {"words": words, "labels": labels, "coords": coords,
                            "explained": explained, "one_piece": one_piece,
                            "agreement": neighbour_agreement(vectors, labels)}
    return panels


def pca_2d(x_ND: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of x projected on their two principal axes (numpy SVD of the centred
    rows): (coordinates [n, 2], fraction of the variance each axis holds [2])."""
    centred = x_ND - x_ND.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T, s[:2] ** 2 / (s ** 2).sum()
