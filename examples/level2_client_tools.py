"""Level 2: a bare ``Client`` with tools — the tool-calling loop, no agents.

Runs offline on a scripted in-process model. To use a real endpoint, replace
``generate=model`` with ``base_url="http://localhost:11434/v1"`` (any OpenAI-compatible
server) and a real model name; the key comes from OPENAI_API_KEY.

    python examples/level2_client_tools.py
"""

from __future__ import annotations

from toolnexus import Client, Toolkit, ToolContext, make_answer, make_request, suspend, tool
from toolnexus.testing import ScriptedModel, tool_messages


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return {"Paris": "18°C, light rain", "Oslo": "4°C, clear"}.get(city, "unknown")


@tool
def to_fahrenheit(celsius: float) -> str:
    """Convert Celsius to Fahrenheit."""
    return f"{celsius * 9 / 5 + 32:.1f}°F"


@tool
def book_table(restaurant: str, ctx: ToolContext):
    """Book a table. A person has to confirm first."""
    if ctx.answer is None:  # first call: ask, and let the run stop as "pending"
        return suspend(make_request("confirm", f"Book a table at {restaurant}?"))
    return f"booked {restaurant}" if ctx.answer.ok else "not booked"


def scripted(request: dict) -> dict:
    """Stands in for the model: ask for tools first, then answer from their results."""
    results = tool_messages(request)
    asked = request["messages"][-1]["content"] if not results else ""
    if not results and "book" in asked:
        return {"tool_calls": [{"name": "book_table", "arguments": {"restaurant": "Chez Lu"}}]}
    if not results:  # two calls in one turn: they run concurrently
        return {"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}, {"name": "to_fahrenheit", "arguments": {"celsius": 18}}]}
    return {"content": "Result: " + "; ".join(results)}


def main() -> None:
    model = ScriptedModel({"scripted": scripted}, usage={"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50})
    tools = Toolkit([weather, to_fahrenheit, book_table])

    with Client(generate=model, model="scripted", system_prompt="You are a concise assistant.") as client:
        # 1. The loop: model -> tool calls (concurrent) -> model -> final text.
        result = client.run("What's the weather in Paris, in Fahrenheit too?", tools)
        print(result.text)
        print(f"status={result.status} turns={result.turns} tool calls={[c.name for c in result.tool_calls]} tokens={result.usage.total_tokens}")
        assert result.status == "done" and result.tool_call_count == 2

        # 2. Suspension: without wait_for the run stops "pending" with the request...
        pending = client.run("Please book a table for two.", tools)
        print(f"status={pending.status}: {pending.pending.prompt}")
        assert pending.status == "pending"

        # ...and later (another request, another process with a store) it resumes.
        answer = make_answer(pending.pending.id, True)
        done = client.resume(pending.pending, answer, tools, messages=pending.messages)
        print(done.text)
        assert done.status == "done" and "booked Chez Lu" in done.text

        # 3. Metrics, Prometheus text.
        assert "toolnexus_tool_calls_total" in client.metrics()

    print("OK level 2: client loop, concurrent tools, suspend and resume")


if __name__ == "__main__":
    main()
