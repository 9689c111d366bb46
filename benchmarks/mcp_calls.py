"""MCP tool calls per second: toolnexus against the official SDK, as a client and as a server.

Both clients talk to the same server program (the SDK's own server, ``tests/_mcp_server.py``,
one process per client, each kept for the whole run) and make the same ``add`` calls: from
1 thread and from 8 threads for toolnexus, from 1 task and from 8 concurrent tasks for the
SDK's asyncio client (its one session driven by an event loop on a thread of its own).
Rounds alternate the four measurements so that they share the machine's noise; the report
gives the median calls per second of each and the ratios, measured side by side in one run.
It also gives the median time from an interrupt (``ctx.cancelled`` set) to the return of a
call blocked in a slow tool.

The served side (``--side served``): the same ``add`` calls over Streamable HTTP (MCP
2026-07-28, JSON replies) to ``toolnexus.mcp.wsgi_app`` under gunicorn (one process,
``gthread`` with 8 threads) and to the SDK's own server (stateless, under uvicorn, one
process), both on this machine, from 1 and 8 threads of one toolnexus client each. (On a
kept-alive connection the SDK's server takes about 45 ms a call, its own client's calls
included: most of a 1-thread gap is that wait, not work.)

Usage: ``python benchmarks/mcp_calls.py [--side client|served|both] [--rounds R] [--calls N] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
SERVER = [sys.executable, str(ROOT / "tests" / "_mcp_server.py"), "stdio"]

from _rates import medians_of, per_second
from toolnexus import ToolContext
from toolnexus import mcp


def ours(server: mcp.MCPServer, calls: int, threads: int) -> float:
    """Calls per second from ``threads`` threads sharing ``server``'s one session."""

    def work(offset: int) -> None:
        result = server.call("add", {"a": offset, "b": 1})
        assert result.output == str(offset + 1), result.output

    return per_second(threads, calls // threads, work)


class SDKClient:
    """The official SDK's ``ClientSession`` over stdio, on an event loop of its own thread."""

    def __init__(self) -> None:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._stop = asyncio.Event()
        ready: asyncio.Future[Any] = asyncio.run_coroutine_threadsafe(self._open(ClientSession, StdioServerParameters, stdio_client), self._loop)  # type: ignore[assignment]
        self._session, self._closed = ready.result(60)

    async def _open(self, ClientSession: Any, Params: Any, stdio_client: Any) -> tuple[Any, asyncio.Future[None]]:
        opened: asyncio.Future[Any] = self._loop.create_future()
        closed: asyncio.Future[None] = self._loop.create_future()

        async def hold() -> None:
            async with stdio_client(Params(command=SERVER[0], args=SERVER[1:])) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    opened.set_result(session)
                    await self._stop.wait()
            closed.set_result(None)

        self._holder = self._loop.create_task(hold())
        return await opened, closed

    def measure(self, calls: int, tasks: int) -> float:
        async def run() -> float:
            each = calls // tasks

            async def work(offset: int) -> None:
                for n in range(each):
                    result = await self._session.call_tool("add", {"a": offset + n, "b": 1})
                    assert result.content[0].text == str(offset + n + 1)

            begun = time.perf_counter()
            await asyncio.gather(*(work(t * 100000) for t in range(tasks)))
            return each * tasks / (time.perf_counter() - begun)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(600)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(self._closed), 30), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def interrupt_latency(
    server: mcp.MCPServer, samples: int, tool: str = "slow", arguments: dict[str, Any] | None = None, after: float = 0.05
) -> list[float]:
    """Milliseconds from ``ctx.cancelled.set()``, ``after`` s into a call of ``tool`` (by
    default ``slow`` for 30 s), to the call's return."""
    found: list[float] = []
    for _ in range(samples):
        ctx = ToolContext()
        set_at: list[float] = []

        def cancel() -> None:
            set_at.append(time.perf_counter())
            ctx.cancelled.set()

        timer = threading.Timer(after, cancel)
        timer.start()
        result = server.call(tool, {"seconds": 30} if arguments is None else arguments, ctx)
        found.append((time.perf_counter() - set_at[0]) * 1000)
        assert result.is_error and "interrupted" in result.output, result.output
        timer.join()
    return found


def client_side(rounds: int, calls: int) -> dict[str, Any]:
    server = mcp.stdio(SERVER, name="sdk-server")
    server.tools()
    sdk = SDKClient()
    plans: dict[str, Callable[[], float]] = {
        "toolnexus, 1 thread": lambda: ours(server, calls, 1),
        "sdk client, 1 task": lambda: sdk.measure(calls, 1),
        "toolnexus, 8 threads": lambda: ours(server, calls, 8),
        "sdk client, 8 tasks": lambda: sdk.measure(calls, 8),
    }
    try:
        medians = medians_of(plans, rounds)
        latency = interrupt_latency(server, 20)
    finally:
        sdk.close()
        server.close()
    return {
        "calls_per_s": {label: round(value, 1) for label, value in medians.items()},
        "ratio_1": round(medians["toolnexus, 1 thread"] / medians["sdk client, 1 task"], 2),
        "ratio_8": round(medians["toolnexus, 8 threads"] / medians["sdk client, 8 tasks"], 2),
        "interrupt_ms_median": round(statistics.median(latency), 2),
        "interrupt_ms_max": round(max(latency), 2),
    }


def served_side(rounds: int, calls: int) -> dict[str, Any]:
    """Our WSGI app and the SDK's server, each called by one toolnexus client."""
    from _gunicorn import free_port, serving
    from _mcp import sdk_http_server

    port = free_port()
    env = {"MCP_TEST_SECRET": "benchmark-secret-0123456789"}
    flags = ("-w", "1", "-k", "gthread", "--threads", "8")
    with serving(port, str(ROOT / "tests"), "_mcp_served_app:app", *flags, env=env), sdk_http_server("http-json") as sdk_url:
        theirs = mcp.http(sdk_url, name="sdk-server")
        mine = mcp.http(f"http://127.0.0.1:{port}/mcp", name="toolnexus-server")
        try:
            assert mine.call("add", {"a": 1, "b": 2}).output == "3" and theirs.call("add", {"a": 1, "b": 2}).output == "3"
            plans: dict[str, Callable[[], float]] = {
                "wsgi_app, 1 thread": lambda: ours(mine, calls, 1),
                "sdk server, 1 thread": lambda: ours(theirs, calls, 1),
                "wsgi_app, 8 threads": lambda: ours(mine, calls, 8),
                "sdk server, 8 threads": lambda: ours(theirs, calls, 8),
            }
            medians = medians_of(plans, rounds)
        finally:
            mine.close()
            theirs.close()
    return {
        "calls_per_s": {label: round(value, 1) for label, value in medians.items()},
        "ratio_1": round(medians["wsgi_app, 1 thread"] / medians["sdk server, 1 thread"], 2),
        "ratio_8": round(medians["wsgi_app, 8 threads"] / medians["sdk server, 8 threads"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", choices=("client", "served", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=800, help="calls per measurement")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    report: dict[str, Any] = {"rounds": args.rounds, "calls": args.calls}
    if args.side in ("client", "both"):
        report["client"] = client_side(args.rounds, args.calls)
    if args.side in ("served", "both"):
        report["served"] = served_side(args.rounds, args.calls)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    client, served = report.get("client"), report.get("served")
    if client is not None:
        print("client side: one stdio session to the SDK's server")
        for label, value in client["calls_per_s"].items():
            print(f"  {label:24s} {value:8.1f} calls/s (median of {args.rounds})")
        print(f"  ratio toolnexus / sdk, 1 thread vs 1 task:   {client['ratio_1']:.2f}")
        print(f"  ratio toolnexus / sdk, 8 threads vs 8 tasks: {client['ratio_8']:.2f}")
        print(f"  interrupt to return of a blocked call: median {client['interrupt_ms_median']} ms, max {client['interrupt_ms_max']} ms (20 samples)")
    if served is not None:
        print("served side: Streamable HTTP (2026-07-28, JSON), one toolnexus client")
        for label, value in served["calls_per_s"].items():
            print(f"  {label:24s} {value:8.1f} calls/s (median of {args.rounds})")
        print(f"  ratio wsgi_app / sdk server, 1 thread:  {served['ratio_1']:.2f}")
        print(f"  ratio wsgi_app / sdk server, 8 threads: {served['ratio_8']:.2f}")


if __name__ == "__main__":
    main()
