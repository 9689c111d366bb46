"""A typed team for the typed-output tests, usable here and from a child process
(``python tests/_typed_team.py settle STATE RUNTIME_ID`` prints one JSON line).

buyer asks two suppliers for a ``Quote`` each (in one step), then gives its own ``Choice``:
the cheaper quote. alpha answers through ``final_result``; beta answers in plain JSON text.
"""

from __future__ import annotations

import json
import os
import sys
from decimal import Decimal
from typing import Any

import attrs

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolnexus import AgentDef, Runtime  # noqa: E402
from toolnexus.testing import ScriptedModel, tool_messages  # noqa: E402


@attrs.frozen
class Quote:
    supplier: str
    price: Decimal
    days: int


@attrs.frozen
class Choice:
    """The offer to take."""

    supplier: str
    price: Decimal
    reason: str


def registry() -> dict[str, AgentDef]:
    return {
        "buyer": AgentDef("buyer", "Picks the best offer", team=["alpha", "beta"], output=Choice),
        "alpha": AgentDef("alpha", "Quotes for supplier Alpha", model="alpha", output=Quote),
        "beta": AgentDef("beta", "Quotes for supplier Beta", model="beta", output=Quote),
    }


def _choose(request: dict[str, Any]) -> dict[str, Any]:
    quotes = [json.loads(text) for text in tool_messages(request)]
    best = min(quotes, key=lambda q: Decimal(str(q["price"])))
    args = {"supplier": best["supplier"], "price": best["price"], "reason": f"cheapest of {len(quotes)}"}
    return {"tool_calls": [{"id": "f1", "name": "final_result", "arguments": args}]}


def model() -> ScriptedModel:
    ask = {"tool_calls": [
        {"id": "t1", "name": "task", "arguments": {"agent": "alpha", "prompt": "Quote 10 chairs"}},
        {"id": "t2", "name": "task", "arguments": {"agent": "beta", "prompt": "Quote 10 chairs"}},
    ]}  # fmt: skip
    alpha = {"tool_calls": [{"id": "q1", "name": "final_result", "arguments": {"supplier": "Alpha", "price": "41.50", "days": 3}}]}
    beta = {"content": '{"supplier": "Beta", "price": 39.90, "days": 5}'}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return ScriptedModel({"buyer": [ask, _choose], "alpha": [alpha], "beta": [beta]}, usage=usage)


def settle(state: str, runtime_id: str) -> dict[str, Any]:
    with Runtime(registry(), model="buyer", generate=model(), state=state, runtime_id=runtime_id) as rt:
        handle = rt.spawn(rt.root, "buyer")
        rt.wake(handle, "Buy 10 chairs")
        result = rt.wait(handle, timeout=30)
        return {"handle": handle.id, "status": result.status, "text": result.text}


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "settle":
        print(json.dumps(settle(*args)))
    else:
        raise SystemExit(f"unknown command {command!r}")
