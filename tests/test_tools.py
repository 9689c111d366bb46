"""Tools and result helpers (CONTRACT §2)."""

from __future__ import annotations

import threading

from toolnexus.data import Answer, ToolResult, make_request
from toolnexus._tools.tools import Tool, ToolContext, failure, is_suspension, sanitize_name, success, suspend, tool


def test_tool_as_bare_decorator():
    @tool
    def add(a: int, b: int = 1) -> int:
        """Add two numbers.

        More text."""
        return a + b

    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert add.input_schema == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}},
        "required": ["a"],
    }
    assert add.source == "native"
    assert add.execute({"a": 2, "b": 3}, ToolContext()) == "5"


def test_tool_decorator_with_name():
    @tool(name="lookup")
    def find(q: str) -> str:
        """Find it."""
        return q.upper()

    assert find.name == "lookup"
    assert find.description == "Find it."
    assert find.execute({"q": "x"}, ToolContext()) == "X"


def test_tool_call_form_with_overrides():
    def fn(q: str) -> str:
        """Ignored docstring."""
        return q

    schema = {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}, "required": ["q"]}
    built = tool(fn, name="search", description="Search things.", input_schema=schema)
    assert (built.name, built.description, built.input_schema) == ("search", "Search things.", schema)
    assert built.execute({"q": "hi"}, ToolContext()) == "hi"


def test_tool_call_form_without_overrides_infers_everything():
    def echo(text: str) -> str:
        """Echo text."""
        return text

    built = tool(echo)
    assert (built.name, built.description) == ("echo", "Echo text.")
    assert built.input_schema["required"] == ["text"]


def test_tool_names_are_sanitised():
    assert sanitize_name("my tool.v2") == "my_tool_v2"
    assert Tool("my tool.v2", "d", None, lambda args, ctx: "x").name == "my_tool_v2"
    assert tool(lambda: "x", name="my tool.v2").name == "my_tool_v2"


def test_sanitising_keeps_letters_digits_underscore_and_dash():
    assert sanitize_name("Ab_9-z") == "Ab_9-z"
    assert sanitize_name("a/b:c é") == "a_b_c__"


def test_tool_without_schema_gets_an_empty_object_schema():
    assert Tool("t", "d", None, lambda args, ctx: "x").input_schema == {"type": "object", "properties": {}}


def test_function_taking_ctx_receives_the_tool_context():
    seen = {}

    @tool
    def approve(item: str, ctx) -> str:
        seen["ctx"] = ctx
        return item

    answer = Answer(id="req_1", ok=True)
    ctx = ToolContext(answer=answer, handle_id="root/a.1")
    assert approve.execute({"item": "x"}, ctx) == "x"
    assert seen["ctx"] is ctx
    assert seen["ctx"].answer is answer
    assert seen["ctx"].handle_id == "root/a.1"
    assert isinstance(seen["ctx"].cancelled, threading.Event)


def test_tool_context_defaults():
    ctx = ToolContext()
    assert ctx.answer is None
    assert ctx.handle_id is None
    assert isinstance(ctx.cancelled, threading.Event) and not ctx.cancelled.is_set()
    assert ToolContext().cancelled is not ctx.cancelled


def test_success_shape():
    assert success("done") == ToolResult(output="done", is_error=False, metadata=None)
    assert success("done", rows=3) == ToolResult(output="done", is_error=False, metadata={"rows": 3})


def test_failure_shape():
    assert failure("boom") == ToolResult(output="boom", is_error=True, metadata=None)
    assert failure("boom", code=2) == ToolResult(output="boom", is_error=True, metadata={"code": 2})


def test_suspend_shape_uses_the_prompt_as_output():
    request = make_request("approval", "Deploy?")
    result = suspend(request)
    assert result == ToolResult(output="Deploy?", is_error=True, metadata={"pending": request})
    assert result.pending is request
    assert is_suspension(result)


def test_suspend_with_explicit_output():
    request = make_request("approval", "Deploy?")
    assert suspend(request, output="waiting for approval").output == "waiting for approval"


def test_plain_failure_is_not_a_suspension():
    assert not is_suspension(failure("boom", pending="not a request"))


def test_returned_non_str_value_is_rendered_as_json():
    @tool
    def data() -> dict:
        return {"a": [1, 2], "b": "é"}

    assert data.execute({}, ToolContext()) == '{"a": [1, 2], "b": "é"}'


def test_returned_tool_result_passes_through():
    @tool
    def bad() -> ToolResult:
        return failure("nope")

    assert bad.execute({}, ToolContext()) == ToolResult(output="nope", is_error=True)
