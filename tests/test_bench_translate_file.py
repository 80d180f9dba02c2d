"""bench/bench_translate_file.py's CTranslate2 side on the committed tiny workdir: the
peer's process imports what a user's script imports and no more, and translates the file
as CTranslate2 does in-process under jformer's search options."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ctranslate2 = pytest.importorskip("ctranslate2", reason="the marian extra (CTranslate2)")
import sentencepiece  # noqa: E402

from jformer.data.sources import load_split  # noqa: E402
from jformer.interop.ctranslate2 import SPM_EXPORT_NAME, export_workdir  # noqa: E402
from jformer.interop.ctranslate2_search import search_options  # noqa: E402
from jformer.workdir import files  # noqa: E402

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")
LEGACY = os.path.join(os.path.dirname(__file__), "fixtures", "legacy_workdir")
spec = importlib.util.spec_from_file_location(
    "bench_translate_file", os.path.join(BENCH, "bench_translate_file.py"))
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_workdir(LEGACY, tmp_path_factory.mktemp("ct2") / "model")


def in_process(exported, sources: list[str], batch: int, options: dict) -> list[str]:
    """CTranslate2's detokenized translations of ``sources``, in this process."""
    sp = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(exported, SPM_EXPORT_NAME))
    results = ctranslate2.Translator(str(exported), device="cpu").translate_batch(
        sp.encode(sources, out_type=str), max_batch_size=batch, **options)
    return [sp.decode(r.hypotheses[0]) for r in results]


def test_the_worker_imports_no_jax_no_jformer_no_converters(exported, tmp_path):
    config = files.load_config(LEGACY)
    sources = [s for s, _ in load_split(config.data, "test")][:6]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    options = search_options(4, config.model.max_len)
    worker = dict(model=str(exported), spm=os.path.join(exported, SPM_EXPORT_NAME),
                  src=str(tmp_path / "src.txt"), out=str(tmp_path / "out.txt"), inter=1,
                  intra=1, batch=4, options=options,
                  report_modules=str(tmp_path / "modules.json"))
    subprocess.run([sys.executable, bench.CT2_WORKER, json.dumps(worker)], check=True,
                   env=dict(os.environ, CT2_USE_MKL="0"))
    modules = json.loads((tmp_path / "modules.json").read_text())
    assert "ctranslate2" in modules and "sentencepiece" in modules
    heavy = [m for m in modules if m.split(".")[0] in ("jax", "jaxlib", "jformer", "flax",
                                                        "torch", "transformers")
             or m.startswith("ctranslate2.converters")]
    assert heavy == []
    want = in_process(exported, sources, 4, options)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == want


def test_the_ct2_part_reports_each_setting_with_its_bleu(exported, tmp_path):
    out = tmp_path / "rows.json"
    assert bench.main(["--workdir", LEGACY, "--parts", "ct2", "--ct2-threads", "1",
                       "--ct2-mkl", "0", "--limit", "8", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["how"] for r in rows] == ["CTranslate2 float32, 1 thread, oneDNN, batch 32"]
    assert rows[0]["sentences"] == 8 and rows[0]["seconds"] > 0
    config = files.load_config(LEGACY)
    pairs = load_split(config.data, "test")[:8]
    hyps = in_process(exported, [s for s, _ in pairs], 32,
                      search_options(config.decode.beam_size, config.model.max_len))
    assert rows[0]["bleu"] == pytest.approx(bench.bleu(hyps, [t for _, t in pairs]))


def test_rules_name_a_stop_and_an_eos_rule_or_the_runs():
    """--rules takes run or STOP:EOS_CANDIDATES pairs; anything else is refused by name."""
    args = bench.parse(["--workdir", LEGACY, "--rules", "run,full:top_w,exact:all"])
    assert bench._list(args.rules) == ["run", "full:top_w", "exact:all"]
    for bad in ("full", "top_w:full", "exact:some"):
        with pytest.raises(SystemExit):
            bench.parse(["--workdir", LEGACY, "--rules", bad])
