"""The state's requests as a Django model, for the admin and for queries.

The tables belong to the state store (``toolnexus.state``): the app's migration creates
them with the store's own SQL, so the model is unmanaged and only reads them. Answering
goes through the runtime (``toolnexus.django.approvals``), never through ``save()``.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from django.db import models

from ..data import Request
from ..wire import from_wire


class PendingRequest(models.Model):  # type: ignore[misc]  # Django ships no type hints
    """A request a run waits on (``status`` ``"open"``), or one answered or cancelled."""

    runtime_id = models.TextField()
    #: Request ids are unique (``make_request``), so the id alone names a row.
    request_id = models.TextField(primary_key=True)
    handle_id = models.TextField()
    status = models.TextField()
    request = models.TextField()
    answer = models.TextField(null=True)
    created_at = models.FloatField()
    closed_at = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = "tn_requests"
        verbose_name = "pending request"
        ordering = ("created_at",)

    def __str__(self) -> str:
        return str(self.request_id)

    def as_request(self) -> Request:
        body: Any = json.loads(self.request) if isinstance(self.request, str) else self.request
        return from_wire(Request, body)

    @property
    def kind(self) -> str:
        return self.as_request().kind

    @property
    def prompt(self) -> str:
        return self.as_request().prompt

    @property
    def created(self) -> datetime.datetime:
        created_at: float = self.created_at  # pyright: ignore[reportAssignmentType]  # a FloatField to pyright
        return datetime.datetime.fromtimestamp(created_at, tz=datetime.timezone.utc)

    @property
    def expires(self) -> datetime.datetime | None:
        return expires_at(self.as_request())


def expires_at(request: Request) -> datetime.datetime | None:
    """``Request.expires_at`` (ISO 8601) as an aware datetime; a time without a zone is UTC.

    Raises:
        ValueError: the value is not an ISO 8601 time.
    """
    if not request.expires_at:
        return None
    moment = datetime.datetime.fromisoformat(request.expires_at)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.timezone.utc)
