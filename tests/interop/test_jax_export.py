"""``jformer export jax``: the documented loader and the exported programs, against the Translator.

The model is the committed tiny workdir (tests/fixtures/legacy_workdir, 400 steps), the
sentences its 24 demo test sentences (13-42 tokens with EOS, so both buckets 32 and 64
are used) and an empty one. The Translator runs with the same buckets and batch size
and the run's own decode settings (beam 4, alpha 0.6, output length a * S + b).
"""
import dataclasses
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from jformer.config import EXACT_ALL
from jformer.data.sources import load_split
from jformer.inference import Translator
from jformer.interop import jax_export
from jformer.workdir import checkpoint, files
from tests.test_accelerator_lowering import PORTABLE_CUSTOM_CALLS, cpu_kernels, custom_calls

LEGACY = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy_workdir")
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "interop.md")
BUCKETS, ROWS = (32, 64), 8
# What the loader must run without: jformer and the training stack.
FORBIDDEN = ("jformer", "flax", "optax", "orbax", "ml_collections")


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    config = files.load_config(LEGACY)
    return [s for s, _ in load_split(config.data, "test")] + [""]


def translator_at(step=None) -> Translator:
    decode = dataclasses.replace(files.load_config(LEGACY).decode, batch_size=ROWS,
                                 length_buckets=BUCKETS)
    return Translator.from_checkpoint(LEGACY, step=step, decode_cfg=decode)


@pytest.fixture(scope="module")
def translator() -> Translator:
    return translator_at()


@pytest.fixture(scope="module")
def greedy_export(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("greedy") / "export"
    return jax_export.export_workdir(LEGACY, out, buckets=BUCKETS, batch_rows=ROWS,
                                     method="greedy")


def documented_loader() -> str:
    """The first Python block of docs/interop.md's "jax.export" section, verbatim."""
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("\n## jax.export\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_documented_loader(cwd, sentences: list[str]) -> list[str]:
    """Runs the loader in a fresh interpreter where importing jformer, Flax, Optax,
    Orbax or ml_collections fails; returns its translate(sentences)."""
    block = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in FORBIDDEN)
    check = (f"\nimport json as _json\n"
             f"_loaded = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} "
             f"and sys.modules[m] is not None]\n"
             f"assert not _loaded, _loaded\n"
             f"print('RESULT ' + _json.dumps(translate({json.dumps(sentences)})))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", block + documented_loader() + check],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def run_programs(directory: str, sources: list[np.ndarray], alpha: float,
                 params: dict | None = None, steer=None) -> list[tuple[np.ndarray, float, bool]]:
    """(tokens, score, finished) per source through the exported cpu programs, batched
    as the documented loader does; ``steer(rows, batch_rows)``: the steering arguments of
    a batch of these sources."""
    with open(os.path.join(directory, jax_export.MANIFEST)) as f:
        info = json.load(f)
    if params is None:
        params = dict(np.load(os.path.join(directory, jax_export.PARAMS)))
    programs = {s: jax.jit(p.call) for s, p in jax_export.load_programs(directory).items()}
    bucket = [min(s for s in programs if s >= len(x)) for x in sources]
    out: list = [None] * len(sources)
    for s, program in programs.items():
        todo = [i for i, b in enumerate(bucket) if b == s]
        for start in range(0, len(todo), info["batch_rows"]):
            rows = todo[start:start + info["batch_rows"]]
            x = np.full((info["batch_rows"], s), info["pad_id"], np.int32)
            for r, i in enumerate(rows):
                x[r, :len(sources[i])] = sources[i]
            extra = steer(rows, info["batch_rows"]) if steer else ()
            tokens, scores, finished = map(np.asarray, program(params, x, np.float32(alpha),
                                                               *extra))
            for r, i in enumerate(rows):
                out[i] = (tokens[r], float(scores[r]), bool(finished[r]))
    return out


def assert_same_hypotheses(ours: list[tuple], hyps: list, pad_id: int, eos_id: int) -> None:
    """Equal ids (then PAD), scores and finished flags. An empty source is not decoded
    by the Translator (no ids, score 0); its row in a program yields EOS at once."""
    for (tokens, score, finished), h in zip(ours, hyps, strict=True):
        if len(h.ids) == 0:
            assert (h.text, h.score, tokens[0], score) == ("", 0.0, eos_id, 0.0)
            assert (tokens[1:] == pad_id).all()
            continue
        n = len(h.ids)
        assert tokens[:n].tolist() == h.ids.tolist()
        assert (tokens[n:] == pad_id).all()
        np.testing.assert_allclose(score, h.score, rtol=1e-5, atol=1e-5)
        assert finished == h.finished


def sources_of(translator: Translator, sentences: list[str]) -> list[np.ndarray]:
    """What the loader feeds the programs: sentencepiece ids plus EOS."""
    eos = translator.model_cfg.eos_id
    return [np.append(x, eos).astype(np.int32)
            for x in translator.tokenizer.encode(sentences, add_eos=False)]


@pytest.mark.parametrize("method", ["beam", pytest.param("greedy", marks=pytest.mark.slow)])
def test_the_documented_loader_translates_as_the_translator(method, sentences, translator,
                                                            greedy_export, tmp_path):
    """The docs' snippet, verbatim, without jformer: Translator.translate's strings."""
    out = tmp_path / "runs" / "demo-jax"  # the directory the snippet names
    if method == "greedy":
        os.makedirs(out.parent)
        os.symlink(greedy_export, out)
    else:
        jax_export.export_workdir(LEGACY, out, buckets=BUCKETS, batch_rows=ROWS,
                                  method=method)
    want = translator.translate(sentences, method=method)
    assert sum(bool(t) for t in want) >= 20 and want[-1] == ""
    assert run_documented_loader(tmp_path, sentences) == want


# (export settings, Translator.translate arguments, the alpha the programs get)
HYPOTHESIS_CASES = {
    "greedy": (dict(method="greedy"), dict(method="greedy"), 0.0),
    # alpha is an argument: 1.0, not the 0.6 the export records
    "beam4_alpha1": (dict(method="beam", beam_size=4), dict(beam_size=4, alpha=1.0), 1.0),
    # beam 1 is greedy search with the beam's length-penalised score
    "beam1": (dict(method="beam", beam_size=1), dict(beam_size=1, alpha=0.6), 0.6),
    # a fixed output length, short enough to cut outputs
    "greedy_max_len12": (dict(method="greedy", max_len=12),
                         dict(method="greedy", max_len=12), 0.0),
}


@pytest.mark.parametrize("case", [
    "greedy", *(pytest.param(c, marks=pytest.mark.slow) for c in HYPOTHESIS_CASES
                if c != "greedy")])
def test_programs_give_the_translators_hypotheses(case, sentences, translator, greedy_export,
                                                  tmp_path):
    """Ids (then PAD), scores (1e-5) and finished flags equal the Translator's."""
    settings, translate_args, alpha = HYPOTHESIS_CASES[case]
    sources = sources_of(translator, sentences)
    assert [x.tolist() for x in sources[:-1]] == [
        x.tolist() for x in translator.encode_sources(sentences[:-1])]
    directory = greedy_export if case == "greedy" else jax_export.export_workdir(
        LEGACY, tmp_path / case, buckets=BUCKETS, batch_rows=ROWS, **settings)
    want = translator.translate(sentences, return_scores=True, **translate_args)
    if "max_len" in settings:
        assert sum(not h.finished for h in want) >= 5  # the cut is exercised
    cfg = translator.model_cfg
    assert_same_hypotheses(run_programs(directory, sources, alpha), want, cfg.pad_id,
                           cfg.eos_id)


def test_the_export_has_a_model_card(greedy_export):
    card = open(os.path.join(greedy_export, "README.md"), encoding="utf-8").read()
    assert "jax.export (greedy, platforms cpu)" in card and "step 400" in card


@pytest.mark.slow  # among the costliest default tests: CI's slow run keeps it
def test_parameters_are_an_argument_not_constants(sentences, greedy_export, tmp_path):
    """Programs exported from step 400 run step 200's parameters as the step-200
    Translator does; a program file is smaller than the parameters, while the same
    program with the parameters baked in is not (so the size check can fail)."""
    old = translator_at(step=200)
    params_200 = jax_export.flatten_params(
        checkpoint.restore_params(files.checkpoint_dir(LEGACY), 200))
    sources = sources_of(old, sentences)
    want = old.translate(sentences, method="greedy", return_scores=True)
    ours = run_programs(greedy_export, sources, 0.0, params=params_200)
    assert_same_hypotheses(ours, want, old.model_cfg.pad_id, old.model_cfg.eos_id)
    latest = run_programs(greedy_export, sources, 0.0)
    assert any(a[0].tolist() != b[0].tolist() for a, b in zip(ours, latest))

    params_bytes = os.path.getsize(os.path.join(greedy_export, jax_export.PARAMS))
    with open(os.path.join(greedy_export, jax_export.MANIFEST)) as f:
        programs = json.load(f)["programs"]["cpu"]
    sizes = [os.path.getsize(os.path.join(greedy_export, name)) for name in programs.values()]
    assert max(sizes) < params_bytes
    cfg = old.model_cfg
    settings = jax_export.ExportSettings(buckets=(32,), batch_rows=ROWS, method="greedy",
                                         rules=EXACT_ALL)
    program = jax_export.search_program(cfg, settings, 64)
    baked = jax.export.export(jax.jit(lambda x, a: program(params_200, x, a)))(
        jax.ShapeDtypeStruct((ROWS, 32), np.int32), jax.ShapeDtypeStruct((), np.float32))
    assert len(baked.serialize()) > params_bytes


def test_accelerator_programs_are_written_and_deserialize(tmp_path):
    """cuda and tpu lowered here (no device): files that deserialize for their platform,
    with the argument and result shapes the manifest states, and no CPU kernel inside."""
    out = jax_export.export_workdir(LEGACY, tmp_path / "acc", buckets=(16, 64), batch_rows=4,
                                    method="beam", beam_size=3,
                                    platforms=("cpu", "cuda", "tpu"))
    with open(os.path.join(out, jax_export.MANIFEST)) as f:
        info = json.load(f)
    assert info["ops"] == {"cpu": "cpu", "cuda": "plain", "tpu": "plain"}
    n_params = len(np.load(os.path.join(out, jax_export.PARAMS)).files)
    for platform in ("cpu", "cuda", "tpu"):
        programs = jax_export.load_programs(out, platform)
        assert sorted(programs) == [16, 64]
        for bucket, exp in programs.items():
            assert exp.platforms == (platform,)
            avals = exp.in_avals
            assert len(avals) == n_params + 2
            assert (avals[-2].shape, str(avals[-2].dtype)) == ((4, bucket), "int32")
            assert (avals[-1].shape, str(avals[-1].dtype)) == ((), "float32")
            t = info["max_output_len"][str(bucket)]
            assert [a.shape for a in exp.out_avals] == [(4, t), (4,), (4,)]
            text = exp.mlir_module()
            if platform == "cpu":
                assert "fast_top_k" in cpu_kernels(text), cpu_kernels(text)
            else:
                assert not cpu_kernels(text), cpu_kernels(text)
                assert "optimization_barrier" not in text
                assert custom_calls(text) <= PORTABLE_CUSTOM_CALLS, custom_calls(text)


def prefix_batch(prefixes: list, rows: list[int], batch_rows: int, width: int):
    """prefix_BP: int32 [batch_rows, width], each row's prefix ids, -1 past them."""
    out = np.full((batch_rows, width), -1, np.int32)
    for r, i in enumerate(rows):
        if prefixes[i] is not None:
            out[r, :len(prefixes[i])] = prefixes[i]
    return out


def phrase_batch(phrases: list, rows: list[int], batch_rows: int, count: int, width: int):
    """constraints_BCL: int32 [batch_rows, count, width], each row's phrases, -1 padding."""
    out = np.full((batch_rows, count, width), -1, np.int32)
    for r, i in enumerate(rows):
        for c, ids in enumerate(phrases[i] or ()):
            out[r, c, :len(ids)] = ids
    return out


PREFIXES = ["Es ist", None, "Die", "Ein Mann und"]  # every fourth sentence's, in turn
PHRASES = [["Hund"], None, ["rote", "Katze"], None, ["Musik"]]


# (export settings, Translator.translate arguments, steering arguments of a batch)
STEERED = {
    "prefix": (dict(prefix_len=8), dict(), lambda prefixes, phrases, rows, n: (
        prefix_batch(prefixes, rows, n, 8),)),
    "prefix_bias": (dict(prefix_len=8, prefix_bias=True), dict(prefix_bias_beta=0.4),
                    lambda prefixes, phrases, rows, n: (prefix_batch(prefixes, rows, n, 8),
                                                        np.float32(0.4))),
    "constraints": (dict(constraint_count=2, constraint_len=8), dict(),
                    lambda prefixes, phrases, rows, n: (phrase_batch(phrases, rows, n, 2, 8),)),
}


@pytest.mark.slow  # ~15 s a case: an export, its compilation and the Translator's
@pytest.mark.parametrize("case", list(STEERED))
def test_steered_programs_give_the_translators_hypotheses(case, sentences, translator,
                                                          tmp_path):
    """Exported with a steering argument, the programs give the Translator's hypotheses
    for the same target prefixes (forced or biased) or lexical constraints."""
    from jformer.inference.constraints import encode_constraints
    from jformer.inference.prefixes import encode_prefixes

    settings, translate_args, steer = STEERED[case]
    n = len(sentences)
    prefix_text = [None if i == n - 1 else PREFIXES[i % len(PREFIXES)] for i in range(n)]
    phrase_text = [None if i == n - 1 else PHRASES[i % len(PHRASES)] for i in range(n)]
    if case == "constraints":
        translate_args = dict(constraints=phrase_text)
    else:
        translate_args = dict(translate_args, target_prefix=prefix_text)
    directory = jax_export.export_workdir(LEGACY, tmp_path / case, buckets=BUCKETS,
                                          batch_rows=ROWS, method="beam", **settings)
    with open(os.path.join(directory, jax_export.MANIFEST)) as f:
        assert json.load(f)["call"].startswith(
            "program(params, inputs_BS, alpha, " + {"prefix": "prefix_BP)",
                                                    "prefix_bias": "prefix_BP, prefix_beta)",
                                                    "constraints": "constraints_BCL)"}[case])
    tok = translator.tokenizer
    prefixes = encode_prefixes(tok, prefix_text, n)
    phrases = encode_constraints(tok, phrase_text, n)
    want = translator.translate(sentences, return_scores=True, **translate_args)
    if case == "prefix":
        assert all(h.ids[:len(p)].tolist() == p.tolist()
                   for h, p in zip(want, prefixes) if p is not None)
    cfg = translator.model_cfg
    got = run_programs(directory, sources_of(translator, sentences), 0.6,
                       steer=lambda rows, b: steer(prefixes, phrases, rows, b))
    assert_same_hypotheses(got, want, cfg.pad_id, cfg.eos_id)


@pytest.mark.slow  # CI's slow run keeps it
def test_int8_programs_give_the_int8_translators_hypotheses(sentences, tmp_path):
    """``--dtype int8``: the programs quantize the float32 params inside (XLA's int8 dot,
    portable) and give the hypotheses of a Translator with decode.dtype="int8" that runs
    the same portable forms. The Translator's native kernels (int8 products equal to
    XLA's bit for bit, tests/kernels; attention and log-softmax equal to float32
    rounding) give the same tokens on these sentences; their scores may differ by a
    quantization step, where that rounding puts an activation across a boundary (an
    Intel Xeon with AMX: 1.2e-4 relative on one of them)."""
    directory = jax_export.export_workdir(LEGACY, tmp_path / "int8", buckets=BUCKETS,
                                          batch_rows=ROWS, method="greedy", dtype="int8")
    with open(os.path.join(directory, jax_export.MANIFEST)) as f:
        info = json.load(f)
    assert info["int8"] is True
    params = np.load(os.path.join(directory, jax_export.PARAMS))
    assert {params[k].dtype.name for k in params.files} == {"float32"}  # quantized inside
    text = jax_export.load_programs(directory)[BUCKETS[0]].mlir_module()
    assert re.search(r"dot_general.*xi8>.*xi8>.*-> tensor<[^>]*xi32>", text)
    decode_cfg = dataclasses.replace(files.load_config(LEGACY).decode, batch_size=ROWS,
                                     length_buckets=BUCKETS, dtype="int8")
    translator = Translator.from_checkpoint(LEGACY, decode_cfg=decode_cfg, portable=True)
    want = translator.translate(sentences, return_scores=True, method="greedy")
    cfg = translator.model_cfg
    got = run_programs(directory, sources_of(translator, sentences), 0.0)
    assert_same_hypotheses(got, want, cfg.pad_id, cfg.eos_id)
    native = Translator.from_checkpoint(LEGACY, decode_cfg=decode_cfg).translate(
        sentences, return_scores=True, method="greedy")
    assert [h.ids.tolist() for h in native] == [h.ids.tolist() for h in want]


@pytest.mark.slow  # CI's slow run keeps it
def test_shortlisted_programs_give_the_shortlisted_translators_hypotheses(sentences,
                                                                         tmp_path):
    """``--shortlist FILE``: the export holds the file and, beside the full-vocabulary
    programs, programs taking ``shortlist_C``. A batch whose list (the rule of
    jformer.inference.shortlist, padded with EOS to ``shortlist_size``) fits runs there,
    and gives the hypotheses of a Translator with that shortlist translating the same
    batch; its tokens all lie in the list."""
    from jformer.data.tokenizer import Tokenizer
    from jformer.inference import shortlist

    config = files.load_config(LEGACY)
    tok = Tokenizer.load(files.tokenizer_path(config.data, LEGACY))
    pairs = load_split(config.data, "train")[:2000]
    learned = shortlist.learn(zip(tok.encode([s for s, _ in pairs], add_eos=False),
                                  tok.encode([t for _, t in pairs], add_eos=False)),
                              config.model.vocab_size, top=2, frequent=10, exclude=[0])
    path = str(tmp_path / "list.npz")
    learned.save(path)
    size = 128  # the Translator's largest list for 400 pieces (below half of them)
    assert jax_export.default_shortlist_size(400) == size
    directory = jax_export.export_workdir(LEGACY, tmp_path / "short", buckets=BUCKETS,
                                          batch_rows=ROWS, method="greedy", shortlist=path)
    with open(os.path.join(directory, jax_export.MANIFEST)) as f:
        info = json.load(f)
    assert info["shortlist"]["size"] == size and info["call"].endswith(
        "alpha) -> (tokens_BT, scores_B, finished_B)")
    assert "shortlist_C" in info["shortlist"]["call"]
    assert shortlist.load(os.path.join(directory, jax_export.SHORTLIST)).top == 2
    translator = Translator.from_checkpoint(LEGACY, decode_cfg=dataclasses.replace(
        config.decode, batch_size=ROWS, length_buckets=BUCKETS, shortlist=path))
    eos, unk = info["eos_id"], info["unk_id"]
    full = jax_export.load_programs(directory)
    short = jax_export.load_programs(directory, shortlist=True)
    params = dict(np.load(os.path.join(directory, jax_export.PARAMS)))
    sources = sources_of(translator, sentences)
    bucket_of = [min(s for s in BUCKETS if s >= len(x)) for x in sources]
    used = 0
    for bucket in BUCKETS:  # as the documented loader batches: by bucket, in order
        todo = [i for i, b in enumerate(bucket_of) if b == bucket and len(sources[i]) > 1]
        for start in range(0, len(todo), ROWS):
            rows = todo[start:start + ROWS]
            x = np.full((ROWS, bucket), info["pad_id"], np.int32)
            for r, i in enumerate(rows):
                x[r, :len(sources[i])] = sources[i]
            ids = learned.batch_ids([sources[i] for i in rows], [eos, unk], eos)
            if ids is None:
                tokens, _, _ = full[bucket].call(params, x, np.float32(0.0))
            else:
                used += 1
                ids_C = np.concatenate([np.unique(ids), np.full(size, eos, np.int32)])[:size]
                tokens, _, _ = short[bucket].call(params, x, np.float32(0.0), ids_C)
                listed = set(ids_C.tolist()) | {info["pad_id"]}
                assert set(np.asarray(tokens)[:len(rows)].ravel().tolist()) <= listed
            # the same sentences in one Translator call: one batch, the same list
            want = translator.translate([sentences[i] for i in rows], method="greedy",
                                        return_scores=True)
            for r, h in enumerate(want):
                assert np.asarray(tokens)[r, :len(h.ids)].tolist() == h.ids.tolist()
    assert used >= 2  # the lists fit: the shortlisted programs ran
    with pytest.raises(ValueError, match="shortlist-size 400 is not below"):
        jax_export.export_workdir(LEGACY, tmp_path / "big", buckets=BUCKETS, shortlist=path,
                                  shortlist_size=400)
    with pytest.raises(FileNotFoundError, match="shortlist not found"):
        jax_export.export_workdir(LEGACY, tmp_path / "none", buckets=BUCKETS,
                                  shortlist=str(tmp_path / "missing.npz"))
