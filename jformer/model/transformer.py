"""Encoder, Decoder and the encoder-decoder Transformer (paper 3, Figure 1).

    model = Transformer(cfg)                                   # cfg: ModelConfig
    logits_BTV = model.apply({"params": p}, inputs_BS, targets_BT)   # teacher forcing
    encoded_BSD = model.apply(v, inputs_BS, method=Transformer.encode)
    cache = model.apply(v, encoded_BSD, inputs_BS, max_len, method=Transformer.init_decode_state)
    logits_BV, cache = model.apply(v, tokens_B, step, cache, method=Transformer.decode_step)

Token ids: int32, ``cfg.pad_id`` marks padding; targets end with EOS and carry no BOS
(the decoder input is the targets shifted right behind ``cfg.start_id``: BOS, or PAD
with ``decoder_start="pad"`` as in Marian).
"""
from __future__ import annotations

import jax.numpy as jnp
from flax import linen as nn
from jax import lax

from jformer import step_index
from jformer.config import ModelConfig
from jformer.model import masks
from jformer.model.cache import DecodeCache
from jformer.model.embeddings import PositionalEncoding, TokenEmbedding
from jformer.model.layers import (DecoderLayer, EncoderLayer, check_same_shape, check_tokens,
                                  dtype_of, layer_norm)
from jformer.model.ops import STOCK, Ops
from jformer.types import Array


def shift_right(targets_BT: Array, start_id: int,
                targets_position_BT: Array | None = None) -> Array:
    """Decoder inputs: the start token (``ModelConfig.start_id``), then targets[:-1]; with
    packing, the start token at every segment start."""
    shifted = jnp.concatenate(
        [jnp.full_like(targets_BT[:, :1], start_id), targets_BT[:, :-1]], axis=1)
    if targets_position_BT is not None:
        shifted = jnp.where(targets_position_BT == 0, start_id, shifted)
    return shifted


def _check_packing(**arrays: Array | None) -> None:
    """Integer segment ids / positions; source and target segment ids come together (the
    cross mask needs both: with one alone it would silently span segments)."""
    for name, x in arrays.items():
        if x is not None and not jnp.issubdtype(x.dtype, jnp.integer):
            raise ValueError(f"{name} must be an integer array; got {x.dtype}")
    segs = {n: x for n, x in arrays.items() if n.endswith("_segmentation")}
    if len(segs) == 2 and sum(x is None for x in segs.values()) == 1:
        given = next(n for n, x in segs.items() if x is not None)
        missing = next(n for n, x in segs.items() if x is None)
        raise ValueError(f"packed rows need inputs_segmentation and targets_segmentation "
                         f"together; got {given} without {missing}")


def _positions(tokens_BL: Array, given_BL: Array | None,
               segmentation_BL: Array | None = None) -> Array:
    """Positions: as given; else counted from each segment's start (packed rows); else
    0 .. L-1."""
    if given_BL is not None:
        return given_BL
    index_BL = jnp.broadcast_to(jnp.arange(tokens_BL.shape[1]), tokens_BL.shape)
    if segmentation_BL is None:
        return index_BL
    # A segment starts where the id changes; position = index - index of that start.
    starts_BL = jnp.concatenate([jnp.ones_like(segmentation_BL[:, :1], bool),
                                 segmentation_BL[:, 1:] != segmentation_BL[:, :-1]], axis=1)
    return index_BL - lax.cummax(jnp.where(starts_BL, index_BL, 0), axis=1)


class _Stack(nn.Module):
    """Shared parts of both stacks: embedding + positions + dropout, final pre-LN norm.
    With relative positions (Shaw et al.) no position is added: self-attention reads
    offsets (:mod:`jformer.model.relative`)."""

    cfg: ModelConfig
    embed: TokenEmbedding
    ops: Ops = STOCK

    def setup(self):
        cfg = self.cfg
        if cfg.positional != "relative":
            self.positional = PositionalEncoding(cfg.positional, cfg.max_len, cfg.d_model)
        self.embed_dropout = self.ops.dropout(cfg.dropout_rate)
        if cfg.norm == "pre":  # pre-LN leaves the residual stream unnormalised
            self.final_norm = layer_norm(cfg, self.ops)

    def embed_tokens(self, tokens_BL: Array, positions_BL: Array, deterministic: bool) -> Array:
        x_BLD = self.embed(tokens_BL)
        if self.cfg.positional != "relative":
            x_BLD = x_BLD + self.positional(positions_BL).astype(dtype_of(self.cfg))
        return self.embed_dropout(x_BLD, deterministic=deterministic)

    def finish(self, x_BLD: Array) -> Array:
        return self.final_norm(x_BLD) if self.cfg.norm == "pre" else x_BLD


class Encoder(_Stack):
    """N encoder layers: source ids [B, S] -> encoded [B, S, D]."""

    def setup(self):
        super().setup()
        self.layers = [EncoderLayer(self.cfg, self.ops, name=f"layer_{i}")
                       for i in range(self.cfg.num_encoder_layers)]

    def __call__(self, inputs_BS: Array, inputs_segmentation_BS: Array | None = None,
                 inputs_position_BS: Array | None = None, deterministic: bool = True) -> Array:
        mask = masks.encoder_mask(inputs_BS, self.cfg.pad_id, inputs_segmentation_BS)
        positions_BS = _positions(inputs_BS, inputs_position_BS, inputs_segmentation_BS)
        x_BSD = self.embed_tokens(inputs_BS, positions_BS, deterministic)
        for layer in self.layers:
            x_BSD = layer(x_BSD, mask, deterministic)
        return self.finish(x_BSD)


class Decoder(_Stack):
    """N decoder layers and the output projection (tied to the embedding by default; a
    tied one may add a learned bias, ``output_bias``: Marian's final_logits_bias)."""

    def setup(self):
        super().setup()
        cfg = self.cfg
        self.layers = [DecoderLayer(cfg, self.ops, name=f"layer_{i}")
                       for i in range(cfg.num_decoder_layers)]
        if not cfg.tie_output:
            self.output_projection = nn.Dense(cfg.vocab_size, dtype=dtype_of(cfg),
                                              kernel_init=nn.initializers.xavier_uniform())
        if cfg.output_bias:
            self.output_bias = self.param("output_bias", nn.initializers.zeros,
                                          (cfg.vocab_size,))
        self.step_output = self.ops.step_output(cfg)

    def output_layer(self) -> tuple[Array, Array | None]:
        """The output projection as (weights [V, D] in the compute dtype, float32 bias [V] | None)."""
        if self.cfg.tie_output:
            return (self.embed.embedding.astype(dtype_of(self.cfg)),
                    self.output_bias if self.cfg.output_bias else None)
        # On no rows: binds the layer's parameters (created here when ``init`` runs
        # through ``features``) and computes nothing.
        self.output_projection(jnp.zeros((0, self.cfg.d_model), dtype_of(self.cfg)))
        p = self.output_projection.variables["params"]
        return p["kernel"].T.astype(dtype_of(self.cfg)), p["bias"]

    def project(self, y_BLD: Array) -> Array:
        """Final (normalised) states [B, L, D] -> float32 logits [B, L, V]."""
        if not self.cfg.tie_output:
            return self.output_projection(y_BLD).astype(jnp.float32)
        logits_BLV = self.embed.attend(y_BLD)
        return logits_BLV + self.output_bias if self.cfg.output_bias else logits_BLV

    def __call__(self, encoded_BSD: Array, inputs_BS: Array, targets_BT: Array,
                 inputs_segmentation_BS: Array | None = None,
                 targets_segmentation_BT: Array | None = None,
                 targets_position_BT: Array | None = None,
                 deterministic: bool = True) -> Array:
        """Teacher forcing: the final states [B, T, D] from which :meth:`project` predicts
        each target token."""
        cfg = self.cfg
        self_mask = masks.decoder_mask(targets_BT, cfg.pad_id, targets_segmentation_BT)
        cross_mask = masks.cross_mask(targets_BT, inputs_BS, cfg.pad_id,
                                      targets_segmentation_BT, inputs_segmentation_BS)
        positions_BT = _positions(targets_BT, targets_position_BT, targets_segmentation_BT)
        # the start token wherever a position is 0: every segment start of a packed row
        decoder_in_BT = shift_right(targets_BT, cfg.start_id, positions_BT)
        y_BTD = self.embed_tokens(decoder_in_BT, positions_BT, deterministic)
        for layer in self.layers:
            y_BTD = layer(y_BTD, encoded_BSD, self_mask, cross_mask, deterministic)
        return self.finish(y_BTD)

    def init_cache(self, encoded_BSD: Array, inputs_BS: Array, max_len: int,
                   beam_size: int | None = None) -> DecodeCache:
        """The cache of ``Ops.cache`` for ``max_len`` positions (``beam_size``: of each
        source's hypotheses), with every layer's cross K/V."""
        cfg = self.cfg
        cross = [layer.project_memory(encoded_BSD) for layer in self.layers]
        return self.ops.cache.init(cross, inputs_BS != cfg.pad_id, max_len, beam_size,
                                   cfg.num_heads, cfg.head_dim, dtype_of(cfg))

    def step(self, tokens_N: Array, index: Array, cache: DecodeCache) -> tuple[Array, DecodeCache]:
        positions_N1 = jnp.broadcast_to(index, tokens_N.shape)[:, None]
        y_N1D = self.embed_tokens(tokens_N[:, None], positions_N1, deterministic=True)
        cross_mask = cache.source_valid[:, None, None, :]  # [B, 1, 1, S]
        cache = cache.at_step(index)
        states = []
        for i, layer in enumerate(self.layers):
            y_N1D, state = layer.step(y_N1D, cache.layer(i), index, cache.cross_k[i],
                                      cache.cross_v[i], cross_mask)
            states.append(state)
        _, bias_V = self.output_layer()
        logits_NV = self.step_output(self.finish(y_N1D), self.project, bias_V)[:, 0]
        return logits_NV, cache.stepped(states)


class Transformer(nn.Module):
    """The encoder-decoder Transformer. See the module docstring for the call forms."""

    cfg: ModelConfig
    ops: Ops = STOCK

    def _check_length(self, name: str, tokens_BL: Array) -> None:
        # Positions past the table would give NaN (an out-of-range gather), not an error.
        if tokens_BL.shape[1] > self.cfg.max_len:
            raise ValueError(f"{name} has {tokens_BL.shape[1]} positions; the model has "
                             f"model.max_len={self.cfg.max_len}")

    def setup(self):
        cfg, dtype = self.cfg, dtype_of(self.cfg)
        logits = self.ops.tied_logits
        if cfg.share_embeddings:
            source_embed = target_embed = TokenEmbedding(
                cfg.vocab_size, cfg.d_model, dtype, logits, name="shared_embedding")
        else:
            source_embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, dtype, logits,
                                          name="source_embedding")
            target_embed = TokenEmbedding(cfg.vocab_size, cfg.d_model, dtype, logits,
                                          name="target_embedding")
        self.encoder = Encoder(cfg, source_embed, self.ops)
        self.decoder = Decoder(cfg, target_embed, self.ops)

    def encode(self, inputs: Array, inputs_segmentation: Array | None = None,
               inputs_position: Array | None = None, deterministic: bool = True) -> Array:
        """Source ids int [batch, src_len] (pad_id = padding) -> encoded [batch, src_len, d_model]."""
        check_tokens("inputs", inputs)
        self._check_length("inputs", inputs)
        _check_packing(inputs_segmentation=inputs_segmentation, inputs_position=inputs_position)
        check_same_shape("inputs_segmentation", inputs_segmentation, "inputs", inputs)
        check_same_shape("inputs_position", inputs_position, "inputs", inputs)
        return self.encoder(inputs, inputs_segmentation, inputs_position, deterministic)

    def decode(self, encoded: Array, inputs: Array, targets: Array,
               inputs_segmentation: Array | None = None,
               targets_segmentation: Array | None = None,
               targets_position: Array | None = None, deterministic: bool = True) -> Array:
        """Teacher-forced logits float32 [batch, tgt_len, vocab] from encoded
        [batch, src_len, d_model]."""
        return self.decoder.project(self._decode(
            encoded, inputs, targets, inputs_segmentation, targets_segmentation,
            targets_position, deterministic))

    def _decode(self, encoded, inputs, targets, inputs_segmentation, targets_segmentation,
                targets_position, deterministic) -> Array:
        """The decoder's final states [batch, tgt_len, d_model] (checked as :meth:`decode`)."""
        check_tokens("inputs", inputs)
        check_tokens("targets", targets)
        self._check_length("targets", targets)
        self._check_encoded(encoded, inputs)
        _check_packing(inputs_segmentation=inputs_segmentation,
                       targets_segmentation=targets_segmentation,
                       targets_position=targets_position)
        check_same_shape("inputs_segmentation", inputs_segmentation, "inputs", inputs)
        check_same_shape("targets_segmentation", targets_segmentation, "targets", targets)
        check_same_shape("targets_position", targets_position, "targets", targets)
        return self.decoder(encoded, inputs, targets, inputs_segmentation, targets_segmentation,
                            targets_position, deterministic)

    def __call__(self, inputs: Array, targets: Array, inputs_segmentation: Array | None = None,
                 targets_segmentation: Array | None = None, inputs_position: Array | None = None,
                 targets_position: Array | None = None, deterministic: bool = True) -> Array:
        """Logits float32 [batch, tgt_len, vocab] predicting ``targets`` given ``inputs``."""
        return self.decoder.project(self._teacher_forced(
            inputs, targets, inputs_segmentation, targets_segmentation, inputs_position,
            targets_position, deterministic))

    def features(self, inputs: Array, targets: Array, inputs_segmentation: Array | None = None,
                 targets_segmentation: Array | None = None,
                 inputs_position: Array | None = None, targets_position: Array | None = None,
                 deterministic: bool = True) -> tuple[Array, Array, Array | None]:
        """``__call__`` as the decoder's final states and the output projection (paper
        Figure 1: the decoder stack, then the Linear before the softmax).

        Returns (final decoder states [batch, tgt_len, d_model], output weights
        [vocab, d_model], output bias [vocab] or None): the logits are
        states . weights^T + bias, which ``Ops.loss`` scores.
        """
        states = self._teacher_forced(inputs, targets, inputs_segmentation,
                                      targets_segmentation, inputs_position, targets_position,
                                      deterministic)
        return (states, *self.output_layer())

    def output_layer(self) -> tuple[Array, Array | None]:
        """The output projection: (weights [vocab, d_model] in the compute dtype, float32
        bias [vocab] or None); the tied embedding when ``tie_output``."""
        return self.decoder.output_layer()

    def _teacher_forced(self, inputs, targets, inputs_segmentation, targets_segmentation,
                        inputs_position, targets_position, deterministic):
        check_tokens("inputs", inputs)
        check_tokens("targets", targets)
        if inputs.shape[0] != targets.shape[0]:
            raise ValueError(f"inputs and targets must share the batch size; got "
                             f"{inputs.shape[0]} and {targets.shape[0]}")
        encoded = self.encode(inputs, inputs_segmentation, inputs_position, deterministic)
        return self._decode(encoded, inputs, targets, inputs_segmentation, targets_segmentation,
                            targets_position, deterministic)

    def init_decode_state(self, encoded: Array, inputs: Array, max_decode_len: int,
                          beam_size: int | None = None) -> DecodeCache:
        """A :class:`DecodeCache` for ``max_decode_len`` output positions; cross K/V computed once.

        ``beam_size=W``: self-attention buffers for W hypotheses per source where the
        cache layout (``Ops.cache``) keeps them itself, so decode steps take B*W tokens
        (row b*W + w); None: one row per source.
        """
        check_tokens("inputs", inputs)
        self._check_encoded(encoded, inputs)
        if max_decode_len > self.cfg.max_len:
            raise ValueError(f"max_decode_len must be <= model.max_len={self.cfg.max_len}; "
                             f"got {max_decode_len}")
        if beam_size is not None and (not isinstance(beam_size, int) or beam_size < 1):
            raise ValueError(f"beam_size must be None or an int >= 1; got {beam_size!r}")
        return self.decoder.init_cache(encoded, inputs, max_decode_len, beam_size)

    def decode_step(self, tokens: Array, step: Array,
                    cache: DecodeCache) -> tuple[Array, DecodeCache]:
        """Tokens int [batch] at output position ``step`` -> (logits float32 [batch, vocab], cache).

        batch is the cache's rows (``DecodeCache.rows``; a search may tile a cache of one
        row per source to its G hypotheses). ``step``: an int scalar, every row at that
        position, or int [batch], each row at its own (:mod:`jformer.step_index`; a
        source's hypotheses at one; not with relative positions).
        """
        rows = cache.rows
        shape, dtype = getattr(tokens, "shape", None), getattr(tokens, "dtype", None)
        if shape != (rows,) or not jnp.issubdtype(dtype, jnp.integer):
            of = "" if rows == cache.source_valid.shape[0] else ": sources x beam"
            raise ValueError(f"tokens must be an integer array [{rows}] (the cache's rows"
                             f"{of}); got {dtype} "
                             f"{shape if shape is not None else type(tokens).__name__}")
        step_index.check(step, rows)
        return self.decoder.step(tokens, step, cache)

    def _check_encoded(self, encoded: Array, inputs: Array) -> None:
        want = (*inputs.shape, self.cfg.d_model)
        if getattr(encoded, "shape", None) != want:
            raise ValueError(f"encoded must be [batch, src_len, d_model] = {want} to match "
                             f"inputs; got {getattr(encoded, 'shape', type(encoded).__name__)}")
