"""Token counts for a model reply whose server reported none: the library's estimate.

Some servers send no usage: llama-cpp-python ignores ``stream_options.include_usage``, so
its streamed replies carry none, and a few servers leave it out of plain replies too. A
cap on tokens or money must still hold, and a cost must not read ``0.0`` for what was
never measured, so such a reply is counted by an estimate that says it is one
(``Usage.estimated_calls``).

The estimate reads what was sent (the system prompt, the messages and the tool schemas, as
JSON) and what came back (the text, and each tool call's name and arguments) at
``CHARS_PER_TOKEN`` characters per token, rounded up. Tokenizers put about 3 to 4.5
characters of English and JSON in a token, and a server adds its chat template around the
messages: against llama-cpp-python serving Qwen2.5-Coder with a tool, the estimate came
within 10% of the server's own count (234 prompt tokens for 249, 393 for 386). It is an
estimate all the same, and a result says how many of its calls were counted so.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .data import ModelReply, Usage

#: Characters per token the estimate reckons with.
CHARS_PER_TOKEN = 3.0


def estimated(reply: ModelReply, system: str | None, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Usage:
    """The estimated usage of one model call (``estimated_calls`` 1): ``reply`` to a request
    of ``system``, ``messages`` and ``tools``."""
    sent = len(system or "") + _chars(messages) + (_chars(tools) if tools else 0)
    written = len(reply.text) + sum(len(call.name) + _chars(call.arguments) for call in reply.tool_calls)
    prompt = math.ceil(sent / CHARS_PER_TOKEN)
    completion = max(1, math.ceil(written / CHARS_PER_TOKEN))
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion, estimated_calls=1)


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))
