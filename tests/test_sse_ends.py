"""``toolnexus.sse.stream`` never waits for a person (CONTRACT §16 "Resumed turns and streams
that end"): it ends after the result, and as soon as the handle rests with every event
after ``last_event_id`` sent; a ``last_event_id`` no store can hold is refused before the
first frame. ``Runtime.stream`` keeps waiting for the next turn, as before, unless it is
asked to end at rest (``end_at_rest=True``, what ``sse`` uses)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

import _stream_team as team
from conftest import run_in_thread
from toolnexus import Runtime, ToolnexusError, make_answer
from toolnexus import sse

HANG = 10.0


@pytest.fixture(params=["memory", "sqlite"])
def rt(request: pytest.FixtureRequest, cleanup: Any, tmp_path: Any) -> Runtime:
    state = {"state": str(tmp_path / "runs.db")} if request.param == "sqlite" else {}
    return cleanup.runtime(team.registry(), generate=team.model(), **state)


def frames(rt: Runtime, handle: str, last_event_id: str | None = None) -> list[dict[str, Any]]:
    """Every frame of the stream, read to its end (which must come: a hang fails the test);
    a keep-alive is a ``{"keep-alive": True}`` frame."""
    chunks = run_in_thread(lambda: list(sse.stream(rt, handle, last_event_id=last_event_id, heartbeat_s=0.05)), HANG)
    parsed = []
    for chunk in chunks:
        text = chunk.decode()
        if text.startswith(":"):
            parsed.append({"keep-alive": True})
            continue
        fields = dict(line.split(": ", 1) for line in text.strip().splitlines())
        parsed.append({"id": fields["id"], "event": fields["event"], "data": json.loads(fields["data"])["data"]})
    return parsed


def pending_run(rt: Runtime) -> tuple[str, list[dict[str, Any]]]:
    handle = rt.spawn(rt.root, "boss")
    rt.wake(handle, "go")
    rt.wait(handle, HANG)
    return handle.id, frames(rt, handle.id)


def test_a_waiting_runs_stream_replays_its_turn_to_the_pending_result_and_ends(rt: Runtime) -> None:
    handle, seen = pending_run(rt)
    assert seen[0]["event"] == "state" and seen[-1]["event"] == "result" and seen[-1]["data"]["status"] == "pending"
    assert not any("keep-alive" in frame for frame in seen)


def test_a_reconnect_to_a_waiting_run_ends_at_once_with_nothing_after_the_last_id(rt: Runtime) -> None:
    handle, seen = pending_run(rt)
    assert frames(rt, handle, seen[-1]["id"]) == []  # no keep-alive either: it ends
    middle = seen[len(seen) // 2]["id"]
    again = frames(rt, handle, middle)
    assert [frame["id"] for frame in again] == [frame["id"] for frame in seen if int(frame["id"]) > int(middle)]


def test_a_reconnect_past_the_end_ends_at_once(rt: Runtime) -> None:
    handle, _ = pending_run(rt)
    assert frames(rt, handle, "900000000") == []


def test_after_the_answer_the_stream_follows_the_resumed_run_to_its_result(rt: Runtime) -> None:
    handle, seen = pending_run(rt)
    request = rt.inspect(handle).pending
    rt.resume(make_answer(request.id, True))
    rest = frames(rt, handle, seen[-1]["id"])
    assert rest[-1]["event"] == "result" and rest[-1]["data"]["status"] == "done"
    assert min(int(frame["id"].split(".")[0]) for frame in rest) >= int(seen[-1]["id"])


def test_a_finished_runs_stream_replays_its_last_turn_and_ends(rt: Runtime) -> None:
    handle = rt.spawn(rt.root, "worker")
    rt.wake(handle, "once")
    assert rt.wait(handle, HANG).text == "did once"
    seen = frames(rt, handle.id)  # idle now: its last turn, then the end (no wait for a next turn)
    assert [frame["event"] for frame in seen] == ["state", "message", "state", "result"]
    assert frames(rt, handle.id, seen[-1]["id"]) == []


def test_a_run_that_never_ran_ends_with_nothing(rt: Runtime) -> None:
    handle = rt.spawn(rt.root, "worker")
    assert frames(rt, handle.id) == []


def test_a_running_runs_stream_keeps_alive_until_its_result(cleanup: Any) -> None:
    rt, handle, gate = team.running_slow(cleanup, HANG)
    threading.Timer(0.3, gate.set).start()
    seen = frames(rt, handle.id)
    assert any("keep-alive" in frame for frame in seen)  # it was running: the stream waited for it
    assert seen[-1]["event"] == "result" and seen[-1]["data"]["status"] == "done"


def test_a_cursor_past_the_trees_end_on_a_running_run_ends_once_the_run_rests(cleanup: Any) -> None:
    rt, handle, gate = team.running_slow(cleanup, HANG)
    threading.Timer(0.3, gate.set).start()
    assert [frame for frame in frames(rt, handle.id, "900000000") if "keep-alive" not in frame] == []


def test_runtime_stream_still_waits_for_the_next_turn(rt: Runtime) -> None:
    handle = rt.spawn(rt.root, "worker")
    stream = rt.stream(handle)
    threading.Timer(0.05, lambda: rt.wake(handle, "later")).start()
    assert run_in_thread(lambda: [e.kind for e in stream], HANG)[-1] == "result"


def pending_elsewhere(cleanup: Any, tmp_path: Any) -> tuple[Runtime, Runtime, str]:
    """Two runtimes on one state, as two worker processes; the first one's run waits on a person."""
    state = str(tmp_path / "shared.db")
    asking = cleanup.runtime(team.registry(), generate=team.model(), state=state, runtime_id="t")
    watching = cleanup.runtime(team.registry(), generate=team.model(), state=state, runtime_id="t")
    handle = asking.spawn(asking.root, "boss")
    asking.wake(handle, "go")
    assert asking.wait(handle, HANG).status == "pending"
    return asking, watching, handle.id


def test_a_run_that_rests_in_another_process_ends_the_stream_here(cleanup: Any, tmp_path: Any) -> None:
    _, watching, handle = pending_elsewhere(cleanup, tmp_path)
    seen = frames(watching, handle)
    assert seen[-1]["event"] == "result" and seen[-1]["data"]["status"] == "pending"
    assert frames(watching, handle, seen[-1]["id"]) == []


def test_a_finished_run_replays_the_turn_another_process_ran_last(cleanup: Any, tmp_path: Any) -> None:
    asking, watching, handle = pending_elsewhere(cleanup, tmp_path)
    assert frames(watching, handle)[-1]["data"]["status"] == "pending"  # this process has seen that turn
    asking.resume(make_answer(asking.inspect(handle).pending.id, True))
    assert asking.wait(handle, HANG).status == "done"
    replay = frames(watching, handle)  # the turn the other process ran, not the one seen here
    assert replay[0]["event"] == "state" and replay[-1]["data"]["status"] == "done"


@pytest.mark.parametrize("bad", ["9" * 5000, str(2**63), "9" * 19, "-1", "1.x", "12; DROP", "1." + "9" * 19, "", "."])
def test_an_id_no_store_can_hold_is_refused_before_the_first_frame(rt: Runtime, bad: str) -> None:
    handle = rt.spawn(rt.root, "worker")
    with pytest.raises(ToolnexusError, match="not an event id"):
        sse.stream(rt, handle, last_event_id=bad)


def test_the_largest_id_a_store_holds_is_taken(rt: Runtime) -> None:
    handle = rt.spawn(rt.root, "worker")
    assert frames(rt, handle.id, "9" * 18) == []


def test_runtime_stream_that_ends_at_rest_ends_at_a_pending_result(rt: Runtime) -> None:
    handle, seen = pending_run(rt)
    events = run_in_thread(lambda: list(rt.stream(handle, end_at_rest=True)), HANG)
    assert [event.id for event in events] == [frame["id"] for frame in seen]
    assert run_in_thread(lambda: list(rt.stream(handle, after=seen[-1]["id"], end_at_rest=True)), HANG) == []


def test_runtime_stream_that_ends_at_rest_ends_for_an_idle_handle_without_a_next_turn(rt: Runtime) -> None:
    handle = rt.spawn(rt.root, "worker")
    stream = rt.stream(handle, end_at_rest=True)
    assert run_in_thread(lambda: list(stream), HANG) == [] and stream.result is None
