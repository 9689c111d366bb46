"""The served layer (``toolnexus._serve``, CONTRACT §20) every surface goes through: who
asks, what belongs to whom (bindings in memory, SQLite and PostgreSQL, atomic across
processes), JSON bodies, the stream cap and the WSGI helpers."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import _stream_team as team
from _services import service_url
from toolnexus import ConfigError, Runtime, ToolnexusError
from toolnexus._serve import SHARED, Access, Held, Refused, StreamSlots, bindings_of, change, json_body, new_id
from toolnexus._serve import wsgi
from toolnexus._serve.bindings import MemoryBindings, SqlBindings
from toolnexus.state import SCHEMA_VERSION
from toolnexus.state import SQLiteState

ROOT = Path(__file__).resolve().parent.parent


# --- who asks ----------------------------------------------------------------------------------


def test_a_surface_without_authorize_or_public_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="authorize=") as raised:
        Access.build(what="the test surface")
    assert "public=True" in str(raised.value)
    with pytest.raises(ConfigError):
        Access.build(lambda request: "x", public=True, what="both")
    with pytest.raises(ConfigError):
        Access.build("token", what="a surface that takes no tokens")
    with pytest.raises(ConfigError):
        Access.build(42, what="not callable")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Access.build("", what="empty token", tokens=True)
    with pytest.raises(ConfigError):
        Access.build(public="yes", what="not a bool")  # type: ignore[arg-type]


def test_a_hook_gives_the_principal_a_truthy_value_the_shared_one_and_a_falsy_one_refuses() -> None:
    answers = {"alice": "alice", "yes": True, "object": object(), "none": None, "empty": "", "false": False, "zero": 0}
    access = Access.build(lambda request: answers[request], what="t")
    assert access.principal("alice") == "alice"
    assert access.principal("yes") == SHARED and access.principal("object") == SHARED
    for refused in ("none", "empty", "false", "zero"):
        with pytest.raises(Refused) as raised:
            access.principal(refused)
        assert raised.value.status == 401


def test_a_hook_of_no_arguments_is_called_without_the_request() -> None:
    assert Access.build(lambda: "bob", what="t").principal("ignored") == "bob"
    assert Access.build(lambda *args: args[0], what="t").principal("carol") == "carol"


def test_a_hook_that_raises_is_not_swallowed() -> None:
    def forbidden(request: Any) -> str:
        raise Refused(403, "forbidden")

    with pytest.raises(Refused) as raised:
        Access.build(forbidden, what="t").principal(None)
    assert raised.value.status == 403


def test_a_bearer_token_is_compared_whole_and_its_caller_is_the_shared_principal() -> None:
    access = Access.build("s3cret", what="mcp", tokens=True)
    assert access.principal(None, authorization="Bearer s3cret") == SHARED
    assert access.principal(None, authorization="bearer  s3cret ") == SHARED
    for wrong in (None, "", "Bearer", "Bearer s3cre", "Bearer s3cretX", "Basic s3cret", "s3cret"):
        with pytest.raises(Refused) as raised:
            access.principal(None, authorization=wrong)
        assert raised.value.status == 401 and raised.value.headers == {"WWW-Authenticate": "Bearer"}
    assert "s3cret" not in repr(access)


def test_public_admits_everyone_as_the_shared_principal() -> None:
    assert Access.build(public=True, what="t").principal(None) == SHARED


# --- bindings ----------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def bindings(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield MemoryBindings()
        return
    if request.param == "sqlite":
        store: Any = SQLiteState(tmp_path / "bindings.db")
    else:
        pytest.importorskip("psycopg")
        from toolnexus.postgres import PostgresState

        store = PostgresState(service_url("postgresql"), schema=f"tn_bind_{uuid.uuid4().hex[:8]}", listen=False)
    try:
        yield SqlBindings(store, "tree")
    finally:
        store.close()


def test_new_ids_are_128_random_url_safe_bits() -> None:
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(
        len(each) == 22 and set(each) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for each in ids
    )


def test_a_binding_is_found_by_its_principal_only(bindings: Any) -> None:
    made = bindings.bind("flask", "alice", "root/a.1", {"k": [1, 2]})
    assert made.version == 1 and len(made.id) == 22
    assert bindings.get("flask", "alice", made.id) == made
    assert bindings.get("flask", "mallory", made.id) is None  # what a missing id gets
    assert bindings.get("agui", "alice", made.id) is None  # another surface's namespace
    assert bindings.get("flask", "alice", "missing") is None
    for odd in ("", "x" * 201, "lone\ud800", None):
        assert bindings.get("flask", "alice", odd) is None


def test_a_chosen_id_is_taken_once_per_principal(bindings: Any) -> None:
    assert bindings.bind("agui", "alice", "root/a.1", id="thread-1") is not None
    assert bindings.bind("agui", "alice", "root/a.2", id="thread-1") is None  # taken: the first one stays
    assert bindings.get("agui", "alice", "thread-1").handle == "root/a.1"
    assert bindings.bind("agui", "bob", "root/a.3", id="thread-1").handle == "root/a.3"  # bob's own thread-1


def test_an_update_is_a_compare_and_set_on_the_version(bindings: Any) -> None:
    made = bindings.bind("a2a", "alice", "root/a.1", {"state": "working"})
    updated = bindings.update(made, {"state": "input-required"})
    assert updated.version == 2 and bindings.get("a2a", "alice", made.id).data == {"state": "input-required"}
    assert bindings.update(made, {"state": "stale"}) is None  # someone else changed it first
    assert bindings.get("a2a", "alice", made.id).data == {"state": "input-required"}
    assert bindings.delete(updated) and not bindings.delete(updated)
    assert bindings.update(updated, {"state": "gone"}) is None


def test_data_must_be_a_json_object(bindings: Any) -> None:
    with pytest.raises(ToolnexusError):
        bindings.bind("flask", "alice", "root/a.1", {"x": float("nan")})
    with pytest.raises(TypeError):
        bindings.bind("flask", "alice", "root/a.1", ["not", "an", "object"])


def test_change_reads_again_after_a_lost_race_and_every_edit_lands_once(bindings: Any) -> None:
    made = bindings.bind("agui", "alice", "root/a.1", {"calls": []})
    errors: list[BaseException] = []

    def add(n: int) -> None:
        try:
            change(bindings, "agui", "alice", made.id, lambda now: {"calls": [*now.data["calls"], n]})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors
    final = bindings.get("agui", "alice", made.id)
    assert sorted(final.data["calls"]) == list(range(8)) and final.version == 9
    with pytest.raises(Refused) as raised:
        change(bindings, "agui", "mallory", made.id, lambda now: {})
    assert raised.value.status == 404


def test_a_compare_and_set_holds_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    store = SQLiteState(path)
    made = SqlBindings(store, "tree").bind("a2a", "alice", "root/a.1", {"n": 0})
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from toolnexus.state import SQLiteState; from toolnexus._serve.bindings import SqlBindings, change;"
        "b = SqlBindings(SQLiteState(sys.argv[2]), 'tree');"
        "[change(b, 'a2a', 'alice', sys.argv[3], lambda now: {'n': now.data['n'] + 1}) for _ in range(20)]"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(ROOT), str(path), made.id]) for _ in range(3)]
    assert [proc.wait(60) for proc in procs] == [0, 0, 0]
    assert SqlBindings(store, "tree").get("a2a", "alice", made.id).data == {"n": 60}
    store.close()


def test_a_runtime_keeps_its_bindings_in_its_state_else_in_memory(tmp_path: Path, cleanup: Any) -> None:
    memory = cleanup.runtime(team.registry(), generate=team.model())
    assert isinstance(bindings_of(memory), MemoryBindings) and bindings_of(memory) is bindings_of(memory)
    state = str(tmp_path / "runs.db")
    first = cleanup.runtime(team.registry(), generate=team.model(), state=state, runtime_id="t")
    second = cleanup.runtime(team.registry(), generate=team.model(), state=state, runtime_id="t")
    other_tree = cleanup.runtime(team.registry(), generate=team.model(), state=state, runtime_id="u")
    made = bindings_of(first).bind("flask", "alice", "root/boss.1")
    assert bindings_of(second).get("flask", "alice", made.id) == made
    assert bindings_of(other_tree).get("flask", "alice", made.id) is None


def test_a_schema_2_store_gains_the_bindings_table_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    SQLiteState(path).close()
    with sqlite3.connect(path) as db:  # as toolnexus wrote it before the served layer
        db.execute("DROP TABLE tn_bindings")
        db.execute("UPDATE tn_meta SET value = '2' WHERE key = 'schema_version'")
    with Runtime(team.registry(), generate=team.model(), state=str(path)) as rt:
        assert bindings_of(rt).bind("flask", "alice", "root/x.1") is not None
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM tn_meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)


# --- bodies -----------------------------------------------------------------------------------------


def reader(data: bytes) -> Any:
    stream = io.BytesIO(data)
    stream.reads = []  # type: ignore[attr-defined]

    def read(n: int) -> bytes:
        stream.reads.append(n)  # type: ignore[attr-defined]
        return stream.read(n)

    return read, stream


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON;charset=UTF-8"]
)
def test_json_with_or_without_parameters_is_taken(content_type: str) -> None:
    read, _ = reader(b'{"a": 1}')
    assert json_body(content_type, 8, read) == {"a": 1}


@pytest.mark.parametrize(
    "content_type", [None, "", "text/plain", "application/x-www-form-urlencoded", "application/json-seq", "text/json"]
)
def test_anything_else_is_415_before_a_byte_is_read(content_type: str | None) -> None:
    read, stream = reader(b'{"a": 1}')
    with pytest.raises(Refused) as raised:
        json_body(content_type, 8, read)
    assert raised.value.status == 415 and stream.reads == []


def test_a_declared_length_over_the_limit_is_413_before_a_byte_is_read() -> None:
    read, stream = reader(b"{}" * 100)
    with pytest.raises(Refused) as raised:
        json_body("application/json", 200, read, limit=100)
    assert raised.value.status == 413 and stream.reads == []


def test_a_body_without_a_length_is_read_to_the_limit_and_one_byte_more_then_refused() -> None:
    read, stream = reader(b"[" + b"1," * 10_000_000 + b"1]")
    with pytest.raises(Refused) as raised:
        json_body("application/json", None, read, limit=1000)
    assert raised.value.status == 413 and stream.tell() == 1001


@pytest.mark.parametrize("body", [b"{", b'{"a": NaN}', b"[" * 65 + b"]" * 65, b"\xff", b'{"a": 1e999}'])
def test_malformed_or_too_deep_json_is_400(body: bytes) -> None:
    read, _ = reader(body)
    with pytest.raises(Refused) as raised:
        json_body("application/json", len(body), read)
    assert raised.value.status == 400


# --- streams ------------------------------------------------------------------------------------------


def test_one_stream_over_the_cap_is_503_with_retry_after_and_a_slot_comes_back_once() -> None:
    slots = StreamSlots(2)
    first, second = slots.take(), slots.take()
    with pytest.raises(Refused) as raised:
        slots.take()
    assert raised.value.status == 503 and int(raised.value.headers["Retry-After"]) > 0
    first.release()
    first.release()  # idempotent: one slot back, not two
    third = slots.take()
    with pytest.raises(Refused):
        slots.take()
    second.release(), third.release()
    assert slots.open == 0


def test_a_held_body_gives_its_slot_back_at_its_end_at_an_error_or_when_closed_unread() -> None:
    slots = StreamSlots(1)

    def frames() -> Any:
        yield b"a"
        yield b"b"

    assert list(Held(frames(), slots.take())) == [b"a", b"b"] and slots.open == 0

    def failing() -> Any:
        yield b"a"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        list(Held(failing(), slots.take()))
    assert slots.open == 0
    closed: list[bool] = []

    class Source:
        def __iter__(self) -> Any:
            return iter([b"x"])

        def close(self) -> None:
            closed.append(True)

    Held(Source(), slots.take()).close()  # the server closes a body it never sent
    assert slots.open == 0 and closed == [True]


def test_a_bad_max_streams_is_a_config_error() -> None:
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError):
            StreamSlots(bad)  # type: ignore[arg-type]


# --- WSGI helpers -------------------------------------------------------------------------------------


def environ(body: bytes = b"", **more: Any) -> dict[str, Any]:
    return {
        "REQUEST_METHOD": "POST",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        **more,
    }


def test_a_wsgi_app_built_on_the_helpers_refuses_before_it_reads_or_runs() -> None:
    access = Access.build(lambda env: env.get("HTTP_X_USER"), what="wsgi test")
    ran: list[Any] = []

    def app(env: dict[str, Any], start_response: Any) -> list[bytes]:
        try:
            principal = wsgi.principal(access, env)
            body = wsgi.read_json(env, limit=100)
        except Refused as refused:
            return wsgi.refusal(start_response, refused)
        ran.append((principal, body))
        return wsgi.respond(start_response, 200, {"ok": True})

    def call(env: dict[str, Any]) -> tuple[str, dict[str, str], Any]:
        seen: dict[str, Any] = {}
        body = b"".join(app(env, lambda status, headers: seen.update(status=status, headers=dict(headers))))
        return seen["status"], seen["headers"], json.loads(body)

    assert call(environ(b'{"a": 1}'))[0] == "401 Unauthorized"
    assert call(environ(b'{"a": 1}', HTTP_X_USER="al", CONTENT_TYPE="text/plain"))[0] == "415 Unsupported Media Type"
    assert call(environ(b"x" * 200, HTTP_X_USER="al"))[0] == "413 Request Entity Too Large"
    assert call(environ(b"{", HTTP_X_USER="al"))[0] == "400 Bad Request"
    assert ran == []
    status, headers, body = call(environ(b'{"a": 1}', HTTP_X_USER="al"))
    assert status == "200 OK" and headers["Content-Type"] == "application/json" and body == {"ok": True}
    assert ran == [("al", {"a": 1})]


def test_a_wsgi_body_without_a_length_is_read_only_when_the_server_ends_it() -> None:
    chunked = environ(b'{"a": 1}', CONTENT_LENGTH="", **{"wsgi.input_terminated": True})
    assert wsgi.read_json(chunked) == {"a": 1}
    assert wsgi.read_body(environ(b'{"a": 1}', CONTENT_LENGTH="")) == b""  # no length, no end: nothing to read
    with pytest.raises(Refused) as raised:
        wsgi.read_body(environ(b"", CONTENT_LENGTH="12abc"))
    assert raised.value.status == 400


def test_a_werkzeug_abort_in_a_hook_is_its_status() -> None:
    werkzeug = pytest.importorskip("werkzeug.exceptions")

    def hook(env: Any) -> str:
        raise werkzeug.Forbidden()

    with pytest.raises(Refused) as raised:
        wsgi.principal(Access.build(hook, what="t"), environ())
    assert raised.value.status == 403


def test_a_bearer_token_is_read_from_the_authorization_header() -> None:
    access = Access.build("tok", what="mcp", tokens=True)
    assert wsgi.principal(access, environ(HTTP_AUTHORIZATION="Bearer tok")) == SHARED
    with pytest.raises(Refused):
        wsgi.principal(access, environ(HTTP_AUTHORIZATION="Bearer nope"))
