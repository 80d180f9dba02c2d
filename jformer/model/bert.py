"""An encoder-only Transformer with BERT's heads (Devlin et al., 2019), on jformer's layers.

    model = Bert(cfg.model, cfg.bert, head="pretrain")
    states_BLD = model.apply(v, inputs_BL, token_types_BL, method=Bert.encode)
    x_BPD, w_VD, bias_V, nsp_B2 = model.apply(v, inputs_BL, token_types_BL, positions_BP,
                                              method=Bert.pretrain_outputs)

The encoder is the translation model's: :class:`~jformer.model.layers.EncoderLayer`
(self-attention and FFN sublayers, post- or pre-LN, dropout), the token embedding
:class:`~jformer.model.embeddings.TokenEmbedding` and
:class:`~jformer.model.embeddings.PositionalEncoding`, padding masks from
:mod:`jformer.model.masks`. BERT adds segment (token-type) embeddings, optionally a
LayerNorm over the summed embeddings (``bert.embedding_norm``) and a pooler,
tanh(W h_[CLS] + b) (``bert.pooler``; paper 3.1 and the released code). Heads:

* ``pretrain``: masked LM, a transform (dense, the model's activation, LayerNorm), then
  logits tied to the token embedding with their own bias [V]; only the gathered masked
  positions [B, P] are transformed and projected (``Ops.loss`` scores the projection).
  Next-sentence prediction: a 2-way softmax on the pooled [CLS] (label 1: B is random).
* ``classify``: softmax over W . pooled [CLS] (single sentences and pairs);
* ``tag``: a softmax per token (the first piece of each word carries its tag);
* ``span``: start and end scores per token, S . h_i and E . h_i (paper 4.2).

Parameter names mirror the translation model's encoder (``encoder/layer_{i}``,
``encoder/positional``, ``encoder/final_norm``), so a pretrained encoder can start a
translation model (:mod:`jformer.train.warm_start`). ``bert.init_std`` > 0 re-draws
every weight matrix and embedding from a truncated normal of that deviation after
``init`` (:func:`init_params`), as BERT initialises; biases stay 0, LayerNorm scales 1.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn

from jformer.config import BertConfig, ModelConfig
from jformer.model import masks
from jformer.model.embeddings import PositionalEncoding, TokenEmbedding
from jformer.model.init import run_once
from jformer.model.layers import (EncoderLayer, check_same_shape, check_tokens, dense_layer,
                                  dtype_of, layer_norm)
from jformer.model.ops import STOCK, Ops
from jformer.types import Array, PyTree

HEADS = ("pretrain", "classify", "tag", "span")
_REDRAWN = ("kernel", "embedding", "table")  # parameter names init_std re-draws


class BertEncoder(nn.Module):
    """Token ids [B, L] (and segment ids) -> final states [B, L, D]."""

    cfg: ModelConfig
    bert: BertConfig
    ops: Ops = STOCK

    def setup(self):
        cfg, dtype, ops = self.cfg, dtype_of(self.cfg), self.ops
        self.token_embedding = TokenEmbedding(cfg.vocab_size, cfg.d_model, dtype,
                                              ops.tied_logits)
        if cfg.positional != "relative":  # relative: in self-attention (Shaw et al.)
            self.positional = PositionalEncoding(cfg.positional, cfg.max_len, cfg.d_model)
        if self.bert.type_vocab_size:
            self.type_embedding = nn.Embed(self.bert.type_vocab_size, cfg.d_model,
                                           embedding_init=nn.initializers.normal(0.02))
        if self.bert.embedding_norm:
            self.embedding_norm = layer_norm(cfg, ops)
        self.embed_dropout = ops.dropout(cfg.dropout_rate)
        self.layers = [EncoderLayer(cfg, ops, name=f"layer_{i}")
                       for i in range(cfg.num_encoder_layers)]
        if cfg.norm == "pre":  # pre-LN leaves the residual stream unnormalised
            self.final_norm = layer_norm(cfg, ops)

    def embed(self, inputs_BL: Array, token_types_BL: Array | None) -> Array:
        """Token + position (+ segment) embeddings [B, L, D], before norm and dropout."""
        dtype = dtype_of(self.cfg)
        if self.bert.scale_embeddings:
            x_BLD = self.token_embedding(inputs_BL)  # x sqrt(d_model), as for translation
        else:
            x_BLD = jnp.take(self.token_embedding.embedding, inputs_BL, axis=0).astype(dtype)
        if self.cfg.positional != "relative":
            positions_BL = jnp.broadcast_to(jnp.arange(inputs_BL.shape[1]), inputs_BL.shape)
            x_BLD = x_BLD + self.positional(positions_BL).astype(dtype)
        if self.bert.type_vocab_size:
            types_BL = jnp.zeros_like(inputs_BL) if token_types_BL is None else token_types_BL
            x_BLD = x_BLD + self.type_embedding(types_BL).astype(dtype)
        return x_BLD

    def __call__(self, inputs_BL: Array, token_types_BL: Array | None = None,
                 deterministic: bool = True) -> Array:
        x_BLD = self.embed(inputs_BL, token_types_BL)
        if self.bert.embedding_norm:
            x_BLD = self.embedding_norm(x_BLD)
        x_BLD = self.embed_dropout(x_BLD, deterministic=deterministic)
        mask = masks.encoder_mask(inputs_BL, self.cfg.pad_id)
        for layer in self.layers:
            x_BLD = layer(x_BLD, mask, deterministic)
        return self.final_norm(x_BLD) if self.cfg.norm == "pre" else x_BLD


class Bert(nn.Module):
    """The encoder and one head (see the module doc); ``num_labels`` from ``bert``."""

    cfg: ModelConfig
    bert: BertConfig
    head: str = "pretrain"
    next_sentence: bool = True  # pretrain: with the NSP classifier
    ops: Ops = STOCK

    def setup(self):
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}; got {self.head!r}")
        cfg, ops = self.cfg, self.ops
        dense = lambda n: dense_layer(cfg, ops, n)  # noqa: E731
        self.encoder = BertEncoder(cfg, self.bert, ops)
        self.head_dropout = ops.dropout(cfg.dropout_rate)
        if self.bert.pooler and self.head in ("pretrain", "classify"):
            self.pooler = dense(cfg.d_model)
        if self.head == "pretrain":
            self.mlm_transform = dense(cfg.d_model)
            self.mlm_norm = layer_norm(cfg, ops)
            self.mlm_bias = self.param("mlm_bias", nn.initializers.zeros, (cfg.vocab_size,))
            if self.next_sentence:
                self.nsp = dense(2)
        elif self.head == "classify":
            self.classifier = dense(self.bert.num_labels)
        elif self.head == "tag":
            self.tagger = dense(self.bert.num_labels)
        else:
            self.span = dense(2)

    # ------------------------------------------------------------------ shared parts
    def encode(self, inputs: Array, token_types: Array | None = None,
               deterministic: bool = True) -> Array:
        """Token ids int [batch, len] (pad_id = padding), segment ids int [batch, len]
        (0 for A, 1 for B) -> final states [batch, len, d_model]."""
        check_tokens("inputs", inputs)
        if inputs.shape[1] > self.cfg.max_len:
            raise ValueError(f"inputs has {inputs.shape[1]} positions; the model has "
                             f"model.max_len={self.cfg.max_len}")
        if token_types is not None:
            check_tokens("token_types", token_types)
            check_same_shape("token_types", token_types, "inputs", inputs)
        return self.encoder(inputs, token_types, deterministic)

    def pooled(self, states_BLD: Array) -> Array:
        """The [CLS] state [B, D], through the pooler when bert.pooler."""
        cls_BD = states_BLD[:, 0]
        return jnp.tanh(self.pooler(cls_BD)) if self.bert.pooler else cls_BD

    def _activation(self, x: Array) -> Array:
        return nn.relu(x) if self.cfg.activation == "relu" else nn.gelu(x)

    # ------------------------------------------------------------------ heads
    def pretrain_outputs(self, inputs: Array, token_types: Array | None,
                         mlm_positions: Array, deterministic: bool = True
                         ) -> tuple[Array, Array, Array, Array | None]:
        """(transformed states at the masked positions [B, P, D], output weights [V, D]
        (the token embedding, compute dtype), float32 output bias [V], NSP logits float32
        [B, 2] or None): the MLM logits are states . weights^T + bias."""
        states_BLD = self.encode(inputs, token_types, deterministic)
        picked_BPD = jnp.take_along_axis(states_BLD, mlm_positions[:, :, None], axis=1)
        x_BPD = self.mlm_norm(self._activation(self.mlm_transform(picked_BPD)))
        w_VD = self.encoder.token_embedding.embedding.astype(dtype_of(self.cfg))
        nsp_B2 = None
        if self.next_sentence:
            nsp_B2 = self.nsp(self.pooled(states_BLD)).astype(jnp.float32)
        return x_BPD, w_VD, self.mlm_bias, nsp_B2

    def mlm_logits(self, inputs: Array, token_types: Array | None,
                   mlm_positions: Array) -> Array:
        """float32 logits [B, P, V] at the positions (inference)."""
        x_BPD, w_VD, bias_V, _ = self.pretrain_outputs(inputs, token_types, mlm_positions)
        return jnp.einsum("BPD,VD->BPV", x_BPD, w_VD,
                          preferred_element_type=jnp.float32) + bias_V

    def classify(self, inputs: Array, token_types: Array | None = None,
                 deterministic: bool = True) -> Array:
        """float32 logits [B, num_labels] from the pooled [CLS]."""
        pooled_BD = self.pooled(self.encode(inputs, token_types, deterministic))
        pooled_BD = self.head_dropout(pooled_BD, deterministic=deterministic)
        return self.classifier(pooled_BD).astype(jnp.float32)

    def tag(self, inputs: Array, token_types: Array | None = None,
            deterministic: bool = True) -> Array:
        """float32 logits [B, L, num_labels] per token."""
        states_BLD = self.encode(inputs, token_types, deterministic)
        states_BLD = self.head_dropout(states_BLD, deterministic=deterministic)
        return self.tagger(states_BLD).astype(jnp.float32)

    def spans(self, inputs: Array, token_types: Array | None = None,
              deterministic: bool = True) -> tuple[Array, Array]:
        """Start and end scores float32 [B, L] (padding at masks.NEG_INF)."""
        states_BLD = self.encode(inputs, token_types, deterministic)
        scores_BL2 = self.span(states_BLD).astype(jnp.float32)
        scores_BL2 = jnp.where((inputs != self.cfg.pad_id)[:, :, None], scores_BL2,
                               masks.NEG_INF)
        return scores_BL2[..., 0], scores_BL2[..., 1]

    def __call__(self, inputs: Array, token_types: Array | None = None,
                 mlm_positions: Array | None = None, deterministic: bool = True):
        """The head's outputs (what ``init`` runs to create every parameter)."""
        if self.head == "pretrain":
            if mlm_positions is None:
                mlm_positions = jnp.zeros((inputs.shape[0], 1), jnp.int32)
            return self.pretrain_outputs(inputs, token_types, mlm_positions, deterministic)
        method = {"classify": self.classify, "tag": self.tag, "span": self.spans}[self.head]
        return method(inputs, token_types, deterministic)


def init_params(model: Bert, rng: Array, inputs: Array, token_types: Array | None = None
                ) -> PyTree:
    """``model.init`` (float32 parameters), then with ``bert.init_std`` > 0 every weight
    matrix and embedding re-drawn from a normal of that deviation truncated at two
    deviations (BERT's ``truncated_normal_initializer``); one program, run once."""
    def draw(rng, inputs, token_types):
        init_rng, redraw_rng = jax.random.split(rng)
        params = model.init(init_rng, inputs, token_types)["params"]
        std = model.bert.init_std
        if std <= 0:
            return params
        flat, tree = jax.tree_util.tree_flatten_with_path(params)
        keys = jax.random.split(redraw_rng, len(flat))
        leaves = []
        for key, (path, leaf) in zip(keys, flat):
            name = str(getattr(path[-1], "key", path[-1]))
            if name.endswith(_REDRAWN):
                leaf = (jax.random.truncated_normal(key, -2.0, 2.0, leaf.shape, jnp.float32)
                        * std).astype(leaf.dtype)
            leaves.append(leaf)
        return jax.tree_util.tree_unflatten(tree, leaves)
    return run_once(draw, rng, inputs, token_types)


def count_params(params: PyTree) -> int:
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
