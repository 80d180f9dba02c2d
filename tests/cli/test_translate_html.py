"""``jformer translate --format html``: each line is HTML, translated as
Translator.translate(format="html") does; steering flags of plain sentences are refused
by name."""
import pytest

# The option's wiring through the CLI; the option itself is tested in the default run
# (tests/inference/test_html_format.py, test_inline_markup.py). Slow: CI's second run.
pytestmark = pytest.mark.slow

from jformer.inference.translator import Translator  # noqa: E402
from tests.cli.test_cli import run_cli  # noqa: E402
from tests.serve.conftest import WORKDIR  # noqa: E402

LINES = ["<p>I see <b>a big</b> dog.</p>", "It is <i>late</i>, {name}.<br/>", "",
         "<b>Five.</b> &amp; %s"]


def test_each_line_is_translated_as_html(tmp_path, capsys):
    (tmp_path / "in.html").write_text("".join(line + "\n" for line in LINES))
    status, out, err = run_cli(["translate", "--workdir", WORKDIR, "--input",
                                tmp_path / "in.html", "--format", "html", "--beam", "2",
                                "--quiet"], capsys)
    assert status == 0, err
    want = Translator.from_checkpoint(WORKDIR).translate(LINES, format="html", beam_size=2)
    assert out.split("\n")[:-1] == want
    assert "{name}" in out and "%s" in out


def test_steering_flags_are_refused_with_html(tmp_path, capsys):
    (tmp_path / "in.html").write_text("<b>Five.</b>\n")
    status, out, err = run_cli(["translate", "--workdir", WORKDIR, "--input",
                                tmp_path / "in.html", "--format", "html", "--alignments",
                                "--constraints", tmp_path / "in.html"], capsys)
    assert status != 0 and out == ""
    assert "--format html does not go with --alignments, --constraints" in err
