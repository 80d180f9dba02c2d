"""``jformer translate --target-prefix FILE [--prefix-bias-beta B]``: each output line
begins with its prefix line, as Translator.translate gives it; a prefix file of the wrong
length, or a prefix with no room left, is one error line naming the file and line."""
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

from jformer.inference.translator import Translator
from tests.cli.test_cli import run_cli
from tests.inference.test_translator import SHORT

SOURCES = [s for s in SHORT if s]
PREFIXES = ["Die Zahl", "", "Ich sehe", "Es", "", "Wir"]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "in.en").write_text("".join(s + "\n" for s in SOURCES))
    (tmp_path / "prefix.de").write_text("".join(p + "\n" for p in PREFIXES))
    return tmp_path


@pytest.mark.parametrize("beta", [None, 0.9])
def test_outputs_begin_with_their_prefix_lines(tiny_run, files, capsys, beta):
    extra = [] if beta is None else ["--prefix-bias-beta", str(beta)]
    status, out, err = run_cli(["translate", "--workdir", tiny_run, "--input",
                                files / "in.en", "--target-prefix", files / "prefix.de",
                                "--quiet", "--chunk-lines", "4", *extra], capsys)
    assert status == 0, err
    want = Translator.from_checkpoint(tiny_run).translate(SOURCES, target_prefix=PREFIXES,
                                                         prefix_bias_beta=beta)
    assert out.split("\n")[:-1] == want
    if beta is None:
        assert all(line.startswith(p) for line, p in zip(want, PREFIXES))


def test_bad_prefix_files_are_one_line_naming_file_and_line(tiny_run, files, capsys):
    short = files / "short.de"
    short.write_text("Die\n")
    status, _, err = run_cli(["translate", "--workdir", tiny_run, "--input", files / "in.en",
                              "--target-prefix", short, "--quiet"], capsys)
    assert status == 1 and f"--target-prefix {short} has 1 lines but" in err
    long = files / "long.de"
    long.write_text("Die\n" + "sieben " * 40 + "\n" + "\n" * 4)
    status, _, err = run_cli(["translate", "--workdir", tiny_run, "--input", files / "in.en",
                              "--target-prefix", long, "--quiet"], capsys)
    assert status == 1 and f"{long} line 2: the prefix has" in err
    status, _, err = run_cli(["translate", "--workdir", tiny_run, "--input", files / "in.en",
                              "--prefix-bias-beta", "0.5", "--quiet"], capsys)
    assert status == 1 and "--prefix-bias-beta needs --target-prefix" in err
