"""MCP over stdio against the official Python SDK's server, a real child process."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from _mcp import process_gone, sdk_stdio_command
from conftest import HANG_TIMEOUT, run_in_thread
from toolnexus import Client, Runtime, ToolContext, Toolkit
from toolnexus import mcp
from toolnexus.testing import ScriptedModel, tool_messages

PROMPT = 1.0  # "promptly" on a loaded 2-core machine; the figure itself comes from benchmarks/mcp_calls.py


@pytest.fixture
def server(closing):
    return closing(mcp.stdio(sdk_stdio_command(), name="sdk"))


def test_tools_keep_the_servers_names_descriptions_and_input_schemas(server):
    tools = {each.name: each for each in server.tools()}
    assert {"add", "echo", "slow", "cancellations", "pid", "die", "fail"} <= set(tools)
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.input_schema["properties"].keys() == {"a", "b"}
    assert add.input_schema["required"] == ["a", "b"]
    assert add.source == "mcp" and add.resource is server


def test_a_call_gives_the_text_as_output_and_the_structured_content_in_metadata(server):
    result = Toolkit(server.tools()).execute("add", {"a": 2, "b": 40})
    assert not result.is_error
    assert result.output == "42"
    assert result.metadata == {"structured": {"result": 42}}


def test_a_tool_that_fails_on_the_server_is_an_error_result(server):
    result = server.call("fail", {"reason": "no luck"})
    assert result.is_error


def test_32_threads_of_100_calls_share_one_session_and_no_reply_crosses(server):
    first_pid = int(server.call("pid", {}).output)
    wrong: list[str] = []

    def calls(thread: int) -> None:
        for n in range(100):
            a = thread * 1000 + n
            result = server.call("add", {"a": a, "b": 1})
            if result.is_error or result.output != str(a + 1):
                wrong.append(f"thread {thread} call {n}: {result.output}")

    threads = [threading.Thread(target=calls, args=(each,)) for each in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_TIMEOUT * 6)
    assert not any(thread.is_alive() for thread in threads)
    assert wrong == []
    assert int(server.call("pid", {}).output) == first_pid  # one process, one session throughout


def test_a_timed_out_call_is_an_error_result_and_the_server_is_told(closing):
    server = closing(mcp.stdio(sdk_stdio_command(), timeout=0.5))
    server.tools()  # the start and handshake are not bounded by timeout
    result = server.call("slow", {"seconds": 30})
    assert result.is_error and "tool slow timed out after 0.5 s" in result.output
    assert server.call("cancellations", {"wait_s": 5}).output == "1"


def test_an_interrupt_returns_the_call_at_once_and_the_server_is_told(server):
    server.tools()
    ctx = ToolContext()
    threading.Timer(0.2, ctx.cancelled.set).start()
    result = server.call("slow", {"seconds": 30}, ctx)
    assert result.is_error and "interrupted" in result.output
    assert server.call("cancellations", {"wait_s": 5}).output == "1"


def test_interrupting_a_run_blocked_in_a_slow_mcp_tool_leaves_the_handle_idle_and_tells_the_server(server):
    started = threading.Event()
    model = ScriptedModel({"m": [{"tool_calls": [{"id": "c1", "name": "slow", "arguments": {"seconds": 30}}]}, {"content": "after"}]})
    hooks = {"before_tool": lambda **call: started.set()}
    rt = Runtime({"worker": {"does": "waits", "tools": server.tools()}}, generate=model, model="m", hooks=hooks)
    try:
        handle = rt.spawn(rt.root, "worker")
        rt.wake(handle, "go")
        assert started.wait(HANG_TIMEOUT)
        assert server.call("slow_started", {"wait_s": HANG_TIMEOUT}).output == "1"  # the call reached the server
        begun = time.monotonic()
        rt.interrupt(handle)
        result = rt.wait(handle, timeout=HANG_TIMEOUT)
        assert time.monotonic() - begun < PROMPT
        assert result.status == "interrupted"
        assert rt.inspect(handle).state == "idle"
        assert server.call("cancellations", {"wait_s": 5}).output == "1"
    finally:
        rt.close(rt.root)


def test_a_server_that_exits_mid_call_fails_every_call_in_flight_naming_its_exit_code_and_stderr(server):
    server.tools()
    waiting: dict[str, str] = {}
    slow = threading.Thread(target=lambda: waiting.update(slow=server.call("slow", {"seconds": 30}).output))
    slow.start()
    result = server.call("die", {"code": 3, "last_words": "the disk is on fire"})
    slow.join(HANG_TIMEOUT)
    for output in (result.output, waiting["slow"]):
        assert "exited with code 3" in output and "the disk is on fire" in output and "sdk" in output


def test_a_server_killed_mid_call_is_started_again_by_the_next_call(server):
    old = int(server.call("pid", {}).output)
    box: dict[str, str] = {}
    slow = threading.Thread(target=lambda: box.update(output=server.call("slow", {"seconds": 30}).output))
    slow.start()
    assert server.call("slow_started", {"wait_s": HANG_TIMEOUT}).output == "1"  # killed mid-call, not before it
    os.kill(old, signal.SIGKILL)
    slow.join(HANG_TIMEOUT)
    assert "killed by signal 9" in box["output"]
    new = int(server.call("pid", {}).output)
    assert new != old and process_gone(old)
    assert server.call("add", {"a": 1, "b": 1}).output == "2"


def test_close_leaves_no_process_and_no_zombie(closing):
    server = closing(mcp.stdio(sdk_stdio_command()))
    server.tools()
    pid = server.pid
    assert pid is not None and not process_gone(pid)
    run_in_thread(server.close)
    assert process_gone(pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped already: not a child any more
    assert server.pid is None


def test_a_closed_server_starts_again_on_its_next_use(server):
    first = int(server.call("pid", {}).output)
    server.close()
    assert int(server.call("pid", {}).output) != first


def test_the_same_code_works_from_inside_a_running_asyncio_loop(server):
    async def inside_a_loop() -> tuple[list[str], str]:
        names = [each.name for each in server.tools()]
        return names, server.call("add", {"a": 20, "b": 22}).output

    names, output = asyncio.run(inside_a_loop())
    assert "add" in names and output == "42"


def test_a_runtime_closes_the_servers_of_its_tools(closing):
    server = closing(mcp.stdio(sdk_stdio_command()))
    model = ScriptedModel({"m": [{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}]}, lambda request: {"content": tool_messages(request)[-1]}]})
    rt = Runtime({"calc": {"does": "adds", "tools": server.tools()}}, generate=model, model="m")
    assert rt.run_agent("calc", "1 + 2?").text == "3"
    pid = server.pid
    rt.close(rt.root)
    assert pid is not None and process_gone(pid) and server.pid is None


def test_a_client_closes_the_servers_of_the_toolkits_it_ran(closing):
    server = closing(mcp.stdio(sdk_stdio_command()))
    model = ScriptedModel({"m": [{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 2}}]}, lambda request: {"content": tool_messages(request)[-1]}]})
    client = Client(model="m", generate=model)
    assert client.run("2 + 2?", Toolkit(server.tools())).text == "4"
    pid = server.pid
    client.close()
    assert pid is not None and process_gone(pid)
