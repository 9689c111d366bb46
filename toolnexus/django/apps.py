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
        checks.register(check_settings, "toolnexus")


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """``manage.py check``: the setting names a registry and only ``Runtime`` keywords.

    Nothing is built here; the runtime is built on first use, in each worker process.
    """
    from .conf import settings_problem

    problem = settings_problem()
    if problem is None:
        return []
    return [checks.Error(problem, hint="See the Django section of the toolnexus README.", id="toolnexus.E001")]
