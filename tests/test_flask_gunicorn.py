"""examples/flask_approval.py under gunicorn with two worker processes: the runs live in the
state, so an answer lands on whichever worker takes it, even after the starting worker died."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from _gunicorn import free_port, serving

pytest.importorskip("flask")
pytest.importorskip("gunicorn")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], int]:
    """One HTTP exchange on a fresh connection: status, JSON body, serving worker's pid."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read()), int(response.headers["X-Served-By"])
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), int(error.headers.get("X-Served-By") or 0)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    port = free_port()
    state = str(tmp_path / "runs.db")
    with serving(port, str(EXAMPLES), f"flask_approval:offline_app({state!r})") as proc:
        yield f"http://127.0.0.1:{port}", proc


def test_answers_land_on_either_worker_and_every_run_finishes_once(server: Any) -> None:
    base, _ = server
    runs = 6
    with ThreadPoolExecutor(max_workers=runs) as pool:
        started = list(pool.map(lambda _: call(base, "POST", "/runs?wait=20", {"prompt": "Please refund my order"}), range(runs)))
    assert all(status == 200 and body["status"] == "pending" for status, body, _ in started), started
    ids = [body["run"] for _, body, _ in started]
    assert len(set(ids)) == runs  # distinct handles in the one stored tree
    starters = {body["run"]: pid for _, body, pid in started}

    # Kill the worker that started the first run: its answer must land on another process.
    victim = starters[ids[0]]
    os.kill(victim, signal.SIGKILL)

    def answer(item: tuple[int, dict[str, Any], int]) -> tuple[int, dict[str, Any], int]:
        _, body, _ = item
        status, accepted, pid = call(base, "POST", f"/runs/{body['run']}/answer", {"id": body["pending"]["id"], "ok": True})
        assert status == 202, accepted
        shown = call(base, "GET", f"/runs/{body['run']}?wait=20")  # the worker that took the answer runs the rest
        return shown[0], shown[1], pid

    with ThreadPoolExecutor(max_workers=runs) as pool:
        answered = list(pool.map(answer, started))
    for status, body, pid in answered:
        assert status == 200, body
        assert body["result"]["text"] == "Dear customer, refunded 19.90 EUR on order A-1001."
        assert pid != victim
    assert answered[0][2] != starters[ids[0]]

    for (_, body, _) in started:  # a second answer is refused by whichever worker gets it
        status, again, _ = call(base, "POST", f"/runs/{body['run']}/answer", {"id": body["pending"]["id"], "ok": True})
        assert status == 409, again
        status, shown, _ = call(base, "GET", f"/runs/{body['run']}")
        assert status == 200 and shown["status"] == "done"
