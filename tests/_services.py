"""Real services for the tests: PostgreSQL and Redis, reached through the URLs that
``.ci/services start`` exports. A developer without them gets skips; under CI (``CI=true``)
a missing service fails the test, so a green CI run never hides an untested store."""

from __future__ import annotations

import os

import pytest

_VARIABLES = {"postgresql": "TOOLNEXUS_TEST_PG_URL", "redis": "TOOLNEXUS_TEST_REDIS_URL"}


def service_url(service: str) -> str:
    """The URL of a running ``service`` ("postgresql" or "redis"), or skip/fail the test."""
    variable = _VARIABLES[service]
    url = os.environ.get(variable)
    if url:
        return url
    message = f"{service} is not available: set {variable} (eval \"$(bash .ci/services start)\")"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)
