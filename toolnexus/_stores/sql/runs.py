"""The runs of a stored tree. A run is a top handle (a child of the root) with all its
descendants: what one ``run_agent``, or one ``toolnexus run``, started.

Housekeeping works on whole runs only. ``prune_runs`` deletes a run when its top handle
is closed, and closed long enough ago, with every row of every handle in it; a run whose
top handle is not closed (idle, running, suspended, failed or interrupted) keeps every
row, a closed teammate's included, since a resume, a retry or a recovery replays the
lead's recorded ``task`` calls, which reattach to those teammates. ``listed_runs`` is
what ``toolnexus show`` prints: every run still open, and only the latest closed ones.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import attrs

from ..._team.record import HandleRecord
from ...data import HandleView
from ..parts import HandleTable
from .base import StateStore
from .handlerows import LISTED_COLUMNS, ROOT, records_of_rows, views_of_rows

#: The rows a pruned run takes with it: ``(table, the column that names a handle)``, the
#: handles themselves last. A table that keeps rows per handle or per run joins this list.
RUN_TABLES: tuple[tuple[str, str], ...] = (
    ("tn_events", "handle_id"),
    ("tn_stream", "handle_id"),
    ("tn_journal", "handle_id"),
    ("tn_messages", "conversation_id"),
    ("tn_requests", "handle_id"),
    ("tn_bindings", "handle_id"),  # what a served surface bound to the run (``toolnexus._serve``)
    ("tn_handles", "id"),
)

#: Runs read (and deleted) per statement and per transaction.
RUNS_PER_BATCH = 100
#: Handle ids per ``IN (...)`` list of a delete.
_IDS_PER_STATEMENT = 500

#: The handles of the runs whose top handles are listed in ``{tops}``, each with its run.
#: (Tables are named right after ``FROM``, where a PostgreSQL state qualifies them.)
_RUN_HANDLES = (
    "WITH RECURSIVE run(run_top, id) AS ("
    " SELECT id, id FROM tn_handles WHERE runtime_id = ? AND id IN ({tops})"
    " UNION ALL SELECT run.run_top, h.id FROM tn_handles h, run WHERE h.runtime_id = ? AND h.parent_id = run.id)"
)


def prune_runs(state: StateStore, runtime_id: str, before: float) -> list[str]:
    """Delete the runs of ``runtime_id`` whose top handle closed before ``before``
    (``time.time()``), each whole, with all its rows; the ids of the handles deleted.

    A run is deleted in one transaction with its rows (``RUN_TABLES``): a prune that
    stops part-way leaves whole runs. A closed top handle above a handle that is not
    closed (which closing leaf-first never leaves) keeps its run.
    """
    tops = [
        row[0]
        for row in state.execute(
            "SELECT id FROM tn_handles WHERE runtime_id = ? AND parent_id = ? AND state = 'closed' AND updated_at < ?"
            " ORDER BY spawn_no",
            (runtime_id, ROOT, before),
        )
    ]
    removed: list[str] = []
    for batch in _batches(tops, RUNS_PER_BATCH):
        with state.transaction():
            ids = _finished_handles(state, runtime_id, batch)
            for chunk in _batches(ids, _IDS_PER_STATEMENT):
                marks = ", ".join("?" for _ in chunk)
                for table, column in RUN_TABLES:
                    sql = f"DELETE FROM {table} WHERE runtime_id = ? AND {column} IN ({marks})"
                    state.execute(sql, (runtime_id, *chunk))
        removed += ids
    return removed


def _finished_handles(state: StateStore, runtime_id: str, tops: list[str]) -> list[str]:
    """Every handle of the runs of ``tops`` whose handles are all closed."""
    sql = _RUN_HANDLES.format(tops=", ".join("?" for _ in tops))
    rows = state.execute(
        f"{sql} SELECT run.run_top, run.id, h.state FROM tn_handles h, run WHERE h.runtime_id = ? AND h.id = run.id",
        (runtime_id, *tops, runtime_id, runtime_id),
    )
    runs: dict[str, list[str]] = {}
    open_runs: set[str] = set()
    for top, handle_id, status in rows:
        runs.setdefault(top, []).append(handle_id)
        if status != "closed":
            open_runs.add(top)
    return [handle_id for top in tops if top not in open_runs for handle_id in runs.get(top, [])]


class SqlRuns:
    """The runs of one tree (``parts.Runs``)."""

    def __init__(self, state: StateStore, runtime_id: str) -> None:
        self._state = state
        self._runtime_id = runtime_id

    def listing(self, table: HandleTable, keep_closed: int) -> list[HandleView]:
        rows = self._state.execute(
            f"SELECT {LISTED_COLUMNS} FROM tn_handles WHERE runtime_id = ? AND state <> 'closed'"
            f" UNION ALL SELECT * FROM (SELECT {LISTED_COLUMNS} FROM tn_handles"
            " WHERE runtime_id = ? AND state = 'closed' ORDER BY updated_at DESC LIMIT ?) recent",
            (self._runtime_id, self._runtime_id, keep_closed),
        )
        return views_of_rows(rows)

    def prune(self, table: HandleTable | None, before: float) -> list[str]:
        ids = prune_runs(self._state, self._runtime_id, before)
        if table is not None:
            table.forget(ids)
        return ids


@attrs.frozen
class RunListing:
    """What ``toolnexus show`` prints of a tree: the root and the listed runs' records
    (pre-order), and how many closed runs were left out."""

    records: list[HandleRecord]
    closed_left_out: int


def listed_runs(state: StateStore, runtime_id: str, closed_limit: int | None) -> RunListing:
    """Every run whose top handle is not closed, and the ``closed_limit`` most recently
    started closed ones (every one when ``None``), with their handles."""
    where = "runtime_id = ? AND parent_id = ?"
    keys = (runtime_id, ROOT)
    tops = state.execute(f"SELECT id FROM tn_handles WHERE {where} AND state <> 'closed'", keys)
    limit = "" if closed_limit is None else f" LIMIT {int(closed_limit)}"
    closed = state.execute(
        f"SELECT id FROM tn_handles WHERE {where} AND state = 'closed' ORDER BY spawn_no DESC{limit}", keys
    )
    left_out = 0
    if closed_limit is not None and len(closed) >= closed_limit:
        total = state.execute(f"SELECT count(*) FROM tn_handles WHERE {where} AND state = 'closed'", keys)[0][0]
        left_out = int(total) - len(closed)
    rows = state.execute(f"SELECT {LISTED_COLUMNS} FROM tn_handles WHERE runtime_id = ? AND id = ?", (runtime_id, ROOT))
    for batch in _batches([row[0] for row in [*tops, *closed]], RUNS_PER_BATCH):
        sql = _RUN_HANDLES.format(tops=", ".join("?" for _ in batch))
        rows += state.execute(
            f"{sql} SELECT {', '.join('h.' + column for column in LISTED_COLUMNS.split(', '))}"
            " FROM tn_handles h, run WHERE h.runtime_id = ? AND h.id = run.id",
            (runtime_id, *batch, runtime_id, runtime_id),
        )
    return RunListing(records=records_of_rows(rows), closed_left_out=left_out)


def _batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
