"""``manage.py toolnexus_expire``: answer the requests past their ``expires_at`` (from cron)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ...approvals import expire


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = 'Answers every open request past its expires_at with ok=False, reason="expired"; the runs resume here.'

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--timeout", type=float, default=None, help="seconds each resumed run may take (default: no limit)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        expired = expire(timeout=options["timeout"])
        for request_id in expired:
            self.stdout.write(request_id)
        self.stderr.write(f"{len(expired)} request(s) expired")
