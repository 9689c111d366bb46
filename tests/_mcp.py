"""MCP servers for the tests, each a real process: the official Python SDK's server (over
stdio, or over Streamable HTTP under uvicorn), the reference server from npm, and a small
server written against the wire format for the protocol's corners."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Iterator

from _services import missing, service_url

HERE = Path(__file__).parent
STARTUP_S = 30.0


def require_sdk() -> None:
    """The official SDK (the ``mcp`` test extra): skipped without it, failed under CI."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        missing("the mcp package (the test extra) is not installed: pip install -e '.[test]'")


def sdk_stdio_command() -> list[str]:
    require_sdk()
    return [sys.executable, str(HERE / "_mcp_server.py"), "stdio"]


def raw_command(*args: str) -> list[str]:
    return [sys.executable, str(HERE / "_mcp_raw_server.py"), *args]


def hostile_command(*args: str) -> list[str]:
    """``_mcp_hostile_server.py``: a stdio server that turns hostile on its ``attack`` tool."""
    return [sys.executable, str(HERE / "_mcp_hostile_server.py"), *args]


@contextlib.contextmanager
def peak_memory() -> Iterator[dict[str, int]]:
    """``box["peak"]``: the most memory Python objects held at once during the block, over
    what they held when it began (every thread counted)."""
    box: dict[str, int] = {}
    tracemalloc.start()
    try:
        begun = tracemalloc.get_traced_memory()[0]
        yield box
        box["peak"] = tracemalloc.get_traced_memory()[1] - begun
    finally:
        tracemalloc.stop()


def everything_command() -> list[str]:
    """The reference server ``@modelcontextprotocol/server-everything`` over stdio."""
    return ["node", service_url("mcp-everything"), "stdio"]


@contextlib.contextmanager
def sdk_http_server(mode: str = "http", ttl_ms: int = 0) -> Iterator[str]:
    """The SDK's server under uvicorn on 127.0.0.1 (``mode``: ``http``, ``http-json`` or
    ``http-sse``, see ``_mcp_server.py``): yields its MCP endpoint URL."""
    require_sdk()
    env = {**os.environ, "TOOLNEXUS_TEST_MCP_TTL_MS": str(ttl_ms)}
    with _port_printing([sys.executable, str(HERE / "_mcp_server.py"), mode], env, "the SDK's HTTP server") as port:
        yield f"http://127.0.0.1:{port}/mcp"


def mcp1_command() -> list[str]:
    """The SDK's 1.x server (handshake era only) over stdio, run by its own interpreter."""
    return [service_url("mcp1-python"), str(HERE / "_mcp1_server.py"), "stdio"]


@contextlib.contextmanager
def mcp1_http_server() -> Iterator[str]:
    """The SDK's 1.x server with sessions under uvicorn: yields its MCP endpoint URL."""
    command = [*mcp1_command()[:2], "http"]
    with _port_printing(command, dict(os.environ), "the mcp 1.x HTTP server") as port:
        yield f"http://127.0.0.1:{port}/mcp"


@contextlib.contextmanager
def _port_printing(command: list[str], env: dict[str, str], what: str) -> Iterator[int]:
    """Run a server that prints its port first; stopped (killed if need be) and reaped after."""
    errors = tempfile.TemporaryFile()  # a pipe nobody reads could fill and stall the server
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, env=env)
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], STARTUP_S)
        line = process.stdout.readline() if ready else b""
        if not line.strip().isdigit():
            process.kill()
            errors.seek(0)
            raise AssertionError(f"{what} did not start: {errors.read().decode()[-2000:]}")
        yield int(line)
    finally:
        errors.close()
        process.terminate()  # uvicorn of mcp 1.x ignores it while a stream is open: then killed
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wrong_sums(server, threads: int, calls: int) -> list[str]:
    """``calls`` ``add`` calls from each of ``threads`` threads sharing ``server``: the
    outputs that are not the sum asked (a reply that crossed to another call)."""
    import threading

    wrong: list[str] = []

    def work(thread: int) -> None:
        for n in range(calls):
            result = server.call("add", {"a": thread * 100 + n, "b": 1})
            if result.output != str(thread * 100 + n + 1):
                wrong.append(result.output)

    workers = [threading.Thread(target=work, args=(each,)) for each in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60 * 3)
    return wrong


def process_gone(pid: int) -> bool:
    """Whether no process (not even a zombie awaiting its reaping) has ``pid``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("X",) and not os.path.exists(f"/proc/{pid}")


def children() -> set[int]:
    """The process ids of this process's children (every thread's), from /proc."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            found.update(int(each) for each in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found
