"""Tests for jformer/translate.py on a tiny random model and a tiny sentencepiece model.

The model is random, so translations are gibberish; the tests check the machinery:
cached steps equal teacher forcing, batching and bucketing change no result, the number
of compiled programs stays bounded, special inputs are handled, checkpoints round-trip.
A bias towards EOS on the last decoder layer gives outputs of varied lengths.
"""
import dataclasses
import functools
import json
import os
import random
import shutil
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.kernels.topk import beam_candidates
from jformer.ops import transformer
from jformer.inference import batch_decode
from jformer.inference import buckets as bucketing
from jformer.inference import restore
from jformer.search import beam as beam_search
from jformer.config import (Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig,
                            from_config_dict, to_dict)
from jformer.data import demo
from jformer.data.tokenizer import Tokenizer
from jformer.inference.settings import SearchSettings
from jformer.inference.batch_decode import SearchSpec
from jformer.inference.results import Hypothesis
from jformer.inference.translator import Translator
from jformer.model.masks import NEG_INF
from tests.inference.record import record_batches
from jformer.workdir import checkpoint, files
from jformer.model.init import run_once

CORPUS = demo.generate_pairs(0, 300, 0, 0)["train"]
# The exact rule over all 2W candidates (the defaults before 2026-12-01): the small test
# model ranks EOS below the W best on many steps, so under top_w most of its outputs run
# to max_len, and the tests here want outputs that end at many different steps.
DECODE = DecodeConfig(beam_size=3, alpha=0.6, max_len_a=1.0, max_len_b=4, batch_size=4,
                      length_buckets=(16, 32), overlong="truncate", eos_candidates="all",
                      stop="exact")
CHUNK = batch_decode.CHUNK_SIZE  # the Translator's default: the CLI tests share its programs
SHORT = ["Five.", "I see two apples.", "", "The number is three.", "It is late.",
         "We need one car.", "Hello"]  # all in the 16-token bucket


def words_of_corpus() -> list[str]:
    return sorted({w for en, _ in CORPUS for w in en.split()})


@functools.cache
def _random_params(cfg: ModelConfig) -> dict:
    dummy = jnp.zeros((1, 4), jnp.int32)
    return jax.device_get(run_once(transformer(cfg).init, jax.random.key(0), dummy,
                                   dummy)["params"])


def build_setup(directory: str) -> tuple[ModelConfig, dict, Tokenizer]:
    """Tokenizer (written to <directory>/spm.model), model config and random params."""
    tok = Tokenizer.train([s for pair in CORPUS for s in pair],
                          os.path.join(directory, "spm"), vocab_size=400)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, num_heads=4,
                      num_encoder_layers=2, num_decoder_layers=2, d_ff=64, max_len=40,
                      dropout_rate=0.0, pad_id=tok.pad_id, bos_id=tok.bos_id,
                      eos_id=tok.eos_id)
    params = jax.tree.map(np.copy, _random_params(cfg))
    # Push the last decoder state towards EOS's embedding: some outputs end early.
    eos_D = params["shared_embedding"]["embedding"][cfg.eos_id]
    norm = params["decoder"]["layer_1"]["ffn_residual"]["norm"]
    norm["bias"] = norm["bias"] + 2.0 * eos_D / np.linalg.norm(eos_D)
    return cfg, params, tok


def write_workdir(workdir: str, cfg: ModelConfig, params: dict, tok: Tokenizer,
                  steps=(10,)) -> None:
    """A training-like run folder: config.json, spm.model, checkpoints/<step>/.

    The last step holds ``params``; earlier ones hold them scaled by 1.01, 1.02, ...
    """
    os.makedirs(workdir, exist_ok=True)
    config = Config(cfg, DataConfig(), TrainConfig(), DECODE)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump(to_dict(config), f)
    shutil.copy(tok.path, os.path.join(workdir, "spm.model"))
    with checkpoint.Checkpointer(files.checkpoint_dir(workdir), keep=5, save_every=1,
                                 async_save=False) as ckpt:
        for i, step in enumerate(steps):
            scaled = jax.tree.map(lambda x: x * (1.0 + 0.01 * (len(steps) - 1 - i)), params)
            ckpt.save(step, {"params": scaled, "step": np.int32(step)}, {"epoch": 0})


def tiny_workdir(root) -> str:
    """<root>/run: a workdir of :func:`build_setup`'s model (one checkpoint, step 10)."""
    cfg, params, tok = build_setup(str(root))
    run = os.path.join(root, "run")
    write_workdir(run, cfg, params, tok, steps=(10,))
    return run


# ------------------------------------------------------------------ pure helpers


def test_buckets_and_output_length_rule(setup):
    cfg = setup[0]
    assert bucketing.source_buckets(DECODE, cfg.max_len) == (16, 32, 40)
    assert bucketing.source_buckets(dataclasses.replace(DECODE, length_buckets=(8, 64)),
                                    cfg.max_len) == (8, 40)
    assert [bucketing.bucket_for(n, (8, 16, 40)) for n in (1, 8, 9, 40)] == [8, 8, 16, 40]
    # min(max_len, a * bucket + b) rounded up to the chunk: 8 + 4 -> 12; 32 + 4 -> 36.
    assert bucketing.output_len(8, cfg, DECODE, 4) == 12
    assert bucketing.output_len(8, cfg, DECODE, 8) == 16
    assert bucketing.output_len(32, cfg, DECODE, 4) == 36
    assert bucketing.output_len(32, cfg, DECODE, 8) == cfg.max_len  # 40, not 48
    assert bucketing.output_len(40, cfg, DECODE, 4) == cfg.max_len
    half = dataclasses.replace(DECODE, max_len_a=0.5, max_len_b=1)
    assert bucketing.output_len(16, cfg, half, 4) == 12  # ceil(9 / 4) * 4


def test_load_config_round_trip(tmp_path, setup):
    config = Config(setup[0], DataConfig(), TrainConfig(), DECODE)
    (tmp_path / "config.json").write_text(json.dumps(to_dict(config)))
    assert files.load_config(tmp_path) == config
    with pytest.raises(FileNotFoundError, match="config.json"):
        files.load_config(tmp_path / "missing")


# ------------------------------------------------------------------ decoding


def test_step_logits_equal_teacher_forced_logits(translator, setup):
    cfg, params, _ = setup
    rng = np.random.default_rng(0)
    inputs_BS = rng.integers(4, cfg.vocab_size, (2, 7)).astype(np.int32)
    inputs_BS[0, 5:] = cfg.pad_id
    targets_BT = rng.integers(4, cfg.vocab_size, (2, 6)).astype(np.int32)
    expected_BTV = np.asarray(jax.jit(transformer(cfg).apply)({"params": params}, inputs_BS,
                                                              targets_BT))
    decoder_in_BT = np.concatenate([np.full((2, 1), cfg.bos_id), targets_BT[:, :-1]], 1)
    step_fn, state = translator.step_fn(inputs_BS, max_len=8)
    # Three hypotheses per source, as beam search runs it: the self-attention state is
    # tiled, the cross-attention keys/values stay one copy per source.
    tiled = jax.tree.map(lambda x: jnp.repeat(x, 3, axis=0), state)
    step = jax.jit(step_fn)
    kept = np.ones(cfg.vocab_size, bool)
    kept[[cfg.pad_id, cfg.bos_id]] = False
    for t in range(targets_BT.shape[1]):
        logits_BV, state = step(jnp.asarray(decoder_in_BT[:, t]), jnp.int32(t), state)
        tiled_logits_NV, tiled = step(jnp.asarray(np.repeat(decoder_in_BT[:, t], 3)),
                                      jnp.int32(t), tiled)
        np.testing.assert_allclose(np.asarray(logits_BV)[:, kept], expected_BTV[:, t, kept],
                                   atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(tiled_logits_NV, np.repeat(logits_BV, 3, axis=0),
                                   atol=1e-5, rtol=1e-5)
        assert np.all(np.asarray(logits_BV)[:, ~kept] == NEG_INF)  # never generated


def test_beam_size_one_is_greedy(translator):
    greedy = translator.translate(SHORT, method="greedy", return_scores=True)
    beam1 = translator.translate(SHORT, beam_size=1, return_scores=True)
    assert [h.text for h in beam1] == [h.text for h in greedy]
    for g, b in zip(greedy, beam1):  # beam 1 reports the length-penalised score
        assert b.score == pytest.approx(g.score / ((5 + len(g.ids)) / 6) ** DECODE.alpha,
                                        rel=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batch_equals_sentences_one_by_one_in_input_order(translator, beam_size):
    together = translator.translate(SHORT, beam_size=beam_size, return_scores=True)
    alone = [translator.translate([s], beam_size=beam_size, return_scores=True)[0]
             for s in SHORT]
    assert [h.text for h in together] == [h.text for h in alone]
    np.testing.assert_allclose([h.score for h in together], [h.score for h in alone],
                               rtol=1e-5, atol=1e-5)
    backwards = translator.translate(SHORT[::-1], beam_size=beam_size)
    assert backwards == [h.text for h in together][::-1]
    assert len({len(h.ids) for h in together}) > 2  # the EOS bias gives varied lengths


@pytest.mark.slow
@pytest.mark.parametrize("devices,parallel_", [(2, "split"), (4, "split"), (3, "batches")])
def test_decoding_on_several_devices_equals_one_device(setup, translator, devices,
                                                       parallel_):
    if len(jax.local_devices()) < devices:
        pytest.skip(f"needs {devices} local devices (tests/conftest.py asks for 8)")
    cfg, params, tok = setup
    parallel = Translator(cfg, params, tok, DECODE, devices=devices, parallel=parallel_)
    assert parallel.placement.devices == jax.local_devices()[:devices]
    for kwargs in (dict(beam_size=3, n_best=2, batch_size=devices), dict(method="greedy")):
        # SHORT's sentences make several batches of `devices`: split, or taken in turn
        want = translator.translate(SHORT, return_scores=True, **kwargs)
        got = parallel.translate(SHORT, return_scores=True, **kwargs)
        if "n_best" in kwargs:
            want, got = sum(want, []), sum(got, [])
        assert [h.text for h in got] == [h.text for h in want]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want],
                                   rtol=1e-5, atol=1e-5)
    # Sampling: each sentence has its own key, so the devices sample what one does.
    sample = functools.partial(parallel.translate, SHORT, method="sample", temperature=2.0)
    first = sample(rng=jax.random.key(1))
    assert first == translator.translate(SHORT, method="sample", temperature=2.0,
                                         rng=jax.random.key(1))
    assert sample(rng=jax.random.key(2)) != first
    if parallel_ == "split":
        with pytest.raises(ValueError,
                           match=f"batch_size must be a multiple of devices={devices}"):
            parallel.translate(SHORT, batch_size=devices + 1)
    else:  # every batch runs whole on one device; one program serves them all
        assert parallel.translate(SHORT, batch_size=devices + 1) == translator.translate(
            SHORT, batch_size=devices + 1)
    with pytest.raises(ValueError, match="devices must be an int in"):
        Translator(cfg, params, tok, DECODE, devices=len(jax.local_devices()) + 1)
    with pytest.raises(ValueError, match="parallel must be one of"):
        Translator(cfg, params, tok, DECODE, devices=2, parallel="mesh")


def test_alpha_and_temperature_sweeps_reuse_the_compiled_search(translator):
    # Tuning the length penalty on a dev set: one program per shape, not per value.
    base = translator.translate(SHORT, beam_size=3, alpha=0.0, return_scores=True)
    sample = functools.partial(translator.translate, SHORT, method="sample",
                               rng=jax.random.key(3))
    cold = sample(temperature=0.05)
    before = batch_decode.trace_count()
    for alpha in (0.3, 1.0, 2.5):
        hyps = translator.translate(SHORT, beam_size=3, alpha=alpha, return_scores=True)
        same = [(h, b) for h, b in zip(hyps, base) if np.array_equal(h.ids, b.ids)]
        assert same
        for h, b in same:  # alpha is applied, not a stale compiled constant
            assert h.score * ((5 + len(h.ids)) / 6) ** alpha == pytest.approx(b.score,
                                                                               rel=1e-5)
    hot = sample(temperature=50.0)
    assert batch_decode.trace_count() == before
    assert sample(temperature=0.05) == cold  # temperature is applied, too
    assert hot != cold
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0"):
        translator.translate(SHORT, alpha=float("nan"))
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        translator.translate(SHORT, method="sample", temperature=0.0)


@pytest.mark.slow
def test_compilations_stay_bounded_over_mixed_lengths(translator):
    words, rng = words_of_corpus(), random.Random(0)
    calls = [[" ".join(rng.choices(words, k=rng.randint(1, 40)))
              for _ in range(rng.randint(1, 3))] for _ in range(30)]
    before = batch_decode.trace_count()
    buckets = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # long sentences are truncated
        for sentences in calls:
            lengths = [min(len(s), translator.model_cfg.max_len)
                       for s in translator.encode_sources(sentences)]
            buckets |= {bucketing.bucket_for(n, translator.buckets) for n in lengths}
            assert len(translator.translate(sentences, method="greedy")) == len(sentences)
    assert len(buckets) >= 3
    # One program per (bucket, padded rows): rows are 1, 2 or 4 (batch_size 4).
    assert batch_decode.trace_count() - before <= len(buckets) * 3


def test_short_batches_run_on_fewer_rows(translator, monkeypatch):
    assert [bucketing.padded_rows(n, 8) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert [bucketing.padded_rows(n, 8, devices=2) for n in (1, 3, 5)] == [2, 4, 8]
    assert bucketing.padded_rows(5, 6, devices=3) == 6  # capped at batch_size
    shapes = []
    record_batches(monkeypatch, translator, lambda inputs_BS: shapes.append(inputs_BS.shape))
    one = translator.translate(["It is late."], method="greedy")
    assert shapes == [(1, 16)]  # one row, not batch_size of them
    # the same result as inside a full batch
    assert translator.translate(["It is late."] + SHORT[:3], method="greedy")[0] == one[0]


def test_a_batch_stays_within_the_rows_the_prepared_weights_take(translator, monkeypatch):
    """Under the CPU set with packed weights, a decode step takes at most
    PACKED_ROWS_MAX rows: a beam batch is cut to PACKED_ROWS_MAX // beam sentences, and the
    outputs are those of batches that fit anyway. The stock set has no such limit."""
    from jformer.kernels import ops as cpu_ops
    from jformer.model.ops import STOCK

    if cpu_ops.PACKED_ROWS_MAX != translator.ops.cache.rows_max(translator.prepared):
        pytest.skip("the native kernels are not loaded: no packed weights")
    shapes = []
    record_batches(monkeypatch, translator, lambda inputs_BS: shapes.append(len(inputs_BS)))
    monkeypatch.setattr(cpu_ops, "PACKED_ROWS_MAX", 8)  # 2 sentences at beam 3 and 4
    sentences = ["It is late.", "Five.", "We need one car.", "The number is three."] * 2
    cut = translator.translate(sentences, beam_size=3, batch_size=8, return_scores=True)
    assert shapes and max(shapes) == 2
    shapes.clear()
    greedy = translator.translate(sentences, beam_size=1, batch_size=8)
    assert max(shapes) == 8  # one row per sentence: 8 rows fit
    monkeypatch.setattr(cpu_ops, "PACKED_ROWS_MAX", 128)
    whole = translator.translate(sentences, beam_size=3, batch_size=2, return_scores=True)
    assert [h.ids.tolist() for h in cut] == [h.ids.tolist() for h in whole]
    assert greedy == translator.translate(sentences, beam_size=1, batch_size=8)
    assert STOCK.cache.rows_max(translator.prepared) is None


@pytest.mark.slow  # compiles a program of its own; the default run checks the
# search on toy tables (tests/search/test_shrink.py)
def test_batches_drop_finished_sentences_and_translate_the_same(setup, translator):
    """With decode.shrink_floor=2 the Translator's beam batches of 4 go on with 2 as
    sentences finish: the same texts and ids as batches that keep every row (the default,
    0), scores to float32 rounding. (Greedy: slow tests in
    tests/inference/test_batch_decode.py.)"""
    sentences = SHORT[:2] + SHORT[3:]  # lengths vary; a padding row in the last batch
    got, default = {}, DECODE.shrink_floor
    assert SearchSpec(shrink_floor=default).stage_sizes(DECODE.batch_size) == ()
    staged = Translator(*setup, dataclasses.replace(DECODE, shrink_floor=2), chunk_size=CHUNK)
    for floor, tr in ((2, staged), (default, translator)):
        before = set(batch_decode._TRACES)
        got[floor] = tr.translate(sentences, beam_size=3, return_scores=True)
        if floor == 2:  # the program compiled for the batch of 4 runs in stages
            staged = [(shape, spec) for shape, spec in set(batch_decode._TRACES) - before
                      if shape[0] == DECODE.batch_size]
            assert len(staged) == 1 and staged[0][1].stage_sizes(DECODE.batch_size) == (2,)
    assert [h.ids.tolist() for h in got[2]] == [h.ids.tolist() for h in got[default]]
    np.testing.assert_allclose([h.score for h in got[2]], [h.score for h in got[default]],
                               rtol=1e-5, atol=1e-5)
    assert len({len(h.ids) for h in got[2]}) > 1  # sentences finish at different steps


def test_padding_rows_end_at_once_and_do_not_hold_back_the_early_exit(translator):
    cfg = translator.model_cfg
    spec = SearchSettings("greedy").spec(24, translator.chunk_size, DECODE.rules)  # bucket 16's
    inputs_BS = np.full((DECODE.batch_size, 16), cfg.pad_id, np.int32)
    inputs_BS[:, 0] = cfg.eos_id
    out = batch_decode.decode_batch(translator.params, translator.prepared, inputs_BS,
                                 np.zeros(DECODE.batch_size, bool), jax.random.key(0),
                                 model_cfg=cfg, ops=translator.ops, spec=spec)
    assert np.all(np.asarray(out.tokens)[:, 0, 0] == cfg.eos_id)
    assert int(out.num_steps) == CHUNK < spec.max_len  # one chunk, then the loop exits


def test_max_len_above_the_model_positions_is_capped_with_a_warning(translator):
    limit = translator.model_cfg.max_len
    with pytest.warns(UserWarning, match=f"max_len={limit + 10} is more than the model's "
                                         f"positions \\(model.max_len={limit}\\)"):
        capped = translator.translate(SHORT[:2], method="greedy", max_len=limit + 10,
                                      return_scores=True)
    at_limit = translator.translate(SHORT[:2], method="greedy", max_len=limit,
                                    return_scores=True)
    assert [h.text for h in capped] == [h.text for h in at_limit]


def test_empty_sentences_give_empty_translations_without_decoding(translator, monkeypatch):
    assert translator.translate(["", "   "]) == ["", ""]

    def fail(inputs_BS):
        raise AssertionError("no batch may be decoded for empty inputs")

    record_batches(monkeypatch, translator, fail)
    assert translator.translate(["", " "], n_best=2) == [[""], [""]]
    assert translator.translate([]) == []
    # Text the tokenizer drops entirely (a zero-width space, a stray BOM) is empty too,
    # not a translation of a bare EOS.
    invisible = ["\u200b", "\ufeff", "\u200b \u200b"]
    assert [len(ids) for ids in translator.tokenizer.encode(invisible, add_eos=True)] == [1] * 3
    assert translator.translate(invisible) == [""] * 3


def test_overlong_input_is_truncated_with_a_warning_or_rejected(setup, translator):
    cfg, params, tok = setup
    long_text = " ".join(["three hundred and forty-five"] * 12)
    assert len(tok.encode([long_text])[0]) > cfg.max_len
    with pytest.warns(UserWarning, match=r"sentence 1 has \d+ tokens"):
        ids = translator.encode_sources(["Five.", long_text])[1]
    assert len(ids) == cfg.max_len and ids[-1] == cfg.eos_id
    strict = Translator(cfg, params, tok, dataclasses.replace(DECODE, overlong="error"))
    with pytest.raises(ValueError, match=r"sentence 1 has \d+ tokens .*max_len=40"):
        strict.translate(["Five.", long_text])


def test_n_best_returns_sorted_hypotheses(translator):
    n_best = translator.translate(SHORT[:2], beam_size=3, n_best=3, return_scores=True)
    best = translator.translate(SHORT[:2], beam_size=3)
    for hyps, one in zip(n_best, best):
        assert len(hyps) == 3 and all(isinstance(h, Hypothesis) for h in hyps)
        # The search runs until all three finished, or max_len (24 in this bucket) cut
        # it off; a finished hypothesis ends with EOS.
        for h in hyps:
            assert h.finished == (h.ids[-1] == translator.model_cfg.eos_id)
            assert h.finished or len(h.ids) == 24
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert hyps[0].text == one
    assert all(h.finished for h in n_best[1])  # this one ends well within max_len
    assert [len(h) for h in translator.translate(SHORT[:2], beam_size=3, n_best=2)] == [2, 2]
    with pytest.raises(ValueError, match="n_best must be <= 3"):
        translator.translate(SHORT[:1], beam_size=3, n_best=4)


@pytest.mark.slow
def test_sampling_top_k_one_is_greedy_and_depends_on_the_key(translator):
    greedy = translator.translate(SHORT, method="greedy")
    assert translator.translate(SHORT, method="sample", top_k=1) == greedy
    key = jax.random.key(7)
    first = translator.translate(SHORT, method="sample", rng=key)
    assert translator.translate(SHORT, method="sample", rng=key) == first
    others = [translator.translate(SHORT, method="sample", rng=jax.random.key(s))
              for s in (1, 2)]
    assert any(o != first for o in others)


def test_a_sample_does_not_depend_on_the_rest_of_the_batch(translator):
    """Sentence i samples with fold_in(rng, i): batch size and bucketing do not change
    it, and the sentence alone with that key samples the same."""
    key = jax.random.key(5)
    sample = functools.partial(translator.translate, method="sample", temperature=3.0)
    together = sample(SHORT, rng=key)
    assert len(set(together)) > 1
    for batch_size in (1, 2, 3):
        assert sample(SHORT, rng=key, batch_size=batch_size) == together
    for i, sentence in enumerate(SHORT):
        alone = sample([sentence], rng=jax.random.fold_in(key, i)[None])  # keys [1]
        assert alone == [together[i]]
    # Raw PRNGKey data works as a key; a key array of the wrong length is named.
    assert sample(SHORT, rng=jax.random.key_data(key)) == together
    with pytest.raises(ValueError, match=rf"rng must be one key or keys \[{len(SHORT)}\]"):
        sample(SHORT, rng=jax.random.split(key, 2))


def test_bad_arguments_raise_value_error(setup, translator):
    cfg, params, tok = setup
    with pytest.raises(ValueError, match="method must be one of"):
        translator.translate(["Five."], method="nucleus")
    with pytest.raises(ValueError, match="sequence of str"):
        translator.translate("Five.")
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        translator.translate(["Five."], beam_size=0)
    with pytest.raises(ValueError, match="does not match the model config"):
        Translator(dataclasses.replace(cfg, vocab_size=cfg.vocab_size + 1), params, tok)


# ------------------------------------------------------------------ checkpoints


def test_restored_translator_equals_in_memory_one(tmp_path, setup, translator):
    cfg, params, tok = setup
    write_workdir(str(tmp_path / "run"), cfg, params, tok)
    restored = Translator.from_checkpoint(tmp_path / "run", chunk_size=CHUNK)
    assert restored.model_cfg == cfg and restored.decode_cfg == DECODE
    assert restored.translate(SHORT) == translator.translate(SHORT)
    wrong = from_config_dict({"model": dataclasses.asdict(
        dataclasses.replace(cfg, d_ff=48))}).model
    with pytest.raises(ValueError, match="d_ff|shape"):
        restore.check_params(wrong, params)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Translator.from_checkpoint(tmp_path / "run", checkpoint_dir=str(tmp_path / "none"))


# ------------------------------------------------------- decode-path speed-ups (exactness)


@pytest.mark.parametrize("vocab", [3, 50])
def test_two_stage_top_k_equals_one_top_k_over_all_extensions(vocab):
    rng = np.random.default_rng(vocab)
    ext_BWV = jnp.asarray(rng.integers(0, 4, (3, 4, vocab)).astype(np.float32))  # ties
    logp, parent, token = beam_candidates(ext_BWV, 8)  # the "cpu" set's two stages
    want_logp, flat = jax.lax.top_k(ext_BWV.reshape(3, 4 * vocab), 8)
    np.testing.assert_array_equal(logp, want_logp)
    np.testing.assert_array_equal(parent * vocab + token, flat)


@pytest.mark.slow
def test_slot_addressed_beam_cache_steps_equal_teacher_forcing(setup):
    # Hypotheses with different histories share each source's buffers; after every step
    # a random parent choice (repeats included) remaps the slot table. Each hypothesis'
    # logits must still be the teacher-forced logits of its own prefix.
    cfg, params, _ = setup
    model, rng = transformer(cfg), np.random.default_rng(3)
    batch, beams, steps = 2, 3, 6
    inputs_BS = rng.integers(4, cfg.vocab_size, (batch, 7)).astype(np.int32)
    inputs_BS[1, 4:] = cfg.pad_id
    cache = batch_decode.encode_and_init(model, params, inputs_BS, steps, beam_size=beams)
    step_fn, state = batch_decode.make_step_fn(model, params, cache)
    step, reorder = jax.jit(step_fn), jax.jit(model.ops.cache.reorder)
    teacher = jax.jit(model.apply)
    inputs_NS = np.repeat(inputs_BS, beams, axis=0)
    history_N = [[] for _ in range(batch * beams)]  # decoder inputs fed so far
    kept = np.ones(cfg.vocab_size, bool)
    kept[[cfg.pad_id, cfg.bos_id]] = False
    for t in range(steps):
        tokens_N = (np.full(batch * beams, cfg.bos_id) if t == 0 else
                    rng.integers(4, cfg.vocab_size, batch * beams)).astype(np.int32)
        for n in range(batch * beams):
            history_N[n].append(int(tokens_N[n]))
        logits_NV, state = step(jnp.asarray(tokens_N), jnp.int32(t), state)
        # Decoder input [BOS, y1, ..., yt] is teacher forcing of targets [y1, ..., yt, *].
        targets_NT = np.full((batch * beams, steps), 5, np.int32)
        for n, hist in enumerate(history_N):
            targets_NT[n, :t] = hist[1:]
        want_NTV = np.asarray(teacher({"params": params}, inputs_NS, targets_NT))
        np.testing.assert_allclose(np.asarray(logits_NV)[:, kept], want_NTV[:, t, kept],
                                   atol=1e-5, rtol=1e-5)
        parent_BW = rng.integers(0, beams, (batch, beams)).astype(np.int32)
        state = reorder(state, jnp.asarray(parent_BW))
        history_N = [list(history_N[b * beams + p]) for b in range(batch)
                     for p in parent_BW[b]]


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [2, 4])
def test_slot_addressed_beam_search_equals_reordering_the_rows(setup, beam_size):
    cfg, params, tok = setup
    model = transformer(cfg)
    inputs_BS = np.full((3, 16), cfg.pad_id, np.int32)
    for b, ids in enumerate(tok.encode_lists(SHORT[:2] + SHORT[3:4])):
        inputs_BS[b, :len(ids)] = ids
    spec = dict(batch_size=3, beam_size=beam_size, max_len=12, alpha=0.6,
                bos_id=cfg.bos_id, eos_id=cfg.eos_id, pad_id=cfg.pad_id)

    @functools.partial(jax.jit, static_argnums=0)
    def search(slots: bool):
        cache = batch_decode.encode_and_init(model, params, inputs_BS, 12,
                                          beam_size if slots else None)
        step_fn, state = batch_decode.make_step_fn(model, params, cache)
        return beam_search.beam_search(
            step_fn, state, reorder=model.ops.cache.reorder if slots else None, **spec)

    slot, rows = search(True), search(False)
    cache = batch_decode.encode_and_init(model, params, inputs_BS, 12, beam_size + 1)
    with pytest.raises(ValueError, match="init_decode_state's beam_size must be the search"):
        beam_search.beam_search(*batch_decode.make_step_fn(model, params, cache),
                                reorder=model.ops.cache.reorder, **spec)
    np.testing.assert_array_equal(slot.tokens, rows.tokens)
    np.testing.assert_array_equal(slot.lengths, rows.lengths)
    np.testing.assert_allclose(slot.scores, rows.scores, rtol=1e-5, atol=1e-5)
    assert len(set(np.asarray(rows.lengths).ravel().tolist())) > 1  # EOS at varied steps
