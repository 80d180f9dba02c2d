"""Lexical constraints on Multi30k: glossary term hit rate, BLEU, chrF and speed.

    python bench/constraints.py --workdir /work/runs/m30 --checkpoint /work/runs/m30/avg5 \
        --data /work/shared/data/multi30k

1. A word dictionary from the training data: for each lowercased source word, the target
   word with the highest Dice co-occurrence coefficient (sentence level), kept when
   Dice >= --min-dice, both words occur >= --min-count times, the source word is not
   one of the --skip-top most frequent and the target word is capitalized (a noun or
   name: a term); plus identical words (numbers, names: the source word itself in the
   reference).
2. The unconstrained translation of test2016 (beam search, the run's decode settings).
3. A glossary (written to a temp dir, never to the repository): the (source word,
   target word) pairs where the source word is in the sentence, its dictionary
   translation is in the reference, and it is missing from the unconstrained output;
   the --entries most frequent pairs.
4. Decoding again with the glossary (jformer.inference.constraints.glossary_constraints).

Prints, with and without the glossary: the term hit rate (over every (sentence,
glossary entry) whose source term the sentence contains: the target term in the output
as a whole word, and anywhere, e.g. inside a compound), corpus BLEU and chrF, and output tokens per second (each decode run
once to compile, then timed; only meaningful on a quiet machine).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORD = re.compile(r"\w+", re.UNICODE)


def words(line: str) -> list[str]:
    return WORD.findall(line)


def dice_dictionary(src: list[str], tgt: list[str], min_count: int, min_dice: float,
                    skip_top: int) -> dict[str, str]:
    """lowercased source word -> the target word of highest Dice coefficient, in its most
    frequent training form, kept only when that form is capitalized (a German noun or
    name: a term, not a function word); the ``skip_top`` most frequent source words are
    left out."""
    fs, ft, joint = collections.Counter(), collections.Counter(), collections.Counter()
    forms: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for s, t in zip(src, tgt):
        sw = set(w.lower() for w in words(s))
        tw = set()
        for k, w in enumerate(words(t)):
            if k:  # not sentence-initial: its case is the word's own
                forms[w.lower()][w] += 1
            tw.add(w.lower())
        fs.update(sw)
        ft.update(tw)
        joint.update((a, b) for a in sw for b in tw)
    frequent = {w for w, _ in fs.most_common(skip_top)}
    best: dict[str, tuple[float, str]] = {}
    for (a, b), n in joint.items():
        if fs[a] < min_count or ft[b] < min_count or a in frequent:
            continue
        dice = 2 * n / (fs[a] + ft[b])
        if dice >= min_dice and dice > best.get(a, (0.0, ""))[0]:
            best[a] = (dice, b)
    out = {}
    for a, (_, b) in best.items():
        form = forms[b].most_common(1)[0][0] if forms[b] else b
        if form[0].isupper():
            out[a] = form
    return out


def has_word(text: str, term: str, ignore_case: bool = False) -> bool:
    flags = re.IGNORECASE if ignore_case else 0
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text, flags) is not None


def build_glossary(sources, refs, hyps, dictionary, entries: int) -> list[tuple[str, str]]:
    """The most frequent (source word, target term) pairs where the reference has the
    term and the unconstrained output misses it; names and numbers the source and the
    reference share count as their own translation."""
    missed = collections.Counter()
    for s, r, h in zip(sources, refs, hyps):
        ref_words = set(words(r))
        for k, w in enumerate(words(s)):
            target = dictionary.get(w.lower())
            if target is None and k and w in ref_words and (w[0].isupper() or w.isdigit()):
                target = w  # identical word: a name or number
            if target is None or target not in ref_words or len(w) < 3:
                continue
            if not has_word(h, target):
                missed[(w.lower(), target)] += 1
    return [pair for pair, _ in missed.most_common(entries)]


def hit_rate(glossary, sources, outputs) -> tuple[int, int, int]:
    """(hits as whole words, hits as substrings, terms applied)."""
    from jformer.inference.constraints import glossary_constraints

    hits = inside = total = 0
    for phrases, out in zip(glossary_constraints(glossary, sources), outputs):
        for p in phrases or ():
            total += 1
            hits += has_word(out, p)
            inside += p in out
    return hits, inside, total


def timed(translator, sources, **kw):
    translator.translate(sources, **kw)  # compiles every program the call uses
    start = time.perf_counter()
    hyps = translator.translate(sources, return_scores=True, **kw)
    seconds = time.perf_counter() - start
    return [h.text for h in hyps], sum(len(h.ids) for h in hyps) / seconds, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--data", required=True, help="folder of train.* and test2016.*")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--entries", type=int, default=300)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--min-dice", type=float, default=0.3)
    p.add_argument("--skip-top", type=int, default=100,
                   help="leave the N most frequent source words out of the dictionary")
    p.add_argument("--limit", type=int, default=0, help="first N test sentences (0: all)")
    args = p.parse_args()

    import dataclasses

    from sacrebleu.metrics import BLEU, CHRF

    from jformer.inference import Translator
    from jformer.inference.constraints import glossary_constraints, load_glossary
    from jformer.workdir.files import load_config, read_lines

    path = lambda split, lang: os.path.join(args.data, f"{split}.{lang}")  # noqa: E731
    dictionary = dice_dictionary(read_lines(path("train", args.src)),
                                 read_lines(path("train", args.tgt)), args.min_count,
                                 args.min_dice, args.skip_top)
    sources, refs = read_lines(path("test2016", args.src)), read_lines(path("test2016",
                                                                            args.tgt))
    if args.limit:
        sources, refs = sources[:args.limit], refs[:args.limit]
    decode = dataclasses.replace(load_config(args.workdir).decode, dtype=args.dtype)
    translator = Translator.from_checkpoint(args.workdir, args.checkpoint, decode_cfg=decode)
    free, free_tps, free_s = timed(translator, sources)
    glossary = build_glossary(sources, refs, free, dictionary, args.entries)
    with tempfile.TemporaryDirectory() as tmp:
        gpath = os.path.join(tmp, "glossary.tsv")
        with open(gpath, "w", encoding="utf-8") as f:
            f.writelines(f"{s}\t{t}\n" for s, t in glossary)
        glossary = load_glossary(gpath)
    cons = glossary_constraints(glossary, sources)
    steered, steered_tps, steered_s = timed(translator, sources, constraints=cons)
    used = sum(c is not None for c in cons)
    print(f"{len(sources)} sentences; dictionary {len(dictionary)} words; glossary "
          f"{len(glossary)} entries; {used} sentences get constraints "
          f"({sum(len(c) for c in cons if c)} terms)")
    print(f"{'':22s} {'term hits (words)':>19s} {'substr':>7s} {'BLEU':>7s} {'chrF':>7s} "
          f"{'tokens/s':>9s} {'seconds':>8s}")
    for name, outs, tps, secs in (("without constraints", free, free_tps, free_s),
                                  ("with the glossary", steered, steered_tps, steered_s)):
        hits, inside, total = hit_rate(glossary, sources, outs)
        print(f"{name:22s} {hits:6d}/{total:<5d} {100 * hits / max(total, 1):6.1f}% "
              f"{100 * inside / max(total, 1):6.1f}% "
              f"{BLEU().corpus_score(outs, [refs]).score:7.2f} "
              f"{CHRF().corpus_score(outs, [refs]).score:7.2f} {tps:9.1f} {secs:8.1f}")
    missing = [(s, o, c) for s, o, c in zip(sources, steered, cons)
               if c and not all(has_word(o, t) for t in c)]
    for s, o, c in missing[:5]:
        print(f"missed: {c} | {s} | {o}")


if __name__ == "__main__":
    main()
