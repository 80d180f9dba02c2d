"""BLEU on inputs longer than model.max_len: splitting against reading past the trained length.

    python bench/long_inputs.py [--workdir runs/demo] [--groups 6,9,12,16] [--beam 4]
        [--table-len 256] [--limit N] [--checkpoint DIR] [--src FILE --ref FILE]
        [--min-tokens N] [--bands 96,128,192]

Long inputs are made from the demo corpus's test split (the run's data.demo_* settings),
or from a parallel test set (--src, --ref: one sentence per line): k consecutive test
pairs (k from --groups, non-overlapping windows) joined with spaces on both sides, kept
when the source takes more than --min-tokens tokens (default model.max_len) and at most
--table-len. Each input is translated whole by:

- split: decode.overlong="split" (jformer.inference.segment: one piece per sentence);
- by-sentence: decode.overlong="sentences", which cuts every input at its sentences
  (sentencex), whatever its length;
- packed: the same sentences packed greedily, in order, into pieces up to the limit
  (the alternative one-piece-per-sentence was chosen over);
- extended: the same parameters in a model built with model.max_len = --table-len:
  sinusoidal positions have no parameters, so the table simply extends, and relative
  positions (Shaw et al.) read only offsets clipped at model.relative_clip, all of them
  trained; the decoder then also emits positions past the trained ones;
- truncate: the old behaviour (first model.max_len tokens), for reference;
- sentences: each test sentence translated on its own, the translations joined: what
  the model gives one sentence at a time, the line the others are read against.

An input of at most model.max_len tokens is one piece for split, packed and extended
(it fits); only by-sentence, truncate and sentences cut it. A --min-tokens under
model.max_len measures inputs longer than the training sentences that still fit the
trained table.

Prints corpus BLEU and chrF (sacreBLEU, 13a) per method, overall and per band of source
length, and the ratio of output to reference length. A BLEU figure, not a timing: it
may run on a busy machine. For sinusoidal and relative models (a learned table cannot
extend).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from jformer.data import demo  # noqa: E402
from jformer.inference import OverlongWarning, Translator, scoring  # noqa: E402
from jformer.workdir import files  # noqa: E402

METHODS = ("split", "by-sentence", "packed", "extended", "truncate", "sentences")


def test_pairs(config, src: str | None, ref: str | None) -> list[tuple[str, str]]:
    """The demo's test split, or the (source, reference) lines of two files."""
    if (src is None) != (ref is None):
        raise SystemExit("--src and --ref go together")
    if src is None:
        d = config.data
        return demo.generate_pairs(d.demo_seed, d.demo_num_train, d.demo_num_eval,
                                   d.demo_num_test)["test"]
    sources, refs = files.read_lines(src), files.read_lines(ref)
    if len(sources) != len(refs):
        raise SystemExit(f"{src} has {len(sources)} lines and {ref} {len(refs)}; "
                         f"a parallel test set has one line each")
    return list(zip(sources, refs))


def long_pairs(test: list[tuple[str, str]], count, groups: list[int], min_tokens: int,
               table_len: int) -> list[tuple[list[str], str, int]]:
    """(source sentences, joined reference, source tokens) of every long input."""
    out = []
    for k in groups:
        for start in range(0, len(test) - k + 1, k):
            window = test[start:start + k]
            src = [en for en, _ in window]
            n = count(" ".join(src))
            if min_tokens < n <= table_len:
                out.append((src, " ".join(de for _, de in window), n))
    return out


def band_edges(min_tokens: int, table_len: int, edges: list[int]) -> list[tuple[int, int]]:
    """(low, high) source-token bands from min_tokens + 1 to table_len, cut at ``edges``."""
    cuts = [min_tokens] + [e for e in sorted(edges) if min_tokens < e < table_len]
    return [(lo + 1, hi) for lo, hi in zip(cuts, cuts[1:] + [table_len])]


def packed_pieces(sentences: list[str], count, limit: int) -> list[str]:
    """Consecutive sentences joined greedily while the piece fits."""
    pieces = [sentences[0]]
    for s in sentences[1:]:
        joined = pieces[-1] + " " + s
        if count(joined) <= limit:
            pieces[-1] = joined
        else:
            pieces.append(s)
    return pieces


def translate_all(method: str, base: Translator, extended: Translator, inputs, beam: int
                  ) -> list[str]:
    texts = [" ".join(src) for src, _, _ in inputs]
    if method == "split":
        return base.translate(texts, beam_size=beam)
    if method == "extended":
        return extended.translate(texts, beam_size=beam)
    if method == "sentences":
        return _joined(base, [src for src, _, _ in inputs], beam)
    if method in ("truncate", "by-sentence"):
        policy = "truncate" if method == "truncate" else "sentences"
        other = Translator(base.model_cfg, base.params, base.tokenizer,
                           dataclasses.replace(base.decode_cfg, overlong=policy),
                           source_lang=base.source_lang)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OverlongWarning)
            return other.translate(texts, beam_size=beam)
    count = _counter(base)
    return _joined(base, [packed_pieces(src, count, base.model_cfg.max_len)
                          for src, _, _ in inputs], beam)


def _joined(base: Translator, groups: list[list[str]], beam: int) -> list[str]:
    """Every piece of every group translated in one call; each group's joined with spaces."""
    flat = base.translate([p for g in groups for p in g], beam_size=beam)
    out, i = [], 0
    for g in groups:
        out.append(" ".join(flat[i:i + len(g)]))
        i += len(g)
    return out


def _counter(translator: Translator):
    return lambda text: len(translator.tokenizer.encode([text], add_eos=True)[0])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default=os.path.join(REPO, "runs", "demo"))
    p.add_argument("--groups", default="6,9,12,16", help="sentences per long input")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--table-len", type=int, default=256,
                   help="positions of the extended table (and the longest input kept)")
    p.add_argument("--limit", type=int, default=0, help="at most this many inputs (0: all)")
    p.add_argument("--checkpoint", default=None, help="a checkpoint directory, e.g. an "
                   "average (default: the workdir's latest)")
    p.add_argument("--src", default=None, help="a test set's source lines (default: the "
                   "demo's test split)")
    p.add_argument("--ref", default=None, help="its reference lines")
    p.add_argument("--min-tokens", type=int, default=None,
                   help="keep inputs over this many source tokens (default: model.max_len)")
    p.add_argument("--bands", default="96,128,192",
                   help="source-token counts where the per-band figures are cut")
    args = p.parse_args(argv)
    config = files.load_config(args.workdir)
    if config.model.positional == "learned":
        raise SystemExit(f"{args.workdir}: model.positional='learned'; a learned table "
                         f"cannot extend (sinusoidal and relative positions can)")
    base = Translator.from_checkpoint(args.workdir, args.checkpoint, decode_cfg=(
        dataclasses.replace(config.decode, overlong="split")))
    decode_ext = dataclasses.replace(config.decode, overlong="error", length_buckets=tuple(
        sorted(set(config.decode.length_buckets) | {128, args.table_len})))
    extended = Translator(dataclasses.replace(config.model, max_len=args.table_len),
                          base.params, base.tokenizer, decode_ext,
                          source_lang=config.data.src_lang)
    min_tokens = config.model.max_len if args.min_tokens is None else args.min_tokens
    inputs = long_pairs(test_pairs(config, args.src, args.ref), _counter(base),
                        [int(k) for k in args.groups.split(",")], min_tokens, args.table_len)
    if not inputs:
        raise SystemExit(f"no input of {min_tokens + 1}-{args.table_len} source tokens; "
                         f"try larger --groups or a lower --min-tokens")
    if args.limit:
        inputs = inputs[:args.limit]
    bands = band_edges(min_tokens, args.table_len, [int(e) for e in args.bands.split(",")])
    print(f"{args.workdir}: model.positional={config.model.positional}, "
          f"model.max_len={config.model.max_len}, {len(inputs)} long inputs "
          f"({min(n for *_, n in inputs)}-{max(n for *_, n in inputs)} source tokens), "
          f"beam {args.beam}")
    header = f"{'method':<9} {'band':>9} {'inputs':>6} {'BLEU':>6} {'chrF':>6} {'len ratio':>9}"
    print(header)
    for method in METHODS:
        hyps = translate_all(method, base, extended, inputs, args.beam)
        for low, high in [(0, args.table_len)] + bands:
            idx = [i for i, (*_, n) in enumerate(inputs) if low <= n <= high]
            if not idx:
                continue
            s = scoring.corpus_scores([hyps[i] for i in idx], [inputs[i][1] for i in idx])
            ratio = s["bleu_details"].split("ratio = ")[1].split()[0]
            band = "all" if low == 0 else f"{low}-{high}"
            print(f"{method:<9} {band:>9} {len(idx):>6} {s['bleu']:6.2f} {s['chrf']:6.2f} "
                  f"{ratio:>9}", flush=True)
    print(s["bleu_signature"])


if __name__ == "__main__":
    main()
