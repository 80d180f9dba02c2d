"""``jformer score``: one line of forced-decoding scores per pair, equal to
Translator.score's; JSON lines with the pieces; a too-long line named by file and line."""
import json

import numpy as np
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

from jformer.inference.translator import Translator
from tests.cli.test_cli import PAIRS, run_cli


@pytest.fixture
def pairs(pair_files):
    return ["--src", pair_files[0], "--tgt", pair_files[1]]


def test_a_line_per_pair_equal_to_the_api(tiny_run, pairs, capsys):
    status, out, err = run_cli(["score", "--workdir", tiny_run, *pairs, "--alpha", "0.6"],
                               capsys)
    assert status == 0, err
    lines = out.rstrip("\n").split("\n")
    assert len(lines) == len(PAIRS)
    want = Translator.from_checkpoint(tiny_run).score([en for en, _ in PAIRS],
                                                     [de for _, de in PAIRS], alpha=0.6)
    for line, w in zip(lines, want):
        score, total, mean, tokens = line.split("\t")
        assert float(score) == pytest.approx(w.score, abs=1e-4)
        assert float(total) == pytest.approx(w.total, abs=1e-4)
        assert float(mean) == pytest.approx(w.mean, abs=1e-4)
        np.testing.assert_allclose([float(x) for x in tokens.split()], w.log_probs, atol=1e-4)


def test_jsonl_names_the_pieces(tiny_run, pairs, capsys):
    status, out, err = run_cli(["score", "--workdir", tiny_run, *pairs, "--jsonl"], capsys)
    assert status == 0, err
    first = json.loads(out.split("\n")[0])
    assert first["pieces"][-1] == "</s>"
    assert len(first["pieces"]) == len(first["token_log_probs"])
    assert first["log_prob"] == pytest.approx(sum(first["token_log_probs"]), abs=1e-4)


def test_bad_files_are_one_line_naming_file_and_line(tiny_run, pairs, tmp_path, capsys):
    tgt = tmp_path / "long.de"
    tgt.write_text("Ja.\n" + "sieben " * 60 + "\n" + "Nein.\n" * (len(PAIRS) - 2))
    status, _, err = run_cli(["score", "--workdir", tiny_run, *pairs[:2], "--tgt", tgt], capsys)
    assert status == 1
    assert f"{tgt} line 2: has" in err and "model.max_len=40" in err
    short = tmp_path / "short.de"
    short.write_text("Ja.\n")
    status, _, err = run_cli(["score", "--workdir", tiny_run, *pairs[:2], "--tgt", short], capsys)
    assert status == 1 and f"has {len(PAIRS)} lines but --tgt {short} has 1" in err
