"""Scorers: how close a case's answer came, as a number (1.0 right, 0.0 wrong).

A scorer is any callable ``(case, case_result) -> float | bool | Score`` with a name (its
``name`` attribute, else its ``__name__``). The built-in ones are made by ``exact()``,
``contains()``, ``matches(T)`` and ``judge(client, rubric)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterable

import attrs

from .._tools import schema as _schema
from ..errors import ConfigError, WireError
from ..wire import build, to_json

if TYPE_CHECKING:
    from .._run.client import Client
    from .dataset import Case
    from .results import CaseResult

Scorer = Callable[["Case", "CaseResult"], Any]


@attrs.frozen
class Score:
    """What a scorer may return when it has a reason to give: ``value`` goes to
    ``CaseResult.scores``, ``reason`` to ``CaseResult.reasons`` (under the scorer's name)."""

    value: float
    reason: str | None = None


class ScorerError(Exception):
    """A scorer could not score a case; its message goes to ``CaseResult.scorer_errors``."""


def as_text(value: Any) -> str:
    """A value as a case's text shows it: a string as is, anything else as its JSON
    (through the library's converter), or ``str()`` when JSON has no form for it."""
    if isinstance(value, str):
        return value
    try:
        return to_json(value)
    except (WireError, TypeError, ValueError):
        return str(value)


@attrs.frozen
class _Exact:
    name: str = "exact"

    def __call__(self, case: Case, result: CaseResult) -> float:
        return 1.0 if result.text.strip() == as_text(_expected(case)).strip() else 0.0


@attrs.frozen
class _Contains:
    name: str = "contains"

    def __call__(self, case: Case, result: CaseResult) -> float:
        return 1.0 if str(_expected(case)) in result.text else 0.0


def _expected(case: Case) -> Any:
    if case.expected is None:
        raise ScorerError(f"the case {case.name!r} has no expected value")
    return case.expected


def exact(*, name: str = "exact") -> Scorer:
    """1.0 when the case's text equals its ``expected`` (both stripped; a value that is
    not a string compared as its JSON), else 0.0. A case without ``expected`` is a scorer
    error."""
    return _Exact(name)


def contains(*, name: str = "contains") -> Scorer:
    """1.0 when ``str(expected)`` occurs in the case's text, else 0.0. A case without
    ``expected`` is a scorer error."""
    return _Contains(name)


@attrs.frozen
class _Matches:
    kind: type
    name: str = "matches"

    def __call__(self, case: Case, result: CaseResult) -> float:
        output = self._as_kind(result.output)
        if output is None:
            return 0.0
        if case.expected is None:
            return 1.0
        expected = self._as_kind(case.expected)
        if expected is None:
            if not isinstance(case.expected, dict):
                raise ScorerError(f"expected must be a {self.kind.__name__} or a dict of its fields")
            try:
                expected = build(case.expected, self.kind)
            except WireError as exc:
                raise ScorerError(f"expected is not a {self.kind.__name__}: {exc}") from None
        return 1.0 if output == expected else 0.0

    def _as_kind(self, value: Any) -> Any:
        """``value`` when it is a ``T`` (for a ``TypedDict``: a dict that builds as one), else ``None``."""
        if not _schema.is_typeddict(self.kind):
            return value if isinstance(value, self.kind) else None
        if not isinstance(value, dict):
            return None
        try:
            return build(value, self.kind)
        except WireError:
            return None


def matches(kind: type, *, name: str = "matches") -> Scorer:
    """1.0 when the case's output is a ``kind`` (an attrs class, a dataclass or a
    ``TypedDict``, as typed output builds it) and, when the case has an ``expected``
    (a ``kind`` or a dict of its fields), equal to it; else 0.0.

    Raises:
        ConfigError: ``kind`` is not such a class.
    """
    if not _schema.is_structured(kind):
        raise ConfigError(f"matches() takes an attrs class, a dataclass or a TypedDict, not {kind!r}")
    return _Matches(kind, name)


#: The typed output a judge is asked for.
VERDICT = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "description": "0 (fails the rubric) to 1 (meets it fully)"},
        "reason": {"type": "string", "description": "why, in one sentence"},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}


@attrs.frozen
class _Judge:
    client: Client
    rubric: str
    name: str = "judge"

    def __call__(self, case: Case, result: CaseResult) -> Score:
        asked = self.client.run(self.question(case, result), output=VERDICT)
        verdict = asked.output
        if asked.status != "done" or not isinstance(verdict, dict):
            raise ScorerError(f"the judge gave no verdict (status {asked.status}): {asked.text[:200]}")
        score = float(verdict["score"])
        if not math.isfinite(score):
            raise ScorerError(f"the judge's score {score} is not a number")
        return Score(min(1.0, max(0.0, score)), str(verdict["reason"]))

    def question(self, case: Case, result: CaseResult) -> str:
        """What the judge model is asked: the rubric, the prompt, the expected answer, the answer."""
        parts = [
            "Grade the answer below against the rubric. Call final_result with a score from 0 "
            "(fails the rubric) to 1 (meets it fully) and a one-sentence reason.",
            f"Rubric:\n{self.rubric}",
            f"Prompt:\n{case.prompt}",
        ]
        if case.expected is not None:
            parts.append(f"Expected answer:\n{as_text(case.expected)}")
        parts.append(f"Answer to grade:\n{result.text}")
        return "\n\n".join(parts)


def judge(client: Client, rubric: str, *, name: str = "judge") -> Scorer:
    """A model grades each answer: ``client`` is asked, with typed output ``{score: number,
    reason: str}``, how well the text meets ``rubric`` given the prompt and the expected
    answer. The score is clamped to 0..1; the reason goes to ``CaseResult.reasons[name]``.
    A run that gives no verdict is a scorer error for that case.

    Args:
        client: the ``Client`` (endpoint and model) that judges; shared by the worker threads.
        rubric: what a good answer does, in words.
        name: the scorer's name in the report.
    """
    if not isinstance(rubric, str) or not rubric.strip():
        raise ConfigError("judge() needs a rubric: what a good answer does, in words")
    return _Judge(client, rubric, name)


def named(scorers: Iterable[Scorer]) -> tuple[tuple[str, Scorer], ...]:
    """The scorers with their names, in order.

    Raises:
        ConfigError: a scorer is not callable, has no name, or two share one.
    """
    if callable(scorers):
        scorers = (scorers,)
    found: dict[str, Scorer] = {}
    for scorer in scorers:
        if not callable(scorer):
            raise ConfigError(f"a scorer must be callable as (case, case_result), not {scorer!r}")
        name = getattr(scorer, "name", None)
        if not isinstance(name, str) or not name:
            name = getattr(scorer, "__name__", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"the scorer {scorer!r} has no name: give it a name or __name__ attribute")
        if name in found:
            raise ConfigError(f"two scorers are named {name!r}: give one a name of its own")
        found[name] = scorer
    return tuple(found.items())


def score(scorer: Scorer, case: Case, result: CaseResult) -> tuple[float | None, str | None, str | None]:
    """``(value, reason, error)``: a scorer that raises, or returns anything but a number,
    a bool or a ``Score`` with a finite number, gives no value and an error message."""
    try:
        value = scorer(case, result)
    except ScorerError as exc:
        return None, None, str(exc)
    except Exception as exc:  # a scorer's failure is that case's scorer error, never the run's
        return None, None, f"{type(exc).__name__}: {exc}"
    reason = value.reason if isinstance(value, Score) else None
    if isinstance(value, Score):
        value = value.value
    if isinstance(value, bool):
        return (1.0 if value else 0.0), reason, None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value), reason, None
    return None, None, f"returned {_short(value)}, not a number or a bool"


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
