"""LibreTranslate's own clients, unmodified, against jformer on a live loopback server.

libretranslatepy (a form body per text) and deep-translator (the query string per text)
translate SENTENCES; the results must equal Translator.translate's. Then LibreTranslate's
documented requests (docs.libretranslate.com, "API Usage": simple, auto-detected,
HTML, alternatives; en -> de here) go through curl, as JSON and as a form. The server
asks for an API key (--api-keys): deep-translator will not run without one.
"""
import html
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

# The option's wiring through the CLI or the server; the option itself is tested in the
# default run (tests/inference, tests/search). Slow: CI's second run.
pytestmark = pytest.mark.slow

pytest.importorskip("uvicorn", reason="needs the serve extra: pip install -e '.[serve]'")
libretranslatepy = pytest.importorskip("libretranslatepy", reason="test extra")
deep_translator = pytest.importorskip("deep_translator", reason="test extra")

from deep_translator.exceptions import AuthorizationException, ServerException  # noqa: E402

from jformer.serve import ServeLimits, create_app  # noqa: E402
from jformer.serve.api_keys import ApiKeys  # noqa: E402
from jformer.serve.loading import describe  # noqa: E402
from tests.serve.conftest import SENTENCES, live_server  # noqa: E402

KEY = "3f1c2a9e-7b1d-4c55-9e0a-5d2b8c6f4e21"


@pytest.fixture(scope="module")
def base(translator):
    app = create_app(lambda: (translator, describe(translator, source_lang="en",
                                                   target_lang="de")),
                     ServeLimits(max_beam=4, max_wait_ms=2, warmup_buckets=0),
                     api_keys=ApiKeys([KEY]))
    with live_server(app) as url:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/v1/ready", timeout=5):
                    break
            except urllib.error.HTTPError:  # 503 while loading
                assert time.monotonic() < deadline, "the server did not become ready"
                time.sleep(0.05)
        yield url


def test_libretranslatepy(base, translator):
    api = libretranslatepy.LibreTranslateAPI(base, api_key=KEY)
    assert [api.translate(s, "en", "de") for s in SENTENCES] == translator.translate(SENTENCES)
    assert api.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                               {"code": "de", "name": "German", "targets": []}]
    assert api.detect(SENTENCES[0]) == [{"confidence": 0.0, "language": "en"}]
    for client, args, status, message in [
            (libretranslatepy.LibreTranslateAPI(base, api_key="wrong"), ("en", "de"), 403,
             "Invalid API key"),
            (libretranslatepy.LibreTranslateAPI(base), ("en", "de"), 403,
             "Please contact the server operator to get an API key"),
            (api, ("en", "fr"), 400, "fr is not supported")]:
        with pytest.raises(urllib.error.HTTPError) as caught:
            client.translate(SENTENCES[0], *args)
        assert caught.value.code == status
        assert json.loads(caught.value.read()) == {"error": message}
    assert api.translate(SENTENCES[1], "en", "de") == translator.translate(SENTENCES[1:2])[0]


def test_deep_translator(base, translator):
    client = deep_translator.LibreTranslator(source="en", target="de", api_key=KEY,
                                             custom_url=base + "/")
    assert client.translate_batch(SENTENCES) == translator.translate(SENTENCES)
    wrong = deep_translator.LibreTranslator(source="en", target="de", api_key="wrong",
                                            custom_url=base + "/")
    with pytest.raises(AuthorizationException):
        wrong.translate(SENTENCES[0])
    french = deep_translator.LibreTranslator(source="en", target="fr", api_key=KEY,
                                             custom_url=base + "/")
    with pytest.raises(ServerException):  # the server's 400: fr is not supported
        french.translate(SENTENCES[0])
    assert client.translate(SENTENCES[2]) == translator.translate(SENTENCES[2:3])[0]


def test_libretranslates_documented_requests_through_curl(base, translator):
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("needs curl")
    (hello,), (n_best,) = (translator.translate(["Hello!"]),
                           translator.translate(["Hello!"], beam_size=4, n_best=4))
    detected = {"confidence": 0.0, "language": "en"}
    docs = [  # docs.libretranslate.com/guides/api_usage, with this model's languages
        ({"q": "Hello!", "source": "en", "target": "de"}, {"translatedText": hello}),
        ({"q": "Hello!", "source": "auto", "target": "de"},
         {"translatedText": hello, "detectedLanguage": detected}),
        ({"q": '<p class="green">Hello!</p>', "source": "en", "target": "de",
          "format": "html"},
         {"translatedText": f'<p class="green">{html.escape(hello, quote=False)}</p>'}),
        ({"q": "Hello!", "source": "en", "target": "de", "format": "text", "alternatives": 3},
         {"translatedText": n_best[0],
          "alternatives": [h for i, h in enumerate(n_best[1:])
                           if h != n_best[0] and h not in n_best[1:i + 1]]}),
    ]
    for fields, answer in docs:
        fields = dict(fields, api_key=KEY)
        as_json = [curl, "-s", "-X", "POST", base + "/translate", "-H",
                   "Content-Type: application/json", "-d", json.dumps(fields)]
        as_form = [curl, "-s", "-X", "POST", base + "/translate"] + [
            arg for key, value in fields.items()
            for arg in ("--data-urlencode", f"{key}={value}")]
        for command in (as_json, as_form):
            out = subprocess.run(command, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout) == answer, command
    languages = subprocess.run([curl, "-s", base + "/languages"], capture_output=True,
                               text=True, timeout=60)
    assert json.loads(languages.stdout)[0] == {"code": "en", "name": "English",
                                               "targets": ["de"]}
