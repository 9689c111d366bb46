"""examples/live_team under gunicorn with two worker processes on a SQLite state: a real
headless Chromium watches the team's text grow, clicks the approval and sees the answer;
an event stream that reconnects on the other worker gets every durable event once."""

from __future__ import annotations

import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import pytest

from _browser import chromium
from _gunicorn import free_port, serving

pytest.importorskip("flask")
pytest.importorskip("gunicorn")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "live_team"
def gunicorn(directory: Path, *flags: str, delay_s: float = 0.0) -> Iterator[tuple[str, str]]:
    port = free_port()
    state = str(directory / "runs.db")
    with serving(port, str(EXAMPLE), f"app:offline_app({state!r}, gap_s=0.05, delay_s={delay_s})", *flags):
        yield f"127.0.0.1:{port}", state


@pytest.fixture(scope="module")
def threaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The documented ``gunicorn -w 2 --threads 4``; each model reply takes a moment, so a
    run is running for a second or so before it asks for the approval."""
    yield from gunicorn(tmp_path_factory.mktemp("threaded"), "--threads", "4", delay_s=0.3)


@pytest.fixture
def sync_workers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two single-threaded workers: while one streams to a client, the other takes the next."""
    yield from gunicorn(tmp_path)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def text_of(driver: Any, handle_suffix: str) -> str:
    found = driver.execute_script(
        "const s = [...document.querySelectorAll('section.handle')].find(e => /"
        + handle_suffix
        + "$/.test(e.dataset.handle));"
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


def test_the_page_shows_two_teammates_text_growing_then_an_approval_then_the_answer(
    threaded: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    address, _ = threaded
    browser.get(f"http://{address}/")
    browser.find_element("id", "go").click()
    grown = until(
        lambda: (text_of(browser, r"researcher\.\d+"), text_of(browser, r"writer\.\d+"))
        if all((text_of(browser, r"researcher\.\d+"), text_of(browser, r"writer\.\d+")))
        else None,
        20,
        "both teammates' text",
    )
    assert browser.find_element("id", "final").text == ""  # the run has not ended yet
    until(lambda: browser.find_element("id", "ask").is_displayed(), 20, "the approval")
    assert "Publish the note" in browser.find_element("id", "question").text
    assert text_of(browser, r"researcher\.\d+").startswith("Fact one") and text_of(browser, r"writer\.\d+").startswith(
        "toolnexus now streams"
    )
    assert len(text_of(browser, r"writer\.\d+")) >= len(grown[1])
    browser.save_screenshot(str(tmp_path / "live_team.png"))
    browser.find_element("id", "approve").click()
    final = until(lambda: browser.find_element("id", "final").text, 20, "the final answer")
    assert final.startswith("done: Done: published 'toolnexus streams'"), final
    assert not browser.find_element("id", "ask").is_displayed()


class Visitor:
    """A browser as the server sees it: the cookie ``/`` gave it goes with every request
    (``cookie=False``: a client that never loaded the page)."""

    def __init__(self, address: str, *, cookie: bool = True) -> None:
        self.host, port = address.split(":")
        self.port = int(port)
        self.cookie = ""
        if cookie:
            status, headers, _ = self.request("GET", "/")
            assert status == 200
            self.cookie = headers["Set-Cookie"].split(";", 1)[0]
            assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]

    def connect(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        sent = {**({"Cookie": self.cookie} if self.cookie else {}), **(headers or {})}
        conn.request(method, path, body, sent)
        return conn, conn.getresponse()

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        data = json.dumps(body).encode() if body is not None else None
        kind = {"Content-Type": "application/json"} if body is not None else {}
        conn, response = self.connect(method, path, data, {**kind, **(headers or {})})
        try:
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def post(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        status, _, data = self.request("POST", path, body)
        return status, json.loads(data)

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        status, _, data = self.request("GET", path)
        return status, json.loads(data)

    def sse(
        self, path: str, last_event_id: str | None = None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn, response = self.connect("GET", path, headers={"Last-Event-ID": last_event_id} if last_event_id else {})
        assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream", response.status
        return conn, response

    def stream(self, path: str, last_event_id: str | None = None) -> tuple[int, list[dict[str, Any]]]:
        """A whole event stream: its status and events, read to their end."""
        status, events, _ = self.stream_with_headers(path, last_event_id)
        return status, events

    def stream_with_headers(
        self, path: str, last_event_id: str | None = None
    ) -> tuple[int, list[dict[str, Any]], dict[str, str]]:
        conn, response = self.connect("GET", path, headers={"Last-Event-ID": last_event_id} if last_event_id else {})
        try:
            return (
                response.status,
                list(frames(response)) if response.status == 200 else [],
                dict(response.getheaders()),
            )
        finally:
            conn.close()

    def start(self) -> str:
        status, started = self.post("/runs", {"prompt": "a note"})
        assert status == 202, started
        return str(started["run"])

    def pending(self, run: str) -> dict[str, Any]:
        status, shown = self.get(f"/runs/{run}?wait=20")
        assert status == 200 and shown["status"] == "pending", shown
        return dict(shown["pending"])


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


def test_an_event_stream_reconnecting_on_the_other_worker_gets_every_durable_event_once(
    sync_workers: tuple[str, str],
) -> None:
    address, state = sync_workers
    visitor = Visitor(address)
    run = visitor.start()
    events = f"/runs/{run}/events"
    first_conn, first = visitor.sse(events)
    seen: list[dict[str, Any]] = []
    for event in frames(first):
        seen.append(event)
        if len([e for e in seen if e["kind"] != "text"]) >= 6:
            break
    # The first worker is busy streaming to the first connection: this one lands on the other.
    second_conn, second = visitor.sse(events, last_event_id=seen[-1]["id"])
    assert second.getheader("X-Served-By") != first.getheader("X-Served-By")
    first_conn.close()
    rest = list(frames(second))  # to the pending result, where the stream ends
    second_conn.close()
    assert rest[-1]["kind"] == "result" and rest[-1]["data"]["status"] == "pending"
    request = next(e for e in rest if e["kind"] == "pending")["data"]["request"]
    assert visitor.post(f"/runs/{run}/answer", {"id": request["id"], "ok": True})[0] == 202
    third_conn, third = visitor.sse(events, last_event_id=rest[-1]["id"])
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
    top = next(e["handle"] for e in seen if e["handle"].count("/") == 1)
    with Runtime(TEAM, generate=lambda request: {"content": "unused"}, state=state) as rt:
        stored = [e.id for e in rt.stream(top, after="0") if e.kind != "text"]
        stored += [e.id for e in rt.stream(top, after=stored[-1]) if e.kind != "text"]
    assert received == stored  # every durable event, once, in order
    assert os.path.exists(state)


def in_thread(call: Any) -> Any:
    """``call`` on a daemon thread; the returned function waits for its value, or fails the
    test after ``timeout`` seconds (a stream that never ends must not hang the suite)."""
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(value=call()), daemon=True)
    thread.start()

    def outcome(timeout: float) -> Any:
        thread.join(timeout)
        if "value" not in box:
            pytest.fail(f"a stream did not end within {timeout}s")
        return box["value"]

    return outcome


def timed(call: Any) -> tuple[float, Any]:
    began = time.monotonic()
    value = call()
    return time.monotonic() - began, value


def test_ten_waiting_tabs_and_eight_hostile_streams_leave_the_page_and_the_approval_answering_within_a_second(
    threaded: tuple[str, str],
) -> None:
    address, _ = threaded
    visitor, stranger, anonymous = Visitor(address), Visitor(address), Visitor(address, cookie=False)
    runs = [visitor.start() for _ in range(10)]
    requests = {run: visitor.pending(run) for run in runs}  # every run waits on a person now
    last = {}
    for run in runs:  # a waiting run's stream replays its turn to the pending result, and ends
        status, events = visitor.stream(f"/runs/{run}/events")
        assert status == 200 and events[-1]["kind"] == "result" and events[-1]["data"]["status"] == "pending"
        last[run] = events[-1]["id"]

    tabs = [(visitor, f"/runs/{run}/events", last[run] if n % 2 else None) for n, run in enumerate(runs)]
    hostile = [(anonymous, f"/runs/{runs[n]}/events", None) for n in range(3)]
    hostile += [(stranger, f"/runs/{runs[n]}/events", last[runs[n]]) for n in range(3)]
    hostile += [(visitor, f"/runs/{runs[n]}/events", "900000000") for n in range(2)]  # past the end
    streams = [
        in_thread(lambda who=who, path=path, after=after: who.stream_with_headers(path, after))
        for who, path, after in tabs + hostile
    ]
    page_s, page = timed(lambda: anonymous.request("GET", "/"))
    click_s, click = timed(lambda: visitor.post(f"/runs/{runs[0]}/answer", {"id": requests[runs[0]]["id"], "ok": True}))
    ended = [outcome(20) for outcome in streams]  # every stream ends by itself
    assert page[0] == 200 and page_s < 1.0, page_s
    assert click[0] == 202 and click_s < 1.0, (click, click_s)
    assert [status for status, _, _ in ended[len(tabs) : len(tabs) + 6]] == [401] * 3 + [404] * 3
    for n, (status, events, headers) in enumerate(ended[: len(tabs)]):
        if status == 503:  # over the cap of this worker: the page tries again when Retry-After says
            assert int(headers["Retry-After"]) > 0
            status, events = visitor.stream(*tabs[n][1:])
        assert status == 200
        if n % 2 == 0 and runs[n] != runs[0]:
            assert events[-1]["kind"] == "result" and events[-1]["data"]["status"] == "pending"
        elif n % 2:
            assert events == []  # it came back after the last event: nothing new, and it ended

    status, shown = visitor.get(f"/runs/{runs[0]}?wait=20")
    assert status == 200 and shown["status"] == "done", shown
    status, replay = visitor.stream(f"/runs/{runs[0]}/events")  # a finished run: its last turn, then the end
    assert status == 200 and replay[-1]["kind"] == "result" and replay[-1]["data"]["status"] == "done"
    assert visitor.stream(f"/runs/{runs[0]}/events", replay[-1]["id"]) == (200, [])
    for run in runs[1:]:
        assert visitor.get(f"/runs/{run}")[1]["status"] == "pending"  # the strangers changed nothing


def test_over_the_stream_cap_a_stream_is_refused_503_with_retry_after_and_a_slot_comes_back(
    threaded: tuple[str, str],
) -> None:
    address, _ = threaded
    visitor = Visitor(address)
    runs = [visitor.start() for _ in range(6)]  # each runs a second or so before it asks
    opened = [visitor.connect("GET", f"/runs/{run}/events") for run in runs]
    try:
        statuses = [response.status for _, response in opened]
        refused = [response for _, response in opened if response.status == 503]
        assert refused and statuses.count(200) <= 4, statuses  # two streams per worker process, two workers
        assert all(int(response.getheader("Retry-After")) > 0 for response in refused)
        page_s, page = timed(lambda: visitor.request("GET", "/"))
        assert page[0] == 200 and page_s < 1.0, page_s
        for _, response in opened:
            if response.status == 200:
                assert list(frames(response))[-1]["data"]["status"] == "pending"  # it ended at the approval
    finally:
        for conn, _ in opened:
            conn.close()
    for run in runs:  # every slot came back: each worker streams again
        visitor.pending(run)
        assert visitor.stream(f"/runs/{run}/events")[0] == 200


def test_a_last_event_id_that_is_no_id_is_400_before_any_frame(threaded: tuple[str, str]) -> None:
    address, _ = threaded
    visitor = Visitor(address)
    run = visitor.start()
    for after in ["9" * 5000, str(2**63), "-1", "12; DROP", "1.99999999999999999999"]:
        status, headers, body = visitor.request("GET", f"/runs/{run}/events", headers={"Last-Event-ID": after})
        assert status == 400 and headers["Content-Type"] == "application/json" and b"not an event id" in body, (
            after[:30],
            status,
        )
        status, _, _ = visitor.request("GET", f"/runs/{run}/events?after={urllib.parse.quote(after[:1000])}")
        assert status == 400
