"""Watch a team while it works: a page that shows every handle of the tree with its text
growing as the model writes it, an approval as a button, and the run going on after the
click. One Flask app (``toolnexus.flask``) and one HTML page with a few lines of plain
JavaScript (an ``EventSource`` on the run's events); no build step.

The team: an editor delegates research and drafting to two teammates at once, then asks
for approval to publish, then answers. The runs live in a SQLite state, so the page's
requests (and its ``EventSource``, which reconnects with ``Last-Event-ID``) may land on
any worker process.

Offline, on a scripted model server that streams its replies word by word::

    python examples/live_team/app.py                 # http://127.0.0.1:8000
    gunicorn -w 2 --threads 4 -b 127.0.0.1:8000 --chdir examples/live_team "app:offline_app('runs.db')"

On a real OpenAI-compatible endpoint::

    flask --app "examples/live_team/app:create_app(base_url='http://localhost:11434/v1', model='llama3.1', state='runs.db')" run

Text grows live on the page while the worker serving its events runs the turns (turns
running in another worker process show each reply whole, as it is committed).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from pathlib import Path
from typing import Any

from flask import Flask, send_file

from toolnexus import AgentDef, ToolContext, make_request, success, suspend, tool
from toolnexus.flask import Toolnexus
from toolnexus.testing import ScriptedLLMServer, tool_call_completion, text_completion

HERE = Path(__file__).resolve().parent
PROMPT = "A short launch note for toolnexus streaming"


@tool
def publish(title: str, ctx: ToolContext):
    """Publish the note under a title. A person approves every publication."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Publish the note {title!r}?", data={"title": title}))
    return success(f"published {title!r}")


TEAM = {
    "editor": AgentDef(
        "editor",
        "Plans a note, delegates the work, publishes the result",
        soul="You edit short notes. Use the task tool to send research to researcher and drafting to writer, "
        "both at once; then call publish with a title; then answer with one sentence.",
        team=("researcher", "writer"),
        tools=(publish,),
    ),
    "researcher": AgentDef("researcher", "Finds the facts a note needs", soul="You are the researcher. Answer with three short facts."),
    "writer": AgentDef("writer", "Drafts short, plain prose", soul="You are the writer. Answer with a short paragraph."),
}


def create_app(*, base_url: str | None = None, model: str = "default", state: str | None = None, **runtime_options: Any) -> Flask:
    """The page and the runs API (``/runs``) on a model endpoint; ``state`` keeps the runs
    in a SQLite file (or a ``postgresql://`` URL) that every worker process shares."""
    app = Flask(__name__)
    options = {"state": state, **runtime_options} if state is not None else runtime_options
    Toolnexus(app, registry=TEAM, entry="editor", base_url=base_url, model=model, **options)

    @app.get("/")
    def page() -> Any:
        return send_file(HERE / "index.html")

    @app.after_request
    def served_by(response: Any) -> Any:
        response.headers["X-Served-By"] = str(os.getpid())  # which worker process answered
        return response

    return app


# --- offline: a scripted model that streams slowly enough to watch -----------------------------

NOTES = (
    "Fact one: a stream watches a whole team, every teammate's text as it is written. "
    "Fact two: every event but text is committed with a serial, so a page that reconnects misses nothing. "
    "Fact three: no event loop is needed anywhere."
)
DRAFT = (
    "toolnexus now streams. Open a page, start a team, and watch each teammate write: the research "
    "and the draft grow side by side, an approval waits for your click, and the run goes on after it."
)


def scripted(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model: it answers by who is asking (the editor has the ``task`` tool)."""
    tools = {entry["function"]["name"] for entry in body.get("tools") or ()}
    system = next((m.get("content") or "" for m in body.get("messages") or () if m.get("role") == "system"), "")
    results = [m for m in body.get("messages") or () if m.get("role") == "tool"]
    if "task" not in tools:
        return text_completion(body, NOTES if "researcher" in system else DRAFT)
    if not results:
        return tool_call_completion(body, [
            ("call_research", "task", {"agent": "researcher", "prompt": "Find three facts about streaming in toolnexus"}),
            ("call_draft", "task", {"agent": "writer", "prompt": "Draft a short launch note about streaming"}),
        ])
    if len(results) == 2:
        return tool_call_completion(body, [("call_publish", "publish", {"title": "toolnexus streams"})])
    return text_completion(body, f"Done: {results[-1].get('content')}, with research and a draft from the team.")


def offline_app(state: str | None = None, *, gap_s: float = 0.08) -> Flask:
    """The app on a scripted model server of its own (one per process), whose replies come
    word by word ``gap_s`` apart."""
    server = ScriptedLLMServer(scripted, stream_gap_s=gap_s)
    atexit.register(server.close)
    return create_app(base_url=server.base_url, model="scripted", state=state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the live team page offline (a scripted model).")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--state", default=None, help="keep the runs in this SQLite file")
    args = parser.parse_args(argv)
    offline_app(args.state).run(host="127.0.0.1", port=args.port, threaded=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
