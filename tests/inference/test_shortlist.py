"""jformer.inference.shortlist: learning, the file, each batch's ids; a shortlisted search
writes what the full one writes where the list holds the full model's choices."""
import dataclasses

import jax
import numpy as np
import pytest

from jformer.inference import shortlist
from jformer.inference.batch_decode import (SearchSpec, decode_batch, encode_and_init,
                                            make_step_fn)
from jformer.kernels import int8_matmul
from jformer.model import int8 as int8_model
from jformer.inference.translator import Translator
from jformer.model import Transformer
from jformer.ops import resolve
from jformer.types import NEG_INF
from tests.inference.test_translator import DECODE, SHORT

V = 40


def _pairs():
    """Source piece s (10..19) always brings target piece s + 10, and every target holds
    the frequent piece 4; piece 5 follows 10 half the time."""
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(200):
        s = rng.choice(np.arange(10, 20), size=3, replace=False)
        t = np.concatenate([s + 10, [4]])
        if 10 in s and rng.random() < 0.5:
            t = np.append(t, 5)
        pairs.append((s, rng.permutation(t)))
    return pairs


def test_learn_keeps_the_likeliest_targets_of_each_source_piece_and_the_frequent():
    learned = shortlist.learn(_pairs(), V, top=2, frequent=1, exclude=[0, 2])
    assert learned.frequent.tolist() == [4]
    for s in range(10, 20):
        listed = learned.targets[learned.offsets[s]:learned.offsets[s + 1]].tolist()
        assert len(listed) == 2 and listed[0] == s + 10  # p(s + 10 | s) = 1
        assert 4 not in listed  # every batch keeps the frequent piece: no list holds it
    assert 5 in learned.targets[learned.offsets[10]:learned.offsets[11]]
    assert learned.offsets[0] == learned.offsets[10] == 0  # pieces never seen: empty lists


def test_the_file_round_trips_and_bad_files_name_the_problem(tmp_path):
    learned = shortlist.learn(_pairs(), V, top=3, frequent=2)
    path = tmp_path / "shortlist.npz"
    learned.save(path)
    again = shortlist.load(path, V)
    for field in ("offsets", "targets", "frequent"):
        np.testing.assert_array_equal(getattr(again, field), getattr(learned, field))
    assert (again.vocab_size, again.top) == (V, 3)
    with pytest.raises(ValueError, match="a shortlist for 40 pieces, the model has 41"):
        shortlist.load(path, 41)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.npz: not a jformer shortlist"):
        shortlist.load(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError, match="jformer shortlist writes one"):
        shortlist.load(tmp_path / "missing.npz")


def test_batch_ids_are_the_sorted_union_rounded_up_with_eos():
    learned = shortlist.Shortlist(np.array([0] * 11 + [2] * 190, np.int64),
                                  np.array([30, 31], np.int32), np.array([7], np.int32),
                                  200, 2)
    ids = learned.batch_ids([np.array([10, 3]), np.array([55])], always=[3, 1], fill=3)
    assert ids.dtype == np.int32 and len(ids) == 64 and ids[:5].tolist() == [1, 3, 7, 30, 31]
    assert (ids[5:] == 3).all()
    # a union whose size (72 -> 128) is half the vocabulary or more: the full one
    assert len(dataclasses.replace(learned, frequent=np.arange(60, dtype=np.int32))
               .batch_ids([np.array([10])], always=[3], fill=3)) == 64
    wide = dataclasses.replace(learned, frequent=np.arange(70, dtype=np.int32))
    assert wide.batch_ids([np.array([10])], always=[3], fill=3) is None


# the float32 set; int8 over the CPU kernel where it runs; int8 over XLA's int8 dot
SETS = {"float32": (False, False), "int8": (True, False), "int8 portable": (True, True)}
# XLA's int8 dot (the accelerators' and the jax export's form) in CI's slow run
SET_NAMES = ["float32", "int8", pytest.param("int8 portable", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", SET_NAMES)
def test_a_shortlist_holding_the_full_argmax_leaves_greedy_output_unchanged(setup, name):
    """With every piece the full greedy search wrote in the list, each step's argmax is in
    it, so the output is the same (and a test that can fail: dropping one written piece
    changes the output). Beam search may change: its scores are over the list. int8
    steps list int8 columns (Int8ShortlistOutput), the kernel's where it runs."""
    method = "greedy"
    cfg, params, _ = setup
    int8, portable = SETS[name]
    ops = resolve(cfg, int8=int8)
    rng = np.random.default_rng(3)
    inputs = rng.integers(4, cfg.vocab_size, (4, 12)).astype(np.int32)
    inputs[:, -1] = cfg.eos_id
    spec = SearchSpec(method, 1 if method == "greedy" else 3, max_len=16)
    prepared = ops.cache.prepare(Transformer(cfg, ops), params, portable=portable)
    args = (params, prepared, inputs, np.ones(4, bool), jax.random.key(0), np.float32(0.6),
            np.float32(1.0), None, np.float32(0.0), None, None)
    full = decode_batch(*args, model_cfg=cfg, ops=ops, spec=spec)
    written = np.unique(np.asarray(full.tokens))
    written = written[written != cfg.pad_id]
    ids = np.unique(np.concatenate([written, [cfg.eos_id]])).astype(np.int32)
    padded = np.concatenate([ids, np.full(64 - len(ids), cfg.eos_id, np.int32)])
    short = decode_batch(*args, padded, model_cfg=cfg, ops=ops, spec=spec)
    np.testing.assert_array_equal(np.asarray(short.tokens), np.asarray(full.tokens))
    # the scores are over the list: a softmax over fewer pieces gives each more mass
    assert np.all(np.asarray(short.scores) > np.asarray(full.scores))
    dropped = ids[ids != cfg.eos_id][:1]
    fewer = np.where(np.isin(padded, dropped), cfg.eos_id, padded).astype(np.int32)
    other = decode_batch(*args, fewer, model_cfg=cfg, ops=ops, spec=spec)
    assert not np.isin(np.asarray(other.tokens), dropped).any()
    assert not np.array_equal(np.asarray(other.tokens), np.asarray(full.tokens))


@pytest.mark.parametrize("name", SET_NAMES)
def test_listed_logits_are_the_full_steps_at_the_listed_ids(setup, name):
    """A step over a list gives each listed id the full step's logit (int8: a column's
    quantization is its own, so the listed columns are the full step's, kernel or XLA's
    dot) and every other id NEG_INF."""
    cfg, params, _ = setup
    int8, portable = SETS[name]
    ops = resolve(cfg, int8=int8)
    model = Transformer(cfg, ops)
    prepared = ops.cache.prepare(model, params, portable=portable)
    native = not portable and int8_matmul.wanted()  # the kernel's forms (else XLA's dot)
    assert (int8_model.NATIVE in prepared.get(int8_model.COLLECTION, {})) == (int8 and native)
    rng = np.random.default_rng(5)
    inputs = rng.integers(4, cfg.vocab_size, (3, 9)).astype(np.int32)
    inputs[:, -1] = cfg.eos_id
    cache = encode_and_init(model, params, inputs, 8)
    ids_C = np.unique(rng.integers(0, cfg.vocab_size, 40)).astype(np.int32)
    ids_C = np.concatenate([ids_C, np.full(64 - len(ids_C), ids_C[0], np.int32)])
    tokens = np.full(3, cfg.start_id, np.int32)
    full, _ = make_step_fn(model, params, cache, None, prepared)
    listed = ops.cache.listed(model, params, prepared, ids_C)
    short, _ = make_step_fn(model, params, cache, None, prepared, listed)
    full_NV = np.asarray(full(tokens, np.int32(0), cache.search_state())[0])
    short_NV = np.asarray(short(tokens, np.int32(0), cache.search_state())[0])
    np.testing.assert_allclose(short_NV[:, ids_C], full_NV[:, ids_C], rtol=1e-6, atol=1e-6)
    others = np.setdiff1d(np.arange(cfg.vocab_size), ids_C)
    assert (short_NV[:, others] <= NEG_INF).all()
    if int8:  # the listed columns are int8, packed for the kernel where it runs
        w = listed["decoder"]["step_output"]["output"]
        form = int8_matmul.form()  # native: AVX2's int16 pairs or VNNI's unsigned quads
        weight, want = ((w["packed"], (form.dtype, (4, cfg.d_model // form.depth,
                                                    16 * form.depth)))
                        if native else (w["q"], (np.int8, (cfg.d_model, 64))))
        assert w["scale"].shape == (64,)
        assert (weight.dtype, weight.shape) == want


@pytest.mark.parametrize("placement", [dict(), dict(devices=2, parallel="split")])
def test_the_translator_reads_decode_shortlist(setup, tmp_path, placement):
    """decode.shortlist names the file; every batch decodes over its own list (each
    device of a split batch over the batch's list)."""
    cfg, params, tok = setup
    full = Translator(cfg, params, tok, DECODE)
    want = full.translate(SHORT, method="greedy", return_scores=True)
    written = np.unique(np.concatenate([h.ids for h in want if len(h.ids)]))
    n = cfg.vocab_size
    listed = shortlist.Shortlist(np.zeros(n + 1, np.int64), np.zeros(0, np.int32),
                                 written.astype(np.int32), n, 1)
    # the batches do decode over a list: it is under half the vocabulary
    assert listed.batch_ids([np.zeros(0, np.int32)], [cfg.eos_id, tok.unk_id],
                            cfg.eos_id) is not None
    listed.save(tmp_path / "list.npz")
    short = Translator(cfg, params, tok, dataclasses.replace(
        DECODE, shortlist=str(tmp_path / "list.npz")), **placement)
    got = short.translate(SHORT, method="greedy", return_scores=True)
    assert [h.text for h in got] == [h.text for h in want]
    with pytest.raises(FileNotFoundError, match="shortlist not found"):
        Translator(cfg, params, tok, dataclasses.replace(DECODE, shortlist=str(tmp_path / "x")))
