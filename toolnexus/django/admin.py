"""The admin's list of pending requests, with approve and decline actions.

An action answers each selected request through the runtime (``approvals.answer``): the
run resumes in the admin's process, inside one transaction per request, and
``request_answered`` tells the project. Opening the list first answers the requests past
their ``expires_at`` with ``reason="expired"``.

Who asks is the admin site's own login (CONTRACT §20): a staff user, with the model's
``view`` permission to list the requests and its ``change`` permission to answer them; the
actions are Django's CSRF-protected form posts, so no other site can post them. A
request the admin refuses answers nothing: the expired requests are answered only for a
user who may change them.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin, messages
from django.db import transaction

from ..data import make_answer
from ..errors import ToolnexusError, UnknownRequest
from . import approvals
from .conf import state_database
from .models import PendingRequest

log = logging.getLogger("toolnexus")


@admin.register(PendingRequest)
class PendingRequestAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no type hints
    list_display = ("request_id", "kind", "prompt", "handle_id", "created", "expires")
    search_fields = ("request_id", "handle_id")
    actions = ("approve", "decline")
    readonly_fields = ("request_id", "runtime_id", "handle_id", "status", "request", "created_at")
    exclude = ("answer", "closed_at")

    def get_queryset(self, request: Any) -> Any:
        return approvals.pending()

    def changelist_view(self, request: Any, extra_context: Any = None) -> Any:
        if self.has_change_permission(request):  # a refused (or read-only) visit answers nothing
            expired = self._expire(request)
            if expired:
                answered = f"{len(expired)} request(s) expired and were answered as declined: {', '.join(expired)}"
                self.message_user(request, answered, messages.INFO)
        return super().changelist_view(request, extra_context)

    def _expire(self, request: Any) -> list[str]:
        """Expire overdue requests; a failure is shown, not raised."""
        try:
            return approvals.expire()
        except ToolnexusError as exc:
            log.warning("toolnexus admin: expiring requests failed", exc_info=True)
            self.message_user(request, f"expiring requests failed: {exc}", messages.ERROR)
            return []

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    @admin.action(  # type: ignore[untyped-decorator]
        description="Approve the selected requests (the runs resume)", permissions=["change"]
    )
    def approve(self, request: Any, queryset: Any) -> None:
        self._answer(request, queryset, ok=True)

    @admin.action(  # type: ignore[untyped-decorator]
        description="Decline the selected requests (the runs resume)", permissions=["change"]
    )
    def decline(self, request: Any, queryset: Any) -> None:
        self._answer(request, queryset, ok=False)

    def _answer(self, request: Any, queryset: Any, *, ok: bool) -> None:
        done, gone = [], []
        for row in list(queryset):
            answer = make_answer(row.request_id, ok, reason=None if ok else "declined")
            try:
                # Django ships no types: pyright's guess at atomic()'s result is no context manager
                with transaction.atomic(using=state_database()):  # pyright: ignore[reportGeneralTypeIssues]
                    result = approvals.answer(answer)
            except UnknownRequest:
                gone.append(row.request_id)
                continue
            except ToolnexusError as exc:
                log.warning("toolnexus admin: answering %s failed", row.request_id, exc_info=True)
                self.message_user(request, f"{row.request_id}: {exc}", messages.ERROR)
                continue
            done.append(f"{row.request_id} ({result.status})")
        if done:
            verb = "approved" if ok else "declined"
            self.message_user(request, f"{verb}: {', '.join(done)}", messages.SUCCESS)
        if gone:
            self.message_user(request, f"answered elsewhere already: {', '.join(gone)}", messages.WARNING)

