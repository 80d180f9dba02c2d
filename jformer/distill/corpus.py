"""A distilled corpus: the teacher's translations of a split's sources, written as the
line-aligned text files that ``data.source="text"`` reads, a chunk at a time.

    <out>/<split>.<src>, <out>/<split>.<tgt>   the sources and the teacher's targets
    <out>/distill.json                         the manifest: teacher, settings, cost

What holds:

- **Resumable, nothing lost.** The two files grow as ``*.partial``; after each chunk they
  are flushed to disk and ``distill_progress.json`` records (atomically) the sources done
  and both files' byte lengths. A run that stops anywhere resumes after the last recorded
  chunk: the partial files are cut back to the recorded lengths, the sources already done
  are skipped, and the finished files are the same as one uninterrupted run's. The final
  names appear only once every source is done.
- **Same settings or an error.** A resumed run must have the settings it started with
  (teacher, checkpoint, search, targets per source); a different one is a ValueError
  naming the field and both values. A finished corpus with the same settings is left as
  it is.
- **Targets per source.** One (the best beam or greedy hypothesis); ``n_best`` > 1 writes
  the distinct texts of the n best beam hypotheses, each as a pair with its source;
  ``samples`` > 1 writes that many sampled translations (method "sample"), sample k of
  source i drawing with ``fold_in(rng, i * samples + k)``, so a resumed run draws the same.
  An empty translation is left out and counted.
- **The cost, honestly.** The manifest holds the seconds spent translating and the
  seconds of the whole command (loading and compiling included), summed over resumed
  runs, and sentences per second over both.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Iterable, Iterator, Sequence

from jformer.workdir import files

PROGRESS = "distill_progress.json"
MANIFEST = "distill.json"
PARTIAL = ".partial"


class Outputs:
    """The two files of a split being distilled: ``<out>/<split>.<lang>`` for the source
    and target language, and their ``.partial`` forms while they grow."""

    def __init__(self, out: str, split: str, src_lang: str, tgt_lang: str):
        self.out = out
        self.final = (os.path.join(out, f"{split}.{src_lang}"),
                      os.path.join(out, f"{split}.{tgt_lang}"))
        self.partial = tuple(p + PARTIAL for p in self.final)
        self.progress = os.path.join(out, PROGRESS)
        self.manifest = os.path.join(out, MANIFEST)


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); remove it to start the "
                         f"distillation again") from e


def check_settings(path: str, recorded: dict, settings: dict) -> None:
    """ValueError naming the first field whose value differs from the one ``path``
    recorded."""
    for name in sorted(set(recorded) | set(settings)):
        if recorded.get(name) != settings.get(name):
            raise ValueError(
                f"{path}: this distillation was made with {name}={recorded.get(name)!r}, "
                f"not {settings.get(name)!r}; give the same settings to resume it, or "
                f"another --out")


def _cut_back(path: str, size: int) -> None:
    """Truncates ``path`` to the ``size`` bytes a progress record vouches for."""
    have = os.path.getsize(path) if os.path.exists(path) else -1
    if have < size:
        raise ValueError(f"{path}: {have} bytes, but the progress record says {size} were "
                         f"written; the file was changed outside jformer. Remove the "
                         f"folder's distill files to start again")
    with open(path, "r+b") as f:
        f.truncate(size)


def start(outputs: Outputs, settings: dict) -> dict | None:
    """The progress to resume from (a fresh one if there is none), or None when a finished
    corpus with these settings is already there. Partial files are cut back to the last
    recorded chunk."""
    os.makedirs(outputs.out, exist_ok=True)
    if os.path.exists(outputs.progress):
        progress = _read_json(outputs.progress)
        check_settings(outputs.progress, progress["settings"], settings)
        if progress.get("complete"):
            return progress
        for path, size in zip(outputs.partial, progress["bytes"]):
            _cut_back(path, size)
        return progress
    if os.path.exists(outputs.manifest):
        check_settings(outputs.manifest, _read_json(outputs.manifest)["settings"], settings)
        return None
    for path in outputs.partial:  # left by a run that stopped before its first record
        with open(path, "wb"):
            pass
    return dict(settings=settings, done=0, pairs=0, empty=0, bytes=[0, 0], translate_s=0.0,
                wall_s=0.0, complete=False)


def _one_line(text: str) -> str:
    # Byte-fallback pieces can decode to a line break: keep the files line-aligned.
    return text.replace("\r", " ").replace("\n", " ").strip()


def _targets(result, n_best: int) -> list[str]:
    """The distinct non-empty texts of one source's result, best first."""
    texts = [h.text for h in result] if n_best > 1 else [result]
    return list(dict.fromkeys(t for t in map(_one_line, texts) if t))


def distill(translate: Callable[[Sequence[str], int], list], sources: Iterable[list[str]],
            outputs: Outputs, progress: dict, chunk: int, n_best: int = 1, samples: int = 1,
            session_start: float | None = None,
            report: Callable[[dict], None] | None = None) -> dict:
    """Translates ``sources`` (lists of source sentences, in corpus order) after the
    first ``progress["done"]``, ``chunk`` at a time, and finishes the corpus (module
    docstring). ``translate(sentences, first_row)`` returns one result per sentence
    (for ``samples`` > 1 the sentences come repeated, sample by sample, and
    ``first_row`` is the first one's row number, for its sampling key); ``n_best`` > 1:
    lists of hypotheses. Returns the manifest written."""
    session_start = time.perf_counter() if session_start is None else session_start
    wall_before = progress["wall_s"]
    if not progress["complete"]:
        for batch in _chunks(_skip(sources, progress["done"]), chunk):
            t0 = time.perf_counter()
            expanded = [s for s in batch for _ in range(samples)]
            results = translate(expanded, progress["done"] * samples)
            progress["translate_s"] += time.perf_counter() - t0
            src_lines, tgt_lines = [], []
            for i, source in enumerate(batch):
                if samples > 1:
                    got = [t for r in results[i * samples:(i + 1) * samples]
                           if (t := _one_line(r))]
                    progress["empty"] += samples - len(got)
                else:
                    got = _targets(results[i], n_best)
                    progress["empty"] += not got
                src_lines += [_one_line(source)] * len(got)
                tgt_lines += got
            _append(outputs, progress, src_lines, tgt_lines)
            progress["done"] += len(batch)
            progress["pairs"] += len(tgt_lines)
            progress["wall_s"] = wall_before + time.perf_counter() - session_start
            files.write_json(outputs.progress, progress)
            if report is not None:
                report(progress)
        progress["complete"] = True
        progress["wall_s"] = wall_before + time.perf_counter() - session_start
        files.write_json(outputs.progress, progress)
    return _finish(outputs, progress)


def _skip(sources: Iterable[list[str]], done: int) -> Iterator[str]:
    seen = 0
    for block in sources:
        if seen + len(block) <= done:
            seen += len(block)
            continue
        yield from block[max(0, done - seen):]
        seen += len(block)


def _chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _append(outputs: Outputs, progress: dict, src_lines: list[str], tgt_lines: list[str]
            ) -> None:
    """Appends a chunk's lines to both partial files, flushed to disk, and records the
    new lengths in ``progress`` (written by the caller)."""
    sizes = []
    for path, lines in zip(outputs.partial, (src_lines, tgt_lines)):
        with open(path, "ab") as f:
            f.write("".join(line + "\n" for line in lines).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
            sizes.append(f.tell())
    progress["bytes"] = sizes


def _finish(outputs: Outputs, progress: dict) -> dict:
    """Renames the finished partial files into place, writes the manifest, drops the
    progress record (each step safe to repeat after a stop)."""
    for partial, final in zip(outputs.partial, outputs.final):
        if os.path.exists(partial):
            os.replace(partial, final)
    seconds = progress["wall_s"]
    manifest = dict(
        settings=progress["settings"], sources=progress["done"], pairs=progress["pairs"],
        empty_translations=progress["empty"], files=[os.path.basename(p)
                                                     for p in outputs.final],
        translate_s=round(progress["translate_s"], 3), wall_s=round(seconds, 3),
        sentences_per_s=round(progress["done"] / seconds, 3) if seconds else None,
        translate_sentences_per_s=(round(progress["done"] / progress["translate_s"], 3)
                                   if progress["translate_s"] else None))
    files.write_json(outputs.manifest, manifest)
    if os.path.exists(outputs.progress):
        os.remove(outputs.progress)
    return manifest


def write_references(path_pair: tuple[str, str], pairs: Sequence[tuple[str, str]]) -> None:
    """A split's (source, reference) pairs as two line-aligned files, each written
    atomically: the student validates and tests on the real references."""
    for path, side in zip(path_pair, zip(*pairs) if pairs else ((), ())):
        files.write_atomically(path, "".join(_one_line(s) + "\n" for s in side)
                               .encode("utf-8"))
