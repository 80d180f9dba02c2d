"""Tests for jformer.data.spm_calls: few texts go through single calls, many through one
pooled call, and a Tokenizer gives the same ids and texts either way."""
from jformer.data import spm_calls


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, items, **kwargs):
        self.calls.append((items, kwargs))
        return [f"<{x}>" for x in items] if isinstance(items, list) else f"<{items}>"


def test_few_items_go_one_by_one_without_a_pool():
    call = Recorder()
    items = tuple(f"t{i}" for i in range(spm_calls.POOLED_FROM - 1))
    assert spm_calls.each(call, items, 4, out_type=int) == [f"<{x}>" for x in items]
    assert call.calls == [(x, dict(out_type=int)) for x in items]


def test_many_items_go_in_one_pooled_call():
    call = Recorder()
    items = tuple(f"t{i}" for i in range(spm_calls.POOLED_FROM))
    assert spm_calls.each(call, items, 4, out_type=int) == [f"<{x}>" for x in items]
    assert call.calls == [(list(items), dict(num_threads=4, out_type=int))]


def test_single_and_pooled_calls_agree(tok):
    texts = ["a cat sat on the mat", "", "zebras über ölfelder", "the end."]
    many = texts + [f"sentence number {i}" for i in range(spm_calls.POOLED_FROM)]
    few_ids = tok.encode_lists(texts)
    assert few_ids == tok.encode_lists(many)[:len(texts)]
    assert few_ids[1] == [tok.eos_id]
    rows = few_ids + [[]]
    pooled_rows = rows + tok.encode_lists(many)[len(texts):]
    few_texts = tok.decode(rows)
    assert few_texts == tok.decode(pooled_rows)[:len(rows)]
    assert few_texts[1] == "" and few_texts[-1] == ""
    assert few_texts[0] == "a cat sat on the mat"
