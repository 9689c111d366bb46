"""AG-UI threads in a §11 state (CONTRACT §21 "Durable"): the thread and handle map, the
open interrupt and the pending frontend calls are in the state, so a thread a process
started and left waiting on an approval is resumed, answered and finished by another
process; on SQLite, and on PostgreSQL where the tests have it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ag_ui.core")

import _agui_team as team  # noqa: E402
from _agui_team import body, check_run, user  # noqa: E402
from _durable_team import state  # noqa: E402,F401  (the fixture: a SQLite file, or PostgreSQL)
from toolnexus import agui  # noqa: E402

TEAM = Path(__file__).resolve().parent / "_agui_team.py"


def test_an_interrupt_one_process_left_is_resumed_and_finished_by_another(state: str) -> None:
    runtime_id = f"agui-{uuid.uuid4().hex[:10]}"
    done = subprocess.run(
        [sys.executable, str(TEAM), "first", state, runtime_id, "t1"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    check_run(first)
    asked = first[-1]["outcome"]["interrupts"][0]["id"]

    rt = team.runtime(state, runtime_id=runtime_id)  # another process's runtime: the first one is gone
    try:
        messages = [user("the Q3 report")]
        resume = [{"interruptId": asked, "status": "resolved", "payload": {"approved": True}}]
        second = list(agui.events(rt, body("t1", "run-2", messages, resume=resume), agent="assistant"))
        check_run(second)
        assert second[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["call-pick-1"]}
        with pytest.raises(agui.AGUIInputError) as again:
            agui.events(rt, body("t1", "run-3", messages, resume=resume), agent="assistant")
        assert again.value.status == 409
        answer = {"id": "tm-1", "role": "tool", "toolCallId": "call-pick-1", "content": "blue"}
        third = list(agui.events(rt, body("t1", "run-3", [*messages, answer]), agent="assistant"))
        check_run(third)
        assert third[-1]["result"] == "Done: publisher: published Q3; colour blue."
    finally:
        rt.release()


def test_a_frontend_call_one_process_left_is_answered_in_another(state: str, tmp_path: Any) -> None:
    runtime_id = f"agui-{uuid.uuid4().hex[:10]}"
    rt = team.runtime(state, runtime_id=runtime_id)
    messages = [user("the Q3 report")]
    try:
        first = list(agui.events(rt, body("t1", "run-1", messages), agent="assistant"))
        resume = [{"interruptId": first[-1]["outcome"]["interrupts"][0]["id"], "status": "resolved"}]
        list(agui.events(rt, body("t1", "run-2", messages, resume=resume), agent="assistant"))
    finally:
        rt.release()
    other = team.runtime(state, runtime_id=runtime_id)
    try:
        assert other.inspect(other.handles()[1].id).pending.kind == "frontend_tool"
        with pytest.raises(agui.AGUIInputError) as unanswered:
            agui.events(other, body("t1", "run-3", messages), agent="assistant")
        assert unanswered.value.status == 422 and "call-pick-1" in unanswered.value.reason
        answer = {"id": "tm-1", "role": "tool", "toolCallId": "call-pick-1", "content": "red"}
        third = list(agui.events(other, body("t1", "run-3", [*messages, answer]), agent="assistant"))
        assert third[-1]["result"] == "Done: publisher: published Q3; colour red."
    finally:
        other.release()
