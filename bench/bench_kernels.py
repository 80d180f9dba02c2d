"""What each XLA:CPU kernel buys: every kernel against its plain form, at the small config.

    python bench/bench_kernels.py [--dtype float32|bfloat16] [--repeats 30]

Each row times one jitted function twice, with the kernel and with the plain form that
``model.ops="plain"`` runs, at the shapes of a small-config train step (64 sentences
x 32 tokens, d_model 256, d_ff 1024, vocabulary 8,192) or a small-config decode step
(32 sentences, beam 4). Training rows time the value and the gradient (what the train
step runs); decode rows time the forward op. Before timing, each pair is checked to
compute the same values (dropout: the same kept fraction, its masks come from another
random stream by design; the tests in tests/kernels check each properly). It prints the
median milliseconds of each and the plain/kernel ratio. Whole-model figures with the
switch on and off: `bench_train.py --ops plain,cpu` and `bench_decode.py --ops`.
"""
from __future__ import annotations

import argparse
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jformer.kernels import dropout, fused_loss, layernorm, matmul, tied_logits, topk
from jformer.model.losses import smoothed_cross_entropy

ROWS, D, F, V = 64 * 32, 256, 1024, 8192  # small config, batch 64 x 32 target tokens
DECODE_ROWS, BEAM = 32, 4


def _grad_of_sum(fn, argnums):
    """jit(value and gradient of sum(fn(*args) * cotangent)): a layer's training cost."""
    def loss(*args):
        *inputs, cot = args
        return jnp.sum(fn(*inputs).astype(jnp.float32) * cot)
    return jax.jit(jax.value_and_grad(loss, argnums=argnums))


def cases(dtype, key):
    """(name, kind, kernel fn, plain fn, args) for every kernel."""
    k = iter(jax.random.split(key, 16))
    x_ND = jax.random.normal(next(k), (ROWS, D), dtype)
    w_DF = (jax.random.normal(next(k), (D, F)) * 0.05).astype(dtype)
    cot_NF = jax.random.normal(next(k), (ROWS, F))
    x_BLD = x_ND.reshape(64, 32, D)
    emb_VD = (jax.random.normal(next(k), (V, D)) * 0.05).astype(dtype)
    cot_BLV = jax.random.normal(next(k), (64, 32, V))
    scale, bias = jnp.ones((D,)) * 1.1, jnp.full((D,), 0.1)
    cot_BLD = jax.random.normal(next(k), (64, 32, D))
    h_BLF = jax.random.normal(next(k), (64, 32, F), dtype)
    cot_BLF = jax.random.normal(next(k), (64, 32, F))
    rng = next(k)
    targets = jax.random.randint(next(k), (64, 32), 4, V)
    weights = jnp.ones((64, 32), jnp.float32)
    logp_BWV = jax.nn.log_softmax(jax.random.normal(next(k), (DECODE_ROWS, BEAM * V)))
    logits_BV = jax.random.normal(next(k), (DECODE_ROWS, V))
    flax_ln = nn.LayerNorm(epsilon=1e-6, dtype=dtype)
    ln_params = {"params": {"scale": scale, "bias": bias}}
    flax_drop = nn.Dropout(0.1)

    def plain_loss(x, w):
        logits = jnp.einsum("BTD,VD->BTV", x, w, preferred_element_type=jnp.float32)
        return smoothed_cross_entropy(logits, targets, weights, 0.1)["loss"]

    def fused(x, w):
        return fused_loss.projected_cross_entropy(x, w, None, targets, weights, 0.1)["loss"]

    return [
        ("matmul.dense (FFN W1, [2048, 256] x [256, 1024])", "train",
         _grad_of_sum(matmul.dense, (0, 1)), _grad_of_sum(lambda x, w: x @ w, (0, 1)),
         (x_ND, w_DF, cot_NF)),
        ("layernorm.LayerNorm ([64, 32, 256])", "train",
         _grad_of_sum(lambda x: layernorm.layer_norm(x, scale, bias, 1e-6), 0),
         _grad_of_sum(lambda x: flax_ln.apply(ln_params, x), 0), (x_BLD, cot_BLD)),
        ("dropout.Dropout (rate 0.1, [64, 32, 1024])", "train",
         _grad_of_sum(lambda h: dropout.dropout(h, 0.1, rng), 0),
         _grad_of_sum(lambda h: flax_drop.apply({}, h, deterministic=False,
                                                rngs={"dropout": rng}), 0), (h_BLF, cot_BLF)),
        ("tied_logits ([64, 32, 256] x [8192, 256]^T)", "train",
         _grad_of_sum(tied_logits.tied_logits, (0, 1)),
         _grad_of_sum(lambda x, e: jnp.einsum("BLD,VD->BLV", x, e,
                                              preferred_element_type=jnp.float32), (0, 1)),
         (x_BLD, emb_VD, cot_BLV)),
        ("fused_loss (projection + label-smoothed loss, V 8192)", "train",
         jax.jit(jax.value_and_grad(fused, (0, 1))), jax.jit(jax.value_and_grad(plain_loss, (0, 1))),
         (x_BLD, emb_VD)),
        ("topk.fast_top_k (beam: top 8 of [32, 4 x 8192])", "decode",
         jax.jit(lambda x: topk.fast_top_k(x, 2 * BEAM)),
         jax.jit(lambda x: jax.lax.top_k(x, 2 * BEAM)), (logp_BWV,)),
        ("topk.fast_argmax (greedy: [32, 8192])", "decode",
         jax.jit(topk.fast_argmax), jax.jit(lambda x: jnp.argmax(x, -1)), (logits_BV,)),
    ]


def _time_ms(fn, args, repeats):
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _same(a, b, dtype):
    tol = 2e-2 if dtype == jnp.bfloat16 else 1e-3
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        if x.shape != y.shape or not np.allclose(x, y, rtol=tol, atol=tol * max(1.0, np.abs(y).max())):
            return False
    return True


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--repeats", type=int, default=30, help="timed calls per function (median)")
    args = p.parse_args(argv)
    dtype = jnp.dtype(args.dtype)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {args.dtype}, "
          f"median of {args.repeats} calls; train rows: value + gradient\n")
    print("| kernel | step | kernel ms | plain ms | plain / kernel | same values |")
    print("|---|---|---:|---:|---:|---|")
    for name, kind, kernel, plain, fn_args in cases(dtype, jax.random.key(0)):
        if name.startswith("dropout"):  # other random streams by design: compare the rate
            kept = [float(jnp.mean(f(*fn_args)[1] != 0)) for f in (kernel, plain)]
            same = abs(kept[0] - kept[1]) < 0.01
        else:
            same = _same(kernel(*fn_args), plain(*fn_args), dtype)
        k_ms, p_ms = _time_ms(kernel, fn_args, args.repeats), _time_ms(plain, fn_args, args.repeats)
        print(f"| {name} | {kind} | {k_ms:.2f} | {p_ms:.2f} | {p_ms / k_ms:.2f}x | "
              f"{'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
