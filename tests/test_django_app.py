"""toolnexus.django in this process: the settings-built runtime, its check, and the
connection hygiene for worker threads (the project under gunicorn is in test_django.py)."""

from __future__ import annotations

import threading

import pytest

django = pytest.importorskip("django")

import _django_site  # noqa: E402,F401  (configures the in-process site)
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import override_settings  # noqa: E402

from toolnexus import AgentDef, agent  # noqa: E402
from toolnexus.django import build_runtime, closing_connections, runtime  # noqa: E402
from toolnexus.django.apps import check_settings  # noqa: E402
from toolnexus.django.testing import override_runtime  # noqa: E402

TEAM = {"solo": AgentDef("solo", "answers")}


def answer(request):
    return {"content": "hello"}


def test_the_process_runtime_is_built_once_from_the_setting_and_inline_by_default():
    rt = runtime()
    assert rt is runtime() and rt.inline
    assert rt.run_agent("solo", "hi").text == "hello"


def test_worker_threads_get_closing_connections_around_every_tool_call():
    rt = build_runtime(inline=False)
    try:
        assert not rt.inline and rt._turns._around_tool is closing_connections
    finally:
        rt.close(rt.root)


def test_a_project_around_tool_or_an_agent_as_registry_is_kept():
    solo = agent("solo", does="answers")
    with override_settings(TOOLNEXUS={"registry": solo, "generate": answer, "model": "m", "inline": False, "around_tool": None}):
        rt = build_runtime()
    try:
        assert rt._turns._around_tool is None and rt.definition("solo").does == "answers"
    finally:
        rt.close(rt.root)


def test_an_unknown_key_or_a_missing_registry_is_improperly_configured():
    with override_settings(TOOLNEXUS={"registry": TEAM, "max_wokers": 4}):
        with pytest.raises(ImproperlyConfigured, match="unknown key.*max_wokers"):
            build_runtime()
        assert [error.id for error in check_settings()] == ["toolnexus.E001"]
    with override_settings(TOOLNEXUS={"model": "m"}):
        with pytest.raises(ImproperlyConfigured, match="registry"):
            build_runtime()
        assert "registry" in check_settings()[0].msg
    assert check_settings() == []


def test_override_runtime_swaps_the_process_runtime_for_the_block_and_closes_it():
    before = runtime()
    with override_runtime(inline=False) as rt:
        assert runtime() is rt and not rt.inline
    assert runtime() is before
    assert rt.inspect(rt.root).state == "closed"


def test_closing_connections_closes_a_worker_threads_connection_after_the_call():
    seen = {}

    def worker():
        with closing_connections():
            connection.ensure_connection()
            seen["inside"] = connection.connection is not None
        seen["after"] = connection.connection is None

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(10)
    assert seen == {"inside": True, "after": True}


def test_closing_connections_leaves_a_connection_inside_atomic_alone():
    with transaction.atomic():
        with closing_connections():
            connection.ensure_connection()
        assert connection.connection is not None and connection.in_atomic_block


def test_the_database_state_with_worker_threads_is_a_check_warning():
    with override_settings(TOOLNEXUS={"registry": TEAM, "state": "django", "inline": False}):
        assert [message.id for message in check_settings()] == ["toolnexus.W001"]
    with override_settings(TOOLNEXUS={"registry": TEAM, "state": "django"}):
        assert check_settings() == []
