"""Django integration: one runtime per process, built from ``settings.TOOLNEXUS``.

Add ``"toolnexus.django"`` to ``INSTALLED_APPS`` and describe the runtime::

    TOOLNEXUS = {
        "registry": "shop.agents.TEAM",     # a registry mapping or an Agent, or its dotted path
        "model": "gpt-4o-mini",
        "base_url": "https://api.openai.com/v1",
        # any other Runtime keyword; "inline" is True unless set to False
    }

A view then calls ``runtime().run_agent(...)``. Inline (the default) every turn and
every tool call runs on the request's thread, inside its connection and transaction.
With ``"inline": False`` tools run on worker threads, and ``closing_connections`` is put
around every tool call so that no worker thread keeps a database connection.

``"state": "django"`` keeps the runs in the project's database (``manage.py migrate``
creates the tables; ``toolnexus.django.state`` says how they meet the view's
transaction), so any worker process continues them. The admin then lists the pending
requests with approve and decline actions; ``toolnexus.django.approvals`` answers them
from views, expires them (also ``manage.py toolnexus_expire``) and signals each outcome.
"""

from __future__ import annotations

from .conf import build_runtime, runtime
from .hygiene import closing_connections

__all__ = ["build_runtime", "closing_connections", "runtime"]
