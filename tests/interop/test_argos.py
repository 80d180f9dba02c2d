"""``jformer export argos`` installed and run by argostranslate itself, offline.

argostranslate reads its settings (package folder, beam size) from the environment when
imported, and writes below $XDG_DATA_HOME, so each check runs in a fresh interpreter with
those pointed into tmp_path. The one step that cannot run here is MiniSBD's sentence
splitter, which downloads its model on first use: the slow test replaces it by "the
input is one sentence" (each input here is one sentence); everything else is
argostranslate's own code: install_from_path, its package loader and tokenizer, its
CTranslate2 call and decoding.
"""
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

pytest.importorskip("ctranslate2", reason="the Argos export needs the export extra: "
                    "pip install 'jformer[export]'")
pytest.importorskip("argostranslate", reason="the Argos tests need argostranslate: pip "
                    "install 'jformer[test]'")

from jformer.cli import main  # noqa: E402
from jformer.data.tokenizer import Tokenizer  # noqa: E402
from jformer.inference import Translator  # noqa: E402
from jformer.interop import argos  # noqa: E402
from jformer.interop.ctranslate2 import ExportError  # noqa: E402
from jformer.config import DecodeConfig  # noqa: E402
from jformer.data import demo  # noqa: E402
from jformer.workdir import files  # noqa: E402

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
SENTENCES = [s for s, _ in demo.generate_pairs(0, 300, 0, 12)["test"]]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INSTALL = """
import json, sys
import argostranslate.package as package
package.install_from_path(sys.argv[1])
(pkg,) = package.get_installed_packages()
print(json.dumps({"codes": [pkg.from_code, pkg.to_code], "names": [pkg.from_name, pkg.to_name],
                  "folder": str(pkg.package_path), "readme": pkg.get_readme(),
                  "pieces": [pkg.tokenizer.encode(s) for s in json.loads(sys.argv[2])]}))
"""
TRANSLATE = """
import json, sys
import argostranslate.package, argostranslate.sbd
argostranslate.package.install_from_path(sys.argv[1])
# MiniSBD downloads its model on first use: here, each input is one sentence.
argostranslate.sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [text]
import argostranslate.translate
print(json.dumps([argostranslate.translate.translate(s, "en", "de")
                  for s in json.loads(sys.argv[2])]))
"""


def run_argos(script: str, package: str, sentences, home, **env) -> object:
    env = dict(os.environ, XDG_DATA_HOME=str(home / "data"),
               XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"),
               **env)
    env.pop("ARGOS_PACKAGES_DIR", None)
    out = subprocess.run([sys.executable, "-c", script, package, json.dumps(sentences)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("argos") / "translate-en_de-1_0.argosmodel"
    assert main(["export", "argos", "--workdir", LEGACY, "--out", str(out)]) == 0
    return str(out)


def test_the_package_holds_what_argos_reads(package):
    with zipfile.ZipFile(package) as archive:
        names = set(archive.namelist())
        meta = json.loads(archive.read("translate-en_de-1_0/metadata.json"))
        spm_bytes = archive.read("translate-en_de-1_0/sentencepiece.model")
    assert {"translate-en_de-1_0/" + n for n in (
        "metadata.json", "sentencepiece.model", "README.md", "model/model.bin",
        "model/config.json", "model/shared_vocabulary.json")} <= names
    assert all(n.startswith("translate-en_de-1_0/") for n in names)
    assert meta == {"package_version": "1.0", "argos_version": "1.9", "type": "translate",
                    "from_code": "en", "from_name": "English", "to_code": "de",
                    "to_name": "German", "links": []}
    with open(os.path.join(LEGACY, "spm.model"), "rb") as f:
        assert spm_bytes == f.read()


def test_argostranslate_installs_it_and_segments_as_jformer(package, tmp_path):
    got = run_argos(INSTALL, package, SENTENCES, tmp_path)
    assert got["codes"] == ["en", "de"] and got["names"] == ["English", "German"]
    assert got["folder"].startswith(str(tmp_path / "data"))  # installed, not read in place
    assert "step 400" in got["readme"]
    tok = Tokenizer.load(os.path.join(LEGACY, "spm.model"))
    assert got["pieces"] == [[tok.id_to_piece(i) for i in row]
                             for row in tok.encode_lists(SENTENCES, add_eos=False)]


@pytest.mark.slow
def test_argostranslate_translates_as_jformers_greedy_search(package, tmp_path):
    """ARGOS_BEAM_SIZE=1: Argos's CTranslate2 search is greedy, as jformer's with
    method="greedy" (length penalties do not apply); its texts are jformer's. With its
    default beam of 4 it translates every sentence too (its own length penalty, 0.2)."""
    translator = Translator.from_checkpoint(LEGACY, decode_cfg=DecodeConfig(
        batch_size=16, length_buckets=(32,)))
    max_len = translator.model_cfg.max_len
    want = translator.translate(SENTENCES, method="greedy", max_len=max_len)
    # Argos's CTranslate2 call has no max_decoding_length (256): compare where jformer
    # finished before its max_len
    finished = [h.finished for h in translator.translate(
        SENTENCES, method="greedy", max_len=max_len, return_scores=True)]
    assert sum(finished) >= 8
    got = run_argos(TRANSLATE, package, SENTENCES, tmp_path / "greedy", ARGOS_BEAM_SIZE="1")
    assert [g for g, f in zip(got, finished) if f] == [w for w, f in zip(want, finished) if f]
    beam = run_argos(TRANSLATE, package, SENTENCES, tmp_path / "beam")
    assert len(beam) == len(SENTENCES) and all(beam)


def test_separate_vocabularies_are_refused_by_name(tmp_path, capsys):
    """A workdir whose source and target have their own sentencepiece models (here the
    legacy model twice, numbered alike, so the config still matches the tokenizer)."""
    workdir = shutil.copytree(LEGACY, tmp_path / "run")
    for name in files.SEPARATE_SPM.values():
        shutil.copyfile(workdir / "spm.model", workdir / name)
    tok = Tokenizer.load(workdir / "spm.model")
    files.write_json(workdir / files.JOINT_VOCAB,
                     {tok.id_to_piece(i): i for i in range(tok.vocab_size)})
    config = json.loads((workdir / "config.json").read_text())
    config["data"]["vocab"] = "separate"
    (workdir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match="data.vocab='separate'"):
        argos.export_workdir(workdir, tmp_path / "out.argosmodel")
    assert main(["export", "argos", "--workdir", str(workdir), "--out",
                 str(tmp_path / "out.argosmodel")]) == 1
    assert "data.vocab='separate'" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["run"]  # nothing half-written
