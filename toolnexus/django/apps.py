"""The installable app: checks the ``TOOLNEXUS`` setting at start-up."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks


class ToolnexusConfig(AppConfig):  # type: ignore[misc]  # Django ships no type hints
    name = "toolnexus.django"
    label = "toolnexus"
    verbose_name = "toolnexus"

    def ready(self) -> None:
        from django.core.signals import request_started

        from .conf import build_before_request

        checks.register(check_settings, "toolnexus")
        request_started.connect(build_before_request, dispatch_uid="toolnexus.build_before_request")


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """``manage.py check``: the setting names a registry and only ``Runtime`` keywords.

    Nothing is built here; the runtime is built on first use, in each worker process.
    """
    from .conf import settings_problem, worker_threads_with_database_state

    problem = settings_problem()
    if problem is not None:
        return [checks.Error(problem, hint="See the Django section of the toolnexus README.", id="toolnexus.E001")]
    if worker_threads_with_database_state():
        return [
            checks.Warning(
                'TOOLNEXUS has "state": "django" on SQLite with "inline": False: a run started inside a transaction'
                " waits on its own worker threads, which cannot write "
                "the state while that transaction holds SQLite's lock",
                hint='Leave "inline" at True, or start runs outside transaction.atomic().',
                id="toolnexus.W001",
            )
        ]
    return []
