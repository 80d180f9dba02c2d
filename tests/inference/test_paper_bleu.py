"""jformer.inference.paper_bleu: the paper's tokenized, compound-split BLEU."""
import sys

import pytest

from jformer.inference import paper_bleu
from jformer.inference.paper_bleu import split_compounds, tokenized_bleu


def test_split_compounds_as_get_ende_bleu_sh():
    assert split_compounds("das E-Mail-Konto") == "das E ##AT##-##AT## Mail ##AT##-##AT## Konto"
    # perl's matches do not overlap: one-letter parts keep their second hyphen
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    # a hyphen next to a space (or at an end) is no compound
    assert split_compounds("&quot; -Format - x y-") == "&quot; -Format - x y-"


def test_tokenized_bleu_by_hand():
    """Split: hypothesis and reference have 8 tokens each and differ in one (Postfach /
    Konto): precisions 7/8, 5/7, 3/6, 2/5, so BLEU = 100 * (1/8) ** (1/4) = 59.46.
    Unsplit, "E-Mail-Postfach" is one wrong token: no trigram matches, BLEU 0."""
    hyp, ref = "das E-Mail-Postfach ist neu", "das E-Mail-Konto ist neu"
    score = tokenized_bleu([split_compounds(hyp)], [split_compounds(ref)])
    assert score.score == pytest.approx(100 * (1 / 8) ** 0.25)
    assert tokenized_bleu([hyp], [ref]).score == 0.0
    # A second pair ("ja" for "ja nein") adds a unigram match and a brevity penalty:
    # 9 hypothesis tokens for 10: 100 * exp(1 - 10/9) * (8/9 * 5/7 * 3/6 * 2/5) ** (1/4)
    score = tokenized_bleu([split_compounds(hyp), "ja"], [split_compounds(ref), "ja nein"])
    assert score.score == pytest.approx(53.42, abs=0.005)


def test_paper_bleu_tokenizes_then_splits():
    def spaced_punctuation(line):  # a stand-in for Moses: "." is its own token
        return line.replace(".", " .")
    score, sig = paper_bleu.paper_bleu(["das E-Mail-Postfach ist neu."],
                                       ["das E-Mail-Konto ist neu."], tokenize=spaced_punctuation)
    # 9 tokens each, one wrong: 8/9, 6/8, 4/7, 2/6
    assert score.score == pytest.approx(100 * (8 / 9 * 6 / 8 * 4 / 7 * 2 / 6) ** 0.25)
    assert "tok:moses-de" in sig and "compounds:##AT##" in sig


def test_without_sacremoses_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacremoses", None)
    with pytest.raises(ValueError, match=r"sacremoses.*pip install -e '\.\[paper-bleu\]'"):
        paper_bleu.paper_bleu(["a"], ["a"])


def test_moses_tokenization_of_german():
    pytest.importorskip("sacremoses", reason="Moses' tokenizer: pip install -e '.[paper-bleu]'")
    tok = paper_bleu.moses_tokenizer("de")
    assert tok('Das "Rich-Text"-Format kostet 3,50 Euro.') == (
        "Das &quot; Rich-Text &quot; -Format kostet 3,50 Euro .")
    assert split_compounds(tok("Er sagt: e-mail & co.")) == (
        "Er sagt : e ##AT##-##AT## mail &amp; co .")
