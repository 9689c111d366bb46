"""Django (CONTRACT §15) with real parts: the example project under gunicorn
(``-w 2 --threads 4``) and ``manage.py test``, on SQLite and on PostgreSQL
(``TOOLNEXUS_TEST_PG_URL``)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

from _services import service_url

pytest.importorskip("django")
pytest.importorskip("gunicorn")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "django_approval"
WORKERS, THREADS = 2, 4
RUN_TIMEOUT = 30.0  # seconds a view gives one run: ample, even on a loaded machine
SHORT_RUN_TIMEOUT = 1.0  # ...and in the one test that waits for a run to time out
SLACK = 5.0
STATE_POOL = 4  # toolnexus.django.state.POSTGRES_POOL_SIZE  # on a loaded 2-core machine, far below anything that would be a hang
_orders = itertools.count(1)


# --- databases -----------------------------------------------------------------------------------


class Database:
    """One database for the example project: its URL for the settings and, on PostgreSQL,
    a way to count the sessions connected to it."""

    def __init__(self, kind: str, url: str, server_url: str | None = None) -> None:
        self.kind, self.url, self.server_url = kind, url, server_url

    @property
    def name(self) -> str:
        return urlsplit(self.url).path.lstrip("/")

    def admin(self, sql: str, *params: object) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.server_url, autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def sessions(self, application: str) -> int:
        """Sessions connected to this database by one server (its ``application_name``)."""
        return self.admin("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s", self.name, application)[0][0]

    def settled_sessions(self, application: str, at_most: int) -> int:
        """``sessions`` once the backends of connections the site has just closed are gone:
        a backend leaves pg_stat_activity a moment after its client hangs up (longer on a
        loaded machine), while a leaked session stays. Re-counts for up to a few seconds."""
        deadline = time.monotonic() + SLACK
        while True:
            count = self.sessions(application)
            if count <= at_most or time.monotonic() > deadline:
                return count
            time.sleep(0.05)


def project_env(database: Database, **variables: str) -> dict[str, str]:
    """The environment of a process of the example project (this checkout's toolnexus first)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "DJANGO_SETTINGS_MODULE": "approval_site.settings", "EXAMPLE_DATABASE_URL": database.url, **variables}


def manage(database: Database, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = project_env(database)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=timeout)


#: The project's user the tests sign in as (the example's views are behind its login).
USER, PASSWORD = "tester", "tester-secret"
_MAKE_USER = (
    "from django.contrib.auth.models import User; "
    f"User.objects.filter(username={USER!r}).exists() or User.objects.create_user({USER!r}, password={PASSWORD!r})"
)


def migrated(database: Database) -> Database:
    done = manage(database, "migrate", "-v0")
    assert done.returncode == 0, done.stderr
    made = manage(database, "shell", "-c", _MAKE_USER)
    assert made.returncode == 0, made.stderr
    return database


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Database:
    return migrated(Database("sqlite", str(tmp_path_factory.mktemp("django") / "example.sqlite3")))


@pytest.fixture(scope="module")
def pg_db() -> Database:
    server_url = service_url("postgresql")
    name = f"toolnexus_django_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(server_url)
    database = Database("postgresql", urlunsplit(parts._replace(path=f"/{name}")), server_url)
    database.admin(f'CREATE DATABASE "{name}"')
    try:
        yield migrated(database)
    finally:
        database.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: Under pytest-xdist, the tests on each database run on one worker, which makes that
#: database (and its servers) once; the two databases' tests run side by side.
ON_SQLITE = pytest.mark.xdist_group("django-sqlite")
ON_POSTGRESQL = pytest.mark.xdist_group("django-postgresql")


@pytest.fixture(
    scope="module",
    params=[pytest.param("sqlite", marks=ON_SQLITE), pytest.param("postgresql", marks=ON_POSTGRESQL)],
)
def database(request: pytest.FixtureRequest) -> Database:
    return request.getfixturevalue("pg_db" if request.param == "postgresql" else "sqlite_db")


# --- gunicorn ------------------------------------------------------------------------------------


class Gunicorn:
    """The example project under gunicorn, started by the test and stopped after it."""

    def __init__(
        self, database: Database, *, inline: bool, workers: int = WORKERS, run_timeout: float = RUN_TIMEOUT
    ) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.application = f"django_approval_{port}"
        env = project_env(
            database,
            EXAMPLE_INLINE="1" if inline else "0",
            EXAMPLE_CONN_MAX_AGE="60",  # persistent connections: the worst case for counting sessions
            EXAMPLE_RUN_TIMEOUT=str(run_timeout),
            EXAMPLE_APPLICATION_NAME=self.application,
        )
        command = [sys.executable, "-m", "gunicorn", "-w", str(workers), "--threads", str(THREADS), "-b", f"127.0.0.1:{port}", "--graceful-timeout", "3", "approval_site.wsgi"]
        self.log: list[str] = []
        self._boots = 0  # "Booting worker" lines so far; guarded by _booted, notified on each
        self._booted = threading.Condition()
        self.process = subprocess.Popen(command, cwd=EXAMPLE, env=env, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._wait_for_boots(workers, 60):
            self.stop()
            pytest.fail("gunicorn did not start:\n" + "".join(self.log))
        self.session = requests.Session()  # signed in: the project's login, as a browser would be
        signed = self.session.post(self.base + "/login/", json={"username": USER, "password": PASSWORD}, timeout=30)
        assert signed.status_code == 200, signed.text

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._booted:
                self.log.append(line)
                self._boots += "Booting worker" in line
                self._booted.notify_all()

    def _wait_for_boots(self, boots: int, timeout: float) -> bool:
        with self._booted:
            return self._booted.wait_for(lambda: self._boots >= boots, timeout)

    def post(self, path: str, body: dict) -> requests.Response:
        return self.session.post(self.base + path, json=body, timeout=30)

    def get(self, path: str) -> dict:
        return self.session.get(self.base + path, timeout=30).json()

    def new_order(self, amount: str = "10.00") -> str:
        number = f"T-{os.getpid()}-{next(_orders)}"
        assert self.post("/orders/", {"number": number, "amount": amount}).status_code == 201
        return number

    def kill_worker(self, pid: int) -> None:
        """SIGKILL one worker process; returns once gunicorn has booted its replacement."""
        with self._booted:
            booted = self._boots
        os.kill(pid, signal.SIGKILL)
        assert self._wait_for_boots(booted + 1, 60), "gunicorn did not replace the killed worker:\n" + "".join(self.log)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def servers():
    """Starts each (database, mode) server once per module; stops them all at the end."""
    started: dict[tuple, Gunicorn] = {}

    def server(
        database: Database, *, inline: bool = True, workers: int = WORKERS, run_timeout: float = RUN_TIMEOUT
    ) -> Gunicorn:
        key = (database.url, inline, workers, run_timeout)
        if key not in started:
            started[key] = Gunicorn(database, inline=inline, workers=workers, run_timeout=run_timeout)
        return started[key]

    yield server
    for each in started.values():
        each.stop()


# --- a view's transaction covers the run (inline) --------------------------------------------------


def test_a_tool_sees_the_views_uncommitted_row(database, servers):
    server = servers(database)
    order = server.new_order()
    response = server.post("/complaints/", {"order": order, "text": "The box arrived dented"})
    body = response.json()
    assert response.status_code == 200 and body["status"] == "done", body
    assert f"complaint {body['complaint']} on order {order}" in body["reply"]
    assert "The box arrived dented" in body["reply"]


def test_a_tool_write_rolls_back_with_the_views_atomic(database, servers):
    server = servers(database)
    order = server.new_order()
    body = server.post("/complaints/", {"order": order, "text": "Please refund", "dry_run": True}).json()
    assert body["status"] == "done" and "refunded 10.00 EUR" in body["reply"], body  # the tool did write...
    assert server.get(f"/orders/{order}/") == {"order": order, "status": "open", "refunds": 0, "complaints": 0}  # ...and it rolled back


def test_an_inline_tool_is_not_blocked_by_the_views_row_lock(database, servers):
    server = servers(database)
    order = server.new_order()
    started = time.monotonic()
    body = server.post("/complaints/", {"order": order, "text": "Please refund"}).json()
    assert body["status"] == "done" and "refunded 10.00 EUR" in body["reply"], body
    assert time.monotonic() - started < SLACK
    assert server.get(f"/orders/{order}/") == {"order": order, "status": "refunded", "refunds": 1, "complaints": 1}


def test_a_worker_thread_tool_blocked_by_the_views_row_lock_times_out(database, servers):
    server = servers(database, inline=False, workers=1, run_timeout=SHORT_RUN_TIMEOUT)
    order = server.new_order()
    started = time.monotonic()
    body = server.post("/complaints/", {"order": order, "text": "Please refund"}).json()
    elapsed = time.monotonic() - started
    assert body["status"] == "timeout", body
    assert SHORT_RUN_TIMEOUT <= elapsed < SHORT_RUN_TIMEOUT + SLACK
    assert server.get(f"/orders/{order}/")["refunds"] == 0


def test_an_approval_asked_by_one_worker_is_answered_by_another(database, servers):
    server = servers(database, workers=2)
    order = server.new_order("80.00")
    asked = server.post("/complaints/", {"order": order, "text": "Refund please"})
    assert asked.status_code == 202, asked.text
    pending = asked.json()["pending"]
    assert pending["kind"] == "approval" and pending["prompt"] == f"Refund 80.00 EUR on order {order}?"
    assert server.get(f"/orders/{order}/")["refunds"] == 0
    server.kill_worker(int(asked.headers["X-Served-By"]))  # the run now lives only in the database
    done = server.post("/answers/", {"id": pending["id"], "ok": True})
    assert done.status_code == 200 and "refunded 80.00 EUR" in done.json()["reply"], done.text
    assert done.headers["X-Served-By"] != asked.headers["X-Served-By"]
    assert server.get(f"/orders/{order}/") == {"order": order, "status": "refunded", "refunds": 1, "complaints": 1}
    again = server.post("/answers/", {"id": pending["id"], "ok": True})
    assert again.status_code == 409 and "answered already" in again.json()["error"]  # as Flask's answer route


def test_an_answer_with_a_bad_id_or_a_deep_body_is_a_client_error_not_a_500(database, servers):
    server = servers(database, workers=1)
    lone = server.post("/answers/", {"id": "req_\ud800", "ok": True})
    assert lone.status_code in (400, 404), lone.text
    deep_body = "[" * 5000 + "]" * 5000
    json_type = {"Content-Type": "application/json"}
    deep = server.session.post(server.base + "/answers/", data=deep_body, headers=json_type, timeout=30)
    assert deep.status_code == 400, deep.text


def test_a_stranger_is_refused_and_a_form_post_starts_nothing(database, servers):
    server = servers(database, workers=1)
    order = server.new_order("80.00")
    pending = server.post("/complaints/", {"order": order, "text": "Refund please"}).json()["pending"]
    anonymous = requests.post(server.base + "/answers/", json={"id": pending["id"], "ok": True}, timeout=30)
    assert anonymous.status_code == 401
    form = server.session.post(server.base + "/complaints/", data={"order": order, "text": "Refund please"}, timeout=30)
    assert form.status_code == 415
    assert server.get(f"/orders/{order}/") == {"order": order, "status": "open", "refunds": 0, "complaints": 1}


def test_concurrent_answers_to_one_request_resume_the_run_once(database, servers):
    server = servers(database, workers=2)
    order = server.new_order("90.00")
    pending = server.post("/complaints/", {"order": order, "text": "Refund please"}).json()["pending"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        codes = sorted(pool.map(lambda _: server.post("/answers/", {"id": pending["id"], "ok": True}).status_code, range(4)))
    assert codes.count(200) == 1 and set(codes) <= {200, 404, 409}, codes
    assert server.get(f"/orders/{order}/") == {"order": order, "status": "refunded", "refunds": 1, "complaints": 1}


# --- connections ---------------------------------------------------------------------------------


@ON_POSTGRESQL
@pytest.mark.parametrize("inline", [True, False], ids=["inline", "worker-threads"])
def test_200_requests_leave_no_more_postgresql_sessions_than_gunicorn_threads(pg_db, servers, inline):
    server = servers(pg_db, inline=inline)
    order = server.new_order()

    def complain(n: int) -> str:
        return server.post("/complaints/", {"order": order, "text": f"question {n}"}).json()["status"]

    with ThreadPoolExecutor(max_workers=WORKERS * THREADS) as pool:
        statuses = list(pool.map(complain, range(200)))
    assert statuses == ["done"] * 200
    assert 0 < pg_db.settled_sessions(server.application, WORKERS * THREADS) <= WORKERS * THREADS
    if inline:  # the runs' state: a small pool of its own per worker, and one LISTEN session
        assert pg_db.sessions(f"{server.application} toolnexus") <= WORKERS * (STATE_POOL + 1)


@ON_POSTGRESQL
@pytest.mark.parametrize("inline", [True, False], ids=["inline", "worker-threads"])
def test_requests_still_finish_after_postgresql_ends_the_sites_sessions(pg_db, servers, inline):
    server = servers(pg_db, inline=inline)
    order = server.new_order()
    assert server.post("/complaints/", {"order": order, "text": "first"}).json()["status"] == "done"
    ended = pg_db.admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", server.application)
    assert ended  # the site kept at least one session, and the server has just dropped it
    for n in range(WORKERS * THREADS * 2):
        body = server.post("/complaints/", {"order": order, "text": f"again {n}"}).json()
        assert body["status"] == "done", body
        # The tool reached the database: it read the row, or (on a worker thread, outside the
        # view's transaction) found it invisible; never a dropped connection.
        assert f"again {n}" in body["reply"] or (not inline and "matching query does not exist" in body["reply"]), body


# --- manage.py test ------------------------------------------------------------------------------


def test_manage_py_test_runs_an_agent_in_a_testcase_and_drops_its_database(database):
    done = manage(database, "test", "complaints", "--noinput")
    assert done.returncode == 0, done.stderr
    assert "Ran 13 tests" in done.stderr and "OK" in done.stderr
    if database.kind == "postgresql":
        assert database.admin("SELECT datname FROM pg_database WHERE datname = %s", f"test_{database.name}") == []
