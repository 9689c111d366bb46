"""The values an evaluation hands back: one ``CaseResult`` per case, and what ``compare``
finds between two reports."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class CaseResult:
    """One case's run and scores. Durations are in seconds."""

    name: str
    prompt: str
    expected: Any = None
    metadata: dict[str, Any] | None = None
    #: The typed output when the run had one, else the text; a callable target's plain value as is.
    output: Any = None
    text: str = ""
    #: The result's status (``done``, ``incomplete``, ``timeout``...); ``error`` when the target raised.
    status: str = "done"
    #: ``"<Type>: <message>"`` when the target raised; the text when the status is ``error``.
    error: str | None = None
    #: Every scorer by name; ``None`` when it could not score (and for every scorer of an ``error`` case).
    scores: dict[str, float | None] = attrs.field(factory=dict)
    #: A scorer's reason by its name (``judge`` gives one).
    reasons: dict[str, str] = attrs.field(factory=dict)
    #: Why a scorer gave ``None``, by its name.
    scorer_errors: dict[str, str] = attrs.field(factory=dict)
    tokens: int = 0
    #: US dollars; ``None`` when nothing the case ran was priced.
    cost: float | None = None
    latency_s: float = 0.0


@attrs.frozen
class Regression:
    """A score (or, with scorer ``"status"``, the status) that moved between two reports."""

    case: str
    scorer: str
    before: Any
    after: Any


@attrs.frozen(kw_only=True)
class Comparison:
    """What ``Report.compare`` found: the moves in dataset order, then scorer order."""

    regressions: list[Regression]
    improvements: list[Regression]
    #: Cases in this report that the baseline did not have.
    added: list[str]
    #: Cases of the baseline that this report does not have.
    missing: list[str]
    #: No regressions.
    ok: bool

    def to_markdown(self) -> str:
        """The regressions, improvements, added and missing cases as a short Markdown list."""
        moves = f"{len(self.regressions)} regressions, {len(self.improvements)} improvements"
        lines = [f"**Against the baseline:** {moves}"]
        lines += [f"- regression: {_move(each)}" for each in self.regressions]
        lines += [f"- improvement: {_move(each)}" for each in self.improvements]
        if self.added:
            lines.append(f"- added: {', '.join(self.added)}")
        if self.missing:
            lines.append(f"- missing: {', '.join(self.missing)}")
        return "\n".join(lines) + "\n"


def _move(each: Regression) -> str:
    return f"{each.case} {each.scorer} {_shown(each.before)} → {_shown(each.after)}"


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


#: Within this much of the tolerance a move counts as within it (float sums are not exact).
_SLACK = 1e-9


def compare_cases(
    now: tuple[CaseResult, ...],
    now_scorers: tuple[str, ...],
    before: tuple[CaseResult, ...],
    before_scorers: tuple[str, ...],
    tolerance: float,
) -> Comparison:
    """``Report.compare``'s rules over two reports' cases and scorer names."""
    earlier = {case.name: case for case in before}
    scorers = [name for name in now_scorers if name in before_scorers]
    regressions: list[Regression] = []
    improvements: list[Regression] = []
    for case in now:
        old = earlier.get(case.name)
        if old is None:
            continue
        failed_now, failed_before = case.status == "error", old.status == "error"
        if failed_now != failed_before:
            move = Regression(case.name, "status", old.status, case.status)
            (regressions if failed_now else improvements).append(move)
            continue
        if failed_now:
            continue
        for scorer in scorers:
            after, prior = case.scores.get(scorer), old.scores.get(scorer)
            change = (after or 0.0) - (prior or 0.0)
            if change < -tolerance - _SLACK:
                regressions.append(Regression(case.name, scorer, prior, after))
            elif change > tolerance + _SLACK:
                improvements.append(Regression(case.name, scorer, prior, after))
    names = {case.name for case in now}
    return Comparison(
        regressions=regressions,
        improvements=improvements,
        added=[case.name for case in now if case.name not in earlier],
        missing=[case.name for case in before if case.name not in names],
        ok=not regressions,
    )
