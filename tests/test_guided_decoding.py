"""Typed output keeps tools usable on a server with guided decoding (CONTRACT §17 "Tools
stay usable"). The local server here behaves as vLLM does with ``response_format``: when a
request carries one, the reply is constrained to JSON of that schema, so it never calls a
tool; without one it calls tools like any tool-capable model."""

from __future__ import annotations

import json
import threading
from decimal import Decimal

import attrs

from toolnexus import Client, tool
from toolnexus.testing import ScriptedLLMServer, completion

ORDERS = {"A-1001": {"total": "19.90", "damaged": True}}


@attrs.frozen
class Decision:
    refund: bool
    amount: Decimal
    reason: str


def value_for(schema):
    """What guided decoding makes of a schema without knowing anything: the least value of
    each required property's type."""
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: value_for(schema["properties"][name]) for name in schema.get("required", [])}
    return {"boolean": False, "number": 0, "integer": 0, "string": "", "array": []}.get(kind, None)


class GuidedServer:
    """A tool-calling model that looks the order up, then decides; under ``response_format``
    it can only write schema JSON (as a server with guided decoding does)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.bodies = []

    def __call__(self, body):
        with self.lock:
            self.bodies.append(body)
        format_ = body.get("response_format")
        if format_ is not None:
            schema = format_["json_schema"]["schema"]
            return completion(body, {"role": "assistant", "content": json.dumps(value_for(schema))}, "stop")
        names = {t["function"]["name"] for t in body.get("tools", [])}
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not results:
            call = {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": json.dumps({"order": "A-1001"})}}
            return completion(body, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
        order = json.loads(results[0])
        decision = {"refund": order["damaged"], "amount": order["total"], "reason": "damaged in transit"}
        if "final_result" in names:
            call = {"id": "call_2", "type": "function", "function": {"name": "final_result", "arguments": json.dumps(decision)}}
            return completion(body, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
        return completion(body, {"role": "assistant", "content": json.dumps(decision)}, "stop")


looked_up: list[str] = []


@tool
def lookup_order(order: str) -> dict:
    """Look an order up by its number."""
    looked_up.append(order)
    return ORDERS[order]


SCHEMA = {"type": "object", "properties": {"refund": {"type": "boolean"}, "amount": {"type": "string"}, "reason": {"type": "string"}}, "required": ["refund", "amount", "reason"]}
RAW_FORMAT = {"response_format": {"type": "json_schema", "json_schema": {"name": "decision", "schema": SCHEMA}}}


def test_a_typed_run_still_calls_its_tools_and_returns_a_valid_value(closing):
    looked_up.clear()
    server = closing(ScriptedLLMServer(GuidedServer()))
    with Client(base_url=server.base_url, model="m", api_key="k") as client:
        result = client.run("Settle the complaint about order A-1001", [lookup_order], output=Decision)
    assert looked_up == ["A-1001"]
    assert result.status == "done"
    assert result.output == Decision(refund=True, amount=Decimal("19.90"), reason="damaged in transit")


def test_the_same_run_with_a_raw_response_format_never_calls_its_tools(closing):
    looked_up.clear()
    server = closing(ScriptedLLMServer(GuidedServer()))
    with Client(base_url=server.base_url, model="m", api_key="k", request_params=RAW_FORMAT) as client:
        result = client.run("Settle the complaint about order A-1001", [lookup_order])
    assert looked_up == [] and result.tool_call_count == 0
    assert json.loads(result.text) == {"refund": False, "amount": "", "reason": ""}  # a guess, not the order
