"""Toolkit (CONTRACT §2)."""

from __future__ import annotations

from toolnexus.data import ToolResult
from toolnexus._tools.toolkit import Toolkit
from toolnexus._tools.tools import Tool, ToolContext, tool

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def make(name: str, output: str = "ok", description: str = "d") -> Tool:
    return Tool(name, description, SCHEMA, lambda args, ctx: output)


def test_tools_and_tool_names_keep_registration_order():
    a, b = make("alpha"), make("beta")
    kit = Toolkit([a, b])
    assert kit.tools() == [a, b]
    assert kit.tool_names() == ["alpha", "beta"]


def test_get_returns_the_tool_or_none():
    a = make("alpha")
    kit = Toolkit([a])
    assert kit.get("alpha") is a
    assert kit.get("missing") is None


def test_register_adds_a_tool():
    kit = Toolkit()
    b = make("beta")
    assert kit.register(b) is True
    assert kit.get("beta") is b
    assert kit.tool_names() == ["beta"]


def test_duplicate_names_first_wins():
    first, second = make("dup", output="first"), make("dup", output="second")
    kit = Toolkit([first, second])
    assert kit.tools() == [first]
    assert kit.register(make("dup", output="third")) is False
    assert kit.execute("dup", {"q": "x"}).output == "first"


def test_execute_unknown_name_is_an_error_naming_known_tools():
    kit = Toolkit([make("alpha"), make("beta")])
    result = kit.execute("gamma", {})
    assert result.is_error
    assert "gamma" in result.output
    assert "alpha" in result.output and "beta" in result.output


def test_execute_non_dict_args_is_an_error_and_the_tool_is_not_called():
    calls = []
    kit = Toolkit([Tool("t", "d", SCHEMA, lambda args, ctx: calls.append(args) or "ran")])
    for bad in (["x"], "x", None, 3):
        result = kit.execute("t", bad)
        assert result.is_error
        assert "invalid arguments" in result.output
    assert calls == []


def test_execute_raising_tool_is_an_error_with_the_message():
    def explode(args, ctx):
        raise RuntimeError("disk on fire")

    result = Toolkit([Tool("t", "d", SCHEMA, explode)]).execute("t", {})
    assert result.is_error
    assert "disk on fire" in result.output


def test_execute_str_return_is_success():
    assert Toolkit([make("t", output="hello")]).execute("t", {"q": "x"}) == ToolResult(output="hello")


def test_execute_tool_result_return_passes_through():
    returned = ToolResult(output="x", is_error=True, metadata={"k": 1})
    assert Toolkit([Tool("t", "d", SCHEMA, lambda args, ctx: returned)]).execute("t", {}) is returned


def test_execute_passes_args_and_context_to_the_tool():
    seen = {}

    def run(args, ctx):
        seen.update(args=args, ctx=ctx)
        return "ok"

    ctx = ToolContext(handle_id="root")
    Toolkit([Tool("t", "d", SCHEMA, run)]).execute("t", {"q": "x"}, ctx)
    assert seen == {"args": {"q": "x"}, "ctx": ctx}


def test_execute_without_context_supplies_a_fresh_one():
    seen = {}

    @tool
    def t(ctx) -> str:
        seen["ctx"] = ctx
        return "ok"

    assert Toolkit([t]).execute("t", {}).output == "ok"
    assert isinstance(seen["ctx"], ToolContext)


def test_to_openai_exact_shape():
    kit = Toolkit([make("alpha", description="First."), make("beta", description="Second.")])
    assert kit.to_openai() == [
        {"type": "function", "function": {"name": "alpha", "description": "First.", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "beta", "description": "Second.", "parameters": SCHEMA}},
    ]


def test_to_anthropic_exact_shape():
    kit = Toolkit([make("alpha", description="First."), make("beta", description="Second.")])
    assert kit.to_anthropic() == [
        {"name": "alpha", "description": "First.", "input_schema": SCHEMA},
        {"name": "beta", "description": "Second.", "input_schema": SCHEMA},
    ]


def test_empty_toolkit_has_no_schemas():
    kit = Toolkit()
    assert kit.tools() == [] and kit.tool_names() == []
    assert kit.to_openai() == [] and kit.to_anthropic() == []
