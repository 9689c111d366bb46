"""Answering the requests runs wait on, from a view, the admin or ``manage.py toolnexus_expire``.

An answer resumes the run in this process (any process holding the state may answer) and
runs it here, inline, until it settles or asks again; ``request_answered`` then tells the
project, which records the outcome in its own rows.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from ..data import AgentResult, Answer, Request, make_answer
from ..errors import UnknownRequest
from .._team.runtime import Runtime
from .conf import in_database, runtime, state_database, tree_of
from .models import PendingRequest, expires_at

#: Sent after an answer resumed a run and the run settled or asked again, with
#: ``request`` (the ``Request``), ``answer`` (the ``Answer`` given), ``handle_id`` (the
#: handle the run was waited on) and ``result`` (its ``AgentResult``).
request_answered = Signal()

_ROOT = "root"


def pending(rt: Runtime | None = None) -> Any:
    """The open requests of the tree of ``rt`` (this process's runtime by default), oldest
    first, as a ``PendingRequest`` queryset (with ``"state": "django"``)."""
    rows = PendingRequest.objects  # pyright: ignore[reportAttributeAccessIssue]  # the model's metaclass adds it
    return rows.using(state_database()).filter(runtime_id=tree_of(rt or runtime()), status="open")


def answer(given: Answer, *, timeout: float | None = None, rt: Runtime | None = None) -> AgentResult:
    """Resume the run waiting on ``given.id`` and run it here until it settles or asks again.

    An answer to a request past its ``expires_at`` becomes ``ok=False, reason="expired"``.
    With ``timeout`` (seconds) the run is interrupted when time is up (``status="timeout"``).

    Raises:
        UnknownRequest: no run waits on that request (answered, expired or cancelled).
    """
    rt = rt or runtime()
    found = _waiting(rt, given.id)
    if found is None:
        raise UnknownRequest(f"no run waits on request {given.id!r} (answered, expired or cancelled already)")
    request, top = found
    if _expired(request) and given.reason != "expired":
        given = make_answer(given.id, False, reason="expired")
    rt.resume(given)
    result = rt.wait(top, timeout)
    request_answered.send(sender=PendingRequest, request=request, answer=given, handle_id=top, result=result)
    return result


def expire(now: datetime.datetime | None = None, *, timeout: float | None = None) -> list[str]:
    """Answer every open request past its ``expires_at`` with ``ok=False, reason="expired"``,
    each in its own transaction; the ids answered. A request another process answers
    meanwhile is skipped."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    rt = runtime()
    done = []
    for request in rt.open_requests():
        if not _expired(request, now):
            continue
        try:
            # the run's writes commit with its answer
            # Django ships no types: pyright's guess at atomic()'s result is no context manager
            with transaction.atomic(using=state_database()):  # pyright: ignore[reportGeneralTypeIssues]
                answer(make_answer(request.id, False, reason="expired"), timeout=timeout, rt=rt)
        except UnknownRequest:
            continue
        done.append(request.id)
    return done


def _waiting(rt: Runtime, request_id: str) -> tuple[Request, str] | None:
    """The open request ``request_id`` and the highest handle waiting on it: from the
    database with ``"state": "django"``, else from the runtime's handles."""
    if in_database(rt):
        row = pending(rt).filter(request_id=request_id).first()
        return None if row is None else (row.as_request(), _waiting_top(rt, row.handle_id, request_id))
    waiting = [view for view in rt.handles() if view.pending is not None and view.pending.id == request_id]
    if not waiting:
        return None
    top = min(waiting, key=lambda view: view.id.count("/"))
    assert top.pending is not None
    return top.pending, top.id


def _expired(request: Any, now: datetime.datetime | None = None) -> bool:
    try:
        moment = expires_at(request)
    except ValueError:
        return False  # not a time: never expires (the admin shows it as it is)
    return moment is not None and moment <= (now or datetime.datetime.now(datetime.timezone.utc))


def _waiting_top(rt: Runtime, handle_id: str, request_id: str) -> str:
    """The highest handle of the path suspended on ``request_id``: waiting on it runs every
    resumed turn of the path (inline, each parent's ``task`` call runs its child)."""
    top = handle_id
    while True:
        parent = top.rsplit("/", 1)[0]
        if parent == top or parent == _ROOT:
            return top
        waiting = rt.inspect(parent).pending
        if waiting is None or waiting.id != request_id:
            return top
        top = parent
