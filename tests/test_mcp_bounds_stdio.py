"""A stdio MCP server we do not control cannot exhaust or hold the client (CONTRACT §18
"Bounded peers"): a real hostile server process (``_mcp_hostile_server.py``), no mocks."""

from __future__ import annotations

import threading
import time

import pytest

from _mcp import hostile_command, peak_memory, process_gone
from conftest import HANG_TIMEOUT, run_in_thread
from toolnexus import ConfigError, ToolContext
from toolnexus import mcp
from toolnexus.mcp._stdio import EXIT_GRACE_S

MIB = 1 << 20
#: What the client may hold beyond the limit itself: a read, the decoding, its own objects.
MARGIN = 3 * MIB
#: An interrupt returns the call within 100 ms (CONTRACT §18).
INTERRUPT_S = 0.1


def test_a_200_mb_line_without_newline_fails_the_call_naming_the_limit_and_holds_about_the_limit(closing):
    server = closing(mcp.stdio(hostile_command("line", str(200 * MIB)), max_message_bytes=MIB, name="hostile"))
    server.tools()
    with peak_memory() as memory:
        result = run_in_thread(lambda: server.call("attack", {}))
    assert result.is_error and "max_message_bytes (1048576 bytes)" in result.output
    assert memory["peak"] < MIB + MARGIN


def test_after_a_line_over_the_limit_the_next_call_starts_the_server_again(closing):
    server = closing(mcp.stdio(hostile_command("line", str(4 * MIB)), max_message_bytes=MIB))
    first = server.tools() and server.pid
    assert server.call("attack", {}).is_error
    assert server.call("echo", {"text": "still here"}).output == "still here"
    assert server.pid != first and process_gone(first)


def test_a_stderr_line_without_newline_is_kept_cut_and_the_exit_still_named(closing):
    server = closing(mcp.stdio(hostile_command("stderr", str(64 * MIB)), max_message_bytes=MIB))
    server.tools()
    with peak_memory() as memory:
        result = run_in_thread(lambda: server.call("attack", {}))
    assert result.is_error and "exited with code 3" in result.output and "xxxx" in result.output
    assert memory["peak"] < MIB + MARGIN


def test_json_nested_past_any_decoder_is_passed_over_and_the_reply_after_it_arrives(closing):
    server = closing(mcp.stdio(hostile_command("deep")))
    server.tools()
    pid = server.pid
    assert server.call("attack", {}).output == "survived"
    assert server.pid == pid  # the same process: its reader lived through it


def _interrupted_after(server: mcp.MCPServer, delay: float) -> tuple[float, str]:
    """Call ``attack``, interrupt it ``delay`` s later: (seconds from interrupt to return, output)."""
    ctx = ToolContext()
    interrupted: list[float] = []

    def interrupt() -> None:
        interrupted.append(time.monotonic())
        ctx.cancelled.set()

    def call() -> tuple[float, str]:  # the return is timed in the calling thread, not after a join
        output = server.call("attack", {}, ctx).output
        return time.monotonic(), output

    timer = threading.Timer(delay, interrupt)
    timer.start()
    returned, output = run_in_thread(call)
    timer.join()
    return returned - interrupted[0], output


def test_an_interrupt_ends_a_call_to_a_server_that_floods_requests_and_stops_reading_within_100_ms(closing):
    server = closing(mcp.stdio(hostile_command("flood"), max_message_bytes=MIB))
    server.tools()
    latency, output = _interrupted_after(server, 0.5)  # by then the pipe to the server is full
    assert "interrupted" in output
    assert latency < INTERRUPT_S
    latency, output = _interrupted_after(server, 0.2)  # a second call, while nothing can be written
    assert "interrupted" in output
    assert latency < INTERRUPT_S


def test_a_timeout_holds_within_a_second_against_a_server_that_floods_and_stops_reading(closing):
    server = closing(mcp.stdio(hostile_command("flood"), timeout=1.0, max_message_bytes=MIB))
    server.tools()
    for _ in range(2):  # the second call's request cannot even be written
        begun = time.monotonic()
        result = run_in_thread(lambda: server.call("attack", {}))
        assert "timed out after 1 s" in result.output
        assert time.monotonic() - begun < 1.0 + 1.0


def test_close_ends_a_server_that_floods_and_stops_reading_within_its_grace_and_kill(closing):
    server = closing(mcp.stdio(hostile_command("flood"), timeout=0.5, max_message_bytes=MIB))
    server.tools()
    server.call("attack", {})
    pid = server.pid
    begun = time.monotonic()
    run_in_thread(server.close, timeout=HANG_TIMEOUT)
    assert time.monotonic() - begun < 2 * EXIT_GRACE_S + 1.0
    assert pid is not None and process_gone(pid)
    assert [each.name for each in threading.enumerate() if each.name.startswith(f"toolnexus-mcp-{pid}")] == []


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "8MiB"])
def test_max_message_bytes_must_be_a_positive_integer(limit):
    with pytest.raises(ConfigError, match="max_message_bytes"):
        mcp.stdio(["true"], max_message_bytes=limit)
    with pytest.raises(ConfigError, match="max_message_bytes"):
        mcp.http("http://127.0.0.1:1/mcp", max_message_bytes=limit)
