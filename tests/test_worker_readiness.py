"""A delegating turn readies a worker while its model call is in flight, so that the
fan-out of its ``task`` calls does not wait for a thread to start; the worker is one of
the runtime's own threads and ends with it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from _helpers import HANG
from conftest import run_in_thread
from toolnexus import agent, tool
from toolnexus._team import jobs as _jobs
from toolnexus.testing import ScriptedLLMServer, completion


def pool_threads(prefix):
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_the_readier_starts_one_idle_worker_and_only_in_a_pool_without_one():
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="readiness-test")
    try:
        ready = _jobs.readier(pool)
        assert ready is not None
        ready()
        assert len(pool_threads("readiness-test")) == 1
        assert _jobs.readier(pool) is None  # a worker exists: nothing to ready
    finally:
        pool.shutdown(wait=True)
    assert _jobs.readier(None) is None  # inline: no pool, no thread
    assert pool_threads("readiness-test") == []


def test_a_delegating_run_over_http_ends_every_thread_it_started():
    def lookup(q: str) -> str:
        """Look a key up."""
        return f"data({q})"

    def responder(body):
        offered = {t["function"]["name"] for t in body.get("tools") or ()}
        answered = [m for m in body["messages"] if m.get("role") == "tool"]
        if "task" in offered and not answered:
            calls = [{"id": f"t{i}", "type": "function", "function": {"name": "task", "arguments": f'{{"agent": "researcher", "prompt": "{p}"}}'}}
                     for i, p in enumerate("ab")]
            return completion(body, {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")
        return completion(body, {"role": "assistant", "content": "done"}, "stop")

    researcher = agent("researcher", does="Looks one thing up", tools=[tool(lookup)])
    boss = agent("boss", does="Delegates", team=[researcher])
    before = set(threading.enumerate())
    with ScriptedLLMServer(responder) as server:
        result = run_in_thread(lambda: boss.run("go", base_url=server.base_url, model="m"), HANG)
        boss.close()
    assert result.status == "done"
    assert [t.name for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before and t.is_alive()] == []
