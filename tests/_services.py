"""External services for tests: their URLs come from the environment.

A test that needs a service calls ``service_url(VARIABLE)``: unset, the test is skipped,
except under ``CI=true``, where a missing service is a failure.
"""

from __future__ import annotations

import os

import pytest

PG_URL = "TOOLNEXUS_TEST_PG_URL"
REDIS_URL = "TOOLNEXUS_TEST_REDIS_URL"


def service_url(variable: str) -> str:
    url = os.environ.get(variable)
    if url:
        return url
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{variable} is not set; CI must provide this service")
    pytest.skip(f"{variable} is not set")
