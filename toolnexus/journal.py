"""What a durable turn records as it goes (the runtime's state implements it)."""

from __future__ import annotations

from typing import Protocol

from .data import ModelReply, ToolResult


class Journal(Protocol):
    """Where a durable turn records each step as it happens, so that a turn taken over
    after a crash replays what was done instead of doing it again."""

    def model_reply(self, step: int) -> ModelReply | None:
        """The recorded reply of model call ``step`` (1-based), if there is one."""

    def record_model(self, step: int, reply: ModelReply) -> None:
        """Commit ``reply`` together with its charge to the ledger."""

    def tool_outcomes(self, call_ids: list[str]) -> dict[str, ToolResult | None]:
        """Recorded calls among ``call_ids``: the result, or ``None`` when a call started
        and never finished (in doubt)."""

    def tools_started(self, call_ids: list[str]) -> None:
        """Commit that these calls are about to run."""

    def tool_done(self, call_id: str, result: ToolResult) -> None:
        """Commit one call's result together with its charge to the ledger (a suspension
        is not an effect: it is left to be asked again)."""
