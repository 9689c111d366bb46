"""Runs one chain of documentation code blocks (see ``_docs.py``), as a reader would paste
them into one interpreter: ``python _docs_run.py`` reads the chain as JSON on stdin.

Each block is compiled under its Markdown file's name with its own line numbers, so a
traceback points at the page and line. For an ``endpoint`` chain a ``ScriptedLLMServer``
answers every model call: the first request of a step calls the first tool offered (the
one ``tool_choice`` names, if any) with arguments made from its schema, and once tool
results are in it answers ``done: <the results>``, or calls ``final_result`` when a typed
output is asked for; a ``tool_choice`` that names a tool is obeyed on every request, as
llama-cpp-python's grammar obeys it; its URL replaces the endpoint URLs written in the blocks. The test
services' URLs replace the PostgreSQL and Redis URLs and the MCP server's command; a
chain that uses PostgreSQL gets a new database of its own, dropped after it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion

ENDPOINT = re.compile(r"https?://(?:localhost|127\.0\.0\.1|api\.openai\.com)(?::\d+)?/v1\b")
POSTGRES = re.compile(r"postgresql://[^\"'\s]*")
REDIS = re.compile(r"redis://[^\"'\s]*")
MCP_EVERYTHING = re.compile(r"\[\s*\"npx\",\s*\"-y\",\s*\"@modelcontextprotocol/server-everything\"\s*\]")
SAMPLE_TEXT = "to be or not to be"


def value_for(schema: dict[str, Any], root: dict[str, Any]) -> Any:
    """A plain value that fits ``schema`` (the first choice of every choice)."""
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return value_for(target, root)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return value_for(next(s for s in schema[key] if s.get("type") != "null"), root)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: value_for(properties.get(name, {}), root) for name in schema.get("required") or ()}
    formats = {"date-time": "2030-01-01T09:00:00Z", "date": "2030-01-01", "time": "09:00:00", "uuid": "00000000-0000-4000-8000-000000000000"}
    simple = {"string": formats.get(schema.get("format", ""), SAMPLE_TEXT), "integer": 1, "number": 1, "boolean": True, "array": []}
    return simple.get(kind, SAMPLE_TEXT)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The stand-in endpoint: one tool call per step, then an answer (see the module doc)."""
    tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or ()}
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    results = [_text(m.get("content")) for m in messages[last_user + 1:] if m.get("role") == "tool"]
    choice = body.get("tool_choice")
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    others = [name for name in tools if name != "final_result"]
    if named in tools or (not results and others):
        name = named if named in tools else others[0]
        parameters = tools[name].get("parameters") or {}
        return tool_call_completion(body, [(f"call_{len(messages)}", name, value_for(parameters, parameters))])
    if "final_result" in tools:
        parameters = tools["final_result"].get("parameters") or {}
        return tool_call_completion(body, [(f"call_{len(messages)}", "final_result", value_for(parameters, parameters))])
    return text_completion(body, "done: " + ", ".join(results) if results else "done")


def substituted(code: str, services: dict[str, str], base_url: str | None) -> str:
    if base_url is not None:
        code = ENDPOINT.sub(base_url, code)
    if "postgresql" in services:
        code = POSTGRES.sub(services["postgresql"], code)
    if "redis" in services:
        code = REDIS.sub(services["redis"], code)
    if "mcp-everything" in services:
        code = MCP_EVERYTHING.sub(json.dumps(["node", services["mcp-everything"], "stdio"]), code)
    return code


def fresh_database(url: str) -> tuple[str, Callable[[], None]]:
    """A new, empty database on the PostgreSQL server of ``url`` (so a block's trees start
    from nothing, whatever ran before), its URL, and how to drop it."""
    import psycopg

    name = f"tn_docs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}")), drop


def start_worker(module: str) -> subprocess.Popen[bytes]:
    """A Celery worker on ``module`` (in this folder), once it says it is ready."""
    log = Path(f"{module}-worker.log")
    command = [sys.executable, "-m", "celery", "-A", module, "worker", "-P", "threads", "-c", "4", "-Q", "toolnexus", "-l", "info", "--without-heartbeat", "--without-gossip", "--without-mingle"]
    with log.open("wb") as out:
        worker = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while b" ready." not in log.read_bytes():
        if worker.poll() is not None or time.monotonic() > deadline:
            worker.kill()
            raise SystemExit(f"celery worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)  # polling a log file the worker writes; no state of ours to wait on
    return worker


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(timeout=10)


def main() -> None:
    chain = json.load(sys.stdin)
    server = ScriptedLLMServer(respond) if chain["endpoint"] else None
    base_url = server.base_url if server is not None else None
    worker = None
    services = dict(chain["services"])
    drop = None
    if "postgresql" in services:
        services["postgresql"], drop = fresh_database(services["postgresql"])
    # The blocks run as a script's __main__ module, so what inspects a class's module
    # (type hints, pickling) finds their names as it would in a pasted script.
    script = types.ModuleType("__main__")
    sys.modules["__main__"] = script
    namespace = script.__dict__
    try:
        for block in chain["blocks"]:
            code = substituted(block["code"], services, base_url)
            if block.get("file"):
                Path(block["file"]).write_text(code, encoding="utf-8")
                continue
            if chain.get("worker") and worker is None:
                worker = start_worker(chain["worker"])
            exec(compile("\n" * (block["line"] - 1) + code, block["path"], "exec"), namespace)
            sys.stdout.flush()
    finally:
        if worker is not None:
            stop_worker(worker)
        if server is not None:
            server.close()
        if drop is not None:
            drop()


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main()
