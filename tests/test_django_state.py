"""``"state": "django"``: the runtime's durable tree in Django's own database, through the
calling thread's connection (the project under gunicorn is in test_django.py)."""

from __future__ import annotations

import threading

import pytest

django = pytest.importorskip("django")

import _django_site  # noqa: E402,F401  (configures the in-process site)

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from toolnexus import AgentDef, ConfigError, UnknownRequest, make_answer, make_request, success, suspend, tool  # noqa: E402
from toolnexus.django import build_runtime
from toolnexus.django import approvals
from toolnexus.django import conf
from toolnexus.django.state import TABLES, DjangoState  # noqa: E402
from toolnexus.testing import tool_messages  # noqa: E402


@tool
def refund(amount: int, ctx) -> object:
    """Refund, once a person said yes."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Refund {amount}?", expires_at=EXPIRES["at"]))
    return success(f"refunded {amount}")


EXPIRES = {"at": None}
TEAM = {"clerk": AgentDef("clerk", "refunds", tools=(refund,))}


def model(request):
    results = tool_messages(request)
    if results:
        return {"content": results[-1]}
    return {"tool_calls": [{"id": "r", "name": "refund", "arguments": {"amount": 80}}]}


@pytest.fixture(autouse=True)
def migrated():
    call_command("migrate", "toolnexus", verbosity=0)
    yield
    call_command("migrate", "toolnexus", "zero", verbosity=0)  # a fresh tree for every test
    EXPIRES["at"] = None


@pytest.fixture
def runtimes():
    made = []

    def make(**options):
        rt = build_runtime(registry=TEAM, generate=model, model="m", state="django", **options)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        conf.let_go(rt)


def test_the_migration_creates_the_stores_tables_and_reversing_it_drops_them():
    assert set(TABLES) <= set(connection.introspection.table_names())
    call_command("migrate", "toolnexus", "zero", verbosity=0)
    assert not set(TABLES) & set(connection.introspection.table_names())
    with pytest.raises(ConfigError, match="run manage.py migrate"):
        DjangoState()


def test_a_store_of_a_newer_schema_is_a_config_error():
    with connection.cursor() as cursor:
        cursor.execute("UPDATE tn_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ConfigError, match="schema 99"):
        DjangoState()


def test_a_run_pending_in_one_runtime_is_answered_through_another(runtimes):
    asking, answering = runtimes(), runtimes()  # two processes' runtimes on one database
    asked = asking.run_agent("clerk", "refund please")
    assert asked.status == "pending"
    assert [row.request_id for row in approvals.pending()] == [asked.pending.id]
    done = approvals.answer(make_answer(asked.pending.id, True), rt=answering)
    assert done.status == "done" and done.text == "refunded 80"
    assert not approvals.pending().exists()


def stored_version(handle_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT version FROM tn_handles WHERE id = %s", [handle_id])
        return int(cursor.fetchone()[0])


def test_a_change_the_host_rolled_back_is_reread_and_no_handle_id_is_used_twice(runtimes):
    left, right = runtimes(), runtimes()  # two processes' runtimes on one tree
    with transaction.atomic():
        forgotten = left.run_agent("clerk", "first").handle_id
        version_seen = stored_version("root")  # what the left runtime last wrote
        transaction.set_rollback(True)
    kept = []
    while stored_version("root") < version_seen:  # the other runtime commits as many root changes
        kept.append(right.spawn(right.root, "clerk").id)
    assert forgotten in kept  # never committed, so free again
    again = left.spawn(left.root, "clerk").id
    assert again not in kept
    assert [view.id for view in right.handles() if view.parent == "root"] == [*kept, again]


def test_an_expired_request_is_answered_expired_by_the_command(runtimes):
    EXPIRES["at"] = "2000-01-01T00:00:00+00:00"
    rt = runtimes()
    asked = rt.run_agent("clerk", "refund please")

    previous = conf.install(rt)
    try:
        call_command("toolnexus_expire", verbosity=0)
    finally:
        conf.install(previous)
    assert not approvals.pending().exists()
    assert rt.wait(asked.handle_id, 0).text.startswith("expired: Refund 80?")


def test_a_thread_of_the_library_closes_the_connection_a_state_change_opened():
    store = DjangoState()
    seen = {}

    def change(key):
        with store.transaction():
            store.execute("SELECT 1")
        seen[key] = connection.connection is None
        connection.close()

    for name in ("toolnexus-heartbeat", "request-thread"):
        thread = threading.Thread(target=change, args=(name,), name=name)
        thread.start()
        thread.join(10)
    assert seen == {"toolnexus-heartbeat": True, "request-thread": False}


def test_answer_resumes_a_run_of_a_runtime_without_a_state():
    rt = build_runtime(registry=TEAM, generate=model, model="m")
    try:
        asked = rt.run_agent("clerk", "refund please")
        assert approvals.answer(make_answer(asked.pending.id, True), rt=rt).text == "refunded 80"
        with pytest.raises(UnknownRequest):
            approvals.answer(make_answer(asked.pending.id, True), rt=rt)
    finally:
        rt.close(rt.root)


def test_a_yes_that_comes_after_the_expiry_is_answered_expired(runtimes):
    EXPIRES["at"] = "2000-01-01T00:00"  # no zone: UTC
    rt = runtimes()
    asked = rt.run_agent("clerk", "refund please")
    result = approvals.answer(make_answer(asked.pending.id, True), rt=rt)
    assert result.text.startswith("expired: Refund 80?")


def test_a_view_streams_an_inline_run_as_server_sent_events_on_its_own_thread(runtimes):
    from django.http import StreamingHttpResponse

    from toolnexus import sse

    seen = []

    def watched_model(request):
        seen.append(threading.current_thread().name)
        return model(request)

    rt = build_runtime(registry=TEAM, generate=watched_model, model="m", state="django")  # inline by default
    try:
        before = {thread.name for thread in threading.enumerate()}
        with transaction.atomic():  # the view's transaction covers the run
            handle = rt.spawn(rt.root, "clerk")
            rt.wake(handle, "refund please")  # inline: admitted; the iteration runs it
            response = StreamingHttpResponse(sse.stream(rt, handle), headers=sse.HEADERS)
            body = b"".join(response.streaming_content).decode()
        assert response["Content-Type"] == "text/event-stream" and response["X-Accel-Buffering"] == "no"
        kinds = [line.removeprefix("event: ") for line in body.splitlines() if line.startswith("event: ")]
        assert kinds[:3] == ["state", "message", "tool_call"] and kinds[-3:] == ["pending", "state", "result"]
        assert set(seen) == {threading.current_thread().name}
        assert {thread.name for thread in threading.enumerate()} - before == set()  # no library thread
        assert rt.inspect(handle).state == "suspended"
    finally:
        conf.let_go(rt)
