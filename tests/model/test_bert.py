"""The encoder-only model and its heads (jformer.model.bert)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import bert_base, bert_demo, bert_large, bert_small
from jformer.config import BertConfig, ModelConfig, from_config_dict
from jformer.ops import resolve, transformer

from jformer.model.bert import Bert, count_params, init_params
from jformer.model.masks import NEG_INF
from tests import params as params_lib

CFG = ModelConfig(vocab_size=53, d_model=16, num_heads=2, num_encoder_layers=2, d_ff=24,
                  max_len=12, positional="learned", activation="gelu", dropout_rate=0.0,
                  layer_norm_epsilon=1e-12)
BERT = BertConfig(num_labels=3)


def bert_formula(V, D, F, N, max_len, types=2, labels=None, norm="post"):
    """Parameters of the model with the pretraining heads: embeddings (tokens, learned
    positions, segments, LayerNorm); per layer the fused QKV kernel with Q and V biases
    (jformer drops the key bias, which softmax cancels), the output projection, the FFN
    and two LayerNorms; pre-LN's final LayerNorm; the pooler; the MLM transform,
    LayerNorm and output bias; NSP."""
    embeddings = V * D + max_len * D + types * D + 2 * D
    layer = (3 * D * D + 2 * D) + (D * D + D) + (2 * D * F + F + D) + 4 * D
    final_norm = 2 * D if norm == "pre" else 0
    return (embeddings + N * layer + final_norm + (D * D + D) + (D * D + D + 2 * D + V)
            + (2 * D + 2))


def counted(config_module):
    cfg = from_config_dict(config_module.get_config())
    model = Bert(cfg.model, cfg.bert, "pretrain")
    x = jnp.zeros((1, 8), jnp.int32)
    return cfg, count_params(jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x,
                                                               x)["params"]))


@pytest.mark.parametrize("module, published", [(bert_base, 110e6), (bert_large, 340e6)])
def test_published_sizes(module, published):
    cfg, n = counted(module)
    m = cfg.model
    assert m.vocab_size == 30522 and m.max_len == 512
    assert n == bert_formula(30522, m.d_model, m.d_ff, m.num_encoder_layers, 512)
    assert abs(n - published) / published < 0.05
    if module is bert_base:
        assert n == 110_097_212


def test_small_and_demo_configs_build():
    for module in (bert_small, bert_demo):
        cfg, n = counted(module)
        m = cfg.model
        assert n == bert_formula(m.vocab_size, m.d_model, m.d_ff, m.num_encoder_layers,
                                 m.max_len, norm=m.norm)


def make(head="pretrain", cfg=CFG, bert=BERT, **kw):
    model = Bert(cfg, bert, head, **kw)
    x = jnp.full((2, 8), 7, jnp.int32)
    return model, init_params(model, jax.random.PRNGKey(0), x, jnp.zeros_like(x))


def batch():
    inputs = np.array([[4, 10, 11, 12, 5, 20, 21, 5, 0, 0, 0, 0],
                       [4, 30, 31, 5, 40, 41, 42, 43, 44, 5, 0, 0]], np.int32)
    types = np.array([[0] * 5 + [1] * 3 + [0] * 4, [0] * 4 + [1] * 6 + [0] * 2], np.int32)
    return jnp.asarray(inputs), jnp.asarray(types)


@pytest.mark.slow
def test_mlm_head_projects_only_the_gathered_positions_with_the_tied_embedding():
    model, params = make()
    inputs, types = batch()
    positions = jnp.array([[1, 6, 0], [2, 7, 8]], jnp.int32)
    x_BPD, w_VD, bias_V, nsp_B2 = model.apply({"params": params}, inputs, types, positions,
                                              method=Bert.pretrain_outputs)
    assert x_BPD.shape == (2, 3, 16) and nsp_B2.shape == (2, 2)
    np.testing.assert_array_equal(w_VD, params["encoder"]["token_embedding"]["embedding"])
    assert bias_V.shape == (53,) and "mlm_bias" in params
    # the same as transforming every position and picking the masked ones
    states = model.apply({"params": params}, inputs, types, method=Bert.encode)
    full = model.apply({"params": params}, inputs, types,
                       jnp.broadcast_to(jnp.arange(12), (2, 12)), method=Bert.mlm_logits)
    picked = np.take_along_axis(np.asarray(full), np.asarray(positions)[:, :, None], 1)
    got = model.apply({"params": params}, inputs, types, positions, method=Bert.mlm_logits)
    np.testing.assert_allclose(got, picked, atol=1e-5)
    assert states.shape == (2, 12, 16)
    # the output bias is the head's own: it moves the logits, not the input embedding
    moved = jax.tree.map(lambda a: a, params)
    moved["mlm_bias"] = params["mlm_bias"].at[3].add(5.0)
    shifted = model.apply({"params": moved}, inputs, types, positions, method=Bert.mlm_logits)
    np.testing.assert_allclose(shifted[..., 3] - got[..., 3], 5.0, atol=1e-4)
    np.testing.assert_allclose(shifted[..., 4], got[..., 4], atol=1e-6)


@pytest.mark.slow
def test_padding_segments_and_heads():
    for head, shape in (("classify", (2, 3)), ("tag", (2, 12, 3))):
        model, params = make(head)
        inputs, types = batch()
        out = model.apply({"params": params}, inputs, types)
        assert out.shape == shape and out.dtype == jnp.float32
    model, params = make("span")
    inputs, types = batch()
    start, end = model.apply({"params": params}, inputs, types)
    assert start.shape == end.shape == (2, 12)
    assert (np.asarray(start)[np.asarray(inputs) == 0] == NEG_INF).all()
    # padding changes nothing at real positions
    enc = lambda x, t: model.apply({"params": params}, x, t, method=Bert.encode)  # noqa
    short = enc(inputs[:1, :8], types[:1, :8])
    np.testing.assert_allclose(enc(inputs[:1], types[:1])[:, :8], short, atol=1e-5)
    # segment ids matter, and are ignored without segment embeddings
    assert not np.allclose(enc(inputs, types), enc(inputs, jnp.zeros_like(types)))
    plain, p2 = make("span", bert=dataclasses.replace(BERT, type_vocab_size=0))
    assert "type_embedding" not in p2["encoder"]
    enc2 = lambda x, t: plain.apply({"params": p2}, x, t, method=Bert.encode)  # noqa
    np.testing.assert_array_equal(enc2(inputs, types), enc2(inputs, jnp.zeros_like(types)))


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_bert_initialisation_and_the_encoder_is_the_translation_encoder():
    model, params = make()
    kernel = np.asarray(params["encoder"]["layer_0"]["ffn"]["wi"]["kernel"])
    assert np.abs(kernel).max() <= 0.04 + 1e-7  # truncated at two deviations
    assert kernel.std() == pytest.approx(0.02 * 0.88, rel=0.1)
    assert np.asarray(params["encoder"]["token_embedding"]["embedding"]).std() == \
        pytest.approx(0.0176, rel=0.1)
    att = params["encoder"]["layer_1"]["self_attention"]
    assert not np.asarray(att["q_bias"]).any() and not np.asarray(att["v_bias"]).any()
    norm = params["encoder"]["embedding_norm"]
    assert (np.asarray(norm["scale"]) == 1).all() and not np.asarray(norm["bias"]).any()
    # jformer's EncoderLayer: the translation encoder's layer has the same parameters
    x = jnp.ones((1, 4), jnp.int32)
    translation = jax.eval_shape(lambda: transformer(CFG).init(jax.random.PRNGKey(0), x, x))
    shapes = lambda t: jax.tree.map(lambda a: a.shape, t)  # noqa: E731
    assert shapes(translation["params"]["encoder"]["layer_0"]) == \
        shapes(params["encoder"]["layer_0"])
    jformer_init = make(bert=dataclasses.replace(BERT, init_std=0.0))[1]
    assert np.asarray(jformer_init["encoder"]["layer_0"]["ffn"]["wi"]["kernel"]).std() > 0.1


def test_relative_positions_replace_the_position_table():
    """With model.positional="relative" the encoder adds no position vector; each layer's
    self-attention holds Shaw et al.'s tables [2k + 1, head_dim] (its outputs under both
    kernel sets: test_the_encoder_and_heads_agree_under_plain_and_cpu_kernels, slow)."""
    cfg = dataclasses.replace(CFG, positional="relative", relative_clip=3)
    x = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    params = jax.eval_shape(lambda a: Bert(cfg, BERT, "pretrain").init(
        jax.random.PRNGKey(0), a, a), x)["params"]
    assert "positional" not in params["encoder"]
    for i in range(cfg.num_encoder_layers):
        attention = params["encoder"][f"layer_{i}"]["self_attention"]
        assert attention["relative_position_values"].shape == (7, cfg.head_dim)


def test_bad_inputs_are_value_errors_naming_the_argument():
    model, params = make("classify")
    with pytest.raises(ValueError, match="13 positions; the model has model.max_len=12"):
        model.apply({"params": params}, jnp.ones((1, 13), jnp.int32))
    with pytest.raises(ValueError, match="token_types must have the shape of inputs"):
        model.apply({"params": params}, jnp.ones((1, 6), jnp.int32), jnp.ones((1, 5),
                                                                             jnp.int32))
    with pytest.raises(ValueError, match="inputs must be an integer array"):
        model.apply({"params": params}, jnp.ones((1, 6), jnp.float32))


def noised(params, seed=1):
    """Every leaf noised (zero biases and unit scales would hide a misplaced bias)."""
    return params_lib.noised(params, 0.2, seed)


@pytest.mark.parametrize("head, norm, options", [
    ("pretrain", "post", {}), ("classify", "pre", {}), ("tag", "post", {}), ("span", "pre", {}),
    # Shaw et al.'s relative positions (no position table) and a window
    pytest.param("pretrain", "pre", dict(positional="relative", relative_clip=3,
                                         attention_window=2), marks=pytest.mark.slow)])
@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_the_encoder_and_heads_agree_under_plain_and_cpu_kernels(head, norm, options):
    """model.ops: the stock Flax ops and jformer.kernels give the same parameters and
    the same outputs for every head."""
    inputs, types = batch()
    positions = jnp.array([[1, 6, 0], [2, 7, 8]], jnp.int32)
    cfg = dataclasses.replace(CFG, norm=norm, **options)
    plain_cfg, cpu_cfg = (dataclasses.replace(cfg, ops=k) for k in ("plain", "cpu"))
    plain = Bert(plain_cfg, BERT, head, ops=resolve(plain_cfg))
    cpu = Bert(cpu_cfg, BERT, head, ops=resolve(cpu_cfg))
    params = noised(make(head, cfg=dataclasses.replace(cfg, ops="plain"))[1])
    args = (inputs, types, positions) if head == "pretrain" else (inputs, types)
    shapes = lambda t: jax.tree.map(lambda a: a.shape, t)  # noqa: E731
    assert shapes(jax.eval_shape(cpu.init, jax.random.PRNGKey(0), *args)["params"]) == \
        shapes(params)
    method = Bert.mlm_logits if head == "pretrain" else None
    outputs = [jax.jit(lambda p, m=m: m.apply({"params": p}, *args, method=method))(params)
               for m in (plain, cpu)]
    for p, c in zip(*map(jax.tree.leaves, outputs)):
        np.testing.assert_allclose(c, p, rtol=2e-5, atol=2e-5)
    assert ("positional" in params["encoder"]) == ("positional" not in options)
