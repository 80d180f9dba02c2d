"""Serving a workdir whose decode.overlong is "split" (the default for new runs; the
shared serve fixture uses "truncate"): a line longer than model.max_len is split and
translated as ``Translator.translate`` translates it, not truncated nor refused."""
import dataclasses
import json
import shutil
import warnings

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the TestClient needs httpx (test extra)")

with warnings.catch_warnings():  # starlette >= 1.10 would rather have httpx2
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient  # noqa: E402

from jformer.inference import OverlongError, Translator  # noqa: E402
from jformer.serve import ServeLimits, create_app  # noqa: E402
from jformer.serve.loading import ModelSource  # noqa: E402
from tests.serve.conftest import WORKDIR  # noqa: E402
from tests.serve.test_app import wait_ready  # noqa: E402

# Two sentences of the demo corpus, five times: 90 pieces, over the fixture's max_len 64.
LONG_LINE = " ".join(["I see a big dog.", "Five red apples cost ten euros."] * 5)


@pytest.fixture(scope="module")
def split_workdir(tmp_path_factory):
    """The legacy fixture with decode.overlong "split" (and short outputs) in config.json."""
    workdir = tmp_path_factory.mktemp("split") / "run"
    shutil.copytree(WORKDIR, workdir)
    path = workdir / "config.json"
    config = json.loads(path.read_text())
    config["decode"].update(overlong="split", batch_size=4, beam_size=2, max_len_b=16)
    path.write_text(json.dumps(config, indent=1))
    return str(workdir)


def test_a_line_over_max_len_is_split_and_translated_as_the_translator_does(split_workdir):
    direct = Translator.from_checkpoint(split_workdir)
    assert direct.decode_cfg.overlong == "split"
    pieces = len(direct.tokenizer.encode([LONG_LINE], add_eos=True)[0])
    assert pieces > direct.model_cfg.max_len == 64, pieces  # really overlong
    strict = Translator(direct.model_cfg, direct.params, direct.tokenizer,
                        dataclasses.replace(direct.decode_cfg, overlong="error"))
    with pytest.raises(OverlongError):
        strict.translate([LONG_LINE])
    expected = direct.translate([LONG_LINE])
    assert len(expected[0].split()) > 10  # both halves translated, not one truncated piece

    limits = ServeLimits(max_body_bytes=4096, max_sentences=8, max_chars=1000, max_beam=4,
                         max_wait_ms=2, max_queue=16, timeout_s=120, warmup_buckets=0)
    with TestClient(create_app(ModelSource(split_workdir).load, limits)) as client:
        wait_ready(client)
        response = client.post("/v1/translate", json={"q": [LONG_LINE, "I see a big dog."]})
        assert response.status_code == 200, response.text
        assert response.json()["translations"] == expected + direct.translate(
            ["I see a big dog."])


def test_served_in_slots_a_split_line_and_others_translate_the_same(split_workdir):
    """jformer serve --continuous (ModelSource.continuous): the model's beam requests go
    through the Translator's slots (each device its own: a side-by-side placement), split
    pieces too, and answer what the batches answer."""
    direct = Translator.from_checkpoint(split_workdir)
    lines = [LONG_LINE, "I see a big dog.", "Five red apples cost ten euros."]
    expected = direct.translate(lines)
    translator, _ = ModelSource(split_workdir, continuous=True).load()
    assert translator.decode_cfg.continuous and translator.placement.rows_multiple == 1
    limits = ServeLimits(max_body_bytes=4096, max_sentences=8, max_chars=1000, max_beam=4,
                         max_wait_ms=2, max_queue=16, timeout_s=120, warmup_buckets=0)
    with TestClient(create_app(ModelSource(split_workdir, continuous=True).load,
                               limits)) as client:
        wait_ready(client)
        response = client.post("/v1/translate", json={"q": lines})
        assert response.status_code == 200, response.text
        assert response.json()["translations"] == expected
        held = [d for d in client.app.state.jformer.translator._slot_decoders.values()]
        assert held  # the request decoded in slots
