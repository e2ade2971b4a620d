"""The dashboard in a real browser (Debian's chromium, driven by Playwright).

The first test serves `distrai dashboard` as its own process over the session's local network with a
cheating miner (`support.findings_net`, shared with the findings test) and checks the rendered
pages: the held-out loss chart has points, the miners table lists every miner, the page updates
without a reload, and the cheater's own page shows the reason from the validator's signed report.
It saves screenshots. The second serves a hand-made run whose report carries a `<script>` in a
reason, and checks that the script shows as text and never runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import uvicorn
from playwright.sync_api import Browser, sync_playwright
from support.dashboard_run import entry, make_tiny_run
from support.findings_net import ADVERSARY, WINDOWS

from distrai.dashboard.server import create_app
from distrai.localnet.network import REPO
from distrai.localnet.view import signed_reports
from distrai.node.wallets import open_wallet

pytestmark = pytest.mark.e2e  # drives a browser

CHROMIUM = os.environ.get("DISTRAI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCRIPT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), (
        f"no chromium at {CHROMIUM}: apt-get install chromium (or set DISTRAI_CHROMIUM)"
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):
        return {}


def wait_for(
    condition, timeout: float, what: str, process: subprocess.Popen | None = None, detail=lambda: ""
):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None:
            break
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}; {detail()}")


def on_page(page, condition, what: str) -> None:
    """Wait for `condition` about the page, checked from here: the page's policy forbids the string
    evaluation Playwright's own waiting would need."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"the page never showed {what}")
        page.wait_for_timeout(250)


def test_the_dashboard_of_a_local_network_shows_the_loss_every_miner_and_the_cheaters_reason(
    findings_net, browser: Browser, tmp_path
):
    assert findings_net.finished, "the network did not finish its windows"
    net = findings_net.net
    port = free_port()
    log = tmp_path / "dashboard.log"
    command = [
        sys.executable, "-m", "distrai.cli", "dashboard", "--port", str(port), "--refresh", "1",
        "--run.config", str(net.options.run_config), "--subtensor.network", "embedded",
        "--chain.path", str(net.work / "chain.db"), "--metrics", str(net.work / "nodes"),
        "--wallet.path", str(net.wallet_path),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        names = [n.name for n in net.neurons if n.role == "miner"]
        first = net.started_block // net.config.windows.blocks_per_window
        reports = signed_reports(net, list(range(first, first + 3 * WINDOWS)))
        windows = len({r.window for r in reports})

        def ready() -> bool:
            view = get_json(f"{url}/api/run")
            return len(view.get("heldout", [])) > windows and {
                m["label"] for m in view.get("miners", [])
            } == set(names)

        wait_for(
            ready,
            180,
            "the dashboard to read the network and its held-out losses",
            process,
            lambda: f"banners {get_json(f'{url}/api/run').get('banners')}; log: {log.read_text()[-3000:]}",
        )
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url)
        points = page.locator("#loss-chart circle.point")
        on_page(page, lambda: points.count() > windows, "the held-out loss chart's points")
        rows = page.locator("#miners tbody tr")
        assert rows.count() == len(names)
        table = page.locator("#miners").inner_text()
        assert all(name in table for name in names), table
        block = page.locator("#summary .card").first.inner_text()
        on_page(
            page, lambda: page.locator("#summary .card").first.inner_text() != block, "the next block, live"
        )
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)

        cheater = open_wallet(f"adversary-{ADVERSARY}", "default", str(net.wallet_path)).hotkey.ss58_address
        reasons = [r.miners[cheater].reason for r in reports if cheater in r.miners]
        reason = next(r for r in reasons if r and r.startswith("replay"))
        page.get_by_role("link", name=f"adversary-{ADVERSARY}").click()
        page.wait_for_url(f"{url}/miner/{cheater}")
        page.get_by_text(f"Reason: {reason}").first.wait_for(timeout=WAIT_MS)
        assert "rejected" in page.locator("#windows").inner_text()
        page.screenshot(path=str(tmp_path / "miner.png"), full_page=True)
        assert errors == []
        print(f"screenshots: {tmp_path / 'dashboard.png'}, {tmp_path / 'miner.png'}")
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture
def hostile_server(tmp_path):
    """The dashboard, in this process, over a run whose reports carry a script in a reason."""
    run = make_tiny_run(tmp_path)
    m0, m1 = run.miners
    run.publish_report(
        run.validators[0],
        0,
        {
            m0.hotkey.ss58_address: entry(run.uid(m0)),
            m1.hotkey.ss58_address: entry(run.uid(m1), reason=SCRIPT),
        },
    )
    live = run.live()
    live.refresh()
    server = uvicorn.Server(
        uvicorn.Config(create_app(live), host="127.0.0.1", port=free_port(), log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the server to start")
    yield f"http://127.0.0.1:{server.config.port}", m1.hotkey.ss58_address
    server.should_exit = True
    thread.join(30)


def test_a_script_in_a_reason_shows_as_text_and_never_runs(hostile_server, browser: Browser):
    url, victim = hostile_server
    page = browser.new_page()
    page.goto(url)
    page.locator("#miners").get_by_text(SCRIPT, exact=False).wait_for(timeout=WAIT_MS)
    page.goto(f"{url}/miner/{victim}")
    page.get_by_text(f"Reason: replay: {SCRIPT}").wait_for(timeout=WAIT_MS)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#windows img, #windows script").count() == 0

    answer = page.goto(f"{url}/miner/5{'F' * 10_240}")
    assert answer.status == 404
    assert page.locator("h1").inner_text() == "Not found"
    assert "is not a hotkey" in page.locator("p.note").inner_text()
