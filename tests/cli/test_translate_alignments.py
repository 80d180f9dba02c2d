"""``jformer translate --alignments``: each line is "translation ||| i-j ...", the
translation and word alignment Translator.translate(return_alignments=True) gives."""
import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

from jformer.data.alignments import to_moses
from jformer.inference.translator import Translator
from tests.cli.test_cli import run_cli
from tests.inference.test_translator import SHORT, tiny_workdir

SOURCES = [s for s in SHORT if s][:4]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """run(*options) -> (status, stdout, stderr, Translator) of a translate run."""
    root = tmp_path_factory.mktemp("align")
    workdir = tiny_workdir(root)
    (root / "in.en").write_text("".join(s + "\n" for s in SOURCES))

    def run(capsys, *options):
        status, out, err = run_cli(["translate", "--workdir", workdir, "--input",
                                    root / "in.en", "--alignments", "--quiet", *options],
                                   capsys)
        return status, out, err, Translator.from_checkpoint(workdir)

    return run


def test_each_line_carries_its_alignment(run, capsys):
    status, out, err, translator = run(capsys, "--chunk-lines", "3")
    assert status == 0, err
    want = translator.translate(SOURCES, return_alignments=True)
    assert out.split("\n")[:-1] == [f"{h.text} ||| {to_moses(h.alignment)}" for h in want]


@pytest.mark.slow  # another translate run, with n-best lists
def test_n_best_lines_carry_it_as_a_fourth_field(run, capsys):
    status, out, err, translator = run(capsys, "--n-best", "2")
    assert status == 0, err
    want = translator.translate(SOURCES, n_best=2, return_alignments=True)[0]
    lines = [line.split(" ||| ") for line in out.split("\n")[:2]]
    assert [(n, links) for n, _, _, links in lines] == [("0", to_moses(h.alignment))
                                                       for h in want]
    assert [float(score) for _, _, score, _ in lines] == pytest.approx(
        [h.score for h in want], abs=1e-4)
