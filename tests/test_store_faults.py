"""A failed commit ends the run, it never hangs it (CONTRACT §11 "Crash safety, tightened"):
the disk fills, the state file is deleted, replaced or corrupted while a turn runs. The run
returns ``error`` within seconds, the verb raises ``StateError``, no thread of the runtime
dies, and once the fault is cleared the turn is recovered and finishes."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import run_in_thread
from toolnexus import AgentDef, Runtime, StateError, Tool
from toolnexus.state import SQLiteState
from toolnexus.testing import ScriptedModel, tool_messages

FAST = 5.0  # "within seconds", for a loaded 2-core machine


class Held:
    """The ``hold`` tool: blocks until the test lets it go, so a fault can land mid-turn."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.runs = 0

    def tool(self) -> Tool:
        def hold(args: dict[str, Any], ctx: Any) -> Any:
            self.runs += 1
            self.started.set()
            self.go.wait(30)
            return "held"

        return Tool("hold", "holds", None, hold)


def holding_runtime(path: Path, held: Held, **options: Any) -> Runtime:
    def model(request: dict[str, Any]) -> dict[str, Any]:
        return {"content": "finished"} if tool_messages(request) else {"tool_calls": [{"id": "c1", "name": "hold", "arguments": {}}]}

    registry = {"a": AgentDef("a", "holds", model="m", tools=[held.tool()])}
    return Runtime(registry, generate=ScriptedModel({"m": model}), state=str(path), lease=0.6, **options)


def heartbeats_alive() -> bool:
    return any(thread.name == "toolnexus-heartbeat" and thread.is_alive() for thread in threading.enumerate())


def counting_beats(rt: Runtime) -> Callable[[int], bool]:
    """Count the heartbeats ``rt`` tries from now on; the result waits (up to 10 s) until
    that many were tried, failed ones included."""
    rows = rt._ownership._rows
    beat = rows.heartbeat
    tried = threading.Condition()
    count = [0]

    def counted(owner: str) -> None:
        try:
            beat(owner)
        finally:
            with tried:
                count[0] += 1
                tried.notify_all()

    rows.heartbeat = counted  # type: ignore[method-assign]

    def wait_for(n: int) -> bool:
        with tried:
            return tried.wait_for(lambda: count[0] >= n, timeout=10)

    return wait_for


def fault_mid_turn(path: Path, fault: Callable[[], None]) -> tuple[Runtime, Held, BaseException | None, float]:
    """Start ``run_agent`` on a held tool, apply ``fault``, let the tool go: the runtime,
    the tool, what ``run_agent`` raised and how long it took after the tool went."""
    held = Held()
    rt = holding_runtime(path, held)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            rt.run_agent("a", "hold on")
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            box["error"] = exc

    thread = threading.Thread(target=run, name="test-run", daemon=True)
    thread.start()
    assert held.started.wait(10)
    fault()
    went = time.monotonic()
    held.go.set()
    thread.join(30)
    assert not thread.is_alive(), "run_agent hung after the store failed"
    return rt, held, box.get("error"), time.monotonic() - went


def test_a_state_file_deleted_while_a_turn_runs_ends_the_run_with_state_error(tmp_path):
    path = tmp_path / "state.db"
    aside = tmp_path / "aside"
    aside.mkdir()

    def delete() -> None:  # moved away: for the runtime the file at its path is gone
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{path}{suffix}").exists():
                os.rename(f"{path}{suffix}", aside / f"state.db{suffix}")

    rt, held, error, took = fault_mid_turn(path, delete)
    try:
        assert isinstance(error, StateError) and "deleted" in str(error) and str(path) in str(error)
        assert took < FAST
        assert heartbeats_alive()
        with pytest.raises(StateError):
            rt.spawn(rt.root, "a")  # every verb says so, nothing silently goes to a second tree
    finally:
        rt.release()
    for suffix in ("", "-wal", "-shm"):  # the fault cleared: the file is back
        if (aside / f"state.db{suffix}").exists():
            os.rename(aside / f"state.db{suffix}", f"{path}{suffix}")
    recovered = holding_runtime(path, held)
    try:
        assert run_in_thread(lambda: recovered.wait("root/a.1", timeout=20), timeout=30).status == "done"
    finally:
        recovered.release()


def test_a_state_file_replaced_while_a_turn_runs_is_refused_at_the_next_commit(tmp_path):
    path = tmp_path / "state.db"
    other = tmp_path / "other.db"
    SQLiteState(other).close()

    def replace() -> None:
        shutil.copy(other, tmp_path / "copy.db")
        os.replace(tmp_path / "copy.db", path)

    rt, _, error, took = fault_mid_turn(path, replace)
    try:
        assert isinstance(error, StateError) and "replaced" in str(error)
        assert took < FAST and heartbeats_alive()
    finally:
        rt.release()


def test_a_corrupted_state_file_gives_state_error_and_no_thread_dies(tmp_path):
    path = tmp_path / "state.db"

    def corrupt() -> None:
        for suffix in ("-wal", ""):
            target = Path(f"{path}{suffix}")
            if target.exists():
                with open(target, "r+b") as f:
                    f.write(b"\x00garbage, not sqlite\x00" * 200)

    rt, held, error, took = fault_mid_turn(path, corrupt)
    beats = counting_beats(rt)
    try:
        assert error is None or isinstance(error, StateError)  # SQLite may not read the broken pages yet
        assert took < FAST
        for verb in (rt.handles, lambda: rt.run_agent("a", "again"), lambda: Runtime({}, generate=lambda r: {}, state=str(path))):
            held.go.set()
            try:
                verb()
            except StateError:
                pass  # the one error a broken file may give
        assert beats(2)  # the scenario: a few heartbeats on a broken file
        assert heartbeats_alive()
        with pytest.raises(StateError, match="state.db"):
            Runtime({}, generate=lambda r: {}, state=str(path))
    finally:
        rt.release()


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 4 MB tmpfs, mounted for the test (root only, as CI runs)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a small disk needs root to mount a tmpfs")
    folder = tmp_path / "disk"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"cannot mount a tmpfs: {done.stderr}")
        pytest.skip(f"cannot mount a tmpfs: {done.stderr}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_disk_ends_the_run_and_after_space_is_freed_the_turn_is_recovered(small_disk):
    path = small_disk / "state.db"
    filler = small_disk / "filler"

    def fill() -> None:
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass  # the disk is full

    rt, held, error, took = fault_mid_turn(path, fill)
    try:
        assert isinstance(error, StateError)
        assert took < FAST and heartbeats_alive()
        os.remove(filler)  # the fault cleared: this runtime gives the turn up, another takes it over
        other = holding_runtime(path, held)
        try:
            result = run_in_thread(lambda: other.wait("root/a.1", timeout=20), timeout=30)
            assert result.status == "done" and result.text == "finished"
        finally:
            other.release()
    finally:
        rt.release()
