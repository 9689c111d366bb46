"""What a hostile MCP server costs the client: memory, time past ``timeout``, interrupt latency.

The servers are the tests' own hostile ones: raw-socket HTTP endpoints in this process
(``tests/_mcp_hostile_http.py``) and a stdio child process (``tests/_mcp_hostile_server.py``).
For each limit given, it reports the most memory the client's Python objects held at once
(``tracemalloc``, every thread, over what they held before the call) while a call met an
endless chunked JSON body, one endless SSE event, a gzip body that decodes to 64 MiB, and a
200 MiB stdio line without a newline. Then, with ``timeout=1``, how long a call took against
a body that drips, a stream of keep-alives only, headers that never end, and a stdio server
that floods requests and stops reading; the time from an interrupt to the return of a call
against that stdio server and against an endless HTTP body; and how long ``close()`` took to
end that stdio server.

Usage: ``python benchmarks/mcp_hostile.py [--limits-mib 1 8] [--samples N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import _mcp_hostile_http as hostile  # noqa: E402
from _mcp import hostile_command  # noqa: E402
from _rawserver import RawServer  # noqa: E402

from mcp_calls import interrupt_latency  # noqa: E402
from toolnexus import mcp

MIB = 1 << 20


def over_http(attack: hostile.Attack, call: Callable[[mcp.MCPServer], Any], **options: Any) -> Any:
    """``call(server)`` against a raw endpoint that attacks every ``tools/call``."""
    with RawServer(hostile.mcp_endpoint(attack)) as endpoint:
        server = mcp.http(f"http://127.0.0.1:{endpoint.port}/mcp", **options)
        try:
            server.tools()
            return call(server)
        finally:
            server.close()


def over_stdio(args: list[str], call: Callable[[mcp.MCPServer], Any], **options: Any) -> Any:
    server = mcp.stdio(hostile_command(*args), **options)
    try:
        server.tools()
        return call(server)
    finally:
        server.close()


def peak_mib(server: mcp.MCPServer) -> tuple[float, float]:
    """(peak MiB held during one ``attack`` call, seconds it took); the call must fail naming the limit."""
    tracemalloc.start()
    try:
        begun_bytes = tracemalloc.get_traced_memory()[0]
        begun = time.perf_counter()
        result = server.call("attack", {})
        took = time.perf_counter() - begun
        peak = tracemalloc.get_traced_memory()[1] - begun_bytes
    finally:
        tracemalloc.stop()
    assert result.is_error and "max_message_bytes" in result.output, result.output
    return round(peak / MIB, 2), round(took, 3)


def call_seconds(server: mcp.MCPServer) -> float:
    begun = time.perf_counter()
    result = server.call("attack", {})
    assert "timed out" in result.output, result.output
    return round(time.perf_counter() - begun, 3)


def interrupt_ms(server: mcp.MCPServer, samples: int) -> list[float]:
    """Milliseconds from ``ctx.cancelled.set()`` to the return of an ``attack`` call."""
    return interrupt_latency(server, samples, tool="attack", arguments={}, after=0.1)


def close_seconds() -> float:
    server = mcp.stdio(hostile_command("flood"), timeout=0.5)
    server.tools()
    server.call("attack", {})
    begun = time.perf_counter()
    server.close()
    return round(time.perf_counter() - begun, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limits-mib", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    memory: dict[str, Any] = {}
    for limit in args.limits_mib:
        options = {"max_message_bytes": limit * MIB, "timeout": 20}
        hostile.bomb()  # made before any measure
        memory[f"{limit} MiB"] = {
            "http endless json": over_http(hostile.endless_json, peak_mib, **options),
            "http endless event": over_http(hostile.endless_event, peak_mib, **options),
            "http gzip bomb": over_http(hostile.compressed_bomb, peak_mib, **options),
            "stdio 200 MiB line": over_stdio(["line", str(200 * MIB)], peak_mib, **options),
        }
    timeouts = {
        "http dripping body": over_http(hostile.dripping_body, call_seconds, timeout=1.0),
        "http keep-alives only": over_http(hostile.endless_keepalives, call_seconds, timeout=1.0),
        "http dripping headers": over_http(hostile.dripping_headers, call_seconds, timeout=1.0),
        "stdio flood, not reading": over_stdio(["flood"], call_seconds, timeout=1.0),
    }
    stdio_latency = over_stdio(["flood"], lambda server: interrupt_ms(server, args.samples))
    http_latency = over_http(hostile.dripping_body, lambda server: interrupt_ms(server, args.samples))
    report = {
        "peak_mib_and_seconds": memory,
        "seconds_with_timeout_1": timeouts,
        "interrupt_ms": {
            label: {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}
            for label, values in (("stdio flood, not reading", stdio_latency), ("http dripping body", http_latency))
        },
        "close_s_stdio_flood": close_seconds(),
        "samples": args.samples,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for limit, rows in memory.items():
        for label, (peak, took) in rows.items():
            print(f"max_message_bytes={limit:6s} {label:22s} peak {peak:6.2f} MiB, refused after {took:.3f} s")
    for label, took in timeouts.items():
        print(f"timeout=1   {label:26s} call took {took:.3f} s")
    for label, row in report["interrupt_ms"].items():
        print(f"interrupt   {label:26s} median {row['median']} ms, max {row['max']} ms ({args.samples} samples)")
    print(f"close() of a stdio server that floods and stops reading: {report['close_s_stdio_flood']} s")


if __name__ == "__main__":
    main()
