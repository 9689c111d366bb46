"""An MCP server over stdio (``toolnexus mcp serve``): one JSON-RPC message per line in,
each reply as a line out, both eras (CONTRACT §18b "stdio").

Requests are answered concurrently by a few threads of this loop's own, so that a long
agent run does not hold a ``tools/list``; replies are written whole, one at a time. A line
over ``max_body`` is refused (``-32600``) without being held. The loop ends at the end of
its input, once the requests in flight are answered.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from ..errors import WireError
from ..wire import parse_json
from . import _protocol as protocol
from ._pipes import bounded_lines
from ._responder import Responder

log = logging.getLogger("toolnexus")

#: Requests answered at once.
WORKERS = 8
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def serve(responder: Responder, stdin: IO[bytes], stdout: IO[bytes], *, max_body: int, principal: str = "") -> None:
    """Answer the messages of ``stdin`` on ``stdout`` until ``stdin`` ends."""
    writing = threading.Lock()  # guards: stdout

    def write(message: dict[str, Any] | None) -> None:
        if message is None:
            return
        data = (_ENCODE(message) + "\n").encode("utf-8")
        with writing:
            try:
                stdout.write(data)
                stdout.flush()
            except (OSError, ValueError):  # the client went away: nobody to answer
                log.debug("mcp stdio: the reply could not be written", exc_info=True)

    def answer(line: bytes) -> None:
        try:
            message = parse_json(line, what="a message")
        except WireError:
            write(protocol.error_reply(None, protocol.PARSE_ERROR, "Parse error"))
            return
        write(responder.respond(message, principal).message)

    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="toolnexus-mcp-serve") as pool:
        for line in bounded_lines(stdin, max_body, cut=True):
            if len(line) >= max_body and not line.endswith(b"\n"):
                write(protocol.error_reply(None, protocol.INVALID_REQUEST, f"A message over {max_body} bytes"))
            elif line.strip():
                pool.submit(answer, bytes(line))
