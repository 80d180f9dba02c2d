"""One CTranslate2 translation of a file, as a user's script runs it: the peer's side of
bench/bench_translate_file.py.

    CT2_USE_MKL=0 python bench/ct2_file_worker.py '{"model": DIR, "spm": FILE, "src": FILE,
        "out": FILE, "inter": 2, "intra": 1, "batch": 32, "options": {...}}'

It imports ctranslate2 and sentencepiece and nothing of jformer, jax or CTranslate2's
converters: a CTranslate2 user's process pays for none of them, so neither does this
one (importing ``ctranslate2.converters``, as ``jformer.interop.ctranslate2`` does, costs
3-4.6 s on the 2-core machines, more than half the file's translation). ``options`` are
``translate_batch``'s keywords, which the parent computes
(:func:`jformer.interop.ctranslate2_search.search_options`). The process reads the
file, tokenizes it with the export's sentencepiece model, translates it and writes the
detokenized lines; the parent times the whole process. Run in a process of its own:
CT2_USE_MKL is read when the library loads.
"""
import json
import sys


def main(spec: dict) -> None:
    import ctranslate2
    import sentencepiece

    translator = ctranslate2.Translator(spec["model"], device="cpu",
                                        inter_threads=spec["inter"],
                                        intra_threads=spec["intra"])
    sp = sentencepiece.SentencePieceProcessor(model_file=spec["spm"])
    with open(spec["src"], encoding="utf-8") as f:
        sources = f.read().splitlines()
    results = translator.translate_batch(sp.encode(sources, out_type=str),
                                         max_batch_size=spec["batch"], **spec["options"])
    with open(spec["out"], "w", encoding="utf-8") as f:
        f.write("".join(sp.decode(r.hypotheses[0]) + "\n" for r in results))
    if spec.get("report_modules"):  # tests: what this process imported
        with open(spec["report_modules"], "w", encoding="utf-8") as f:
            json.dump(sorted(sys.modules), f)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
