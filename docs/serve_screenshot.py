"""Makes docs/serve_page.png: the page of `jformer serve` after a translation.

    python docs/serve_screenshot.py [--workdir runs/demo] [--out docs/serve_page.png]

Starts the server on a free loopback port, types two lines into the page in headless
Chromium (Debian's chromium and chromium-driver, selenium), presses Translate, waits
for the heatmap, and saves the window as a palette PNG (a few tens of KB).
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = "The meeting is on Thursday, June 26, 1962.\nFive red apples cost ten euros."


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default=os.path.join(REPO, "runs", "demo"))
    p.add_argument("--out", default=os.path.join(REPO, "docs", "serve_page.png"))
    args = p.parse_args()
    from PIL import Image
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=REPO)
    server = subprocess.Popen([sys.executable, "-m", "jformer", "serve", "--workdir",
                               args.workdir, "--port", str(port), "--warmup-buckets", "0",
                               "--log-level", "warning", "--no-access-log"], env=env)
    base = f"http://127.0.0.1:{port}"
    options = Options()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,860",
                 "--hide-scrollbars"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(base + "/v1/ready", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        driver.get(base + "/")
        wait = WebDriverWait(driver, 300)
        wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())
        driver.find_element(By.ID, "source").send_keys(TEXT)
        driver.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap .cell"))
        driver.execute_script("document.getElementById('meta').textContent = ''")
        image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
        image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(args.out,
                                                                       optimize=True)
        print(f"{args.out}: {os.path.getsize(args.out) // 1024} KiB")
    finally:
        driver.quit()
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
