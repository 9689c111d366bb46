"""The web side: a Flask app that starts and answers runs and returns at once.

    POST /runs               {"prompt": "..."}   202 {"run", "status": "running"}
    GET  /runs/<run>[?wait=S]                    the run's tree and, once settled, its result
                                                 (waits up to S seconds for it to settle)
    POST /runs/<run>/answer  {"id", "ok"}         202: the answer is accepted, the run goes on
                                                 409: not the pending request (nothing changes)
    GET  /runs/<run>/events                      the run's events as Server-Sent Events

Who asks: a caller with ``Authorization: Bearer <TEAM_API_TOKEN>`` (an environment
variable; without it every request is refused with 401); pass ``authorize=`` to use the
app's own login instead. A run belongs to whoever started it (its id is random; anyone
else gets 404), and bodies are ``application/json`` only (else 415).

The routes are ``toolnexus.flask``'s; the runtime is the one ``team.make_runtime`` builds
(the same the workers build), so the turns run on the Celery workers: this process only
commits them as queued, sends their messages and reads the shared state. Any web process
(and host) may answer or read a run another one started.

    flask --app web:create_app run -p 8000       (from this folder)
    gunicorn -w 2 -b 127.0.0.1:8000 "web:create_app()"
"""

from __future__ import annotations

import hmac
import os
from typing import Callable

from flask import Flask, request

from team import ENTRY, make_runtime  # first: it puts examples/ on the path

from toolnexus.flask import Toolnexus  # noqa: E402


def token_holder() -> str | None:
    """Who asks: the holder of ``TEAM_API_TOKEN`` (compared in constant time), else nobody."""
    token = os.environ.get("TEAM_API_TOKEN", "")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode()):
        return "api"
    return None


def create_app(authorize: Callable[[], str | None] = token_holder) -> Flask:
    app = Flask(__name__)
    Toolnexus(app, runtime_factory=make_runtime, entry=ENTRY, authorize=authorize)  # the runs stay in the state at exit
    return app
