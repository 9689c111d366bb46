"""A state declares what it can do and how its database spells SQL; the library asks it
that, never its name (CONTRACT §11's stores, written once for SQLite and PostgreSQL)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import _durable_team as team
from _durable_team import files, state  # noqa: F401 - fixtures
from conftest import run_in_thread
from toolnexus import make_answer
from toolnexus.state import SQLiteState, SqlState

from toolnexus._stores.sql.postgres import PostgresDialect
from toolnexus._stores.sql.sqlite import SQLiteDialect


class _UnnamedSQLite(SQLiteDialect):
    name = "not-a-name-the-library-knows"


class _UnnamedPostgres(PostgresDialect):
    name = "not-a-name-the-library-knows-either"


def _renamed(state: str) -> Any:
    """A state of the fixture's database whose dialect answers to no known name."""
    if state.startswith("postgresql"):
        from toolnexus.postgres import PostgresState

        class RenamedPostgres(PostgresState):
            dialect = _UnnamedPostgres()

        return RenamedPostgres(state)

    class RenamedSQLite(SQLiteState):
        dialect = _UnnamedSQLite()

    return RenamedSQLite(state)


def test_a_state_whose_dialect_has_another_name_keeps_a_pending_run_and_resumes_it(state, files):
    first = _renamed(state)
    try:
        with team.runtime(first, files.runtime_id, files.effects, files.calls) as rt:
            pending = rt.run_agent("boss", "ship it")
            assert pending.status == "pending"
    finally:
        first.close()
    second = _renamed(state)
    try:
        with team.runtime(second, files.runtime_id, files.effects, files.calls) as rt:
            assert [request.id for request in rt.open_requests()] == [pending.pending.id]
            rt.resume(make_answer(pending.pending.id, True))
            assert run_in_thread(lambda: rt.wait(pending.handle_id, timeout=20)).text == "boss: deployed: approved"
            assert rt.inspect(pending.handle_id).children == [pending.handle_id + "/worker.1"]
            assert team.lines(files.effects) == [f"deployed {pending.handle_id}/worker.1"]
    finally:
        second.close()


def test_each_dialect_spells_an_insert_that_yields_to_a_row_with_the_same_key(state):
    opened = _renamed(state)
    try:
        runtime_id = f"t-{uuid.uuid4().hex[:10]}"
        insert = opened.dialect.insert_ignoring("tn_meta (key, value) VALUES (?, ?)")
        for value in ("first", "second"):
            with opened.transaction():
                opened.execute(insert, (runtime_id, value))
        assert opened.execute("SELECT value FROM tn_meta WHERE key = ?", (runtime_id,)) == [("first",)]
        with opened.transaction():
            opened.execute("DELETE FROM tn_meta WHERE key = ?", (runtime_id,))
    finally:
        opened.close()


def test_a_state_built_on_the_base_declares_the_least_it_can_do():
    class Minimal(SqlState):
        pass

    minimal = Minimal()
    assert minimal.exclusive_transactions is False  # every read inside a transaction goes to the database
    assert minimal.foreign_commits() is None  # no count of other connections' commits
    assert minimal.in_host_transaction() is False
    assert minimal.notice("root|a") is None  # no notices: other processes poll
    assert abs(minimal.now() - time.time()) < 5  # one host's clock
    assert minimal.dialect.supports_concurrent_writers is False


def test_only_a_database_with_concurrent_writers_locks_the_rows_a_transaction_reads():
    select = "SELECT id FROM tn_handles WHERE runtime_id = ?"
    assert SQLiteDialect().locking(select) == select  # the write lock of BEGIN IMMEDIATE holds them
    assert PostgresDialect().locking(select) == select + " FOR UPDATE"

