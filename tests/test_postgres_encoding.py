"""A PostgreSQL database created without a locale (``initdb`` with no ``LANG``: SQL_ASCII) keeps
a team as text: ids, prompts and answers come back as ``str``, non-ASCII text included."""

from __future__ import annotations

import uuid
from typing import Any, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

import _durable_team as team
from _durable_team import files  # noqa: F401 - fixture
from conftest import run_in_thread
from toolnexus import make_answer


@pytest.fixture
def ascii_database(pg_url: str) -> Iterator[str]:
    """A fresh database of the test server whose encoding is SQL_ASCII, dropped afterwards."""
    psycopg = pytest.importorskip("psycopg")
    name = f"tn_ascii_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        )
    try:
        yield urlunsplit(urlsplit(pg_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_sql_ascii_database_keeps_a_pending_run_as_text_and_resumes_it(ascii_database: str, files: Any) -> None:
    rt = team.runtime(ascii_database, files.runtime_id, effects=files.effects)
    try:
        handle = rt.spawn("root", "boss")
        rt.wake(handle, "déployer: ça part ✓")
        pending = run_in_thread(lambda: rt.wait(handle, timeout=20)).pending
        assert pending is not None and isinstance(pending.id, str)
        assert [view.id for view in rt.handles()] == ["root", handle.id, f"{handle.id}/worker.1"]
        rt.resume(make_answer(pending.id, True, reason="oui, à vous"))
        final = run_in_thread(lambda: rt.wait(handle, timeout=20))
        assert (final.status, final.text) == ("done", "boss: deployed: approved")
        said = [m["content"] for m in rt.conversation_store.get(handle.id) or [] if m["role"] == "user"]
        assert said == ["déployer: ça part ✓"]
    finally:
        rt.release()
