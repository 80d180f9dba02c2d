"""Tests for the command line (jformer/cli.py), run in-process through main(argv).

A tiny run folder is built once: config.json, spm.model and two checkpoints written
with jformer.workdir.checkpoint (the newest holds the test model's parameters).
"""
import dataclasses
import io
import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.cli import main
from jformer.inference import OverlongWarning, Translator
from jformer.inference.attention_maps import positional_matrix
from jformer.model.embeddings import sinusoid_table
from jformer.model.transformer import Transformer
from jformer.workdir import checkpoint, files
from jformer.model.init import run_once

from tests.inference.test_translator import build_setup, write_workdir

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LINES = ["Five.", "", "It is late.", "We need one car.", "The number is three.", "Hello"]
PAIRS = [("Five.", "Fünf."), ("It is late.", "Es ist spät."), ("We need one car.",
         "Wir brauchen ein Auto."), ("The number is three.", "Die Zahl ist drei.")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    cfg, params, tok = build_setup(str(root))
    run = str(root / "run")
    write_workdir(run, cfg, params, tok, steps=(10, 20))
    return run


@pytest.fixture(scope="module")
def reference(workdir):
    return Translator.from_checkpoint(workdir)


def run_cli(argv, capsys, stdin_text=None, monkeypatch=None):
    if stdin_text is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin_text))
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.slow
def test_translate_streams_stdin_to_stdout_in_order(workdir, reference, capsys, monkeypatch):
    text = "".join(line + "\n" for line in LINES)
    status, out, err = run_cli(["translate", "--workdir", workdir, "--chunk-lines", 4],
                               capsys, text, monkeypatch)
    assert status == 0, err
    assert out.split("\n")[:-1] == reference.translate(LINES)
    assert out.endswith("\n") and out.count("\n") == len(LINES)
    assert "sent" in err  # progress goes to stderr
    status, out, _ = run_cli(["translate", "--workdir", workdir, "--beam", 1, "--quiet"],
                             capsys, text, monkeypatch)
    assert status == 0 and out.split("\n")[:-1] == reference.translate(LINES, beam_size=1)
    # Data-parallel over 2 of the test process's devices: the same lines.
    status, out, err = run_cli(["translate", "--workdir", workdir, "--devices", 2,
                                "--batch-size", 4, "--quiet"], capsys, text, monkeypatch)
    assert status == 0, err
    assert out.split("\n")[:-1] == reference.translate(LINES)


def test_evaluate_prints_bleu_and_chrf_with_signatures(workdir, reference, tmp_path, capsys):
    pairs = PAIRS
    (tmp_path / "test.en").write_text("".join(en + "\n" for en, _ in pairs))
    (tmp_path / "test.de").write_text("".join(de + "\n" for _, de in pairs))
    hyp = tmp_path / "hyp.de"
    status, out, err = run_cli(["evaluate", "--workdir", workdir, "--src", tmp_path / "test.en",
                                "--ref", tmp_path / "test.de", "--hyp-out", hyp, "--quiet"],
                               capsys)
    assert status == 0, err
    lines = out.strip().split("\n")
    assert lines[0].startswith("BLEU = ") and lines[2].startswith("chrF2 = ")
    assert "nrefs:1|case:mixed" in lines[1] and "tok:13a" in lines[1]
    assert "nrefs:1|case:mixed" in lines[3] and "nc:6" in lines[3]
    assert hyp.read_text().split("\n")[:-1] == reference.translate([en for en, _ in pairs])
    status, out, _ = run_cli(["evaluate", "--workdir", workdir, "--src", tmp_path / "test.en",
                              "--ref", tmp_path / "test.de", "--lowercase", "--quiet"], capsys)
    assert status == 0 and out.count("case:lc") == 2


@pytest.mark.slow
def test_attention_writes_one_png_per_layer_and_kind(workdir, tmp_path, capsys):
    out_dir = tmp_path / "maps"
    status, out, err = run_cli(["attention", "--workdir", workdir, "We need one car.",
                                "--out", out_dir], capsys)
    assert status == 0, err
    expected = {f"{stack}_layer{i}_{kind}.png" for i in (0, 1) for stack, kind in
                (("encoder", "self_attention"), ("decoder", "self_attention"),
                 ("decoder", "cross_attention"))} | {"positional.png"}
    assert set(os.listdir(out_dir)) == expected
    assert sorted(out.split()) == sorted(str(out_dir / name) for name in expected)
    for name in expected:
        data = (out_dir / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
    # An overlong sentence: one truncation warning, not one per translation step.
    long_line = " ".join(["three hundred and forty-five"] * 12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, _, err = run_cli(["attention", "--workdir", workdir, long_line, "--out",
                                  tmp_path / "long"], capsys)
    assert status == 0, err
    assert [str(w.message).endswith("truncated to 40") for w in caught
            if issubclass(w.category, OverlongWarning)] == [True]
    status, _, err = run_cli(["attention", "--workdir", workdir, "\u200b", "--out",
                              tmp_path / "none"], capsys)
    assert status == 1 and "has no tokens: the tokenizer drops all of it" in err


@pytest.mark.slow
def test_positional_matrix_is_the_table_the_model_adds(reference):
    cfg = reference.model_cfg
    table, title = positional_matrix(reference)
    np.testing.assert_array_equal(table, sinusoid_table(cfg.max_len, cfg.d_model))
    assert "interleaved" in title
    learned_cfg = dataclasses.replace(cfg, positional="learned")
    dummy = jnp.zeros((1, 4), jnp.int32)
    params = run_once(Transformer(learned_cfg).init, jax.random.key(1), dummy, dummy)["params"]
    learned = Translator(learned_cfg, params, reference.tokenizer)
    table, title = positional_matrix(learned)
    np.testing.assert_array_equal(table, params["encoder"]["positional"]["table"])
    assert table.shape == (cfg.max_len, cfg.d_model) and "learned" in title
    relative_cfg = dataclasses.replace(cfg, positional="relative", relative_clip=4)
    params = run_once(Transformer(relative_cfg).init, jax.random.key(1), dummy, dummy)["params"]
    table, title = positional_matrix(Translator(relative_cfg, params, reference.tokenizer))
    np.testing.assert_array_equal(
        table, params["encoder"]["layer_0"]["self_attention"]["relative_position_keys"])
    assert table.shape == (9, cfg.head_dim) and "offsets -4..4" in title


def test_average_checkpoints_then_translate_with_it(workdir, tmp_path, capsys, monkeypatch):
    out_dir = tmp_path / "avg"
    status, out, err = run_cli(["average-checkpoints", "--workdir", workdir, "--last", 2,
                                "--out", out_dir], capsys)
    assert status == 0, err
    assert "[10, 20]" in out
    source = files.checkpoint_dir(workdir)
    mean = jax.tree.map(lambda a, b: (a + b) / 2, checkpoint.restore_params(source, 10),
                        checkpoint.restore_params(source, 20))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                 checkpoint.restore_params(out_dir), mean)
    status, out, err = run_cli(["translate", "--workdir", workdir, "--checkpoint", out_dir,
                                "--quiet"], capsys, "Five.\nHello\n", monkeypatch)
    assert status == 0 and out.count("\n") == 2, err
    status, _, err = run_cli(["average-checkpoints", "--workdir", workdir, "--last", 5,
                              "--out", tmp_path / "avg5"], capsys)
    assert status == 1 and "last 5 checkpoints" in err


def _broken_workdir(root, workdir, keep):
    os.makedirs(root)
    for name in keep:
        src, dst = os.path.join(workdir, name), os.path.join(root, name)
        os.symlink(src, dst)
    return root


@pytest.mark.parametrize("case, message", [
    ("no workdir", "workdir not found: {path}"),
    ("no config", "config file not found: {path}/config.json (is {path} a training "
                  "workdir?)"),
    ("no checkpoint", "no checkpoint directory at {path}/checkpoints"),
    ("no spm.model", "sentencepiece model not found: {path}/spm.model"),
])
def test_missing_run_files_print_one_line_and_exit_1(case, message, workdir, tmp_path,
                                                     capsys, monkeypatch):
    path = str(tmp_path / "run")
    keep = {"no workdir": None, "no config": ["spm.model", "checkpoints"],
            "no checkpoint": ["config.json", "spm.model"],
            "no spm.model": ["config.json", "checkpoints"]}[case]
    if keep is not None:
        _broken_workdir(path, workdir, keep)
    status, out, err = run_cli(["translate", "--workdir", path], capsys, "Five.\n",
                               monkeypatch)
    assert status == 1 and out == ""
    assert err.strip().splitlines() == [f"jformer translate: error: "
                                        f"{message.format(path=path)}"]


def test_unreadable_input_files_print_one_line_and_exit_1(workdir, tmp_path, capsys):
    missing = tmp_path / "missing.en"
    status, _, err = run_cli(["translate", "--workdir", workdir, "--input", missing], capsys)
    assert status == 1 and str(missing) in err and "Traceback" not in err
    (tmp_path / "bad.en").write_bytes(b"\xff\xfe\xfa\n")
    (tmp_path / "ref.de").write_text("Fünf.\n")
    status, _, err = run_cli(["evaluate", "--workdir", workdir, "--src", tmp_path / "bad.en",
                              "--ref", tmp_path / "ref.de"], capsys)
    assert status == 1 and err.strip().splitlines() == [
        f"jformer evaluate: error: {tmp_path / 'bad.en'} line 1: not valid UTF-8 "
        "(invalid start byte at byte 1 of the line)"]
    status, _, err = run_cli(["evaluate", "--workdir", workdir, "--src", missing,
                              "--ref", tmp_path / "ref.de"], capsys)
    assert status == 1 and err.strip().splitlines() == [
        f"jformer evaluate: error: No such file or directory: {missing}"]


def test_path_and_argument_errors_print_one_line(workdir, tmp_path, capsys, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    cases = [(["attention", "--workdir", workdir, "Five.", "--out", afile], str(afile)),
             (["translate", "--workdir", workdir, "--output", afile / "x"], "Not a directory"),
             (["evaluate", "--workdir", workdir, "--src", afile / "x", "--ref", afile],
              "Not a directory"),
             (["translate", "--workdir", workdir, "--seed", 2 ** 32],
              "--seed must be an int in [0, 2**32)"),
             (["translate", "--workdir", workdir, "--alpha", "nan"],
              "alpha must be a finite number >= 0; got nan")]
    for argv, message in cases:
        status, out, err = run_cli(argv, capsys, "Five.\n", monkeypatch)
        assert status == 1 and out == "" and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1 and message in err


def test_truncation_warnings_name_the_input_line(workdir, tmp_path, capsys):
    long_line = " ".join(["three hundred and forty-five"] * 12)
    src = tmp_path / "long.en"
    src.write_text("\n".join(["Five."] * 3 + [long_line, "Five.", long_line]) + "\n")
    status, out, err = run_cli(["translate", "--workdir", workdir, "--input", src,
                                "--chunk-lines", 4, "--quiet"], capsys)
    assert status == 0, err
    assert out.count("\n") == 6
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert [w.split(":")[1] for w in warned] == [f" {src} line 4", f" {src} line 6"]
    assert all("more than model.max_len=40; truncated to 40" in w for w in warned)


@pytest.mark.slow
def test_n_best_lists_in_moses_format(workdir, reference, capsys, monkeypatch):
    lines = ["Five.", "", "It is late."]
    status, out, err = run_cli(["translate", "--workdir", workdir, "--beam", 3, "--n-best",
                                3, "--chunk-lines", 2, "--quiet"], capsys,
                               "".join(line + "\n" for line in lines), monkeypatch)
    assert status == 0, err
    want = reference.translate(lines, beam_size=3, n_best=3, return_scores=True)
    rows = [line.split(" ||| ") for line in out.splitlines()]
    # the empty line gets one empty hypothesis; ids count input lines across chunks
    assert [(int(i), text) for i, text, _ in rows] == [
        (i, h.text) for i, hyps in enumerate(want) for h in hyps]
    for (_, _, score), h in zip(rows, [h for hyps in want for h in hyps]):
        assert float(score) == pytest.approx(h.score, abs=1e-5)
    assert [len(hyps) for hyps in want] == [3, 1, 3]
    status, _, err = run_cli(["translate", "--workdir", workdir, "--beam", 2, "--n-best", 3],
                             capsys, "Five.\n", monkeypatch)
    assert status == 1 and "n_best must be <= 2" in err


@pytest.mark.slow
def test_samples_follow_line_numbers_not_chunks(workdir, capsys, monkeypatch):
    """Line i samples with fold_in(seed key, i) over the whole input: the same line
    repeated gives different samples, and chunking (1 line vs all at once) changes
    nothing. Reproducible from the seed, and equal to one translate() call."""
    lines = ["The number is three."] * 8
    text = "\n".join(lines) + "\n"
    outs = []
    for chunk_lines in (1, 100, 1):
        status, out, err = run_cli(["translate", "--workdir", workdir, "--method", "sample",
                                    "--chunk-lines", chunk_lines, "--quiet", "--seed", 3],
                                   capsys, text, monkeypatch)
        assert status == 0, err
        outs.append(out)
    samples = outs[0].split("\n")[:-1]
    assert len(samples) == 8 and len(set(samples)) > 1
    assert outs[1] == outs[0] and outs[2] == outs[0]
    translator = Translator.from_checkpoint(workdir)
    texts = translator.translate(lines, method="sample", rng=jax.random.key(3))
    # (the CLI writes one line per line: a sampled byte piece that decodes to \r or \n
    # becomes a space)
    assert [t.replace("\r", " ").replace("\n", " ") for t in texts] == samples


def test_a_stray_carriage_return_does_not_split_a_line(workdir, tmp_path, capsys):
    src = tmp_path / "cr.en"
    src.write_bytes(b"Five.\rIt is late.\nHello\r\n")  # a lone CR, then a CRLF ending
    status, out, err = run_cli(["translate", "--workdir", workdir, "--input", src,
                                "--quiet"], capsys)
    assert status == 0, err
    assert out.count("\n") == 2  # one output line per input line, as `wc -l` counts


def test_stdin_is_read_as_utf8_lines_split_at_newline_only(workdir, capsys, monkeypatch):
    """The real stdin (a byte stream): a lone CR stays inside its line, as with --input;
    the stream is detached afterwards, not closed."""
    stdin = io.TextIOWrapper(io.BytesIO("Fünf.\rIt is late.\nHello\r\n".encode()),
                             encoding="latin-1")  # a non-UTF-8 locale's default
    monkeypatch.setattr(sys, "stdin", stdin)
    status, out, err = run_cli(["translate", "--workdir", workdir, "--quiet"], capsys)
    assert status == 0, err
    assert out.count("\n") == 2
    assert not stdin.buffer.closed


def test_evaluate_on_empty_files_is_a_clear_error(workdir, tmp_path, capsys):
    (tmp_path / "empty.en").write_text("")
    (tmp_path / "empty.de").write_text("")
    status, _, err = run_cli(["evaluate", "--workdir", workdir, "--src",
                              tmp_path / "empty.en", "--ref", tmp_path / "empty.de"], capsys)
    assert status == 1 and "Traceback" not in err
    assert "are empty: nothing to score" in err


def test_an_overlong_line_is_reported_with_its_line_number(workdir):
    import dataclasses
    from jformer.cli import build_parser
    from jformer.cli.common import search_kwargs
    from jformer.cli.translate import translate_stream

    strict = Translator.from_checkpoint(workdir)
    strict.decode_cfg = dataclasses.replace(strict.decode_cfg, overlong="error")
    lines = ["Five."] * 4 + [" ".join(["three hundred and forty-five"] * 12)]
    kwargs = search_kwargs(build_parser().parse_args(
        ["translate", "--workdir", workdir, "--beam", "1"]))
    with pytest.raises(ValueError, match=r"^in\.en line 5: \d+ tokens \(EOS included\), "
                                         r"more than model\.max_len=40$"):
        translate_stream(strict, [lines[i:i + 2] for i in range(0, 5, 2)],
                         io.StringIO(), kwargs, True, "in.en")


def test_python_m_jformer_help_lists_the_subcommands():
    result = subprocess.run([sys.executable, "-m", "jformer", "--help"], capture_output=True,
                            text=True, timeout=60,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert result.returncode == 0, result.stderr
    for command in ("translate", "evaluate", "attention", "average-checkpoints"):
        assert command in result.stdout


def test_the_script_exits_quickly_with_its_output_whole_and_its_status(workdir, reference,
                                                                      tmp_path):
    """python -m jformer (cli.entry) ends with os._exit after flushing: stdout and the
    --output file hold every line, atexit handlers ran, and the status is main's."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    hook = tmp_path / "hook.py"  # an atexit handler that leaves a mark
    hook.write_text(f"import atexit\natexit.register(lambda: open({str(tmp_path / 'mark')!r}, "
                    f"'w').write('ran'))\n")
    script = (f"import runpy, sys; exec(open({str(hook)!r}).read()); "
              f"sys.argv = ['jformer'] + sys.argv[1:]; runpy.run_module('jformer', "
              f"run_name='__main__')")
    text = "\n".join(LINES) + "\n"
    for out in (None, tmp_path / "out.de"):
        # one compile cache for both runs: the second loads the first's programs
        argv = ["translate", "--workdir", workdir, "--quiet", "--compile-cache",
                str(tmp_path / "xla")]
        if out is not None:
            argv += ["--output", str(out)]
        done = subprocess.run([sys.executable, "-c", script, *argv], input=text,
                              capture_output=True, text=True, timeout=300, cwd=repo)
        assert done.returncode == 0, done.stderr[-2000:]
        written = done.stdout if out is None else out.read_text()
        assert written.splitlines() == reference.translate(LINES)
        assert (tmp_path / "mark").read_text() == "ran"
        (tmp_path / "mark").unlink()
    done = subprocess.run([sys.executable, "-m", "jformer", "translate", "--workdir",
                           str(tmp_path / "missing")], input=text, capture_output=True,
                          text=True, timeout=300, cwd=repo)
    assert done.returncode == 1 and "workdir not found" in done.stderr


@pytest.mark.slow
def test_overlong_lines_are_split_and_the_line_count_is_kept(workdir, reference, tmp_path,
                                                             capsys):
    pytest.importorskip("sentencex", reason="splitting needs the 'split' extra")
    from jformer.inference import split_to_fit

    paragraph = " ".join(["We need one car.", "It is late, very late."] * 8)
    long_word = "https://example.com/" + "QUJD" * 40
    lines = ["Five.", paragraph, "", long_word, "It is late."]
    src = tmp_path / "long.en"
    src.write_text("\n".join(lines) + "\n")
    status, out, err = run_cli(["translate", "--workdir", workdir, "--input", src,
                                "--overlong", "split", "--beam", 1, "--chunk-lines", 2,
                                "--quiet"], capsys)
    assert status == 0 and "warning" not in err, err
    assert out.count("\n") == len(lines)  # one output line per input line
    out_lines = out.split("\n")[:-1]
    count = lambda t: len(reference.tokenizer.encode([t])[0])
    for i in (1, 3):  # each overlong line is its pieces' translations, joined
        seg = split_to_fit(lines[i], count, reference.model_cfg.max_len)
        assert len(seg.pieces) > 1
        assert out_lines[i] == seg.join(reference.translate(list(seg.pieces), beam_size=1))
    assert out_lines[0] == reference.translate(["Five."], beam_size=1)[0]
    # The run's own policy (truncate, in this workdir) still holds without the flag.
    status, out, err = run_cli(["translate", "--workdir", workdir, "--input", src,
                                "--beam", 1, "--quiet"], capsys)
    assert status == 0 and out.count("\n") == len(lines)
    assert f"{src} line 2:" in err and f"{src} line 4:" in err


def test_memory_limit_flag_is_checked_and_applied(workdir, reference, capsys, monkeypatch):
    status, out, err = run_cli(["translate", "--workdir", workdir, "--memory-limit", "1KB",
                                "--quiet"], capsys, "Five.\n", monkeypatch)
    assert status == 1 and "cannot hold the cache of one row" in err
    assert len(err.strip().splitlines()) == 1
    status, out, err = run_cli(["translate", "--workdir", workdir, "--memory-limit",
                                "lots", "--quiet"], capsys, "Five.\n", monkeypatch)
    assert status == 1 and "decode.memory_limit" in err and "Traceback" not in err
    status, out, _ = run_cli(["translate", "--workdir", workdir, "--memory-limit", "1MB",
                              "--quiet"], capsys, "Five.\nIt is late.\n", monkeypatch)
    assert status == 0
    assert out.split("\n")[:-1] == reference.translate(["Five.", "It is late."])


def test_eos_candidates_and_stop_flags_reach_the_search(workdir):
    """--eos-candidates and --stop override the run's decode.eos_candidates and
    decode.stop (the beam's EOS and stopping rules); without them the run's own stand."""
    import argparse

    from jformer.cli.common import add_search_args, decode_overrides
    from jformer.config import DecodeConfig

    p = argparse.ArgumentParser()
    p.add_argument("--workdir")
    add_search_args(p)
    from jformer.workdir import files

    assert decode_overrides(p.parse_args(["--workdir", workdir])) is None
    run = files.load_config(workdir).decode
    assert (run.eos_candidates, run.stop) == ("all", "exact")  # the tests' DECODE
    top_w = decode_overrides(p.parse_args(["--workdir", workdir, "--eos-candidates", "top_w"]))
    assert (top_w.eos_candidates, top_w.stop) == ("top_w", "exact")
    full = decode_overrides(p.parse_args(["--workdir", workdir, "--stop", "full"]))
    assert (full.eos_candidates, full.stop) == ("all", "full")
    assert (DecodeConfig().eos_candidates, DecodeConfig().stop) == ("top_w", "full")
    for flag, value in (("--eos-candidates", "best"), ("--stop", "patience")):
        with pytest.raises(SystemExit):
            p.parse_args(["--workdir", workdir, flag, value])


def test_continuous_flag_translates_the_same_lines(workdir, reference, capsys, monkeypatch):
    """--continuous (decode.continuous: slots refilled as sentences finish) and
    --no-continuous override the run's setting; the lines are the batches' lines."""
    import argparse

    from jformer.cli.common import add_search_args, decode_overrides

    p = argparse.ArgumentParser()
    p.add_argument("--workdir")
    add_search_args(p)
    assert decode_overrides(p.parse_args(["--workdir", workdir, "--continuous"])).continuous
    assert not decode_overrides(p.parse_args(["--workdir", workdir,
                                              "--no-continuous"])).continuous
    text = "".join(line + "\n" for line in LINES)
    status, out, err = run_cli(["translate", "--workdir", workdir, "--continuous",
                                "--batch-size", 2, "--quiet"], capsys, text, monkeypatch)
    assert status == 0, err
    assert out.split("\n")[:-1] == reference.translate(LINES)
