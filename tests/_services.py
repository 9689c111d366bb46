"""Real services for the tests: PostgreSQL and Redis, reached through the URLs that
``.ci/services start`` exports, the reference MCP server that ``.ci/run`` installs from npm
(its entry script's path), and the interpreter of the virtualenv ``.ci/run`` builds with
the ``mcp`` SDK's 1.x line (which cannot live beside 2.x). A developer without them gets skips; under CI (``CI=true``)
a missing service fails the test, so a green CI run never hides an untested store."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

_VARIABLES = {
    "postgresql": "TOOLNEXUS_TEST_PG_URL",
    "redis": "TOOLNEXUS_TEST_REDIS_URL",
    "mcp-everything": "TOOLNEXUS_TEST_MCP_EVERYTHING",
    "mcp1-python": "TOOLNEXUS_TEST_MCP1_PYTHON",
    "agui-client": "TOOLNEXUS_TEST_AGUI_CLIENT",
}


def service_url(service: str) -> str:
    """Where ``service`` is ("postgresql", "redis": a URL; "mcp-everything": the path of
    the reference server's entry script; "mcp1-python": an interpreter with ``mcp`` 1.x;
    "agui-client": the ``node_modules`` folder that holds ``@ag-ui/client``), or skip/fail
    the test."""
    variable = _VARIABLES[service]
    url = os.environ.get(variable)
    if url:
        return url
    installed = service.startswith(("mcp", "agui"))
    how = "bash .ci/run installs it" if installed else 'eval "$(bash .ci/services start)"'
    missing(f"{service} is not available: set {variable} ({how})")


def missing(message: str) -> NoReturn:
    """Fail under CI (a green run never hides an untested part), skip elsewhere."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)
