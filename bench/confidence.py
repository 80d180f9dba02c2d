"""How well forced decoding's confidence predicts translation quality, sentence by sentence.

    python bench/confidence.py --workdir /work/runs/m30 --checkpoint /work/runs/m30/avg5 \
        --src ../shared/data/multi30k/test2016.en --ref ../shared/data/multi30k/test2016.de

Translates the sources (beam search, the run's decode settings unless given), scores each
output with ``Translator.score`` (its mean token log-probability: the confidence) and
prints the Spearman rank correlation of the confidence with sentence chrF against the
references, and with sentence BLEU; also mean chrF per confidence quartile. The total
log-probability and the length-penalised score are printed beside it for comparison.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--dtype", default="auto")
    args = p.parse_args()

    import dataclasses

    import numpy as np
    from sacrebleu.metrics import BLEU, CHRF
    from scipy.stats import spearmanr

    from jformer.inference import Translator
    from jformer.workdir.files import load_config, read_lines

    decode = dataclasses.replace(load_config(args.workdir).decode, dtype=args.dtype)
    translator = Translator.from_checkpoint(args.workdir, args.checkpoint, decode_cfg=decode)
    sources, refs = read_lines(args.src), read_lines(args.ref)
    start = time.perf_counter()
    hyps = translator.translate(sources, beam_size=args.beam)
    translated = time.perf_counter() - start
    start = time.perf_counter()
    scores = translator.score(sources, hyps)
    scored = time.perf_counter() - start
    chrf, bleu = CHRF(), BLEU(effective_order=True)
    chrf_s = np.array([chrf.sentence_score(h, [r]).score for h, r in zip(hyps, refs)])
    bleu_s = np.array([bleu.sentence_score(h, [r]).score for h, r in zip(hyps, refs)])
    signals = {"mean token log-prob (confidence)": [s.mean for s in scores],
               "total log-prob": [s.total for s in scores],
               "length-penalised score": [s.score for s in scores]}
    print(f"{len(sources)} sentences, beam {args.beam}: translated in {translated:.1f} s, "
          f"scored in {scored:.1f} s; corpus BLEU "
          f"{BLEU().corpus_score(hyps, [refs]).score:.2f}, chrF "
          f"{CHRF().corpus_score(hyps, [refs]).score:.2f}")
    print(f"{'signal':36s} {'Spearman vs chrF':>17s} {'vs sentence BLEU':>17s}")
    for name, values in signals.items():
        rho_c, p_c = spearmanr(values, chrf_s)
        rho_b, _ = spearmanr(values, bleu_s)
        print(f"{name:36s} {rho_c:17.3f} {rho_b:17.3f}   (p={p_c:.1e})")
    order = np.argsort([s.mean for s in scores])
    quarters = np.array_split(order, 4)
    print("mean sentence chrF by confidence quartile (lowest first): "
          + ", ".join(f"{chrf_s[q].mean():.1f}" for q in quarters))


if __name__ == "__main__":
    main()
