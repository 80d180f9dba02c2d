"""bench/ab_decode.py: the pairing of blocks, the ratios it reports, the token check, and
(slow) one real run of two workers over this checkout."""
import importlib.util
import json
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_ab_decode",
                                               os.path.join(REPO, "bench", "ab_decode.py"))
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)


class FakeWorker:
    """Answers as a worker would: its tokens, and ``seconds`` per call times the machine's
    load when it is asked. The load (one clock for both fakes) steps between 1x and 1.5x
    every two blocks: the probe's two, then each round's pair."""

    def __init__(self, name: str, seconds: float, log: list, tokens=((1, 2, 3),)):
        self.name, self.seconds, self.log, self.tokens = name, seconds, log, tokens
        self.prepared = []

    def ask(self, line: str) -> dict:
        if line.startswith("prepare"):
            self.prepared.append(line)
            return {"tokens": [list(t) for t in self.tokens]}
        self.log.append(self.name)
        load = 1.0 + 0.5 * ((len(self.log) - 1) // 2 % 2)
        return {"times": [self.seconds * load] * int(line.split()[2])}


def test_a_head_twice_as_fast_reads_2_in_every_round_despite_drift():
    log = []
    row = ab.compare_shape(FakeWorker("base", 0.02, log), FakeWorker("head", 0.01, log),
                           "small", 1, 4, rounds=8, block_s=0.1)
    assert row["calls_per_block"] == 7  # 0.1 s over the probe's median, 0.015 s
    assert row["ratio_median"] == row["ratio_p10"] == row["ratio_p90"] == 2.0
    assert row["head_faster"] == 8
    rounds = [log[i:i + 2] for i in range(2, len(log), 2)]
    assert rounds == [["base", "head"], ["head", "base"]] * 4  # who goes first alternates


def test_equal_checkouts_read_1_and_head_wins_no_round():
    log = []
    base, head = FakeWorker("base", 0.01, log), FakeWorker("head", 0.01, log)
    row = ab.compare_shape(base, head, "small", 32, 1, rounds=10, block_s=0.05,
                           rows_kernel="off")
    assert base.prepared == head.prepared == ["prepare small 32 1 off"]
    assert row["ratio"] == row["ratio_median"] == 1.0
    assert row["head_faster"] == 0  # a tie is not a win
    assert row["base_tok_s"] == row["head_tok_s"]


def test_checkouts_that_decode_other_tokens_stop_the_run():
    log = []
    with pytest.raises(SystemExit, match="different tokens"):
        ab.compare_shape(FakeWorker("base", 0.01, log),
                         FakeWorker("head", 0.01, log, ((1, 2, 4),)), "small", 1, 1,
                         rounds=2, block_s=0.01)


def test_percentile_picks_an_observed_value():
    values = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert ab.percentile(values, 0.1) == 1.0
    assert ab.percentile(values, 0.9) == 9.0
    assert ab.percentile([3.0], 0.5) == 3.0


@pytest.mark.slow
def test_one_checkout_against_itself(capsys, tmp_path):
    out = tmp_path / "ab.json"
    ab.main(["--base", REPO, "--head", REPO, "--shapes", "1x1", "--rounds", "3",
             "--block-s", "0.02", "--json", str(out)])
    text = capsys.readouterr().out
    assert "| small batch 1 beam 1 |" in text
    row = json.loads(out.read_text())["rows"][0]
    assert row["rounds"] == 3 and row["calls_per_block"] >= 1
    assert row["base_tok_s"] > 0 and row["head_tok_s"] > 0
