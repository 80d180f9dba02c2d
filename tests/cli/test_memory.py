"""Tests for ``jformer memory`` (jformer/cli/memory.py): the table's figures are those of
jformer.inference.memory for the config and the sizes asked for."""
import dataclasses
import os

import pytest

from jformer.cli import main
from jformer.inference import memory
from jformer.workdir import files

from tests.cli.test_cli import run_cli, workdir  # noqa: F401 (the module's fixture)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rows_of(out: str) -> dict[str, int]:
    """label -> exact bytes (the third column) of each table row."""
    rows = {}
    for line in out.splitlines()[1:]:
        label = line[2:46].strip()
        rows[label] = int(line[58:75].replace(",", ""))
    return rows


def test_the_base_config_at_beam_4(capsys):
    status, out, err = run_cli(["memory", "--config", os.path.join(REPO, "configs", "base.py"),
                                "--batch", 64, "--beam", 4, "--src-len", 256, "--tgt-len",
                                256], capsys)
    assert status == 0, err
    assert out.startswith(f"{os.path.join(REPO, 'configs', 'base.py')}: d_model 512, 6+6 layers")
    rows = rows_of(out)
    assert rows["decode cache: self-attention K/V"] == 3 * 2 ** 29  # 1.5 GiB
    assert rows["decode cache: cross-attention K/V"] == 3 * 2 ** 27
    assert rows["decode cache: tables"] == 64 * 256 + 4 * 64 * 4 * 256
    assert rows["decode cache: total"] == sum(rows[f"decode cache: {k}"] for k in (
        "self-attention K/V", "cross-attention K/V", "tables"))
    params = [v for k, v in rows.items() if k.startswith("parameters (63.1M")]
    assert params and rows["Adam moments (2 x float32)"] == 2 * params[0]
    assert "1.5 GiB" in out


def test_a_workdir_with_its_decode_defaults(workdir, capsys):  # noqa: F811
    config = files.load_config(workdir)
    status, out, err = run_cli(["memory", "--workdir", workdir, "--dtype", "bfloat16"], capsys)
    assert status == 0, err
    m, e = config.model, config.decode
    cfg = dataclasses.replace(m, dtype="bfloat16")
    rows = rows_of(out)
    assert rows["decode cache: total"] == memory.cache_bytes(cfg, e.batch_size, e.beam_size,
                                                             m.max_len, src_len=m.max_len)
    per = memory.activation_bytes_per_token(cfg, m.max_len, m.max_len)
    assert rows["training activations / source token"] == round(per.source)
    assert rows["training activations / target token"] == round(per.target)


@pytest.mark.parametrize("argv, message", [
    (["memory"], "one of the arguments --workdir --config is required"),
    (["memory", "--config", "nowhere.py"], "No such file: nowhere.py"),
    (["memory", "--config", os.path.join(REPO, "configs", "base.py"), "--beam", "0"],
     "--beam must be >= 1; got 0"),
])
def test_mistakes_are_one_line_errors(argv, message, capsys):
    if argv == ["memory"]:
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err
        return
    status, out, err = run_cli(argv, capsys)
    assert status == 1 and out == "" and message in err and "Traceback" not in err
