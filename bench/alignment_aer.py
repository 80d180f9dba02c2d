"""Alignment error rate of cross-attention alignments, with and without guided alignment.

    python bench/alignment_aer.py --steps 600 --out aer.json

Trains two small Transformers from the same seed on the synthetic task of
jformer/data/demo/aligned.py (word reorderings with known gold links): one with the plain
loss, one with guided alignment (Garg et al. 2019) on head 0 of the penultimate decoder
layer. Then, on held-out pairs, it reads the alignments of the gold translations by
forced decoding (``Translator.align``) and prints AER = 1 - (|A&S| + |A&P|) / (|A| + |S|)
with S = P = the gold links, for each decoder layer averaged over heads and for the
supervised head, plus greedy exact-match accuracy (that the models did learn to
translate). Quality figures only: the run's speed means nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jformer.config import DecodeConfig, ModelConfig
from jformer.data.demo import aligned
from jformer.data.tokenizer import Tokenizer
from jformer.data.alignments import piece_links, word_index
from jformer.inference.alignment import alignment_error_rate
from jformer.inference.translator import Translator
from jformer.model import Transformer
from jformer.train.guided_alignment import GuidedAlignment
from jformer.train.step import make_loss_fn

MAX_LEN = 48


def encode(tok: Tokenizer, examples, batch: int, length: int) -> list[dict]:
    """Fixed-shape batches: inputs, targets (EOS-terminated) and piece links."""
    src = tok.encode([s for s, _, _ in examples], add_eos=True)
    tgt = tok.encode([t for _, t, _ in examples], add_eos=True, side="target")
    out = []
    for start in range(0, len(examples) - batch + 1, batch):
        b = {"inputs": np.zeros((batch, length), np.int32),
             "targets": np.zeros((batch, length), np.int32),
             "alignments": np.zeros((batch, length, length), bool)}
        for r in range(batch):
            s, t = src[start + r], tgt[start + r]
            b["inputs"][r, :len(s)] = s
            b["targets"][r, :len(t)] = t
            words = [word_index([tok.id_to_piece(i) for i in ids[:-1]]) for ids in (s, t)]
            b["alignments"][r] = piece_links(examples[start + r][2], words[0], words[1],
                                             (length, length))
        out.append(b)
    return out


def train(cfg: ModelConfig, batches: list[dict], steps: int, guided: GuidedAlignment | None,
          seed: int) -> dict:
    model = Transformer(cfg)
    loss_fn = make_loss_fn(model, 0.1, cfg.pad_id, guided)
    schedule = optax.join_schedules([optax.linear_schedule(0.0, 2e-3, 100),
                                     optax.constant_schedule(2e-3)], [100])
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(schedule, b2=0.98))
    first = batches[0]
    params = jax.jit(model.init)(jax.random.key(seed), first["inputs"][:1],
                                 first["targets"][:1])["params"]
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, batch, rng):
        grads, metrics = jax.grad(loss_fn, has_aux=True)(params, batch, rng)
        grads = jax.tree.map(lambda g: g / metrics["tokens"], grads)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    rng = jax.random.key(seed + 1)
    for i in range(steps):
        params, opt_state, metrics = step(params, opt_state, batches[i % len(batches)],
                                          jax.random.fold_in(rng, i))
        if (i + 1) % 200 == 0 or i + 1 == steps:
            line = f"  step {i + 1}: loss/token {float(metrics['loss'] / metrics['tokens']):.3f}"
            if guided is not None:
                line += (f", alignment loss/link-token "
                         f"{float(metrics['alignment_loss'] / metrics['aligned_tokens']):.3f}")
            print(line, flush=True)
    return params


def evaluate(cfg: ModelConfig, params, tok: Tokenizer, test, guided_layer: int) -> dict:
    sources, targets, gold = zip(*test)
    out = {}
    base = DecodeConfig(batch_size=64, length_buckets=(MAX_LEN,), beam_size=1)
    translator = Translator(cfg, params, tok, base)
    hyps = translator.translate(list(sources), method="greedy")
    out["exact_match"] = float(np.mean([h == t for h, t in zip(hyps, targets)]))
    settings = {f"layer{layer}_mean": dict(alignment_layer=layer)
                for layer in range(cfg.num_decoder_layers)}
    settings[f"layer{guided_layer}_head0"] = dict(alignment_layer=guided_layer,
                                                   alignment_head=0)
    for name, fields in settings.items():
        translator.decode_cfg = dataclasses.replace(base, **fields)
        predicted = translator.align(list(sources), list(targets))
        out[f"aer_{name}"] = alignment_error_rate(predicted, gold)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--train", type=int, default=4000, help="training pairs")
    parser.add_argument("--test", type=int, default=300, help="held-out pairs")
    parser.add_argument("--weight", type=float, default=0.5,
                        help="guided alignment weight (lambda)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()

    train_examples = aligned.generate(args.seed, args.train)
    seen = {s for s, _, _ in train_examples}
    test = [e for e in aligned.generate(args.seed + 1000, 3 * args.test)
            if e[0] not in seen][:args.test]
    with tempfile.TemporaryDirectory() as tmp:
        tok = Tokenizer.train([x for s, t, _ in train_examples for x in (s, t)],
                              os.path.join(tmp, "spm"), vocab_size=400)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=64, num_heads=4,
                      num_encoder_layers=2, num_decoder_layers=2, d_ff=128,
                      max_len=MAX_LEN, dropout_rate=0.0, pad_id=tok.pad_id,
                      bos_id=tok.bos_id, eos_id=tok.eos_id)
    batches = encode(tok, train_examples, args.batch, MAX_LEN)
    layer = cfg.num_decoder_layers - 2  # the penultimate: decode.alignment_layer's default
    results = {"config": {**vars(args), "model": dataclasses.asdict(cfg),
                          "guided_layer": layer, "guided_head": 0}}
    for name, guided in (("plain", None),
                         ("guided", GuidedAlignment(args.weight, layer=layer, head=0))):
        print(f"training {name} ({args.steps} steps of {args.batch} pairs)", flush=True)
        params = train(cfg, batches, args.steps, guided, args.seed)
        results[name] = evaluate(cfg, params, tok, test, layer)
        print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in results[name].items()),
              flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    jnp.zeros(())  # start jax before the tokenizer's threads
    main()
