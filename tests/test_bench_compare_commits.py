"""bench/compare_commits.py: the tables it reads, the rounds' alternation, --parts."""
import importlib.util
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_compare_commits",
                                               os.path.join(REPO, "bench", "compare_commits.py"))
cc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cc)


def test_table_rows_reads_only_tables_with_the_key_column():
    text = ("intro\n| config | tgt tok/s |\n|---|---:|\n| small | 1,234 |\n\n"
            "| other | x |\n|---|---|\n| a | b |\n")
    assert cc.table_rows(text, "tgt tok/s") == [{"config": "small", "tgt tok/s": "1,234"}]
    assert cc.number("1,234.5") == 1234.5


def fake_measure(calls):
    def measure(tree, argv):
        calls.append((tree, os.path.basename(argv[0])))
        value = 100.0 if tree == "B" else 110.0
        if argv[0].endswith("bench_train.py"):
            return {"train small float32": value}
        return {"decode small batch 1 beam 1": 2 * value}
    return measure


def test_rounds_alternate_which_checkout_goes_first(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cc, "measure", fake_measure(calls))
    cc.main(["--base", "B", "--head", "H", "--rounds", "2"])
    assert calls == [("H", "bench_train.py"), ("B", "bench_train.py"),
                     ("H", "bench_decode.py"), ("B", "bench_decode.py"),
                     ("B", "bench_train.py"), ("H", "bench_train.py"),
                     ("B", "bench_decode.py"), ("H", "bench_decode.py")]
    out = capsys.readouterr().out
    assert "| train small float32 | 100 | 110 | 1.100 | 0% | 0% |" in out
    assert "| decode small batch 1 beam 1 | 200 | 220 | 1.100 | 0% | 0% |" in out


def test_parts_train_runs_only_the_train_benchmark(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cc, "measure", fake_measure(calls))
    cc.main(["--base", "B", "--head", "H", "--rounds", "1", "--parts", "train"])
    assert calls == [("H", "bench_train.py"), ("B", "bench_train.py")]
    assert "decode" not in capsys.readouterr().out


def test_parts_rejects_an_unknown_name(monkeypatch, capsys):
    monkeypatch.setattr(cc, "measure", fake_measure([]))
    with pytest.raises(SystemExit) as e:
        cc.main(["--base", "B", "--parts", "train,serve"])
    assert e.value.code == 2
    assert "expected train and/or decode, got 'train,serve'" in capsys.readouterr().err
