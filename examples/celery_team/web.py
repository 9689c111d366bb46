"""The web side: a Flask app that starts and answers runs and returns at once.

    POST /runs               {"prompt": "..."}   202 {"run", "status": "running"}
    GET  /runs/<run>[?wait=S]                    the run's tree and, once settled, its result
                                                 (waits up to S seconds for it to settle)
    POST /runs/<run>/answer  {"id", "ok"}         202: the answer is accepted, the run goes on
                                                 409: not the pending request (nothing changes)
    GET  /runs/<run>/events                      the run's events as Server-Sent Events

The routes are ``toolnexus.flask``'s; the runtime is the one ``team.make_runtime`` builds
(the same the workers build), so the turns run on the Celery workers: this process only
commits them as queued, sends their messages and reads the shared state. Any web process
(and host) may answer or read a run another one started.

    flask --app web:create_app run -p 8000       (from this folder)
    gunicorn -w 2 -b 127.0.0.1:8000 "web:create_app()"
"""

from __future__ import annotations

from flask import Flask

from team import ENTRY, make_runtime  # first: it puts examples/ on the path

from toolnexus.flask import Toolnexus  # noqa: E402


def create_app() -> Flask:
    app = Flask(__name__)
    Toolnexus(app, runtime_factory=make_runtime, entry=ENTRY)  # the runs stay in the state at exit
    return app
