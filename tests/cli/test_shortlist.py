"""``jformer shortlist`` learns a file from the run's training pairs; ``--shortlist`` reads
it (jformer/cli/shortlist.py, jformer/cli/common.py)."""
import pytest

from jformer.cli import main
from jformer.inference import shortlist
from jformer.workdir import files


@pytest.mark.slow  # CI's slow run keeps it (tests/inference/test_shortlist.py: the Translator)
def test_learn_then_translate_with_it(tiny_run, pair_files, tmp_path, capsys):
    out = tmp_path / "list.npz"
    assert main(["shortlist", "--workdir", tiny_run, "--out", str(out), "--top", "5",
                 "--frequent", "20", "--max-pairs", "300"]) == 0
    assert "learned a shortlist from 300 pairs: 20 frequent pieces" in capsys.readouterr().out
    learned = shortlist.load(out, files.load_config(tiny_run).model.vocab_size)
    assert len(learned.frequent) == 20 and learned.top == 5 and len(learned.targets) > 0
    src, _ = pair_files
    hyp = tmp_path / "hyp.txt"
    assert main(["translate", "--workdir", tiny_run, "--shortlist", str(out), "--input",
                 str(src), "--output", str(hyp), "--method", "greedy"]) == 0
    assert len(hyp.read_text().splitlines()) == len(src.read_text().splitlines())

def test_bad_options_and_files_are_one_line_errors(tiny_run, pair_files, tmp_path, capsys):
    assert main(["shortlist", "--workdir", tiny_run, "--top", "0"]) != 0
    assert "--top must be >= 1" in capsys.readouterr().err
    src, _ = pair_files
    assert main(["translate", "--workdir", tiny_run, "--shortlist", str(tmp_path / "none"),
                 "--input", str(src), "--output", str(tmp_path / "o.txt")]) != 0
    err = capsys.readouterr().err
    assert "shortlist not found" in err and "Traceback" not in err
