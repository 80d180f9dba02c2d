"""The web page in a real headless Chromium (Debian's chromium + chromium-driver, selenium).

Types a sentence, presses Translate, reads the translation and the heatmap cells from
the page and checks them against Translator.translate and attention_weights; switches
to one head; saves a screenshot in the test's temp dir. Skipped, saying what is
missing, without chromium, chromedriver or selenium (.ci/run installs them).
"""
import shutil

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("selenium", reason="needs the browser extra: pip install -e '.[browser]'")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("needs Chromium and its driver: apt-get install chromium chromium-driver",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from jformer.data.alignments import to_moses  # noqa: E402
from jformer.inference.attention_maps import attention_weights  # noqa: E402
from jformer.serve import ServeLimits, create_app  # noqa: E402
from jformer.serve.loading import describe  # noqa: E402
from tests.serve.conftest import SENTENCES, live_server  # noqa: E402


@pytest.fixture
def server(translator):
    """The app under uvicorn in a thread of this process (it shares compiled programs)."""
    app = create_app(lambda: (translator, describe(translator, step=400, source_lang="en",
                                                   target_lang="de")),
                     ServeLimits(warmup_buckets=0, max_wait_ms=2))
    with live_server(app) as url:
        yield url


@pytest.fixture
def browser():
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1200,900", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def cell_weights(driver, rows, cols):
    """The heatmap's weights [rows, cols] as the page drew them (data-weight)."""
    got = np.full((rows, cols), np.nan)
    cells = driver.execute_script(
        "return [...document.querySelectorAll('#heatmap .cell')].map(c => "
        "[+c.dataset.row, +c.dataset.col, +c.dataset.weight])")
    for r, c, w in cells:
        got[r, c] = w
    return got


def test_type_translate_and_read_the_translation_and_heatmap(server, browser, translator,
                                                            tmp_path):
    sentence = SENTENCES[0]
    wait = WebDriverWait(browser, 120)
    browser.get(server + "/")
    wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
    assert "en → de" in browser.find_element(By.ID, "languages").text
    assert browser.find_element(By.ID, "beam-size").get_attribute("value") == "2"

    browser.find_element(By.ID, "source").send_keys(sentence)
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "result").text.strip() != "")
    assert browser.find_element(By.ID, "result").text == translator.translate([sentence])[0]

    weights, labels = attention_weights(translator, sentence)
    rows, cols = len(labels["output"]), len(labels["source"])
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#heatmap .cell")) == rows * cols)
    read = lambda kind: [e.text for e in browser.find_elements(  # noqa: E731
        By.CSS_SELECTOR, f"#heatmap text.{kind}")]
    assert read("row-label") == labels["output"]
    assert read("col-label") == labels["source"]
    last = weights[("decoder", translator.model_cfg.num_decoder_layers - 1, "cross_attention")]
    # The default view: the last layer, mean of heads.
    np.testing.assert_allclose(cell_weights(browser, rows, cols), last.mean(0), atol=2e-4)

    Select(browser.find_element(By.ID, "att-head")).select_by_visible_text("head 2")
    np.testing.assert_allclose(cell_weights(browser, rows, cols), last[1], atol=2e-4)
    assert not browser.find_element(By.ID, "error").is_displayed()

    # Nothing came from elsewhere (offline page), and no script errors.
    origins = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
    assert set(origins) <= {server}
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    shot = tmp_path / "serve_page.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")


@pytest.mark.slow  # ~10 s; /v1/translate/stream itself: tests/serve/test_streaming_api.py
def test_stream_shows_each_lines_translation_as_it_is_decoded(server, browser, translator):
    lines = [SENTENCES[1], SENTENCES[0]]
    wait = WebDriverWait(browser, 120)
    browser.get(server + "/")
    wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
    Select(browser.find_element(By.ID, "method")).select_by_value("greedy")
    browser.find_element(By.ID, "stream").click()
    browser.find_element(By.ID, "source").send_keys(lines[0] + "\n" + lines[1])
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: "streamed" in d.find_element(By.ID, "meta").text)
    want = translator.translate(lines, method="greedy")
    assert browser.find_element(By.ID, "result").text == "\n".join(want)
    assert "first text" in browser.find_element(By.ID, "meta").text
    assert not browser.find_element(By.ID, "error").is_displayed()
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


@pytest.mark.slow  # ~10 s; the options themselves: tests/serve/test_*_api.py
def test_steer_with_a_prefix_terms_and_alignments(server, browser, translator):
    lines = [SENTENCES[0], SENTENCES[3]]
    wait = WebDriverWait(browser, 120)
    browser.get(server + "/")
    wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
    browser.find_element(By.ID, "source").send_keys("\n".join(lines))
    browser.find_element(By.CSS_SELECTOR, "#steer summary").click()
    browser.find_element(By.ID, "prefix").send_keys("Wir")  # line 1's; line 2 has none
    browser.find_element(By.ID, "terms").send_keys("Auto")
    browser.find_element(By.ID, "align").click()
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "details").is_displayed()
               or d.find_element(By.ID, "error").is_displayed())
    assert not browser.find_element(By.ID, "error").is_displayed(), \
        browser.find_element(By.ID, "error").text
    want = translator.translate(lines, beam_size=2, target_prefix=["Wir", None],
                                constraints=[["Auto"], ["Auto"]], return_alignments=True)
    got = browser.find_element(By.ID, "result").text.split("\n")
    assert got == [h.text for h in want]
    assert got[0].startswith("Wir") and all("Auto" in text for text in got)
    items = browser.find_elements(By.CSS_SELECTOR, "#details li")
    assert [(float(i.get_attribute("data-score")), i.get_attribute("data-alignment"))
            for i in items] == [(pytest.approx(h.score, abs=1e-4), to_moses(h.alignment))
                                for h in want]
    assert not browser.find_element(By.ID, "error").is_displayed()

    # A prefix on a line the source does not have, and a stream with terms: errors that
    # name the field, shown on the page (once the call, attention included, is over).
    wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
    browser.find_element(By.ID, "prefix").send_keys("\n\nDas")
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "target prefix: line 3 has a prefix but the source has 2 line(s)" in \
        browser.find_element(By.ID, "error").text
    wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
    browser.find_element(By.ID, "prefix").clear()
    browser.find_element(By.ID, "align").click()
    browser.find_element(By.ID, "stream").click()
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: "constraints" in d.find_element(By.ID, "error").text)
    assert "422: constraints: not supported by /v1/translate/stream" in \
        browser.find_element(By.ID, "error").text
    # No script error: the one severe entry is the browser logging that refused request.
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert [(e["source"], "/v1/translate/stream" in e["message"] and "422" in e["message"])
            for e in severe] == [("network", True)], severe
