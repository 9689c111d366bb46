"""``Report``: the cases of an evaluation in dataset order, their summary, Markdown and JSON."""

from __future__ import annotations

import statistics
from typing import Any

import attrs

from ..errors import ConfigError, WireError
from ..wire import parse_json, to_json, to_wire
from .markdown import render
from .results import CaseResult, Comparison, compare_cases
from .scoring import as_text

#: A case's keys in a JSON report, in order; ``prompt``, ``reasons`` and
#: ``scorer_errors`` follow them.
CASE_KEYS = (
    "name", "status", "output", "text", "expected", "scores", "tokens", "cost", "latency_s", "error", "metadata",
)


@attrs.frozen(kw_only=True)
class Report:
    """An evaluation's outcome. Durations are in seconds."""

    #: One result per case, in dataset order whatever order they finished in.
    cases: tuple[CaseResult, ...]
    #: The scorers' names, in the order they were given.
    scorers: tuple[str, ...]
    duration_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        """``{"cases", "errors", "scores", "tokens", "cost", "latency_s"}``: each scorer's
        mean over the cases it scored (``None`` when it scored none), tokens and cost
        summed (``cost`` is ``None`` when no case has one), the mean latency."""
        costs = [case.cost for case in self.cases if case.cost is not None]
        return {
            "cases": len(self.cases),
            "errors": sum(1 for case in self.cases if case.status == "error"),
            "scores": {name: _mean([case.scores.get(name) for case in self.cases]) for name in self.scorers},
            "tokens": sum(case.tokens for case in self.cases),
            "cost": sum(costs) if costs else None,
            "latency_s": _mean([case.latency_s for case in self.cases]),
        }

    def to_markdown(self) -> str:
        """A table with one row per case (status, each score, tokens, cost, latency and,
        when a case has one, its error), then the summary."""
        return render(self.cases, self.scorers, self.summary(), self.duration_s)

    def to_json(self) -> str:
        """``{"summary", "cases": [{"name", "status", "output", "text", "expected",
        "scores", "tokens", "cost", "latency_s", "error", "metadata", ...}]}``; outputs go
        through the library's converter (a value JSON has no form for is written as its
        text)."""
        body = {
            "summary": self.summary(),
            "cases": [_case_body(case) for case in self.cases],
            "scorers": list(self.scorers),
            "duration_s": self.duration_s,
        }
        return to_json(body)

    @classmethod
    def from_json(cls, text: str | bytes) -> Report:
        """A report written by ``to_json`` (a typed output comes back as a plain dict).

        Raises:
            WireError: the text is not such a report.
        """
        data = parse_json(text, what="a report")
        if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
            raise WireError("a report must be a JSON object with a list of cases")
        cases = tuple(_case_from(body, index) for index, body in enumerate(data["cases"]))
        duration_s = _number(data.get("duration_s", 0.0), "duration_s")
        return cls(cases=cases, scorers=_scorers_of(data, cases), duration_s=duration_s)

    def compare(self, baseline: Report, *, tolerance: float = 0.0) -> Comparison:
        """This report against an earlier one, case by case (matched by name).

        A score lower than the baseline's by more than ``tolerance`` is a regression, a
        higher one an improvement (``None`` counts as 0; only scorers both reports have
        are compared). A case that ends ``error`` now and did not before is one
        regression with scorer ``"status"`` and the two statuses, its scores not
        compared; the reverse is an improvement.

        Returns:
            The moves in dataset order then scorer order, the added and missing case
            names, and ``ok`` (no regression).
        """
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
            raise ConfigError(f"tolerance must be a number >= 0, not {tolerance!r}")
        return compare_cases(self.cases, self.scorers, baseline.cases, baseline.scorers, float(tolerance))


def _mean(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.fmean(present) if present else None


def _case_body(case: CaseResult) -> dict[str, Any]:
    body = {key: getattr(case, key) for key in CASE_KEYS}
    for key in ("output", "expected", "metadata"):
        body[key] = _json_ready(body[key])
    body.update(prompt=case.prompt, reasons=case.reasons, scorer_errors=case.scorer_errors)
    return body


def _json_ready(value: Any) -> Any:
    """``value`` through the converter; its text when JSON has no form for it."""
    try:
        data = to_wire(value)
        to_json(data)
    except (WireError, TypeError, ValueError):
        return as_text(value)
    return data


def _case_from(body: Any, index: int) -> CaseResult:
    where = f"cases[{index}]"
    if not isinstance(body, dict):
        raise WireError(f"{where} must be an object")
    name, status = body.get("name"), body.get("status")
    if not isinstance(name, str) or not isinstance(status, str):
        raise WireError(f"{where} needs a name and a status (strings)")
    return CaseResult(
        name=name,
        prompt=_string(body.get("prompt", ""), f"{where}.prompt"),
        expected=body.get("expected"),
        metadata=body.get("metadata") if isinstance(body.get("metadata"), dict) else None,
        output=body.get("output"),
        text=_string(body.get("text", ""), f"{where}.text"),
        status=status,
        error=None if body.get("error") is None else _string(body["error"], f"{where}.error"),
        scores=_scores(body.get("scores", {}), f"{where}.scores"),
        reasons=_strings(body.get("reasons", {}), f"{where}.reasons"),
        scorer_errors=_strings(body.get("scorer_errors", {}), f"{where}.scorer_errors"),
        tokens=_whole(body.get("tokens", 0), f"{where}.tokens"),
        cost=None if body.get("cost") is None else _number(body["cost"], f"{where}.cost"),
        latency_s=_number(body.get("latency_s", 0.0), f"{where}.latency_s"),
    )


def _scorers_of(data: dict[str, Any], cases: tuple[CaseResult, ...]) -> tuple[str, ...]:
    """The scorer names: as written, else the summary's, else the cases' in first-seen order."""
    named = data.get("scorers")
    if isinstance(named, list) and all(isinstance(name, str) for name in named):
        return tuple(named)
    summary = data.get("summary")
    if isinstance(summary, dict) and isinstance(summary.get("scores"), dict):
        return tuple(summary["scores"])
    return tuple(dict.fromkeys(name for case in cases for name in case.scores))


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"{where} must be a string, not {type(value).__name__}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError(f"{where} must be a number, not {type(value).__name__}")
    return float(value)


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{where} must be a whole number, not {type(value).__name__}")
    return value


def _scores(value: Any, where: str) -> dict[str, float | None]:
    if not isinstance(value, dict):
        raise WireError(f"{where} must be an object")
    return {str(name): None if score is None else _number(score, f"{where}.{name}") for name, score in value.items()}


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise WireError(f"{where} must be an object")
    return {str(name): _string(text, f"{where}.{name}") for name, text in value.items()}
