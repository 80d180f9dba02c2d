"""A file of real sentences translated as a user translates it, beside the same model's
CTranslate2 export: seconds, sentences/s and BLEU of each way.

    python bench/bench_translate_file.py --workdir runs/m30 --checkpoint runs/m30/avg5 \\
        [--src test2016.en --ref test2016.de] [--beam 4] [--parts cli,api,ct2]
        [--batch-sizes 16,32,64] [--dtypes model,float32] [--shortlists FILE,...]
        [--continuous 0,1] [--rules run,full:top_w,exact:all]
        [--ct2-threads 1,2]
        [--ct2-mkl 0,1] [--ct2-batch 32] [--json out.json]

Without --src/--ref the run's own test split (its config's data section) is read.

- ``cli``: ``jformer translate --workdir W [--checkpoint C] --input SRC --output OUT``
  in a fresh process, twice, with a compile cache that starts empty (the first run
  compiles and fills it, the second loads from it, as a user's second run does). Each
  run reports the whole process's seconds, and the time from start to the first output
  line. A third run adds ``--eos-candidates top_w --stop exact --alpha 0``, the settings
  under which jformer's beam search and CTranslate2's give the same output (at alpha 0
  the exact rule stops as CTranslate2's early exit does; the full rule may stop before).
- ``api``: ``Translator.translate`` in this process, for each ``--dtypes`` entry
  (``decode.dtype``) and ``--batch-sizes`` entry: a first call, which compiles, then a
  second, timed call on the compiled programs. Loading is not counted. With
  ``--shortlists``, each again with each shortlist file (decode.shortlist); with
  ``--continuous 0,1`` in batches and in slots (decode.continuous); with ``--rules``,
  under each beam rule, ``STOP:EOS_CANDIDATES`` (decode.stop, decode.eos_candidates;
  ``run``: the workdir's own).
- ``ct2``: ``jformer export ctranslate2`` of the same checkpoint (float32; int8 too with
  ``--ct2-int8``). Then, in a fresh process each (bench/ct2_file_worker.py, which imports
  only ctranslate2 and sentencepiece, as a user's script does), CTranslate2 reads the
  file, tokenizes it with the exported sentencepiece model, translates it with
  ``translate_batch`` under jformer's search options
  (:func:`jformer.interop.ctranslate2_search.search_options`: beam ``--beam``, alpha 0,
  ``max_batch_size`` ``--ct2-batch``), and writes the detokenized output. This runs for
  each ``CT2_USE_MKL`` of ``--ct2-mkl`` (1 Intel's MKL, 0 oneDNN) and each thread
  setting: one worker with each of ``--ct2-threads`` intra threads, and that many
  one-thread workers. Seconds count the whole process (start, import, model load,
  tokenization, translation, output), as for ``cli``. The best setting is CTranslate2's
  figure. (Before 2026-11-30 the worker ran inside this script and imported
  CTranslate2's converters through jformer's export module, 3-4.6 s that a user's
  process does not pay: the CTranslate2 figures of earlier runs are that much too slow.)

The table also gives how many output lines equal the CTranslate2 float32 output (from
its best setting) and the ``cli`` top_w run's.
Run it on a quiet machine, and name the CPU beside its figures (bench/README.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
CT2_WORKER = os.path.join(BENCH, "ct2_file_worker.py")
REPO = os.path.dirname(BENCH)
sys.path[:0] = [REPO, BENCH]

from compare import CT2_BACKENDS, cpu_name, ct2_detail, ct2_settings  # noqa: E402


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--checkpoint", default=None, help="checkpoint directory (e.g. avg5)")
    p.add_argument("--src", default=None, help="source file, one sentence per line")
    p.add_argument("--ref", default=None, help="reference file (BLEU)")
    p.add_argument("--limit", type=int, default=0, help="first N lines only (0: all)")
    p.add_argument("--parts", default="cli,api,ct2")
    p.add_argument("--beam", type=int, default=None,
                   help="beam size for every part (default: the run's decode.beam_size)")
    p.add_argument("--cli-args", default="", help="cli: more flags for every jformer "
                   "translate run, e.g. \"--dtype auto\"")
    p.add_argument("--batch-sizes", default="16,32,64", help="api: sentences per batch")
    p.add_argument("--dtypes", default="model,float32", help="api: decode.dtype values")
    p.add_argument("--continuous", default="0", help="api: decode.continuous values "
                   "(0 batches, 1 slots refilled as sentences finish), e.g. 0,1")
    p.add_argument("--rules", default="run", help="api: beam rules, decode.stop:"
                   "decode.eos_candidates (run: the workdir's), e.g. run,full:top_w")
    p.add_argument("--shortlists", default="", help="api: also each of these shortlist "
                   "files (jformer shortlist) for every dtype and batch size")
    p.add_argument("--ct2-threads", default="1,2")
    p.add_argument("--ct2-mkl", default="0,1", help="CT2_USE_MKL values (1 MKL, 0 oneDNN)")
    p.add_argument("--ct2-batch", type=int, default=32, help="CTranslate2 max_batch_size")
    p.add_argument("--ct2-int8", action="store_true", help="also the int8 export")
    p.add_argument("--timeout", type=float, default=1800.0, help="per process, seconds")
    p.add_argument("--json", default=None, help="write every result here")
    args = p.parse_args(argv)
    args.shortlists = _list(args.shortlists)
    unknown = set(_list(args.parts)) - {"cli", "api", "ct2"}
    if unknown:
        p.error(f"--parts must name some of cli, api, ct2; got {sorted(unknown)}")
    if (args.src is None) != (args.ref is None):
        p.error("--src and --ref go together")
    from jformer.config import EOS_CANDIDATES, STOP_RULE_NAMES
    for rule in _list(args.rules):
        stop, _, cands = rule.partition(":")
        if rule != "run" and (stop not in STOP_RULE_NAMES or cands not in EOS_CANDIDATES):
            p.error(f"--rules: each must be run or STOP:EOS_CANDIDATES, STOP one of "
                    f"{STOP_RULE_NAMES}, EOS_CANDIDATES one of {EOS_CANDIDATES}; got {rule!r}")
    if not _list(args.ct2_mkl) or set(_list(args.ct2_mkl)) - set(CT2_BACKENDS):
        p.error(f"--ct2-mkl must list some of 0, 1 (CT2_USE_MKL); got {args.ct2_mkl!r}")
    return args


# ---------------------------------------------------------------------- inputs
def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def inputs(args, tmp: str) -> tuple[str, list[str], list[str]]:
    """(source file, sources, references): --src/--ref, or the run's test split."""
    if args.src:
        sources, refs = read_lines(args.src), read_lines(args.ref)
        if len(sources) != len(refs):
            raise SystemExit(f"--src has {len(sources)} lines, --ref {len(refs)}")
    else:
        from jformer.data.sources import load_split
        from jformer.workdir import files
        pairs = load_split(files.load_config(args.workdir).data, "test")
        sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    if args.limit:
        sources, refs = sources[:args.limit], refs[:args.limit]
    path = os.path.join(tmp, "src.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in sources))
    return path, sources, refs


def bleu(hyps: list[str], refs: list[str]) -> float:
    return scores(hyps, refs)["bleu"]


def scores(hyps: list[str], refs: list[str]) -> dict:
    """Cased detokenized sacreBLEU and chrF (jformer.inference.scoring)."""
    from jformer.inference.scoring import corpus_scores
    return corpus_scores(hyps, refs)


# ---------------------------------------------------------------------- cli
def _env() -> dict:
    """This process's environment with the checkout first on PYTHONPATH."""
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path)


def run_cli(args, src: str, out: str, cache: str, extra: list[str]) -> dict:
    """One ``jformer translate`` process: seconds to the first output line and to exit."""
    argv = [sys.executable, "-m", "jformer", "translate", "--workdir", args.workdir,
            "--input", src, "--quiet", "--compile-cache", cache, *shlex.split(args.cli_args),
            *extra]
    if args.checkpoint:
        argv += ["--checkpoint", args.checkpoint]
    if args.beam is not None:
        argv += ["--beam", str(args.beam)]
    env = _env()
    env.pop("JFORMER_COMPILE_CACHE", None)
    start = time.perf_counter()
    first = None
    with open(out, "w", encoding="utf-8") as f, subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            encoding="utf-8", env=env) as proc:
        for line in proc.stdout:
            if first is None:
                first = time.perf_counter() - start
            f.write(line)
        err = proc.stderr.read()
        code = proc.wait(timeout=args.timeout)
    seconds = time.perf_counter() - start
    if code:
        raise RuntimeError(f"jformer translate exited {code}: {err[-2000:]}")
    return {"seconds": seconds, "first_line_s": first}


def part_cli(args, src: str, refs: list[str], tmp: str) -> list[dict]:
    cache = os.path.join(tmp, "xla-cache")
    rows = []
    for name, extra in (("jformer translate, first run (compiles)", []),
                        ("jformer translate, second run (compile cache)", []),
                        ("jformer translate --eos-candidates top_w --stop exact --alpha 0",
                         ["--eos-candidates", "top_w", "--stop", "exact", "--alpha", "0"])):
        out = os.path.join(tmp, f"cli-{len(rows)}.txt")
        how = f"{name} {args.cli_args}".strip()
        row = {"part": "cli", "how": how, **run_cli(args, src, out, cache, extra)}
        hyps = read_lines(out)
        row.update(sentences=len(hyps), bleu=bleu(hyps, refs), output=out)
        rows.append(_show(row))
    return rows


# ---------------------------------------------------------------------- api
def part_api(args, sources: list[str], refs: list[str], tmp: str) -> list[dict]:
    from jformer.inference import Translator
    from jformer.workdir import files

    decode = files.load_config(args.workdir).decode
    rows = []
    for rule, dtype, listed, slots in itertools.product(
            _list(args.rules), _list(args.dtypes), ("", *args.shortlists),
            map(int, _list(args.continuous))):
        stop, cands = ((decode.stop, decode.eos_candidates) if rule == "run"
                       else rule.split(":"))
        translator = Translator.from_checkpoint(
            args.workdir, args.checkpoint,
            decode_cfg=dataclasses.replace(decode, dtype=dtype, shortlist=listed,
                                           continuous=bool(slots), stop=stop,
                                           eos_candidates=cands),
            compile_cache="off")
        listing = f", shortlist {os.path.basename(listed)}" if listed else ""
        listing += ", continuous" if slots else ""
        listing += f", stop {stop}, {cands}"
        for batch in map(int, _list(args.batch_sizes)):
            kwargs = dict(beam_size=args.beam, batch_size=batch)
            start = time.perf_counter()
            translator.translate(sources, **kwargs)
            first = time.perf_counter() - start
            start = time.perf_counter()
            hyps = translator.translate(sources, **kwargs)
            seconds = time.perf_counter() - start
            out = os.path.join(tmp, f"api-{dtype}-{batch}{'-listed' if listed else ''}"
                                    f"{'-slots' if slots else ''}-{stop}-{cands}.txt")
            with open(out, "w", encoding="utf-8") as f:
                f.write("".join(h + "\n" for h in hyps))
            got = scores(hyps, refs)
            rows.append(_show({"part": "api", "how": f"Translator.translate, decode.dtype="
                               f"{dtype}, batch {batch}{listing}, compiled", "seconds": seconds,
                               "first_call_s": first, "sentences": len(hyps),
                               "bleu": got["bleu"], "chrf": got["chrf"], "output": out}))
    return rows


# ---------------------------------------------------------------------- ct2
def part_ct2(args, src: str, refs: list[str], tmp: str) -> list[dict]:
    from jformer.interop.ctranslate2 import SPM_EXPORT_NAME, export_workdir
    from jformer.interop.ctranslate2_search import search_options
    from jformer.workdir import files

    config = files.load_config(args.workdir)
    beam = config.decode.beam_size if args.beam is None else args.beam
    models = {"float32": export_workdir(args.workdir, os.path.join(tmp, "ct2-float32"),
                                        checkpoint_dir=args.checkpoint)}
    if args.ct2_int8:
        models["int8"] = export_workdir(args.workdir, os.path.join(tmp, "ct2-int8"),
                                        checkpoint_dir=args.checkpoint, quantization="int8")
    rows = []
    for quant, model in models.items():
        for mkl in _list(args.ct2_mkl):
            threads = [int(n) for n in _list(args.ct2_threads)]
            for inter, intra, _ in ct2_settings(args.ct2_batch, threads):
                out = os.path.join(tmp, f"ct2-{quant}-{mkl}-{inter}x{intra}.txt")
                spec = dict(model=model, spm=os.path.join(model, SPM_EXPORT_NAME), src=src,
                            out=out, inter=inter, intra=intra, batch=args.ct2_batch,
                            options=search_options(beam, config.model.max_len))
                start = time.perf_counter()
                done = subprocess.run([sys.executable, CT2_WORKER, json.dumps(spec)],
                                      env=dict(os.environ, CT2_USE_MKL=mkl),
                                      capture_output=True, text=True, timeout=args.timeout)
                seconds = time.perf_counter() - start
                if done.returncode:
                    raise RuntimeError(f"CTranslate2 worker exited {done.returncode}: "
                                       f"{done.stderr[-2000:]}")
                hyps = read_lines(out)
                rows.append(_show({"part": "ct2", "quantization": quant,
                                   "how": f"CTranslate2 {quant}, {ct2_detail(inter, intra, mkl)}"
                                          f", batch {args.ct2_batch}",
                                   "seconds": seconds, "sentences": len(hyps),
                                   "bleu": bleu(hyps, refs), "output": out}))
    return rows


# ---------------------------------------------------------------------- report
def _show(row: dict) -> dict:
    extra = ""
    if row.get("first_line_s") is not None:
        extra = f" (first output {row['first_line_s']:.1f} s)"
    elif "first_call_s" in row:
        extra = f" (first call, compiling, {row['first_call_s']:.1f} s)"
    row["sentences_per_s"] = row["sentences"] / row["seconds"]
    chrf = f", chrF {row['chrf']:.2f}" if "chrf" in row else ""
    print(f"  {row['how']}: {row['seconds']:.1f} s, {row['sentences_per_s']:.1f} sent/s, "
          f"BLEU {row['bleu']:.2f}{chrf}{extra}", flush=True)
    return row


def same_lines(a: str, b: str) -> tuple[int, int]:
    x, y = read_lines(a), read_lines(b)
    return sum(p == q for p, q in zip(x, y)), max(len(x), len(y))


def table(rows: list[dict]) -> str:
    ct2 = [r for r in rows if r["part"] == "ct2" and r["quantization"] == "float32"]
    best = min(ct2, key=lambda r: r["seconds"]) if ct2 else None
    lines = ["| how | seconds | sentences/s | BLEU | first output s | lines = CT2 f32 |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        first = r.get("first_line_s")
        same = ""
        if best is not None:
            n, total = same_lines(r["output"], best["output"])
            same = f"{n}/{total}"
        lines.append(f"| {r['how']} | {r['seconds']:.1f} | {r['sentences_per_s']:.1f} | "
                     f"{r['bleu']:.2f} | {'' if first is None else f'{first:.1f}'} | {same} |")
    if best is not None:
        lines.append(f"\nCTranslate2 float32's best setting: {best['how']}.")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse(argv)
    tmp = tempfile.mkdtemp(prefix="bench-translate-file-")
    try:
        src, sources, refs = inputs(args, tmp)
        cpu = cpu_name()
        print(f"{len(sources)} sentences, {args.workdir} ({args.checkpoint or 'latest'}), "
              f"{cpu}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
              flush=True)
        rows = []
        for part in _list(args.parts):
            print(f"[{part}]", flush=True)
            if part == "cli":
                rows += part_cli(args, src, refs, tmp)
            elif part == "api":
                rows += part_api(args, sources, refs, tmp)
            else:
                rows += part_ct2(args, src, refs, tmp)
        print(table(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"cpu": cpu, "sentences": len(sources), "rows": rows}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
