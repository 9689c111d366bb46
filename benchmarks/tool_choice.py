"""Which ``tool_choice`` values a running model server accepts, and what its model does with each.

    python benchmarks/tool_choice.py --base-url http://127.0.0.1:8080/v1 --model m
    python benchmarks/tool_choice.py --base-url http://127.0.0.1:8000/v1 --model m --runs 5

For each of ``"auto"``, ``"required"``, ``"none"`` and a named tool
(``{"type": "function", "function": {"name": "word_count"}}``) the script runs ``--runs``
one-step client runs with one tool (``word_count``) and the value in ``request_params``,
and prints one line: how many requests the server answered (and the first refusal's
HTTP status and reason), how many replies called the tool, and the median time of a
request. Nothing is retried, so a refusal shows as it is.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from toolnexus import Client, LLMError, tool


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


CHOICES: dict[str, Any] = {
    "auto": "auto",
    "required": "required",
    "none": "none",
    "named": {"type": "function", "function": {"name": "word_count"}},
}
PROMPT = "How many words are in 'to be or not to be'? Use the word_count tool."


def measure(base_url: str, model: str, choice: Any, runs: int, max_tokens: int) -> str:
    answered, called, refusal, times = 0, 0, "", []
    params = {"tool_choice": choice, "max_tokens": max_tokens}
    with Client(base_url=base_url, model=model, max_turns=1, retries=0, timeout=300, request_params=params) as client:
        for _ in range(runs):
            started = time.perf_counter()
            try:
                result = client.run(PROMPT, [word_count])
            except LLMError as exc:
                refusal = refusal or f"HTTP {exc.status}: {exc.body_excerpt[:120]!r}"
                continue
            finally:
                times.append(time.perf_counter() - started)
            answered += 1
            called += any(record.name == "word_count" for record in result.tool_calls)
    line = f"answered={answered}/{runs} tool_called={called}/{runs} median={statistics.median(times):.2f}s"
    return f"{line}  first refusal: {refusal}" if refusal else line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--runs", type=int, default=3, help="requests per tool_choice value (default 3)")
    parser.add_argument("--max-tokens", type=int, default=96, help="max_tokens per reply (default 96)")
    args = parser.parse_args(argv)
    for name, choice in CHOICES.items():
        print(f"tool_choice={name:<9} {measure(args.base_url, args.model, choice, args.runs, args.max_tokens)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
