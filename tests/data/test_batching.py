"""Tests for jformer.data.batching, packing and ragged: shapes, budgets, determinism,
exact resumption, host sharding and packing invariants."""
import dataclasses
import json
import zlib

import numpy as np
import pytest

from jformer.data import batching, packing
from jformer.data.ragged import RaggedArray

PAD, EOS = 0, 3


def _corpus(n: int = 537, max_len: int = 45, seed: int = 0) -> tuple[RaggedArray, RaggedArray]:
    """Random pairs; token ids >= 4, each row ends with EOS; lengths 2..max_len."""
    rng = np.random.default_rng(seed)

    def rows(lengths):
        return [np.append(rng.integers(4, 500, size=k - 1), EOS).astype(np.int32)
                for k in lengths]

    src_len = rng.integers(2, max_len + 1, size=n)
    tgt_len = np.clip(src_len + rng.integers(-4, 6, size=n), 2, max_len)
    return RaggedArray.from_rows(rows(src_len)), RaggedArray.from_rows(rows(tgt_len))


def _options(**kw) -> batching.BatchOptions:
    base = dict(max_tokens=512, boundaries=batching.bucket_boundaries(48), pad_id=PAD, seed=3)
    base.update(kw)
    return batching.BatchOptions(**base)


def _take(it, n):
    return [next(it) for _ in range(n)]


def _assert_same(batches_a, batches_b):
    assert len(batches_a) == len(batches_b)
    for a, b in zip(batches_a, batches_b):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def _rows_of(batch, key):
    """Unpadded rows of an unpacked batch (all-pad rows dropped), as tuples."""
    return [tuple(r[r != PAD]) for r in batch[key] if (r != PAD).any()]


# ----------------------------------------------------------------------------- ragged
def test_ragged_concatenate_keeps_rows_in_order():
    parts = [RaggedArray.from_rows([[1, 2], [3]]), RaggedArray.from_rows([]),
             RaggedArray.from_rows([[4, 5, 6], [], [7]])]
    joined = RaggedArray.concatenate(parts)
    assert [r.tolist() for r in joined.to_rows()] == [[1, 2], [3], [4, 5, 6], [], [7]]
    assert joined.values.dtype == np.int32 and joined.offsets.tolist() == [0, 2, 3, 6, 6, 7]
    assert len(RaggedArray.concatenate([])) == 0


def test_ragged_take_truncate_gather():
    r = RaggedArray.from_rows([[5, 6, EOS], [7, EOS], [8, 9, 10, 11, EOS]])
    assert r.lengths.tolist() == [3, 2, 5]
    assert [x.tolist() for x in r.take(np.array([2, 0])).to_rows()] == [[8, 9, 10, 11, EOS],
                                                                      [5, 6, EOS]]
    assert [x.tolist() for x in r.truncate(3).to_rows()] == [[5, 6, EOS], [7, EOS],
                                                             [8, 9, EOS]]
    out = r.gather_padded(np.array([1, -1, 2]), 6, PAD)
    assert out.dtype == np.int32
    assert out.tolist() == [[7, EOS, 0, 0, 0, 0], [0] * 6, [8, 9, 10, 11, EOS, 0]]
    with pytest.raises(ValueError, match="does not fit width 4"):
        r.gather_padded(np.array([2]), 4, PAD)


# ----------------------------------------------------------------------------- plan pieces
def test_bucket_boundaries_and_rows():
    assert batching.bucket_boundaries(128) == (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128)
    assert batching.bucket_boundaries(100)[-2:] == (96, 104)
    assert batching.bucket_boundaries(5) == (8,)
    for width in (8, 24, 40, 128):
        for devices in (1, 2, 3, 8):
            rows = batching.rows_for(width, 1000, devices)
            assert rows % devices == 0 and rows >= devices
            assert rows * width <= 1000 or rows == devices
    assert batching.rows_for(128, 1000, 8) == 8  # budget too small: still one row a device
    assert batching.rows_for(8, 25000, 1, accum_steps=2) == 3124  # 3125 is not even
    assert batching.rows_for(64, 2048, 1, accum_steps=3) == 30  # 32 rows: not 3 micro-batches
    assert batching.rows_for(128, 1000, 8, accum_steps=3) == 24  # at least devices * accum


def test_a_budget_below_one_row_per_device_is_refused_not_exceeded():
    """rows_for never goes below one row per device and micro-batch; BatchOptions refuses
    a budget that would need that floor, so no batch holds more than max_tokens."""
    bounds = batching.bucket_boundaries(128)
    with pytest.raises(ValueError, match=r"max_tokens=4096 .* widest bucket: 128 tokens x "
                                         r"64 devices x 1 accumulation steps = 8192; raise "
                                         r"data.max_tokens to at least 8192"):
        batching.BatchOptions(max_tokens=4096, boundaries=bounds, num_devices=64)
    with pytest.raises(ValueError, match=r"widest packed row: 64 tokens x 2 devices x 3 "
                                         r"accumulation steps = 384.*data.pack_len"):
        batching.BatchOptions(max_tokens=300, boundaries=bounds, num_devices=2, accum_steps=3,
                              pack=True, pack_len=64)
    ok = batching.BatchOptions(max_tokens=8192, boundaries=bounds, num_devices=64)
    assert all(r * w <= 8192 for r, w in zip(ok._rows(64, 1), bounds))


def test_options_validation():
    with pytest.raises(ValueError, match=r"num_devices \(3, global\) must be a multiple of "
                                         r"num_shards \(2\)"):
        _options(num_devices=3, num_shards=2)
    with pytest.raises(ValueError, match="shard_index must be in"):
        _options(shard_index=2, num_shards=2, num_devices=2)
    with pytest.raises(ValueError, match="boundaries must be increasing"):
        _options(boundaries=(16, 8))
    src, tgt = _corpus(20, max_len=45)
    with pytest.raises(ValueError, match="over the largest bucket 16"):
        batching.BatchIterator(src, tgt, _options(boundaries=(8, 16)))
    with pytest.raises(ValueError, match="empty corpus"):
        batching.BatchIterator(src.take(np.array([], int)), tgt.take(np.array([], int)),
                               _options())


# ----------------------------------------------------------------------------- accumulation
@pytest.mark.parametrize("pack", [False, True])
def test_accum_steps_rows_split_into_equal_micro_batches_per_device(pack):
    src, tgt = _corpus(400, max_len=40)
    opts = _options(num_devices=2, accum_steps=3, max_tokens=1000, pack=pack, pack_len=48)
    it = batching.BatchIterator(src, tgt, opts)
    rows = [b["inputs"].shape[0] for b in it.epoch_batches(0)]
    assert rows and all(r % (2 * 3) == 0 for r in rows), sorted(set(rows))
    assert all(r % 6 == 0 for r, _ in it.batch_shapes())
    # without the accumulation multiple, some of these shapes would not split in 3 per device
    plain = batching.BatchIterator(src, tgt, dataclasses.replace(opts, accum_steps=1))
    assert any(r % 6 for r, _ in plain.batch_shapes())


def test_accum_steps_shapes_the_resume_fingerprint():
    src, tgt = _corpus(100)
    opts = _options(num_devices=2)
    # accum_steps=1 keeps the key (and positions saved before the field existed) unchanged
    assert "accum_steps" not in opts.plan_key()
    three = dataclasses.replace(opts, accum_steps=3)
    assert three.plan_key() != opts.plan_key()
    state = batching.BatchIterator(src, tgt, three).get_state()
    with pytest.raises(ValueError, match="another corpus or batching options"):
        batching.BatchIterator(src, tgt, opts).set_state(state)
    batching.BatchIterator(src, tgt, three).set_state(state)
    # accum_steps that divides every batch's rows already changes no plan: an older
    # run's positions (saved without the field) still resume
    single = _options(num_devices=2, max_tokens=1536, boundaries=(8, 16, 24))  # rows 192/96/64
    divides = dataclasses.replace(single, accum_steps=2)
    assert divides.plan_key() == single.plan_key()
    short_src, short_tgt = _corpus(100, max_len=24)
    batching.BatchIterator(short_src, short_tgt, divides).set_state(
        batching.BatchIterator(short_src, short_tgt, single).get_state())
    with pytest.raises(ValueError, match="accum_steps must be a positive int; got 0"):
        dataclasses.replace(opts, accum_steps=0)


@pytest.mark.parametrize("pack", [False, True])
def test_device_count_that_changes_no_rows_resumes(pack):
    # rows 192/96/64 (packed: 24 at width 64) split in 2 devices x 2 micro-batches and in
    # 1 device x 2 alike: every batch is the same, so a position moves between them
    src, tgt = _corpus(300, max_len=24)
    kw = dict(max_tokens=1536, boundaries=(8, 16, 24), accum_steps=2, pack=pack, pack_len=64)
    two, one = _options(num_devices=2, **kw), _options(num_devices=1, **kw)
    assert "num_devices" not in two.plan_key() and two.plan_key() == one.plan_key()
    saved = batching.BatchIterator(src, tgt, two)
    n = saved.num_batches()
    _take(saved, n // 2)
    state = json.loads(json.dumps(saved.get_state()))
    resumed = batching.BatchIterator(src, tgt, one)
    resumed.set_state(state)
    _assert_same(_take(resumed, n), _take(saved, n))
    # 6 devices x 2 need rows in multiples of 12: 24 packed rows are, 64 bucketed are not
    six = _options(num_devices=6, **kw)
    assert ("num_devices" in six.plan_key()) == (not pack)
    assert (six.plan_key() == one.plan_key()) == pack


def test_device_count_that_changes_rows_names_it_and_what_to_do():
    src, tgt = _corpus(100)
    state = batching.BatchIterator(src, tgt, _options(num_devices=2)).get_state()
    assert "num_devices" in _options(num_devices=2).plan_key()  # 512 // 48 = 10 -> 10, 10
    with pytest.raises(ValueError, match=r"num_devices: saved 2, now 4 \(fingerprint \w+, "
                                         r"this iterator \w+\); resume with the original "
                                         r"corpus and options on 2 devices, or start a new "
                                         r"workdir"):
        batching.BatchIterator(src, tgt, _options(num_devices=4)).set_state(state)


def _fingerprint_before_device_counts_were_left_out(src, tgt, options):
    """The fingerprint older versions saved: num_devices always in the key."""
    d = dataclasses.asdict(options)
    for k in ("shard_index", "num_shards"):
        d.pop(k)
    widths = [options.pack_len] if options.pack else list(options.boundaries)
    if all(batching.rows_for(w, options.max_tokens, options.num_devices, options.accum_steps)
           == batching.rows_for(w, options.max_tokens, options.num_devices) for w in widths):
        d.pop("accum_steps")
    crc = zlib.crc32(src.lengths.astype(np.int64).tobytes())
    crc = zlib.crc32(tgt.lengths.astype(np.int64).tobytes(), crc)
    return f"{zlib.crc32(repr(sorted(d.items())).encode(), crc):08x}", d


@pytest.mark.parametrize("num_devices", [1, 2])
def test_positions_saved_before_device_counts_were_left_out_still_resume(num_devices):
    src, tgt = _corpus(300, max_len=24)
    options = _options(num_devices=num_devices, max_tokens=1536, boundaries=(8, 16, 24))
    fingerprint, old_options = _fingerprint_before_device_counts_were_left_out(
        src, tgt, options)
    it = batching.BatchIterator(src, tgt, options)
    assert it.get_state()["fingerprint"] != fingerprint  # the key changed...
    _take(it, 5)
    state = dict(it.get_state(), fingerprint=fingerprint, options=old_options)
    resumed = batching.BatchIterator(src, tgt, options)
    resumed.set_state(state)  # ...but the old position still resumes
    _assert_same(_take(resumed, 7), _take(it, 7))
    other = batching.BatchIterator(src, tgt, dataclasses.replace(options, seed=9))
    with pytest.raises(ValueError, match="seed: saved 3, now 9"):
        other.set_state(state)


# ----------------------------------------------------------------------------- bucketing
@pytest.mark.parametrize("num_devices", [1, 4])
def test_bucketed_epoch_covers_every_pair_once_within_budget(num_devices):
    src, tgt = _corpus()
    it = batching.BatchIterator(src, tgt, _options(num_devices=num_devices))
    seen, shapes = [], set()
    for batch in it.epoch_batches(0):
        assert set(batch) == {"inputs", "targets"}
        rows, width = batch["inputs"].shape
        assert batch["targets"].shape == (rows, width) and batch["inputs"].dtype == np.int32
        assert width in it.options.boundaries and rows % num_devices == 0
        assert rows * width <= 512
        shapes.add((rows, width))
        for key in ("inputs", "targets"):  # right-padded: nothing but PAD after the EOS
            x = batch[key]
            n_real = (x != PAD).sum(axis=1)
            assert (x[np.arange(rows), np.maximum(n_real - 1, 0)][n_real > 0] == EOS).all()
            assert ((np.arange(width) >= n_real[:, None]) == (x == PAD)).all()
        seen += list(zip(_rows_of(batch, "inputs"), _rows_of(batch, "targets")))
    expected = [(tuple(s), tuple(t)) for s, t in zip(src.to_rows(), tgt.to_rows())]
    assert sorted(seen) == sorted(expected)
    assert shapes <= set(it.batch_shapes()) and len(shapes) <= len(it.options.boundaries)


def test_shuffle_is_deterministic_and_changes_per_epoch():
    src, tgt = _corpus()
    a = batching.BatchIterator(src, tgt, _options())
    b = batching.BatchIterator(src, tgt, _options())
    n = a.num_batches()
    _assert_same(_take(a, n + 3), _take(b, n + 3))
    e0, e1 = list(a.epoch_batches(0)), list(a.epoch_batches(1))
    assert [x["inputs"].shape for x in e0] != [x["inputs"].shape for x in e1]
    other = batching.BatchIterator(src, tgt, _options(seed=4))
    assert not all(np.array_equal(x["inputs"], y["inputs"])
                   for x, y in zip(e0, other.epoch_batches(0)))


def test_eval_iterator_is_one_pass_in_order():
    src, tgt = _corpus(100)
    it = batching.BatchIterator(src, tgt, _options(shuffle=False, repeat=False))
    batches = list(it)
    assert len(batches) == it.num_batches()
    assert list(it) == []  # exhausted: no second epoch
    _assert_same(batches, list(it.epoch_batches(0)))
    it.set_state({"epoch": 0, "index": 0})
    _assert_same(batches, list(it))


# ----------------------------------------------------------------------------- resumption
@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("where", ["mid_epoch", "epoch_end", "second_epoch"])
def test_exact_resumption_across_epochs(pack, where):
    src, tgt = _corpus(211)
    options = _options(pack=pack, pack_len=48, max_tokens=256, num_devices=2)
    ref = batching.BatchIterator(src, tgt, options)
    n = ref.num_batches(0)
    stop = {"mid_epoch": n // 2, "epoch_end": n, "second_epoch": n + 3}[where]
    uninterrupted = _take(ref, stop + 9)
    first = batching.BatchIterator(src, tgt, options)
    _take(first, stop)
    state = json.loads(json.dumps(first.get_state()))
    assert set(state) >= {"epoch", "index"}
    restored = batching.BatchIterator(src, tgt, options)
    restored.set_state(state)
    _assert_same(_take(restored, 9), uninterrupted[stop:])


def test_set_state_rejects_bad_or_foreign_state():
    src, tgt = _corpus(100)
    it = batching.BatchIterator(src, tgt, _options())
    other = batching.BatchIterator(src, tgt, _options(max_tokens=1024))
    with pytest.raises(ValueError, match=r"another corpus or batching options: max_tokens: "
                                         r"saved 1024, now \d+ \(fingerprint"):
        it.set_state(other.get_state())
    # a run resumed on another device count, or on a changed corpus, says so
    state = batching.BatchIterator(src, tgt, _options(num_devices=2)).get_state()
    with pytest.raises(ValueError, match="num_devices: saved 2, now 1"):
        it.set_state(state)
    fewer = batching.BatchIterator(*_corpus(99), _options()).get_state()
    with pytest.raises(ValueError, match=r"corpus: saved 99 pairs \(lengths crc \w+\), "
                                         r"now 100"):
        it.set_state(fewer)
    old_style = {k: v for k, v in fewer.items() if k in ("epoch", "index", "fingerprint")}
    with pytest.raises(ValueError, match="a state saved before positions recorded"):
        it.set_state(old_style)
    json.dumps(it.get_state())  # checkpoints store it as JSON
    with pytest.raises(ValueError, match="must be a dict with 'epoch' and 'index'"):
        it.set_state({"step": 3})
    with pytest.raises(ValueError, match="ints >= 0"):
        it.set_state({"epoch": -1, "index": 0})
    with pytest.raises(ValueError, match="past the"):
        it.set_state({"epoch": 0, "index": 10_000})


# ----------------------------------------------------------------------------- sharding
@pytest.mark.parametrize("pack", [False, True])
def test_host_shards_split_every_global_batch(pack):
    src, tgt = _corpus(300)
    kw = dict(pack=pack, pack_len=48, num_devices=4)
    whole = batching.BatchIterator(src, tgt, _options(**kw))
    hosts = [batching.BatchIterator(src, tgt, _options(**kw, shard_index=h, num_shards=2))
             for h in range(2)]
    n = whole.num_batches(1)
    assert all(h.num_batches(1) == n for h in hosts)
    glob = list(whole.epoch_batches(1))
    parts = [list(h.epoch_batches(1)) for h in hosts]
    for k in range(n):
        for key in glob[k]:
            assert parts[0][k][key].shape == parts[1][k][key].shape
            np.testing.assert_array_equal(
                np.concatenate([parts[0][k][key], parts[1][k][key]]), glob[k][key])


# ----------------------------------------------------------------------------- packing
def _check_packed_batch(batch, rows, pack_len):
    for side in ("inputs", "targets"):
        tok, seg, pos = batch[side], batch[f"{side}_segmentation"], batch[f"{side}_position"]
        assert tok.shape == seg.shape == pos.shape == (rows, pack_len)
        assert tok.dtype == seg.dtype == pos.dtype == np.int32
        assert ((seg == 0) == (tok == PAD)).all() and (pos[seg == 0] == 0).all()
        for r in range(rows):
            ids = seg[r][seg[r] > 0]
            # Segments are contiguous, numbered 1, 2, ... in order; padding only at the end.
            assert (np.diff(seg[r][: ids.size]) >= 0).all() and (seg[r][ids.size:] == 0).all()
            assert ids.size == 0 or (np.unique(ids) == np.arange(1, ids.max() + 1)).all()
            for s in np.unique(ids):
                where = np.flatnonzero(seg[r] == s)
                np.testing.assert_array_equal(pos[r, where], np.arange(where.size))
                assert tok[r, where[-1]] == EOS and (tok[r, where[:-1]] != EOS).all()
    # Pair k of a row is segment k on both sides.
    assert (batch["inputs_segmentation"].max(1) == batch["targets_segmentation"].max(1)).all()


def _segments(batch, side):
    tok, seg = batch[side], batch[f"{side}_segmentation"]
    return [tuple(tok[r][seg[r] == s]) for r in range(tok.shape[0])
            for s in range(1, seg[r].max() + 1)]


def test_packing_invariants_and_every_token_kept():
    src, tgt = _corpus(400, max_len=40)
    it = batching.BatchIterator(src, tgt, _options(pack=True, pack_len=64, max_tokens=1024,
                                                   num_devices=2))
    rows = batching.rows_for(64, 1024, 2)
    pairs, real, slots = [], 0, 0
    for batch in it.epoch_batches(0):
        assert set(batch) == {"inputs", "targets", "inputs_segmentation",
                              "targets_segmentation", "inputs_position", "targets_position"}
        _check_packed_batch(batch, rows, 64)
        pairs += list(zip(_segments(batch, "inputs"), _segments(batch, "targets")))
        real += int((batch["inputs"] != PAD).sum() + (batch["targets"] != PAD).sum())
        slots += 2 * batch["inputs"].size
    expected = [(tuple(s), tuple(t)) for s, t in zip(src.to_rows(), tgt.to_rows())]
    assert sorted(pairs) == sorted(expected)
    assert real / slots > 0.85  # short pairs in 64-slot rows pack densely


def test_first_fit_places_in_the_first_row_that_fits():
    src = np.array([5, 3, 4, 2, 6])
    tgt = np.array([5, 3, 4, 2, 2])
    row_of = packing.first_fit(src, tgt, np.arange(5), pack_len=8)
    # 5 -> row 0 (3 left); 3 -> row 0 (0 left, closed); 4 -> row 1; 2 -> row 1; 6 -> row 2.
    assert row_of.tolist() == [0, 0, 1, 1, 2]
    with pytest.raises(ValueError, match="must fit pack_len=4"):
        packing.first_fit(src, tgt, np.arange(5), pack_len=4)


def test_packed_batch_layout_by_hand():
    src = RaggedArray.from_rows([[5, EOS], [6, 7, EOS], [8, EOS]])
    tgt = RaggedArray.from_rows([[9, 9, EOS], [10, EOS], [11, EOS]])
    batch = packing.packed_batch(src, tgt, np.array([0, 1, 2]), np.array([0, 0, 1]), 3, 6, PAD)
    assert batch["inputs"].tolist() == [[5, EOS, 6, 7, EOS, 0], [8, EOS, 0, 0, 0, 0], [0] * 6]
    assert batch["inputs_segmentation"].tolist() == [[1, 1, 2, 2, 2, 0], [1, 1, 0, 0, 0, 0],
                                                     [0] * 6]
    assert batch["inputs_position"].tolist() == [[0, 1, 0, 1, 2, 0], [0, 1, 0, 0, 0, 0], [0] * 6]
    assert batch["targets"].tolist() == [[9, 9, EOS, 10, EOS, 0], [11, EOS, 0, 0, 0, 0],
                                         [0] * 6]
    assert batch["targets_position"].tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 0, 0, 0, 0],
                                                  [0] * 6]


def test_packing_budget_and_device_multiple():
    src, tgt = _corpus(200, max_len=30)
    opts = _options(pack=True, pack_len=32, max_tokens=300, num_devices=4)
    shapes = {b["inputs"].shape for b in batching.BatchIterator(src, tgt, opts).epoch_batches()}
    assert shapes == {(8, 32)}  # 300 // 32 = 9 rows, rounded down to a multiple of 4
    assert dataclasses.replace(opts, num_devices=2).plan_key() != opts.plan_key()
