"""Django under gunicorn: PostgreSQL sessions left open, and requests/s, inline vs worker threads.

Starts ``examples/django_approval`` under ``gunicorn -w 2 --threads 4`` on a fresh
PostgreSQL database (``TOOLNEXUS_TEST_PG_URL`` names the server), with ``CONN_MAX_AGE`` 0
(Django's default) and 60 (persistent connections), and sends ``--requests`` complaints from 8 client threads (each runs the team: a model
call, an ORM tool call, a model call; in-process scripted model). Three modes:

- ``inline``: every turn and tool call on the request's thread (the default), the runs'
  state in the project's database (``"state": "django"``);
- ``inline-memory``: that, with the runs in each process's memory;
- ``threads``: tools on the runtime's worker threads, with ``closing_connections`` around
  each call (the default when ``inline`` is False);
- ``threads-no-hygiene``: worker threads and no ``around_tool``;
- ``runtime-per-run``: that, with a fresh runtime per run (as ``Agent.run`` in a view).

For each: the sessions the site holds open on the database after the requests (counted
by ``application_name`` in ``pg_stat_activity``) and the median requests/s over
``--rounds`` rounds.

``--orders N`` spreads the complaints over N orders (default 1: every view locks the same
order row, so the runs queue on it whatever the mode).

Usage: ``TOOLNEXUS_TEST_PG_URL=postgresql://... python benchmarks/django_sessions.py
[--requests 200] [--rounds 3] [--conn-max-age 0 60] [--orders 1] [--modes inline ...] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import requests

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "django_approval"
CLIENTS = 8
MODES = {
    "inline": {"EXAMPLE_INLINE": "1"},
    "inline-memory": {"EXAMPLE_INLINE": "1", "EXAMPLE_STATE": "memory"},
    "threads": {"EXAMPLE_INLINE": "0"},
    "threads-no-hygiene": {"EXAMPLE_INLINE": "0", "BENCH_NO_HYGIENE": "1"},
    "runtime-per-run": {"EXAMPLE_INLINE": "0", "BENCH_NO_HYGIENE": "1", "BENCH_RUNTIME_PER_REQUEST": "1"},
}


def admin(server_url: str, sql: str, *params: object) -> list[tuple]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "gunicorn", "-w", "2", "--threads", "4", "-b", f"127.0.0.1:{port}", "approval_site.wsgi"]
    process = subprocess.Popen(command, cwd=EXAMPLE, env=env, stderr=subprocess.PIPE, text=True)
    booted = threading.Event()

    def drain() -> None:
        assert process.stderr is not None
        workers = 0
        for line in process.stderr:
            workers += "Booting worker" in line
            if workers >= 2:
                booted.set()

    threading.Thread(target=drain, daemon=True).start()
    if not booted.wait(60):
        process.kill()
        raise SystemExit("gunicorn did not start")
    return process


def measure(mode: str, max_age: int, database_url: str, server_url: str, count: int, rounds: int, orders: int) -> dict[str, object]:
    port = free_port()
    application = f"bench_{mode}_{port}".replace("-", "_")
    env = {
        **os.environ,
        **MODES[mode],
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "DJANGO_SETTINGS_MODULE": "django_bench_settings",
        "EXAMPLE_DATABASE_URL": database_url,
        "EXAMPLE_CONN_MAX_AGE": str(max_age),
        "EXAMPLE_APPLICATION_NAME": application,
    }
    process = start(env, port)
    base = f"http://127.0.0.1:{port}"
    try:
        numbers = [f"B-{port}-{n}" for n in range(orders)]
        for number in numbers:
            requests.post(f"{base}/orders/", json={"number": number, "amount": "10.00"}, timeout=30).raise_for_status()
        sessions_before = admin(server_url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", application)[0][0]
        local = threading.local()

        def complain(n: int) -> None:
            session = getattr(local, "session", None) or requests.Session()
            local.session = session
            reply = session.post(f"{base}/complaints/", json={"order": numbers[n % orders], "text": f"question {n}"}, timeout=60)
            assert reply.status_code == 200 and reply.json()["status"] == "done", reply.text

        rates = []
        with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
            list(pool.map(complain, range(CLIENTS * 2)))  # warm up both workers
            for _ in range(rounds):
                started = time.perf_counter()
                list(pool.map(complain, range(count)))
                rates.append(count / (time.perf_counter() - started))
        sessions_after = admin(server_url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", application)[0][0]
    finally:
        process.terminate()
        process.wait(30)
    return {"mode": mode, "conn_max_age": max_age, "sessions_before": sessions_before, "sessions_after": sessions_after, "requests_per_s": round(statistics.median(rates), 1), "rounds": [round(r, 1) for r in rates]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conn-max-age", type=int, nargs="+", default=[0, 60])
    parser.add_argument("--orders", type=int, default=1)
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    server_url = os.environ.get("TOOLNEXUS_TEST_PG_URL")
    if not server_url:
        raise SystemExit("set TOOLNEXUS_TEST_PG_URL to a PostgreSQL server, e.g. postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"toolnexus_bench_{uuid.uuid4().hex[:8]}"
    database_url = urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    admin(server_url, f'CREATE DATABASE "{name}"')
    try:
        env = {**os.environ, "EXAMPLE_DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "approval_site.settings"}
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=EXAMPLE, env=env, check=True)
        results = [measure(mode, age, database_url, server_url, args.requests, args.rounds, args.orders) for age in args.conn_max_age for mode in args.modes]
    finally:
        admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.requests} requests x {args.rounds} rounds, gunicorn -w 2 --threads 4, {CLIENTS} clients, {args.orders} order(s)")
    print(f"{'mode':<20}{'CONN_MAX_AGE':>13}{'sessions before':>17}{'sessions after':>16}{'requests/s (median)':>22}")
    for row in results:
        print(f"{row['mode']:<20}{row['conn_max_age']:>13}{row['sessions_before']:>17}{row['sessions_after']:>16}{row['requests_per_s']:>22}")


if __name__ == "__main__":
    main()
