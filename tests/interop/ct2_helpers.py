"""Shared pieces of the CTranslate2 export tests: model variants and the two searches side by side.

Sources go through sentencepiece as jformer's Translator encodes them
(``encode_sources``: pieces + EOS); CTranslate2 gets the same pieces without the EOS,
which the export's ``add_source_eos`` appends. Outputs come back as pieces with their
EOS (``return_end_token``) and are mapped to ids through the vocabulary.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import sentencepiece as spm

from jformer.config import ModelConfig
from jformer.data.tokenizer import Tokenizer
from jformer.inference import Translator, forced
from jformer.interop.ctranslate2_search import search_options
from jformer.ops import transformer

# Every axis of what the export must express, each value at least once. Encoder and
# decoder depths differ, so a swapped stack fails; epsilon 1e-2 is far enough from
# CTranslate2's default (1e-5) that dropping it changes the log-probs.
VARIANTS = {
    "post_sinusoidal_shared_tied": dict(norm="post", positional="sinusoidal"),
    "pre_concat_shared_untied": dict(norm="pre", positional="sinusoidal_concat",
                                     tie_output=False, num_encoder_layers=1,
                                     num_decoder_layers=2),
    "post_learned_separate_tied_gelu": dict(norm="post", positional="learned",
                                            share_embeddings=False, activation="gelu",
                                            layer_norm_epsilon=1e-2),
    "pre_learned_separate_untied_gelu": dict(norm="pre", positional="learned",
                                             share_embeddings=False, tie_output=False,
                                             activation="gelu"),
    # Shaw et al.'s relative positions, clipped at 3: most offsets of a sentence are clipped
    "post_relative_shared_tied": dict(norm="post", positional="relative", relative_clip=3),
}


def variant_config(name: str, tokenizer: Tokenizer, **sizes) -> ModelConfig:
    """A small ModelConfig of variant ``name`` with the tokenizer's ids (distinct sizes:
    D=24, H=3, K=8, F=40, 2 encoder and 1 decoder layers unless the variant says)."""
    base = dict(d_model=24, num_heads=3, d_ff=40, num_encoder_layers=2,
                num_decoder_layers=1, max_len=48, dropout_rate=0.0)
    base.update(sizes)
    base.update(VARIANTS[name])
    return ModelConfig(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                       bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, **base)


def ct2_pieces(translator: Translator, sentences: list[str]) -> list[list[str]]:
    """The CTranslate2 input of each sentence: jformer's source ids without their EOS,
    as pieces; checked equal to what sentencepiece itself gives a deployer."""
    tok = translator.tokenizer
    ids = translator.encode_sources(sentences)
    pieces = [[tok.id_to_piece(i) for i in row[:-1]] for row in ids]
    assert all(row[-1] == tok.eos_id for row in ids)
    assert pieces == _processor(tok.path).encode(sentences, out_type=str)
    return pieces


@functools.cache
def _processor(path: str) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=path)


def piece_ids(translator: Translator) -> dict[str, int]:
    tok = translator.tokenizer
    return {tok.id_to_piece(i): i for i in range(tok.vocab_size)}


def assert_same_search(translator: Translator, ct2_translator, sentences: list[str], *,
                       beam_size: int, max_len: int, require_finished: bool,
                       target_prefix: list[str] | None = None) -> int:
    """jformer and CTranslate2 give the same tokens (EOS included) and scores (1e-4).

    jformer runs ``translate(beam_size, alpha=0, max_len)`` (beam 1: greedy search) with
    decode.eos_candidates="top_w" (only EOS among a step's W best finish, as in
    CTranslate2) and decode.stop="exact" (at alpha 0, CTranslate2's early exit),
    CTranslate2 :func:`search_options` of the same. ``require_finished``:
    every jformer output must end in EOS before max_len (beam search forces EOS at
    max_len, which CTranslate2 does not). ``target_prefix``: the same prefixes to both
    (CTranslate2's as pieces). Returns how many outputs ended in EOS.
    """
    method = "beam" if beam_size > 1 else "greedy"
    if (translator.decode_cfg.eos_candidates, translator.decode_cfg.stop) != ("top_w", "exact"):
        translator = Translator(translator.model_cfg, translator.params, translator.tokenizer,
                                dataclasses.replace(translator.decode_cfg,
                                                    eos_candidates="top_w", stop="exact"))
    ours = translator.translate(sentences, beam_size=beam_size, alpha=0.0, max_len=max_len,
                                return_scores=True, method=method,
                                target_prefix=target_prefix)
    extra, prefix_logp = {}, np.zeros(len(sentences))
    if target_prefix is not None:
        tok = translator.tokenizer
        extra["target_prefix"] = [
            [tok.id_to_piece(i) for i in tok.encode([p], add_eos=False, side="target")[0]]
            for p in target_prefix]
        # CTranslate2 scores the tokens after the prefix; jformer's score holds the
        # prefix's log-probability too (read here by forced decoding).
        scored = forced.score_ids(translator.model_cfg, translator.ops, translator.params,
                                  translator.encode_sources(sentences),
                                  [h.ids for h in ours], translator.buckets, 8, 0.0)
        prefix_logp = [float(np.sum(s.log_probs[:len(p)], dtype=np.float64))
                       for s, p in zip(scored, extra["target_prefix"])]
    theirs = ct2_translator.translate_batch(ct2_pieces(translator, sentences),
                                            return_end_token=True,
                                            **search_options(beam_size, max_len), **extra)
    index = piece_ids(translator)
    finished = 0
    for i, (h, r) in enumerate(zip(ours, theirs)):
        if require_finished:
            assert h.finished and len(h.ids) < max_len, (i, sentences[i], h)
        ids = [index[p] for p in r.hypotheses[0]]
        assert ids == h.ids.tolist(), (i, sentences[i], ids, h.ids.tolist())
        np.testing.assert_allclose(r.scores[0] + prefix_logp[i], h.score, atol=1e-4, rtol=0,
                                   err_msg=f"sentence {i}: {sentences[i]!r}")
        finished += bool(h.finished)
    return finished


def perturbed_params(cfg: ModelConfig, seed: int = 0) -> dict:
    """Random params in the model's tree, none at its initial value: weight matrices and
    embeddings N(0, 1/fan_in), biases N(0, 0.1), LayerNorm scales 1 + N(0, 0.1), so a
    misplaced bias or norm shows in the log-probs. (Drawn with numpy: no compile.)"""
    dummy = jax.ShapeDtypeStruct((1, 4), jnp.int32)
    shapes = jax.eval_shape(lambda a: transformer(cfg).init(jax.random.key(0), a, a),
                            dummy)["params"]
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        name, shape = path[-1].key, leaf.shape
        if name == "scale":
            x = 1.0 + rng.normal(0.0, 0.1, shape)
        elif name.endswith("bias"):
            x = rng.normal(0.0, 0.1, shape)
        else:  # [in, ..., out] weight matrices ([H, K, D] out_kernel: in = H*K), tables
            fan_in = shape[0] * shape[1] if name == "out_kernel" else shape[-1 if name in (
                "embedding", "table") else 0]
            x = rng.normal(0.0, fan_in ** -0.5, shape)
        return x.astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes)
