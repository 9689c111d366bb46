"""The suite on several pytest-xdist workers (``-n auto`` in setup.cfg; ``-n0`` runs it in one
process): how many workers, which tests share one, and each worker's own PostgreSQL database
and Redis database, so that workers never see each other's rows or keys.

Most of the suite's time is spent waiting (on subprocesses, servers, timeouts), not computing,
so it runs more workers than the machine has cores.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

#: Workers per core, and the most workers ``-n auto`` starts (each one collects the suite and
#: holds its own connections to the services).
WORKERS_PER_CORE = 2
MOST_WORKERS = 8

_PG = "TOOLNEXUS_TEST_PG_URL"
_REDIS = "TOOLNEXUS_TEST_REDIS_URL"


def worker_name() -> str | None:
    """This xdist worker's name (``gw0``, ``gw1``...), or None outside a worker."""
    return os.environ.get("PYTEST_XDIST_WORKER")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core, at most ``MOST_WORKERS``
    (``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it)."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if chosen and chosen.isdigit():
        return int(chosen)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, min(MOST_WORKERS, WORKERS_PER_CORE * cores))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``, and besides: the tests of a module that defines a module-scoped
    fixture (a server, a migrated database) go to one worker together, so the fixture is
    made once, as in one process. (Marking them ``xdist_group`` from a hook would not do: on
    pytest 9.2 xdist 3.8 no longer sees a group added to a test's id, pytest-xdist#1386.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    root = config.rootpath

    class ModuleFixtureScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            if scope != nodeid:  # an xdist_group mark
                return scope
            module = nodeid.split("::", 1)[0]
            return module if defines_module_fixture(root / module) else nodeid

    return ModuleFixtureScheduling(config, log)


@functools.lru_cache(maxsize=None)
def defines_module_fixture(path: Path) -> bool:
    """Whether the test module at ``path`` defines a ``@pytest.fixture(scope="module")``."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    decorators = (d for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for d in node.decorator_list)
    return any(_is_module_fixture(decorator) for decorator in decorators)


def _is_module_fixture(decorator: ast.expr) -> bool:
    """``@pytest.fixture(scope="module", ...)`` or ``@fixture(scope="module", ...)``."""
    if not isinstance(decorator, ast.Call):
        return False
    func = decorator.func
    named = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    scope = next((k.value for k in decorator.keywords if k.arg == "scope"), None)
    return named == "fixture" and isinstance(scope, ast.Constant) and scope.value == "module"


def pytest_configure(config: pytest.Config) -> None:
    """In a worker: a PostgreSQL database and a Redis database of its own, named in the
    environment the tests (and the processes they start) read."""
    name = worker_name()
    if name is None:
        return
    number = int(name.lstrip("gw") or 0)
    redis_url = os.environ.get(_REDIS)
    if redis_url:
        os.environ[_REDIS] = _with_path(redis_url, f"/{1 + number % 15}")
    pg_url = os.environ.get(_PG)
    if pg_url:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")[:8]
        database = f"toolnexus_{name}_{run}"
        if _create_database(pg_url, database):
            config.stash[_created] = (pg_url, database)
            os.environ[_PG] = _with_path(pg_url, f"/{database}")


def pytest_unconfigure(config: pytest.Config) -> None:
    created = config.stash.get(_created, None)
    if created is not None:
        server_url, database = created
        os.environ[_PG] = server_url
        _admin(server_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


_created = pytest.StashKey[tuple[str, str]]()


def _with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


def _create_database(server_url: str, database: str) -> bool:
    """Whether ``database`` is now there, new and empty; when the server cannot be reached
    the tests keep its URL and meet the problem themselves."""
    return _admin(server_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', f'CREATE DATABASE "{database}"')


def _admin(server_url: str, *statements: str) -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
            for statement in statements:
                conn.execute(statement)
    except psycopg.Error:
        return False
    return True
