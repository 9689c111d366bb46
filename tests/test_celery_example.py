"""examples/celery_team: the Flask app returns at once; a real Celery worker (a subprocess
on Redis) runs the turns on the shared PostgreSQL state; an answer resumes the run there."""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from test_celery import Workers

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "celery_team"


@pytest.fixture
def example(pg_url: str, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Workers]]:
    queue = f"toolnexus-{uuid.uuid4().hex[:10]}"
    settings = {"TOOLNEXUS_BROKER": redis_url, "TOOLNEXUS_STATE": pg_url, "TOOLNEXUS_QUEUE": queue, "TOOLNEXUS_RUNTIME_ID": queue}
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for module in ("team", "tasks", "web"):
        sys.modules.pop(module, None)
    web = importlib.import_module("web")
    workers = Workers({**settings, "TN_CELERY_QUEUE": queue}, tmp_path, app="tasks", cwd=EXAMPLE)
    app = web.create_app(authorize=lambda: "tester")
    yield app, workers
    workers.stop_all()
    app.extensions["toolnexus"].let_go(app)
    for module in ("team", "tasks", "web"):
        sys.modules.pop(module, None)


def test_a_run_is_accepted_at_once_asks_for_approval_and_finishes_after_the_answer(example):
    app, workers = example
    client = app.test_client()
    started = client.post("/runs", json={"prompt": "Please refund my order A-1001."})
    assert started.status_code == 202, started.get_json()
    run = started.get_json()["run"]
    assert client.get(f"/runs/{run}").get_json()["status"] == "running"

    workers.start(concurrency=2)
    pending = client.get(f"/runs/{run}?wait=20").get_json()
    assert pending["status"] == "pending", pending
    request = pending["pending"]
    top = pending["tree"][0]["id"]
    assert [h["id"] for h in pending["tree"]] == [top, f"{top}/billing.1"] and top.startswith("root/")

    assert client.post(f"/runs/{run}/answer", json={"id": "req_wrong", "ok": True}).status_code == 409
    accepted = client.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True})
    assert accepted.status_code == 202, accepted.get_json()

    done = client.get(f"/runs/{run}?wait=20").get_json()
    assert done["status"] == "done", done
    assert "refunded 19.90 EUR" in done["result"]["text"]
    assert client.get("/runs/nope.1").status_code == 404
