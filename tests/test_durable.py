"""Durable state: a pending or half-done team outlives its process (CONTRACT §11).

Every test runs against both stores: a SQLite file and a real PostgreSQL server
(``TOOLNEXUS_TEST_PG_URL``; skipped without it, failed under CI). Child processes are
real interpreters started with ``subprocess``.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

import _durable_team as team
from _durable_team import files, state  # noqa: F401 - fixtures
from _services import service_url
from conftest import run_in_thread
import attrs

from toolnexus import Budget, ConfigError, InMemoryStore, Runtime, SpawnError, StateError, ToolnexusError, UnknownRequest, make_answer
from toolnexus.state import SCHEMA_VERSION, SQLiteState

HERE = Path(__file__).resolve().parent
SCRIPT = str(HERE / "_durable_team.py")
ARROW = "\u2192"




def in_child(*args: str, timeout: float = 60) -> dict:
    """Run a command of ``_durable_team.py`` in a fresh interpreter; its JSON line."""
    done = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def pending_in_another_process(state, files) -> dict:
    out = in_child("pending", state, files.runtime_id, files.effects, files.calls)
    assert out["status"] == "pending"
    return out


def open_runtime(state, files, **options):
    return team.runtime(state, files.runtime_id, files.effects, files.calls, **options)


# --- opening continues the tree -------------------------------------------------------------------


def test_a_pending_run_survives_its_process_and_is_resumed_in_another(state, files):
    started = pending_in_another_process(state, files)
    rt = open_runtime(state, files)
    try:
        assert rt.inspect(started["handle"]).state == "suspended"
        assert rt.inspect(started["handle"] + "/worker.1").state == "suspended"
        rt.resume(make_answer(started["pending"]["id"], True))
        final = run_in_thread(lambda: rt.wait(started["handle"], timeout=20))
        assert final.status == "done"
        assert final.text == "boss: deployed: approved"
        assert team.lines(files.effects) == [f"deployed {started['handle']}/worker.1"]
        assert rt.inspect(started["handle"]).children == [started["handle"] + "/worker.1"]
        reattached = [e for e in rt.events() if e["event"] == "reattach"]
        assert [e["handle"] for e in reattached] == [started["handle"] + "/worker.1"]
    finally:
        rt.release()


def test_a_durable_resume_goes_through_idle_on_every_handle_of_the_path(state, files):
    started = pending_in_another_process(state, files)
    rt = open_runtime(state, files)
    try:
        rt.resume(make_answer(started["pending"]["id"], True))
        run_in_thread(lambda: rt.wait(started["handle"], timeout=20))
        for handle in (started["handle"], started["handle"] + "/worker.1"):
            recorded = rt.transitions(handle)
            assert recorded[:5] == [f"idle{ARROW}running", f"running{ARROW}suspended", f"suspended{ARROW}idle", f"idle{ARROW}running", f"running{ARROW}idle"]
    finally:
        rt.release()


def test_no_model_reply_is_asked_again_for_the_asking_child(state, files):
    started = pending_in_another_process(state, files)
    assert team.lines(files.calls) == ["boss", "worker"]
    rt = open_runtime(state, files)
    try:
        rt.resume(make_answer(started["pending"]["id"], True))
        run_in_thread(lambda: rt.wait(started["handle"], timeout=20))
        # the child resumes at its checkpoint (one more call); the boss replays its turn from
        # its journal (its recorded reply is served again, not asked again), then answers
        assert sorted(team.lines(files.calls)) == ["boss", "boss", "worker", "worker"]
        view = rt.inspect(started["handle"])
        assert view.turns == 2
        assert rt.wait(started["handle"]).turns == 2
    finally:
        rt.release()


def test_ids_continue_after_reopening(state, files):
    rt = open_runtime(state, files)
    first = rt.spawn(rt.root, "echo")
    rt.release()
    rt = open_runtime(state, files)
    try:
        second = rt.spawn(rt.root, "echo")
        assert (first.id, second.id) == ("root/echo.1", "root/echo.2")
        assert rt.inspect(rt.root).children == ["root/echo.1", "root/echo.2"]
    finally:
        rt.release()


def test_ledgers_and_transcripts_survive_reopening(state, files):
    rt = open_runtime(state, files)
    result = rt.run_agent("echo", "hello")
    rt.release()
    rt = open_runtime(state, files)
    try:
        view = rt.inspect(result.handle_id)
        assert (view.state, view.turns, view.tokens) == ("closed", 1, 40)
        assert rt.inspect(rt.root).tokens == 40
        transcript = rt.conversation_store.get(result.handle_id)
        assert [m["role"] for m in transcript] == ["user", "assistant"]
        assert rt.transitions(result.handle_id) == [f"idle{ARROW}running", f"running{ARROW}idle", f"idle{ARROW}closed"]
    finally:
        rt.release()


def test_trees_with_different_runtime_ids_share_a_store(state, files):
    one = open_runtime(state, files)
    other = team.runtime(state, files.runtime_id + "-other")
    try:
        one.run_agent("echo", "a")
        assert other.handles()[0].children == []
        assert one.handles()[0].children == ["root/echo.1"]
    finally:
        one.release()
        other.release()


# --- the answer claim -------------------------------------------------------------------------------


def test_a_second_resume_later_raises_unknown_request_and_changes_nothing(state, files):
    started = pending_in_another_process(state, files)
    rt = open_runtime(state, files)
    try:
        answer = make_answer(started["pending"]["id"], True)
        rt.resume(answer)
        run_in_thread(lambda: rt.wait(started["handle"], timeout=20))
        before = rt.handles()
        with pytest.raises(UnknownRequest):
            rt.resume(answer)
        assert rt.handles() == before
    finally:
        rt.release()
    again = open_runtime(state, files)
    try:
        with pytest.raises(UnknownRequest):
            again.resume(make_answer(started["pending"]["id"], True))
    finally:
        again.release()
    assert len(team.lines(files.effects)) == 1


def test_two_processes_racing_on_one_resume_exactly_one_wins(state, files, tmp_path):
    rounds = 3
    for n in range(rounds):
        files.runtime_id = f"race-{uuid.uuid4().hex[:8]}"
        started = pending_in_another_process(state, files)
        barrier = str(tmp_path / f"go-{n}")
        args = ["resume", state, files.runtime_id, files.effects, files.calls, started["pending"]["id"], barrier, started["handle"]]
        racers = [subprocess.Popen([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        Path(barrier).touch()
        outcomes, errors = [], []
        for racer in racers:
            out, err = racer.communicate(timeout=60)
            assert racer.returncode == 0, err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
            errors.append(err)
        assert sorted(o["outcome"] for o in outcomes) == ["UnknownRequest", "resumed"], errors
        winner = next(o for o in outcomes if o["outcome"] == "resumed")
        assert winner["final"]["status"] == "done"
    assert len(team.lines(files.effects)) == rounds  # the approved tool ran once per round


def test_an_interrupt_cancels_a_request_parked_by_another_process(state, files):
    started = pending_in_another_process(state, files)
    rt = open_runtime(state, files)
    try:
        rt.interrupt(started["handle"] + "/worker.1")
        assert rt.inspect(started["handle"] + "/worker.1").state == "idle"
        with pytest.raises(UnknownRequest):
            rt.resume(make_answer(started["pending"]["id"], True))
        assert team.lines(files.effects) == []
    finally:
        rt.release()


# --- verbs across processes -----------------------------------------------------------------------


def test_wait_sees_a_turn_that_runs_in_another_runtime(state, files):
    started = pending_in_another_process(state, files)
    resumer = open_runtime(state, files)
    watcher = open_runtime(state, files)
    try:
        assert watcher.wait(started["handle"], timeout=0.01).status == "pending"  # settled: the last result
        resumer.resume(make_answer(started["pending"]["id"], True))  # now running in the resumer
        final = run_in_thread(lambda: watcher.wait(started["handle"], timeout=20))
        assert final.status == "done"
        assert final.text == "boss: deployed: approved"
        assert watcher.inspect(started["handle"]).state == "idle"
    finally:
        resumer.release()
        watcher.release()


def test_an_interrupt_from_another_process_stops_the_turn_before_its_next_step(state, files):
    command = [sys.executable, SCRIPT, "stall", state, files.runtime_id, files.effects, files.calls]
    owner = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rt = team.stalling_runtime(state, files.runtime_id, files.calls, gate=lambda: None)  # its tool runs in the other process
    try:
        assert json.loads(run_in_thread(owner.stdout.readline, 30)) == {"entered": True}  # the other process is in its tool
        assert team.lines(files.calls) == ["slow", "tool"]
        assert rt.inspect("root/slow.1").state == "running"
        rt.interrupt("root/slow.1")
        assert rt.inspect("root/slow.1").state == "idle"
        owner.stdin.write("go\n")
        owner.stdin.flush()
        out, err = owner.communicate(timeout=60)
        assert owner.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == {"status": "interrupted", "state": "idle"}
        assert team.lines(files.calls) == ["slow", "tool"]  # no model call after the interrupt
        assert rt.wait("root/slow.1").status == "interrupted"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()
        rt.release()


def test_handles_shows_what_another_process_did(state, files):
    rt = open_runtime(state, files)
    try:
        assert rt.handles()[0].children == []
        assert in_child("echoes", state, files.runtime_id, files.effects, files.calls, "2") == {"done": 2}
        views = rt.handles()
        assert [v.id for v in views] == ["root", "root/echo.1", "root/echo.2"]
        assert [v.state for v in views[1:]] == ["closed", "closed"]
        assert views[0].tokens == 80
        assert [e["event"] for e in rt.events()].count("spawn") == 2
    finally:
        rt.release()


def test_close_root_closes_the_stored_tree_for_every_process(state, files):
    started = pending_in_another_process(state, files)
    rt = open_runtime(state, files)
    rt.close(rt.root)
    again = open_runtime(state, files)
    try:
        assert {v.state for v in again.handles()} == {"closed"}
        with pytest.raises(UnknownRequest):
            again.resume(make_answer(started["pending"]["id"], True))
    finally:
        again.release()


# --- bad input and faults ---------------------------------------------------------------------------


def test_store_and_state_together_is_a_config_error(state, files):
    with pytest.raises(ConfigError, match="store= or state="):
        Runtime(team.registry(), generate=team.model(), store=InMemoryStore(), state=state)


def test_a_registry_missing_a_live_agent_is_a_config_error_naming_it(state, files):
    pending_in_another_process(state, files)
    registry = team.registry()
    del registry["worker"]
    with pytest.raises(ConfigError, match="worker"):
        Runtime(registry, generate=team.model(), state=state, runtime_id=files.runtime_id)


def test_a_store_from_a_newer_schema_is_a_config_error(tmp_path):
    path = tmp_path / "newer.db"
    SQLiteState(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE tn_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(ConfigError, match="newer"):
        Runtime(team.registry(), generate=team.model(), state=str(path))


def test_a_postgres_store_from_a_newer_schema_is_a_config_error():
    from toolnexus.postgres import PostgresState

    url = service_url("postgresql")
    schema = f"tn_newer_{uuid.uuid4().hex[:8]}"
    store = PostgresState(url, schema=schema, listen=False)
    store.execute("UPDATE tn_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    store.close()
    with pytest.raises(ConfigError, match="newer"):
        PostgresState(url, schema=schema, listen=False)


def test_an_unreachable_postgres_is_a_state_error():
    pytest.importorskip("psycopg")
    with pytest.raises(StateError) as raised:
        Runtime(team.registry(), generate=team.model(), state="postgresql://postgres:secret@127.0.0.1:1/postgres")
    assert isinstance(raised.value, ToolnexusError)
    assert "secret" not in str(raised.value)


def test_a_postgres_that_goes_away_is_a_state_error_from_the_verb_and_nothing_is_half_written():
    from psycopg_pool import ConnectionPool

    from toolnexus.postgres import PostgresState

    url = service_url("postgresql")
    pool = ConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    runtime_id = f"gone-{uuid.uuid4().hex[:8]}"
    rt = Runtime(team.registry(), generate=team.model(), state=PostgresState(pool, listen=False), runtime_id=runtime_id)
    first = rt.spawn(rt.root, "echo")
    pool.close()
    with pytest.raises(StateError):
        rt.spawn(rt.root, "echo")
    rt.release()
    again = Runtime(team.registry(), generate=team.model(), state=url, runtime_id=runtime_id)
    try:
        assert [v.id for v in again.handles()] == ["root", first.id]
        assert again.spawn(again.root, "echo").id == "root/echo.2"
    finally:
        again.release()


def test_an_unreadable_state_file_is_a_state_error(tmp_path):
    with pytest.raises(StateError):
        Runtime(team.registry(), generate=team.model(), state=str(tmp_path / "no-such-dir" / "state.db"))


def test_eight_threads_and_a_second_process_share_one_file_and_lose_nothing(tmp_path, files):
    state = str(tmp_path / "shared.db")
    per_thread, threads = 15, 8
    rt = open_runtime(state, files)
    errors: list[BaseException] = []
    statuses: list[str] = []
    lock = threading.Lock()

    def hammer(n: int) -> None:
        try:
            for i in range(per_thread):
                h = rt.spawn(rt.root, "echo")
                rt.post(h, f"note {n}.{i}")
                rt.wake(h, "go")
                result = rt.wait(h, timeout=30)
                rt.close(h)
                with lock:
                    statuses.append(result.status)
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)

    other = subprocess.Popen([sys.executable, SCRIPT, "echoes", state, files.runtime_id, files.effects, files.calls, "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = [threading.Thread(target=hammer, args=(n,), daemon=True) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    out, err = other.communicate(timeout=120)
    try:
        assert not errors, errors
        assert other.returncode == 0, err
        assert "database is locked" not in err
        assert json.loads(out.strip().splitlines()[-1]) == {"done": 20}
        assert statuses == ["done"] * (per_thread * threads)
        total = per_thread * threads + 20
        views = rt.handles()
        assert len(views) == total + 1
        assert len(set(v.id for v in views)) == total + 1
        assert views[0].tokens == 40 * total
        assert [e["event"] for e in rt.events()].count("spawn") == total
    finally:
        rt.release()
    with sqlite3.connect(state) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    fresh = open_runtime(state, files)
    try:
        assert len(fresh.handles()) == total + 1
    finally:
        fresh.release()


def test_release_leaves_the_tree_and_ends_the_runtimes_threads(state, files):
    before = set(threading.enumerate())
    rt = open_runtime(state, files)
    started = rt.spawn(rt.root, "boss")
    rt.wake(started, "go")
    assert run_in_thread(lambda: rt.wait(started, timeout=20)).status == "pending"
    rt.release()
    assert {t for t in threading.enumerate() if t not in before and t.is_alive()} == set()
    again = open_runtime(state, files)
    try:
        assert again.inspect(started.id).state == "suspended"
    finally:
        again.release()


def test_an_interpreter_that_never_releases_still_exits(state, files):
    assert in_child("forget", state, files.runtime_id, files.effects, files.calls, timeout=60) == {"left": True}
    rt = open_runtime(state, files)
    try:
        assert rt.inspect("root/echo.1").state == "closed"
    finally:
        rt.release()


def test_spawn_sees_a_pool_spent_by_another_process(state, files):
    budgeted = team.registry()
    budgeted["boss"] = attrs.evolve(budgeted["boss"], budget=Budget(max_tokens=100))
    rt = Runtime(budgeted, generate=team.model(), state=state, runtime_id=files.runtime_id)
    other = Runtime(budgeted, generate=team.model(), state=state, runtime_id=files.runtime_id)
    try:
        boss = rt.spawn(rt.root, "boss")
        assert other.inspect(boss.id).tokens == 0
        child = other.spawn(boss.id, "echo")
        for n in range(3):  # 3 x 40 tokens charged in the other runtime
            other.post(child, f"n{n}")
            other.wake(child, "go")
            assert other.wait(child, timeout=20).status == "done"
        with pytest.raises(SpawnError, match="budget exhausted"):
            rt.spawn(boss, "echo")
    finally:
        rt.release()
        other.release()


def test_leaving_a_with_block_releases_instead_of_closing(state, files):
    with open_runtime(state, files) as rt:
        h = rt.spawn(rt.root, "echo")
    again = open_runtime(state, files)
    try:
        assert again.inspect(h.id).state == "idle"
    finally:
        again.release()


def test_a_store_object_from_the_host_is_used_and_left_open(tmp_path, files):
    store = SQLiteState(tmp_path / "host.db")
    rt = Runtime(team.registry(), generate=team.model(), state=store, runtime_id=files.runtime_id)
    assert rt.run_agent("echo", "hi").status == "done"
    rt.release()
    again = Runtime(team.registry(), generate=team.model(), state=store, runtime_id=files.runtime_id)
    try:
        assert [v.id for v in again.handles()] == ["root", "root/echo.1"]
    finally:
        again.release()
        store.close()


def test_bad_durable_options_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="recover"):
        Runtime(team.registry(), generate=team.model(), state=str(tmp_path / "s.db"), recover="retry")
    with pytest.raises(ConfigError, match="lease"):
        Runtime(team.registry(), generate=team.model(), state=str(tmp_path / "s.db"), lease=0.0)
    with pytest.raises(ConfigError, match="state must be"):
        Runtime(team.registry(), generate=team.model(), state=42)


def test_first_use_by_four_processes_at_once_creates_the_schema_once():
    url = service_url("postgresql")
    schema = f"tn_race_{uuid.uuid4().hex[:8]}"
    code = (
        "import sys; from toolnexus.postgres import PostgresState; "
        f"s = PostgresState(sys.argv[1], schema={schema!r}, listen=False); "
        "print(s.execute('SELECT value FROM tn_meta')[0][0]); s.close()"
    )
    racers = [subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outcomes = [racer.communicate(timeout=60) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), [err for _, err in outcomes]
    assert [out.strip() for out, _ in outcomes] == [str(SCHEMA_VERSION)] * 4


def test_a_resume_racing_an_interrupt_has_exactly_one_winner(state, files):
    for _ in range(3):
        files.runtime_id = f"ri-{uuid.uuid4().hex[:8]}"
        started = pending_in_another_process(state, files)
        answering, interrupting = open_runtime(state, files), open_runtime(state, files)
        outcome: dict[str, object] = {}
        go = threading.Barrier(2)

        def answer() -> None:
            go.wait()
            try:
                answering.resume(make_answer(started["pending"]["id"], True))
                outcome["resume"] = "won"
            except UnknownRequest:
                outcome["resume"] = "lost"

        def interrupt() -> None:
            go.wait()
            interrupting.interrupt(started["handle"] + "/worker.1")

        try:
            threads = [threading.Thread(target=answer), threading.Thread(target=interrupt)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            final = run_in_thread(lambda: answering.wait(started["handle"], timeout=20))
            if outcome["resume"] == "won":
                # the boss goes on: done, or (its child interrupted just after the resume)
                # retrying with a fresh child that asks anew
                assert final.status == "done" or (final.status == "pending" and final.pending.id != started["pending"]["id"])
            else:  # the interrupt cancelled the request on every handle of the path
                assert final.status == "interrupted"
                assert answering.inspect(started["handle"] + "/worker.1").state == "idle"
            with pytest.raises(UnknownRequest):  # either way the request is gone
                answering.resume(make_answer(started["pending"]["id"], True))
        finally:
            answering.release()
            interrupting.release()
    assert len(team.lines(files.effects)) <= 3  # the approved tool ran at most once a round


def test_units_committed_by_many_threads_of_one_process_never_share_an_event_serial(tmp_path):
    """The serial after a SQLite commit is known inside its transaction, before the next
    unit of another thread numbers its events (once a UNIQUE failure on tn_stream)."""
    from toolnexus import AgentDef

    failures: list[BaseException] = []
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: a window between two units is hit
    try:
        with Runtime({"echo": AgentDef("echo", "echoes")}, generate=lambda request: {"content": "ok"}, state=str(tmp_path / "s.db")) as rt:

            def work() -> None:
                try:
                    for _ in range(60):
                        assert rt.run_agent("echo", "hi").status == "done"
                except BaseException as exc:  # noqa: BLE001 - reported below
                    failures.append(exc)

            threads = [threading.Thread(target=work) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
    finally:
        sys.setswitchinterval(before)
    assert not failures, failures[:3]
