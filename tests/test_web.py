"""The live denoising page in real headless Chromium: run a prompt, watch intermediate canvases with
masked cells, and get the same final text as the API."""
from __future__ import annotations

import os

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.serve import ServerConfig, create_app
from test_serve import ThreadedServer, post, tiny_checkpoint

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is absent (Debian package chromium; .ci/run installs it)", allow_module_level=True)
_pw = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
# expect() rather than page.wait_for_function("..."): a string predicate that fails its first check is
# polled with eval() inside the page, which the page's CSP (default-src 'self') refuses
sync_playwright, expect = _pw.sync_playwright, _pw.expect


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model on a shared 2-core machine: threads cost more than they give
    model, tok, _ = load_checkpoint(tiny_checkpoint(tmp_path_factory.mktemp("web")))
    engine = Engine(model, tok)
    with ThreadedServer(create_app(engine, "tiny")) as url:
        yield url, engine
    torch.set_num_threads(n)


def test_page_shows_denoising_and_final_text(served, tmp_path):
    url, engine = served
    prompt, params = "hello", {"threshold": 0.9, "block_len": 8, "max_tokens": 16}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1100})
            page.goto(url + "/")
            expect(page.locator("#model")).to_contain_text("tiny")
            page.fill("#prompt", prompt)
            page.fill("#threshold", str(params["threshold"]))
            page.fill("#block-len", str(params["block_len"]))
            page.fill("#max-tokens", str(params["max_tokens"]))
            page.fill("#delay", "5")
            page.click("#run")
            page.wait_for_selector('#final-text[data-state="done"]', timeout=60_000)
            final = page.text_content("#final-text")
            steps = int(page.get_attribute("#canvas", "data-steps"))
            masked_steps = int(page.get_attribute("#canvas", "data-masked-steps"))
            trace_rows = page.locator("#trace .trace-row").count()
            tpf = float(page.text_content("#stat-tpf"))
            assert page.is_hidden("#error")
            page.screenshot(path=str(tmp_path / "web.png"), full_page=True)
        finally:
            browser.close()
    # the random model commits one token per step: 2 blocks x 8 steps, all but each block's last with masks
    assert steps == trace_rows == 16
    assert masked_steps == 14
    # 16 denoising steps; block 0's commit is fused into block 1's first step (DecodeConfig.fused_commit)
    assert tpf == pytest.approx(16 / 16, abs=0.01)
    status, body = post(url, "/v1/completions", {"model": "tiny", "prompt": prompt, **params})
    assert status == 200 and final == body["choices"][0]["text"]
    cfg = DecodeConfig(max_new_tokens=params["max_tokens"], threshold=params["threshold"], block_len=params["block_len"])
    assert final == engine.generate(prompt, cfg)[0].text and len(final) == 16


def test_page_with_an_api_key(served, tmp_path):
    """A server started with --api-key: the page takes the key from its URL fragment (/#key=...), and
    without it says so instead of failing obscurely."""
    _, engine = served
    app = create_app(engine, "tiny", config=ServerConfig(api_key="k3y"))
    with ThreadedServer(app) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(url + "/")
            page.wait_for_selector("#error:not([hidden])")
            assert "needs an API key" in page.text_content("#error")
            page.goto(url + "/#key=k3y")
            page.reload()
            expect(page.locator("#model")).to_contain_text("tiny")
            page.fill("#prompt", "hi")
            page.fill("#max-tokens", "4")
            page.fill("#delay", "0")
            page.click("#run")
            page.wait_for_selector('#final-text[data-state="done"]', timeout=60_000)
            assert page.is_hidden("#error")
        finally:
            browser.close()


def test_page_on_an_autoregressive_server_says_so(tmp_path):
    """An AR (or canvas) server has no denoising steps: the page names its decoder, points to the API and
    offers no run, instead of failing with a 400 on every click."""
    from pathlib import Path

    from orl.engine.ar import ARDecoder

    model, tok, manifest = load_checkpoint(Path(__file__).resolve().parents[1] / "checkpoints" / "orl-tiny-ar")
    with ThreadedServer(create_app(ARDecoder(model, tok, manifest=manifest), "ar")) as url:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page()
                page.goto(url + "/")
                page.wait_for_selector("#error:not([hidden])", timeout=30_000)
                assert "autoregressive decoder has no denoising steps" in page.text_content("#error")
                assert page.is_disabled("#run")
            finally:
                browser.close()
