"""Watch a team while it works: a page that shows every handle of the tree with its text
growing as the model writes it, an approval as a button, and the run going on after the
click. One Flask app (``toolnexus.flask``) and one HTML page with a few lines of plain
JavaScript (an ``EventSource`` on the run's events); no build step.

The team: an editor delegates research and drafting to two teammates at once, then asks
for approval to publish, then answers. The runs live in a SQLite state, so the page's
requests (and its ``EventSource``, which reconnects with ``Last-Event-ID``) may land on
any worker process.

Who asks: there is no login. Serving ``/`` gives each browser a visitor id in Flask's
signed session cookie (``HttpOnly``, ``SameSite=Strict``), and the routes' ``authorize=``
reads it: a visitor starts, watches and answers its own runs only (another visitor's run
is ``404``; no cookie is ``401``). Every worker process must sign with the same key: give
``secret_key=`` (or ``FLASK_SECRET_KEY``); without one, a key file is made beside a SQLite
state (``runs.db.key``, readable by its owner only) and shared by the workers.

Nothing waits on a person: the page closes its ``EventSource`` when the run asks for the
approval (the server ends that stream too), and opens a new one after the click, from the
last event it saw (``?after=``). At most two streams are open per worker process
(``TOOLNEXUS_MAX_STREAMS``); one more is answered ``503`` with ``Retry-After``.

Offline, on a scripted model server that streams its replies word by word::

    python examples/live_team/app.py                 # http://127.0.0.1:8000
    gunicorn -w 2 --threads 4 -b 127.0.0.1:8000 --chdir examples/live_team "app:offline_app('/tmp/toolnexus-runs.db')"

On a real OpenAI-compatible endpoint::

    flask --app "examples/live_team/app:create_app(base_url='http://localhost:11434/v1', model='llama3.1', state='/tmp/toolnexus-runs.db')" run

Text grows live on the page while the worker serving its events runs the turns (turns
running in another worker process show each reply whole, as it is committed).
"""

from __future__ import annotations

import argparse
import atexit
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from flask import Flask, send_file, session

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


def visitor() -> str | None:
    """Who asks: the visitor id ``/`` put in this browser's signed cookie (``None``: 401)."""
    found = session.get("visitor")
    return found if isinstance(found, str) and found else None


def create_app(
    *,
    base_url: str | None = None,
    model: str = "default",
    state: str | None = None,
    secret_key: str | None = None,
    **runtime_options: Any,
) -> Flask:
    """The page and the runs API (``/runs``) on a model endpoint; ``state`` keeps the runs
    in a SQLite file (or a ``postgresql://`` URL) that every worker process shares;
    ``secret_key`` signs the visitors' cookies (see the module's docstring)."""
    app = Flask(__name__)
    app.secret_key = secret_key or os.environ.get("FLASK_SECRET_KEY") or shared_key(state)
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Strict")
    options = {"state": state, **runtime_options} if state is not None else runtime_options
    Toolnexus(app, registry=TEAM, entry="editor", base_url=base_url, model=model, authorize=visitor, **options)

    @app.get("/")
    def page() -> Any:
        if visitor() is None:
            session["visitor"] = secrets.token_urlsafe(16)  # this browser's own runs from now on
        return send_file(HERE / "index.html")

    @app.after_request
    def served_by(response: Any) -> Any:
        response.headers["X-Served-By"] = str(os.getpid())  # which worker process answered
        return response

    return app


def shared_key(state: str | None) -> str:
    """A signing key every worker process of one state agrees on: kept in a file beside a
    SQLite state (made once, by whichever worker comes first); a key of this process's own
    without one (a single process then)."""
    if state is None or state.startswith(("postgresql://", "postgres://")):
        if state is not None:
            raise ValueError("give secret_key= (or FLASK_SECRET_KEY): every worker signs the cookies alike")
        return secrets.token_hex(32)
    path = Path(f"{state}.key")
    if not path.exists():
        draft = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
        try:
            os.link(draft, path)  # the first worker's key wins; the others read it
        except FileExistsError:
            pass
        finally:
            os.unlink(draft)
    return path.read_text().strip()


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


def offline_app(state: str | None = None, *, gap_s: float = 0.08, delay_s: float = 0.0) -> Flask:
    """The app on a scripted model server of its own (one per process), whose replies come
    word by word ``gap_s`` apart, each after ``delay_s`` of thought. No key and no real
    model, but the page is the real one: each browser is still a visitor of its own
    (a signed cookie), not ``public=True``."""
    server = ScriptedLLMServer(scripted, stream_gap_s=gap_s, delay_s=delay_s)
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
