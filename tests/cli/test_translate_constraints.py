"""``jformer translate --constraints FILE / --glossary FILE``: each output line contains
its constraint line's phrases (JSON list or tab-separated) and the target terms of the
glossary entries its source contains, as Translator.translate gives them; bad files are
one error line naming the file and line."""
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

from jformer.inference.translator import Translator
from tests.cli.test_cli import run_cli
from tests.inference.test_translator import SHORT

SOURCES = [s for s in SHORT if s][:4]  # Five. / two apples / The number.. / It is late.
LINES = ['["Zahl"]', "", "zwei\tÄpfel", ""]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "in.en").write_text("".join(s + "\n" for s in SOURCES))
    (tmp_path / "cons.de").write_text("".join(c + "\n" for c in LINES))
    (tmp_path / "glossary.tsv").write_text("number\tZahl\nlate\tspät\n")
    return tmp_path


@pytest.mark.slow
def test_outputs_keep_their_constraints_and_glossary_terms(tiny_run, files, capsys):
    status, out, err = run_cli(["translate", "--workdir", tiny_run, "--input",
                                files / "in.en", "--constraints", files / "cons.de",
                                "--glossary", files / "glossary.tsv", "--quiet",
                                "--chunk-lines", "3"], capsys)
    assert status == 0, err
    want = Translator.from_checkpoint(tiny_run).translate(
        SOURCES, constraints=[["Zahl"], None, ["zwei", "Äpfel", "Zahl"], ["spät"]])
    assert out.split("\n")[:-1] == want


def test_bad_constraint_files_are_one_line_naming_file_and_line(tiny_run, files, capsys):
    bad = files / "bad.de"
    bad.write_text('[]\n["Zahl", 3]\n\n\n')
    status, _, err = run_cli(["translate", "--workdir", tiny_run, "--input", files / "in.en",
                              "--constraints", bad, "--quiet"], capsys)
    assert status == 1 and f"{bad}:2: not a JSON list of str" in err
    bad.write_text("\n\n" + "zwei " * 30 + "\n\n")
    status, _, err = run_cli(["translate", "--workdir", tiny_run, "--input", files / "in.en",
                              "--constraints", bad, "--quiet", "--chunk-lines", "2"], capsys)
    assert status == 1 and f"{bad} line 3: phrase 1 has " in err and "at most 16" in err
    bad.write_text("Zahl\n")
    status, _, err = run_cli(["translate", "--workdir", tiny_run, "--input", files / "in.en",
                              "--constraints", bad, "--quiet"], capsys)
    assert status == 1 and f"--constraints {bad} has 1 lines but" in err
