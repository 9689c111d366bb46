"""The stream events' tables in a state (CONTRACT §11, §16): a schema-2 store written
without them gains them when it is opened, and its runtime log is still read."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from conftest import run_in_thread
from toolnexus import AgentDef, Runtime

REGISTRY = {"greeter": AgentDef("greeter", "Greets")}


def greet(request: dict) -> dict:
    return {"content": "hello"}


def test_a_store_without_the_stream_tables_gains_them_and_keeps_its_log(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    with Runtime(REGISTRY, generate=greet, model="m", state=path, runtime_id="old") as rt:
        rt.run_agent("greeter", "hi")
    with sqlite3.connect(path) as db:  # as a store written before the stream tables were
        db.execute("DROP TABLE tn_stream")
        db.execute("DROP TABLE tn_stream_serials")
        db.execute("INSERT INTO tn_events (runtime_id, handle_id, body, at) VALUES (?, ?, ?, ?)", ("old", "root/greeter.1", json.dumps({"event": "older", "handle": "root/greeter.1"}), time.time()))
    with Runtime(REGISTRY, generate=greet, model="m", state=path, runtime_id="old") as rt:
        with rt.stream_agent("greeter", "hi again") as stream:
            kinds = run_in_thread(lambda: [event.kind for event in stream], 10.0)
        log = rt.events()
    assert stream.result.status == "done" and kinds[-1] == "result"
    assert log[0]["event"] == "older" and len(log) > 1  # the older table's rows first, then the new ones
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM tn_stream WHERE runtime_id = 'old' AND kind = 'result'").fetchone()[0] == 1
