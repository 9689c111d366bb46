"""A report as Markdown: one table row per case, then the summary."""

from __future__ import annotations

from typing import Any

from .results import CaseResult

#: The longest error shown in a table cell; the JSON report keeps it whole.
ERROR_CELL = 120


def render(cases: tuple[CaseResult, ...], scorers: tuple[str, ...], summary: dict[str, Any], duration_s: float) -> str:
    """``Report.to_markdown``."""
    noted = any(case.error or case.scorer_errors for case in cases)
    head = ["case", "status", *scorers, "tokens", "cost", "latency"] + (["error"] if noted else [])
    align = ["---", "---"] + ["---:"] * (len(scorers) + 3) + (["---"] if noted else [])
    lines = [_row(head), _row(align)]
    for case in cases:
        cells = [case.name, case.status, *(_score(case.scores.get(name)) for name in scorers)]
        cells += [str(case.tokens), _cost(case.cost), f"{case.latency_s:.2f} s"]
        if noted:
            cells.append(_note(case))
        lines.append(_row(cells))
    lines.append("")
    lines.append(f"**{_count(summary['cases'], 'case')}**, {_count(summary['errors'], 'error')}, in {duration_s:.2f} s")
    lines.append("")
    lines += [f"- {name}: {_score(mean, digits=3)}" for name, mean in summary["scores"].items()]
    lines.append(f"- tokens: {summary['tokens']}")
    lines.append(f"- cost: {_cost(summary['cost'])}")
    latency = summary["latency_s"]
    lines.append(f"- mean latency: {'—' if latency is None else f'{latency:.2f} s'}")
    return "\n".join(lines) + "\n"


def _count(number: int, what: str) -> str:
    return f"{number} {what}" if number == 1 else f"{number} {what}s"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _cell(text: str) -> str:
    """Text that keeps a table row whole: no line breaks, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _score(value: float | None, *, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _cost(value: float | None) -> str:
    return "—" if value is None else f"${value:.6f}"


def _note(case: CaseResult) -> str:
    note = case.error or "; ".join(f"{name}: {problem}" for name, problem in case.scorer_errors.items())
    return note if len(note) <= ERROR_CELL else note[: ERROR_CELL - 1] + "…"
