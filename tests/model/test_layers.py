"""The whole forward pass against an independent NumPy reference written from the paper:
embeddings scaled by sqrt(d_model) plus sinusoids (3.4, 3.5), encoder and decoder layers
with post-LN or pre-LN residual sublayers (3.1), multi-head self- and cross-attention
(3.2), the FFN (3.3) and the tied output, on random (noised) parameters; and Marian's
options: swish or exact GELU, a bias on the tied logits, the decoder starting from PAD,
concatenated sinusoids."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.config import ModelConfig
from jformer.ops import transformer


PAD, BOS, EOS = 0, 2, 3
CFG = ModelConfig(vocab_size=37, d_model=24, num_heads=3, num_encoder_layers=2,
                  num_decoder_layers=2, d_ff=40, max_len=16, dropout_rate=0.0)


def np_sinusoids(length, d, concat=False):
    """Paper 3.5 (sin at 2i, cos at 2i + 1), or with ``concat`` all sines, then all
    cosines (Marian's MarianSinusoidalPositionalEmbedding)."""
    pe = np.zeros((length, d))
    for pos in range(length):
        for i in range(d // 2):
            sin_at, cos_at = (i, d // 2 + i) if concat else (2 * i, 2 * i + 1)
            pe[pos, sin_at] = math.sin(pos / 10000 ** (2 * i / d))
            pe[pos, cos_at] = math.cos(pos / 10000 ** (2 * i / d))
    return pe


def np_layer_norm(x, p, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def np_attention(x, memory, p, mask):
    """Heads h: softmax(Q_h K_h^T / sqrt(d_k)) V_h, concatenated, times W^O."""
    if memory is None:  # self-attention: fused [D, 3, H, K] Q, K, V projections
        w = p["qkv_kernel"]
        q, k, v = (np.einsum("ld,dhk->lhk", x, w[:, j]) for j in range(3))
    else:
        q = np.einsum("ld,dhk->lhk", x, p["q_kernel"])
        k, v = (np.einsum("md,dhk->mhk", memory, p["kv_kernel"][:, j]) for j in range(2))
    q, v = q + p["q_bias"], v + p["v_bias"]
    logits = np.einsum("lhk,mhk->hlm", q, k) / math.sqrt(q.shape[-1])
    logits = np.where(mask[None], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    ctx = np.einsum("hlm,mhk->lhk", weights, v)
    return np.einsum("lhk,hkd->ld", ctx, p["out_kernel"]) + p["out_bias"]


def np_ffn(x, p, activation):
    h = x @ p["wi"]["kernel"] + p["wi"]["bias"]
    if activation == "relu":
        h = np.maximum(h, 0.0)
    elif activation == "gelu":  # flax's gelu, tanh approximation
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    elif activation == "gelu_exact":  # x * Phi(x)
        h = h * 0.5 * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    else:  # swish: x * sigmoid(x)
        h = h / (1 + np.exp(-h))
    return h @ p["wo"]["kernel"] + p["wo"]["bias"]


def np_sublayer(x, f, norm, cfg):
    eps = cfg.layer_norm_epsilon
    if cfg.norm == "pre":
        return x + f(np_layer_norm(x, norm, eps))
    return np_layer_norm(x + f(x), norm, eps)


def np_transformer(params, cfg, src, tgt):
    """Teacher-forced logits [T, V] of one unpadded pair."""
    emb = params["shared_embedding"]["embedding"]
    pe = np_sinusoids(cfg.max_len, cfg.d_model, concat=cfg.positional == "sinusoidal_concat")
    S, T = len(src), len(tgt)
    x = emb[src] * math.sqrt(cfg.d_model) + pe[:S]
    for i in range(cfg.num_encoder_layers):
        p = params["encoder"][f"layer_{i}"]
        x = np_sublayer(x, lambda h: np_attention(h, None, p["self_attention"],
                                                  np.ones((S, S), bool)),
                        p["attention_residual"]["norm"], cfg)
        x = np_sublayer(x, lambda h: np_ffn(h, p["ffn"], cfg.activation),
                        p["ffn_residual"]["norm"], cfg)
    if cfg.norm == "pre":
        x = np_layer_norm(x, params["encoder"]["final_norm"], cfg.layer_norm_epsilon)
    start = PAD if cfg.decoder_start == "pad" else BOS
    decoder_in = np.concatenate([[start], tgt[:-1]])  # shifted right behind the start
    y = emb[decoder_in] * math.sqrt(cfg.d_model) + pe[:T]
    causal = np.tril(np.ones((T, T), bool))
    for i in range(cfg.num_decoder_layers):
        p = params["decoder"][f"layer_{i}"]
        y = np_sublayer(y, lambda h: np_attention(h, None, p["self_attention"], causal),
                        p["self_residual"]["norm"], cfg)
        y = np_sublayer(y, lambda h: np_attention(h, x, p["cross_attention"],
                                                  np.ones((T, S), bool)),
                        p["cross_residual"]["norm"], cfg)
        y = np_sublayer(y, lambda h: np_ffn(h, p["ffn"], cfg.activation),
                        p["ffn_residual"]["norm"], cfg)
    if cfg.norm == "pre":
        y = np_layer_norm(y, params["decoder"]["final_norm"], cfg.layer_norm_epsilon)
    logits = y @ emb.T  # tied output projection
    return logits + params["decoder"]["output_bias"] if cfg.output_bias else logits


MARIAN = dict(output_bias=True, decoder_start="pad", positional="sinusoidal_concat",
              layer_norm_epsilon=1e-5)


@pytest.mark.parametrize("ops", ["plain", "cpu"])
@pytest.mark.parametrize("norm, activation, options", [
    ("post", "relu", {}), ("pre", "relu", {}), ("post", "gelu", {}),
    ("post", "swish", MARIAN), ("pre", "gelu_exact", dict(output_bias=True))])
def test_forward_equals_the_numpy_reference(ops, norm, activation, options):
    cfg = dataclasses.replace(CFG, ops=ops, norm=norm, activation=activation,
                              **options)
    src = np.array([5, 9, 14, 30, 7, EOS], np.int32)
    tgt = np.array([11, 6, 21, 8, EOS], np.int32)
    model = transformer(cfg)
    # Random parameters of the model's shapes, drawn in NumPy (model.init's eager ops
    # would compile one by one, 20 s): N(0, 0.3^2), LayerNorm scales 1 + N(0, 0.3^2);
    # no zero bias, which would hide a lost one.
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), src[None], tgt[None])
    rng = np.random.default_rng(1)
    params = jax.tree_util.tree_map_with_path(
        lambda path, p: (float(path[-1].key == "scale") + 0.3 * rng.standard_normal(p.shape)
                         ).astype(np.float32), shapes["params"])
    # A padded second row checks that padding changes nothing of the first.
    inputs = np.stack([np.pad(src, (0, 2)), np.full(8, 4, np.int32)])
    targets = np.stack([np.pad(tgt, (0, 1)), np.full(6, 5, np.int32)])
    logits = model.apply({"params": params}, jnp.asarray(inputs), jnp.asarray(targets))
    ref = np_transformer(jax.tree.map(lambda a: np.asarray(a, np.float64), params), cfg,
                         src, tgt)
    np.testing.assert_allclose(np.asarray(logits[0, :len(tgt)]), ref, rtol=2e-4, atol=2e-4)
