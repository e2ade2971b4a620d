"""The dashboard's server over a real embedded chain and a real file store, with reports signed by
the validators' own keys, through Starlette's test client: what the pages are given, and what they
refuse. Hostile input: a `<script>` in a reason, a 10 kB hotkey, an oversize report, a forged
signature, an unreachable chain and an unreachable store."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient
from support.dashboard_run import entry, make_tiny_run

from distrai.chain.local import LocalChain
from distrai.chain.subtensor import SubtensorChain
from distrai.dashboard.live import Live
from distrai.dashboard.nodes import NodeMetrics
from distrai.dashboard.reading import RunReader, store_opener
from distrai.dashboard.records import TEXT_CHARS
from distrai.dashboard.server import create_app
from distrai.protocol.sync import StoreCache

SCRIPT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
LONG_HOTKEY = "5" + "F" * 10_240


def client_of(live: Live) -> TestClient:
    live.refresh()
    return TestClient(create_app(live))


def by_label(rows: list[dict]) -> dict[str, dict]:
    return {r["label"]: r for r in rows}


@pytest.fixture
def run(tmp_path):
    return make_tiny_run(tmp_path)


def publish_window(run, reason: str = "segment 1 (steps 15-30) replayed to another state") -> None:
    m0, m1 = (run.uid(m) for m in run.miners)
    hk0, hk1 = (m.hotkey.ss58_address for m in run.miners)
    numbers = {"update_bytes": 1000.0, "tokens": 30720.0, "quality": 1.0, "mark": 0.1, "mark_z": 4.0}
    run.publish_report(run.validators[0], 0, {hk0: entry(m0, 0.8, **numbers), hk1: entry(m1, 0.9, **numbers)})
    run.publish_report(
        run.validators[1],
        0,
        {
            hk0: entry(m0, 0.8, **numbers),
            hk1: entry(m1, reason=reason, update_bytes=1000.0, revealed_bytes=5e6),
        },
    )


def test_the_page_lists_every_miner_and_validator_with_the_signed_reason_of_a_rejection(run):
    publish_window(run)
    client = client_of(run.live())
    view = client.get("/api/run").json()
    miners, validators = by_label(view["miners"]), by_label(view["validators"])
    assert set(miners) == {"miner0", "miner1"} and set(validators) == {"validator0", "validator1"}
    assert view["banners"] == [] and view["problems"] == []
    assert (miners["miner0"]["rejected"], miners["miner1"]["rejected"]) == (0, 1)
    assert miners["miner1"]["last_rejection"] == "replay: segment 1 (steps 15-30) replayed to another state"
    assert miners["miner1"]["last_rejection_by"] == "validator1"
    assert miners["miner1"]["bytes_sent"] == 1000 + 5_000_000
    assert validators["validator0"]["checked"] == 2 and validators["validator0"]["windows_reported"] == 1
    assert [w["window"] for w in view["windows"]] == [0] and view["windows"][0]["reports"] == 2

    page = client.get(f"/api/miner/{run.miners[1].hotkey.ss58_address}").json()
    (window,) = page["windows"]
    rejected = [v for v in window["verdicts"] if not v["accepted"]]
    assert [v["validator_label"] for v in rejected] == ["validator1"]
    assert rejected[0]["explanation"].startswith("The “replay” check failed. It passes when the validator")
    assert "replay" in page["checks"]
    assert any("window 0, by validator1" in line for line in page["summary"])


def test_every_response_carries_a_strict_content_security_policy(run):
    client = client_of(run.live())
    for path in (
        "/",
        f"/miner/{run.miners[0].hotkey.ss58_address}",
        "/api/run",
        "/static/run.js",
        "/nowhere",
    ):
        headers = client.get(path).headers
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy, path
        assert "unsafe-inline" not in policy
        assert headers["x-content-type-options"] == "nosniff"
    assert client.get("/api/run").headers["cache-control"] == "no-store"


def test_a_script_in_a_reason_reaches_the_page_as_json_text_never_as_markup(run):
    publish_window(run, reason=SCRIPT)
    client = client_of(run.live())
    answer = client.get("/api/run")
    assert answer.headers["content-type"] == "application/json"
    assert by_label(answer.json()["miners"])["miner1"]["last_rejection"] == f"replay: {SCRIPT}"
    for path in ("/", f"/miner/{run.miners[1].hotkey.ss58_address}"):
        html = client.get(path).text
        assert "__pwned" not in html and "<script>" not in html
        assert '<script type="module" src="/static/' in html


def test_a_10_kb_hotkey_in_an_address_gets_a_short_escaped_not_found(run):
    client = client_of(run.live())
    answer = client.get(f"/miner/{LONG_HOTKEY}")
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html")
    assert len(answer.text) < 2_000 and "is not a hotkey" in answer.text and "Traceback" not in answer.text
    api = client.get(f"/api/miner/{LONG_HOTKEY}")
    assert api.status_code == 404 and "is not a hotkey" in api.json()["error"] and len(api.text) < 1_000
    markup = client.get("/miner/%3Cscript%3Ealert(1)%3Cb%3E")
    assert (
        markup.status_code == 404 and "<script>alert" not in markup.text and "&lt;script&gt;" in markup.text
    )
    unknown = client.get(f"/api/miner/{run.validators[0].coldkeypub.ss58_address}")
    assert unknown.status_code == 404 and "no miner has hotkey" in unknown.json()["error"]


def test_a_report_naming_a_10_kb_hotkey_is_not_shown_and_says_why_in_a_few_words(run):
    publish_window(run)
    body = {run.miners[0].hotkey.ss58_address: entry(run.uid(run.miners[0])), LONG_HOTKEY: entry(99)}
    run.publish_report(run.validators[0], 0, body)
    view = client_of(run.live()).get("/api/run").json()
    (problem,) = view["problems"]
    assert problem["who"] == "validator0" and problem["window"] == 0
    assert (
        problem["what"].startswith("its report is not shown") and "at most 64 characters" in problem["what"]
    )
    assert len(problem["what"]) <= TEXT_CHARS + 40
    assert view["windows"][0]["reports"] == 1
    assert LONG_HOTKEY not in json.dumps(view)


def test_oversize_and_forged_reports_are_refused_before_anything_in_them_is_shown(run):
    publish_window(run)
    cap = run.config.limits.max_report_bytes
    run.publish_report(run.validators[0], 0, {}, data=b"{" + b" " * cap + b"}")
    signed = run.report_body(
        run.validators[1], 0, {run.miners[0].hotkey.ss58_address: entry(0, reason=SCRIPT)}
    )
    forged = {"body": signed, "signer": run.validators[1].hotkey.ss58_address, "signature": "ab" * 64}
    run.publish_report(run.validators[1], 0, {}, data=json.dumps(forged).encode())
    view = client_of(run.live()).get("/api/run").json()
    problems = {p["who"]: p["what"] for p in view["problems"]}
    assert f"over the limit of {cap}" in problems["validator0"], problems
    assert "signature does not verify" in problems["validator1"], problems
    assert view["windows"][0]["reports"] == 0
    assert SCRIPT not in json.dumps(view)


@pytest.mark.parametrize("chain", ["missing file", "unreachable node"])
def test_an_unreachable_chain_is_a_banner_and_every_page_still_answers(run, tmp_path, chain):
    def open_chain():
        if chain == "missing file":
            return LocalChain(tmp_path / "no-such-chain.db", 1)
        return SubtensorChain("ws://127.0.0.1:1", 1)

    live = Live(RunReader(run.config, open_chain, StoreCache()), NodeMetrics([]), {})
    client = client_of(live)
    view = client.get("/api/run").json()
    assert len(view["banners"]) == 1 and view["banners"][0].startswith("the chain cannot be read:")
    assert ("NoChain" if chain == "missing file" else "ConnectionFailed") in view["banners"][0]
    assert view["miners"] == [] and view["block"] is None
    for path in ("/", "/api/run", f"/miner/{run.miners[0].hotkey.ss58_address}"):
        answer = client.get(path)
        assert answer.status_code == 200 and "Traceback" not in answer.text


def test_an_unreachable_store_is_a_banner_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    run = make_tiny_run(tmp_path, store_url="s3://bucket/run?endpoint=http://127.0.0.1:1&region=auto")
    reader = RunReader(run.config, lambda: LocalChain(run.harness.chain.path, 1), StoreCache(store_opener()))
    view = client_of(Live(reader, NodeMetrics([]), {})).get("/api/run").json()
    assert view["banners"] and all("cannot be read" in b for b in view["banners"]), view["banners"]
    assert "s3://bucket/run" in view["banners"][0]
    assert {m["label"] for m in view["miners"]} == {f"{m.hotkey.ss58_address[:8]}…" for m in run.miners}


def test_garbage_requests_get_plain_answers(run):
    client = client_of(run.live())
    assert client.post("/api/run").status_code == 405
    missing = client.get("/no/such/page")
    assert missing.status_code == 404 and "Not found" in missing.text
    assert client.get("/static/../../pyproject.toml").status_code == 404
    assert client.get("/api/run?window=<script>").status_code == 200


def test_a_new_window_shows_at_the_next_refresh(run):
    publish_window(run)
    live = run.live()
    client = client_of(live)
    assert [w["window"] for w in client.get("/api/run").json()["windows"]] == [0]
    bpw = run.config.windows.blocks_per_window
    run.harness.advance(bpw)
    run.publish_report(
        run.validators[0], 1, {run.miners[0].hotkey.ss58_address: entry(run.uid(run.miners[0]))}
    )
    live.refresh()
    windows = client.get("/api/run").json()["windows"]
    assert [w["window"] for w in windows] == [0, 1] and windows[1]["reports"] == 1
