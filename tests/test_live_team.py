"""examples/live_team under gunicorn with two worker processes on a SQLite state: a real
headless Chromium watches the team's text grow, clicks the approval and sees the answer;
an event stream that reconnects on the other worker gets every durable event once."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from _gunicorn import free_port, serving
from _services import missing

pytest.importorskip("flask")
pytest.importorskip("gunicorn")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "live_team"
#: The flags Chromium needs here: headless, no sandbox (root), and none of the background
#: connections a closed network refuses.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1200,1000")


def gunicorn(tmp_path: Path, *flags: str) -> Iterator[tuple[str, str]]:
    port = free_port()
    state = str(tmp_path / "runs.db")
    with serving(port, str(EXAMPLE), f"app:offline_app({state!r}, gap_s=0.05)", *flags):
        yield f"127.0.0.1:{port}", state


@pytest.fixture
def threaded(tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from gunicorn(tmp_path, "--threads", "4")


@pytest.fixture
def sync_workers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two single-threaded workers: while one streams to a client, the other takes the next."""
    yield from gunicorn(tmp_path)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        missing("headless Chromium is not installed: apt-get install -y chromium chromium-driver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing("selenium is not installed: pip install -e '.[test]'")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def text_of(driver: Any, handle_suffix: str) -> str:
    found = driver.execute_script(
        "const s = [...document.querySelectorAll('section.handle')].find(e => /" + handle_suffix + "$/.test(e.dataset.handle));"
        " return s ? s.querySelector('.text').textContent : '';"
    )
    return str(found or "")


def until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout}s")
        time.sleep(0.05)  # the page changes in another process: look again


def test_the_page_shows_two_teammates_text_growing_then_an_approval_then_the_answer(threaded: tuple[str, str], browser: Any, tmp_path: Path) -> None:
    address, _ = threaded
    browser.get(f"http://{address}/")
    browser.find_element("id", "go").click()
    grown = until(lambda: (text_of(browser, r"researcher\.\d+"), text_of(browser, r"writer\.\d+")) if all((text_of(browser, r"researcher\.\d+"), text_of(browser, r"writer\.\d+"))) else None, 20, "both teammates' text")
    assert browser.find_element("id", "final").text == ""  # the run has not ended yet
    until(lambda: browser.find_element("id", "ask").is_displayed(), 20, "the approval")
    assert "Publish the note" in browser.find_element("id", "question").text
    assert text_of(browser, r"researcher\.\d+").startswith("Fact one") and text_of(browser, r"writer\.\d+").startswith("toolnexus now streams")
    assert len(text_of(browser, r"writer\.\d+")) >= len(grown[1])
    browser.save_screenshot(str(tmp_path / "live_team.png"))
    browser.find_element("id", "approve").click()
    final = until(lambda: browser.find_element("id", "final").text, 20, "the final answer")
    assert final.startswith("done: Done: published 'toolnexus streams'"), final
    assert not browser.find_element("id", "ask").is_displayed()


def sse(address: str, path: str, last_event_id: str | None = None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", path, headers={"Last-Event-ID": last_event_id} if last_event_id else {})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    return conn, response


def frames(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """The events of an open event stream, as they come."""
    block: list[str] = []
    while True:
        line = response.readline()
        if not line:
            return
        text = line.decode().rstrip("\n")
        if text:
            block.append(text)
            continue
        fields = dict(entry.split(": ", 1) for entry in block if ": " in entry and not entry.startswith(":"))
        block = []
        if "data" in fields:
            yield json.loads(fields["data"])


def post(address: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    try:
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_an_event_stream_reconnecting_on_the_other_worker_gets_every_durable_event_once(sync_workers: tuple[str, str]) -> None:
    address, state = sync_workers
    status, started = post(address, "/runs", {"prompt": "a note"})
    assert status == 202
    events = f"/runs/{started['run']}/events"
    first_conn, first = sse(address, events)
    seen: list[dict[str, Any]] = []
    for event in frames(first):
        seen.append(event)
        if len([e for e in seen if e["kind"] != "text"]) >= 6:
            break
    # The first worker is busy streaming to the first connection: this one lands on the other.
    second_conn, second = sse(address, events, last_event_id=seen[-1]["id"])
    assert second.getheader("X-Served-By") != first.getheader("X-Served-By")
    first_conn.close()
    rest = list(frames(second))  # to the pending result
    second_conn.close()
    assert rest[-1]["kind"] == "result" and rest[-1]["data"]["status"] == "pending"
    request = next(e for e in rest if e["kind"] == "pending")["data"]["request"]
    assert post(address, f"/runs/{started['run']}/answer", {"id": request["id"], "ok": True})[0] == 202
    third_conn, third = sse(address, events, last_event_id=rest[-1]["id"])
    tail = list(frames(third))
    third_conn.close()
    assert tail[-1]["kind"] == "result" and tail[-1]["data"]["status"] == "done"

    received = [e["id"] for e in seen + rest + tail if e["kind"] != "text"]
    assert len(received) == len(set(received))  # none twice
    from toolnexus import Runtime

    sys.path.insert(0, str(EXAMPLE))
    try:
        from app import TEAM
    finally:
        sys.path.remove(str(EXAMPLE))
    with Runtime(TEAM, generate=lambda request: {"content": "unused"}, state=state) as rt:
        stored = [e.id for e in rt.stream(f"root/{started['run']}", after="0") if e.kind != "text"]
        stored += [e.id for e in rt.stream(f"root/{started['run']}", after=stored[-1]) if e.kind != "text"]
    assert received == stored  # every durable event, once, in order
    assert os.path.exists(state)
