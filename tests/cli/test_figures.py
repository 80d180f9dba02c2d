"""`jformer figures`: every figure of docs/transformer.md, as small valid PNG files."""
import os
import struct

import pytest

from jformer.cli import main
from jformer.inference.figures import MODEL_FIGURES, PE_FIGURES

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: str) -> tuple[int, int]:
    """(width, height) of a PNG file; fails unless it starts with the signature and IHDR."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def check_pngs(folder, names):
    assert sorted(os.listdir(folder)) == sorted(names)
    for name in names:
        path = os.path.join(folder, name)
        width, height = png_size(path)
        assert 300 <= width <= 1600 and 200 <= height <= 1600, (name, width, height)
        assert os.path.getsize(path) < 100_000, (name, os.path.getsize(path))
        from PIL import Image  # comes with matplotlib

        with Image.open(path) as image:
            image.load()  # decodes every row: a truncated file fails here


@pytest.mark.slow
def test_writes_every_figure_for_a_workdir(tmp_path, capsys):
    out = tmp_path / "figures"
    assert main(["figures", "--workdir", FIXTURE, "--out", str(out)]) == 0
    check_pngs(out, PE_FIGURES + MODEL_FIGURES)
    printed = capsys.readouterr().out.splitlines()
    assert printed[:8] == [str(out / n) for n in PE_FIGURES + MODEL_FIGURES]
    assert any(line.startswith("embeddings, German") for line in printed[8:])


def test_without_a_workdir_writes_the_positional_figures(tmp_path):
    out = tmp_path / "pe"
    assert main(["figures", "--out", str(out), "--d-model", "64", "--max-len", "40"]) == 0
    check_pngs(out, PE_FIGURES)


@pytest.mark.parametrize("args, message", [
    (["--d-model", "7"], "d_model must be even"),
    (["--sentence", "x"], "--checkpoint, --step and --sentence need --workdir"),
    (["--workdir", FIXTURE, "--d-model", "64"], "--d-model and --max-len are for figures"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, args, message):
    assert main(["figures", "--out", str(tmp_path), *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
