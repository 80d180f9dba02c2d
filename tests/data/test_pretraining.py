"""Pretraining examples (jformer.data.pretraining) and their resumable iterator (epochs)."""
import numpy as np
import pytest

from jformer.data import demo
from jformer.data import pretraining as pt
from jformer.data.epochs import EpochIterator, EpochOptions
from jformer.data.ragged import RaggedArray
from jformer.data.tokenizer import Tokenizer

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 100
ORDINARY = np.arange(10, VOCAB, dtype=np.int32)
# ids >= 55 continue a word: whole-word masking groups them with the piece before
WORD_START = np.arange(VOCAB) < 55
SPECIALS = pt.Specials(PAD, CLS, SEP, MASK, ORDINARY, WORD_START)


def synthetic_docs(num_docs, sentences, length, seed=0, vary=False):
    """Documents of random ordinary ids; sentence lengths fixed or in [1, 2*length]."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(num_docs * sentences):
        n = int(rng.integers(1, 2 * length + 1)) if vary else length
        rows.append(rng.integers(10, VOCAB, n).astype(np.int32))
    bounds = np.arange(0, num_docs * sentences + 1, sentences, dtype=np.int64)
    return pt.Documents(RaggedArray.from_rows(rows), bounds)


def rows_of(source, epoch=0):
    return source.rows(epoch, np.arange(source.num_rows(epoch)))


def real_lengths(batch):
    return (batch["inputs"] != PAD).sum(1)


def test_masking_statistics_over_many_draws():
    opts = pt.PretrainOptions(max_seq_len=48, max_predictions_per_seq=40, seed=1)
    src = pt.PretrainingSource(synthetic_docs(400, 12, 6, vary=True), opts, SPECIALS)
    batch = {k: np.concatenate([rows_of(src, e)[k] for e in range(3)])
             for k in rows_of(src, 0)}
    lengths = real_lengths(batch)
    counts = batch["mlm_weights"].sum(1)
    want = np.minimum(40, np.maximum(1, np.round(lengths * 0.15)))
    np.testing.assert_array_equal(counts, want)  # round(15%) of every sequence
    assert counts.sum() / lengths.sum() == pytest.approx(0.15, abs=0.01)
    rows, cols = np.nonzero(batch["mlm_weights"])
    pos = batch["mlm_positions"][rows, cols]
    inputs = batch["inputs"][rows, pos]
    targets = batch["mlm_targets"][rows, cols]
    assert np.isin(targets, ORDINARY).all()  # never [CLS], [SEP] or padding
    n = pos.size
    assert n > 20_000  # binomial sd of a 10% rate: 0.2 points
    masked = (inputs == MASK).mean()
    kept = (inputs == targets).mean()
    other = ((inputs != MASK) & (inputs != targets)).mean()
    # 80% [MASK]; 10% unchanged, plus the 1/90 of random draws that hit the target
    assert masked == pytest.approx(0.8, abs=0.015)
    assert kept == pytest.approx(0.1 + 0.1 / ORDINARY.size, abs=0.01)
    assert other == pytest.approx(0.1 - 0.1 / ORDINARY.size, abs=0.01)
    assert np.isin(inputs[inputs != MASK], ORDINARY).all()
    # positions are sorted and distinct within a row
    for r in range(0, len(lengths), 97):
        p = batch["mlm_positions"][r][batch["mlm_weights"][r] > 0]
        assert (np.diff(p) > 0).all()


def test_special_tokens_and_padding_are_never_masked_and_the_cap_holds():
    opts = pt.PretrainOptions(max_seq_len=64, max_predictions_per_seq=3, seed=2)
    src = pt.PretrainingSource(synthetic_docs(50, 10, 8), opts, SPECIALS)
    batch = rows_of(src)
    assert (batch["mlm_weights"].sum(1) == 3).all()  # 15% of ~60 tokens, capped at 3
    for r in range(batch["inputs"].shape[0]):
        original = batch["inputs"][r].copy()
        p = batch["mlm_positions"][r]
        original[p] = batch["mlm_targets"][r]
        assert original[0] == CLS and (original == SEP).sum() == 2
        assert not np.isin(original[p], [CLS, SEP, PAD]).any()
        length = (original != PAD).sum()
        assert (p < length - 1).all() and (p > 0).all()


def test_next_sentence_is_half_random_and_never_from_the_same_document():
    # The label is a fair coin for chunks of two or more sentences; a one-sentence
    # chunk (a document's tail) has no B of its own, so it is always random.
    docs = synthetic_docs(400, 10, 5)
    opts = pt.PretrainOptions(max_seq_len=23, short_seq_prob=0.0, seed=3)
    labels = []
    for epoch in range(3):
        plan = pt.PretrainingSource(docs, opts, SPECIALS).instances(epoch)
        doc_of = np.searchsorted(docs.bounds, np.arange(docs.bounds[-1]), side="right") - 1
        a_doc, b_doc = doc_of[plan.a_lo], doc_of[plan.b_lo]
        assert (doc_of[plan.a_hi - 1] == a_doc).all() and (doc_of[plan.b_hi - 1] == b_doc).all()
        assert (b_doc[plan.random_next] != a_doc[plan.random_next]).all()
        assert (b_doc[~plan.random_next] == a_doc[~plan.random_next]).all()
        assert (plan.b_lo[~plan.random_next] == plan.a_hi[~plan.random_next]).all()
        assert (plan.b_hi > plan.b_lo).all() and (plan.a_hi > plan.a_lo).all()
        single = plan.chunk_hi - plan.a_lo == 1
        assert plan.random_next[single].all()
        labels.append(plan.random_next[~single])
    labels = np.concatenate(labels)
    assert labels.size > 3000
    assert labels.mean() == pytest.approx(0.5, abs=0.025)
    # the rows carry the plan's labels
    batch = rows_of(pt.PretrainingSource(docs, opts, SPECIALS))
    np.testing.assert_array_equal(batch["nsp_labels"],
                                  pt.PretrainingSource(docs, opts, SPECIALS)
                                  .instances(0).random_next.astype(np.int32))


def test_segments_fill_the_length_and_short_sequences_appear():
    docs = synthetic_docs(200, 12, 6, vary=True)
    full = rows_of(pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=40,
                                                                 short_seq_prob=0.0), SPECIALS))
    lengths = real_lengths(full)
    assert lengths.max() == 40 and np.median(lengths) == 40
    short = rows_of(pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=40,
                                                                  short_seq_prob=0.5), SPECIALS))
    assert np.median(real_lengths(short)) < 40
    # segment ids: 0 over [CLS] A [SEP], 1 over B [SEP], 0 on padding
    types, inputs = full["token_types"], full["inputs"]
    for r in range(0, len(lengths), 13):
        first_sep = int(np.flatnonzero(inputs[r] == SEP)[0])
        assert (types[r, :first_sep + 1] == 0).all()
        assert (types[r, first_sep + 1:lengths[r]] == 1).all()
        assert (types[r, lengths[r]:] == 0).all()


def test_truncation_cuts_the_longer_segment_at_random_ends():
    rng = np.random.default_rng(0)
    a, b = np.arange(100, 130), np.arange(200, 205)
    fronts = 0
    for _ in range(200):
        ta, tb = pt.truncate_pair(a, b, 20, rng)
        assert ta.size + tb.size == 20 and tb.size == 5 and ta.size == 15
        # a contiguous run of a: cut at its front and back only
        assert (np.diff(ta) == 1).all()
        fronts += int(ta[0] - 100)
    assert fronts / (200 * 15) == pytest.approx(0.5, abs=0.05)
    ta, tb = pt.truncate_pair(np.arange(10), np.arange(10), 10, rng)
    assert ta.size == tb.size == 5


def test_whole_word_masking_masks_whole_words():
    opts = pt.PretrainOptions(max_seq_len=64, max_predictions_per_seq=30,
                              whole_word_mask=True, seed=4)
    src = pt.PretrainingSource(synthetic_docs(100, 10, 8), opts, SPECIALS)
    batch = rows_of(src)
    continuation_masked = 0
    for r in range(batch["inputs"].shape[0]):
        original = batch["inputs"][r].copy()
        w = batch["mlm_weights"][r] > 0
        p = batch["mlm_positions"][r][w]
        original[p] = batch["mlm_targets"][r][w]
        chosen = np.zeros(original.size, bool)
        chosen[p] = True
        length = (original != PAD).sum()
        ordinary = np.isin(original, ORDINARY)
        for i in range(1, length):
            starts_word = WORD_START[original[i]] or not ordinary[i - 1]
            if ordinary[i] and not starts_word:  # a continuation goes with its word
                assert chosen[i] == chosen[i - 1]
                continuation_masked += chosen[i]
        assert p.size <= max(1, round(length * 0.15))
    assert continuation_masked > 100


def test_rows_are_deterministic_and_each_rebuilt_alone():
    docs = synthetic_docs(60, 8, 6, vary=True)
    src = pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=32, seed=5), SPECIALS)
    again = pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=32, seed=5), SPECIALS)
    whole = rows_of(src, 1)
    for i in (0, 7, src.num_rows(1) - 1):
        one = again.rows(1, np.array([i]))
        for k in whole:
            np.testing.assert_array_equal(one[k][0], whole[k][i])
    other = pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=32, seed=6), SPECIALS)
    assert not np.array_equal(rows_of(other, 1)["inputs"][:5], whole["inputs"][:5])
    assert not np.array_equal(rows_of(src, 2)["inputs"][:5], whole["inputs"][:5])
    pad_row = src.rows(0, np.array([-1]))
    assert (pad_row["inputs"] == PAD).all() and pad_row["mlm_weights"].sum() == 0
    assert pad_row["nsp_weights"].sum() == 0


def test_iterator_resumes_exactly_and_refuses_another_recipe():
    docs = synthetic_docs(40, 8, 6, vary=True)
    src = pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=32), SPECIALS)
    opts = EpochOptions(batch_size=16, num_devices=2)
    it = EpochIterator(src, opts)
    per_epoch = it.num_batches(0)
    for _ in range(per_epoch + 2):  # into the second epoch
        next(it)
    state = it.get_state()
    assert state["epoch"] == 1 and state["index"] == 2
    expected = [next(it) for _ in range(per_epoch)]
    resumed = EpochIterator(pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=32),
                                                 SPECIALS), EpochOptions(batch_size=16))
    resumed.set_state(state)  # on another device count: the same batches
    for want in expected:
        got = next(resumed)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    other = EpochIterator(pt.PretrainingSource(docs, pt.PretrainOptions(
        max_seq_len=32, masked_lm_prob=0.2), SPECIALS), opts)
    with pytest.raises(ValueError, match=r"source.masked_lm_prob: saved 0.15, now 0.2"):
        other.set_state(state)
    with pytest.raises(ValueError, match=r"batch_size: saved 16, now 8"):
        EpochIterator(src, EpochOptions(batch_size=8)).set_state(state)
    with pytest.raises(ValueError, match="batch_size=12 must be a positive multiple of 8"):
        EpochOptions(batch_size=12, num_devices=4, accum_steps=2)


def test_hosts_take_their_rows_of_every_global_batch():
    docs = synthetic_docs(40, 8, 6)
    src = pt.PretrainingSource(docs, pt.PretrainOptions(max_seq_len=32), SPECIALS)
    one = list(EpochIterator(src, EpochOptions(batch_size=8, repeat=False)))
    hosts = [list(EpochIterator(src, EpochOptions(batch_size=8, num_devices=2, num_shards=2,
                                                  shard_index=h, repeat=False)))
             for h in range(2)]
    assert len(one) == len(hosts[0]) == len(hosts[1]) == -(-src.num_rows(0) // 8)
    for whole, a, b in zip(one, *hosts):
        for k in whole:
            np.testing.assert_array_equal(whole[k], np.concatenate([a[k], b[k]]))
    last = one[-1]  # the epoch's last batch is filled with padding rows
    real = src.num_rows(0) - 8 * (len(one) - 1)
    assert (last["inputs"][real:] == PAD).all() and last["nsp_weights"][real:].sum() == 0


def test_read_documents_and_the_one_document_case(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("First one.\nSecond one.\n\n\n  \nThird.\n", encoding="utf-8")
    q = tmp_path / "b.txt"
    q.write_text("Fourth.\nFifth.", encoding="utf-8")
    docs = pt.read_documents([str(p), str(q)])
    assert docs == [["First one.", "Second one."], ["Third."], ["Fourth.", "Fifth."]]
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        pt.read_documents([str(tmp_path / "missing.txt")])
    with pytest.raises(ValueError, match="there is 1; give more documents"):
        pt.plan_instances(synthetic_docs(1, 5, 5), pt.PretrainOptions(),
                          np.random.default_rng(0))
    # without NSP one document is fine; a one-sentence chunk is [CLS] A [SEP]
    plan = pt.plan_instances(synthetic_docs(1, 5, 5), pt.PretrainOptions(
        max_seq_len=8, next_sentence=False, short_seq_prob=0.0), np.random.default_rng(0))
    assert not plan.random_next.any() and (plan.b_lo == plan.b_hi).all()


def test_special_pieces_come_from_the_vocabulary(tmp_path):
    docs = demo.generate_documents(0, 60, 0, 0)["train"]
    sentences = [s for d in docs for s in d.lines()]
    tok = Tokenizer.train(sentences, tmp_path / "spm", 400,
                          user_defined_symbols=pt.SPECIAL_PIECES)
    sp = pt.Specials.from_tokenizer(tok)
    assert (sp.cls, sp.sep, sp.mask) == (4, 5, 6)
    assert not np.isin([sp.pad, sp.cls, sp.sep, sp.mask, tok.unk_id, tok.eos_id],
                       sp.ordinary).any()
    assert all(not tok.id_to_piece(i).startswith("<0x") for i in sp.ordinary)
    encoded = pt.Documents.encode(tok, [d.lines() for d in docs])
    assert encoded.num_docs == 60 and len(encoded.sentences) == len(sentences)
    plain = Tokenizer.train(sentences, tmp_path / "plain", 400)
    with pytest.raises(ValueError, match=r"has no piece '\[CLS\]'.*needs the pieces"):
        pt.Specials.from_tokenizer(plain)
