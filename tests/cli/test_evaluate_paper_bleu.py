"""``jformer evaluate --paper-bleu``: the paper's tokenized BLEU after the sacreBLEU lines,
and a one-line error naming the extra without Moses' tokenizer."""
import sys
import types

import pytest

from jformer.inference import paper_bleu
from tests.cli.test_cli import PAIRS, run_cli


@pytest.fixture
def test_set(pair_files):
    return ["--src", pair_files[0], "--ref", pair_files[1], "--quiet"]


class StandInMoses:
    """sacremoses.MosesTokenizer's interface; "." becomes its own token."""
    langs = []

    def __init__(self, lang):
        self.langs.append(lang)

    def tokenize(self, line, return_str, escape):
        assert return_str and escape
        return line.replace(".", " .")


def test_paper_bleu_follows_the_sacrebleu_lines(tiny_run, test_set, tmp_path, capsys,
                                                monkeypatch):
    monkeypatch.setitem(sys.modules, "sacremoses",
                        types.SimpleNamespace(MosesTokenizer=StandInMoses))
    hyp = tmp_path / "hyp.de"
    status, out, err = run_cli(["evaluate", "--workdir", tiny_run, *test_set, "--hyp-out", hyp,
                                "--paper-bleu"], capsys)
    assert status == 0, err
    lines = out.strip().split("\n")
    assert lines[0].startswith("BLEU = ") and "tok:13a" in lines[1]
    assert lines[2].startswith("chrF2 = ")
    expected, signature = paper_bleu.paper_bleu(
        hyp.read_text().split("\n")[:-1], [de for _, de in PAIRS],
        tokenize=lambda line: line.replace(".", " ."))
    assert lines[4] == f"{expected}  (paper)"
    assert lines[5] == f"  signature: {signature}" and "tok:moses-de" in lines[5]
    assert StandInMoses.langs == ["de"]  # the run's data.tgt_lang


def test_without_sacremoses_it_is_one_line_naming_the_extra(tiny_run, test_set, capsys,
                                                            monkeypatch):
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # `import sacremoses` fails
    status, out, err = run_cli(["evaluate", "--workdir", tiny_run, *test_set, "--paper-bleu"],
                               capsys)
    assert status != 0 and out == ""
    assert err.strip().splitlines() == [
        "jformer evaluate: error: the paper's tokenized BLEU needs Moses' tokenizer "
        "(sacremoses): pip install -e '.[paper-bleu]'"]
