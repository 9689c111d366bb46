"""What the web app and the workers share: the team, the state, the broker, the dispatcher.

Both sides import this module. The Celery app gets the task ``toolnexus.run_turn`` from
``install``; ``make_runtime`` builds a process's ``Runtime`` on the shared PostgreSQL
state with that dispatcher (a worker calls it once, after fork; the web app once per
web worker). The team is the support/billing approval team of ``flask_approval.py``.

Settings (environment):
    TOOLNEXUS_BROKER    the Celery broker        (default redis://127.0.0.1:6379/0)
    TOOLNEXUS_STATE     the shared state         (default postgresql://postgres@127.0.0.1:5432/postgres)
    TOOLNEXUS_BASE_URL  an OpenAI-compatible endpoint; unset: an offline scripted model
    TOOLNEXUS_MODEL     the model name at that endpoint (default gpt-4o-mini)
    TOOLNEXUS_QUEUE     the Celery queue of the turns (default toolnexus)
    TOOLNEXUS_RUNTIME_ID  the tree inside the state (default celery_team)
"""

from __future__ import annotations

import os
import sys

from celery import Celery

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flask_approval import TEAM, scripted_model  # noqa: E402

from toolnexus import Runtime  # noqa: E402
from toolnexus.celery import RECOMMENDED_SETTINGS, install  # noqa: E402

BROKER = os.environ.get("TOOLNEXUS_BROKER", "redis://127.0.0.1:6379/0")
STATE = os.environ.get("TOOLNEXUS_STATE", "postgresql://postgres@127.0.0.1:5432/postgres")
QUEUE = os.environ.get("TOOLNEXUS_QUEUE", "toolnexus")
RUNTIME_ID = os.environ.get("TOOLNEXUS_RUNTIME_ID", "celery_team")
ENTRY = "support"

celery_app = Celery("celery_team", broker=BROKER)
# Late acknowledgement and a prefetch of one: a message waits in the broker until a
# thread is free for it; the worker runs with ``-P threads``.
celery_app.conf.update(RECOMMENDED_SETTINGS, broker_connection_retry_on_startup=True)


def make_runtime() -> Runtime:
    """This process's runtime on the shared state (called once per process, after fork)."""
    base_url = os.environ.get("TOOLNEXUS_BASE_URL")
    return Runtime(
        TEAM,
        generate=None if base_url else scripted_model(),
        base_url=base_url,
        model=os.environ.get("TOOLNEXUS_MODEL", "gpt-4o-mini"),
        state=STATE,
        runtime_id=RUNTIME_ID,
        dispatcher=dispatcher,
    )


dispatcher = install(celery_app, make_runtime, queue=QUEUE)
