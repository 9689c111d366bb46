"""``Report``: summary, Markdown, JSON both ways, ``compare`` against a baseline, and the
progress line (CONTRACT §23 "Evaluate")."""

from __future__ import annotations

import io
import json
import os
import pty
import sys
from typing import Any

import attrs
import pytest

from toolnexus import WireError
from toolnexus.evals import Case, CaseResult, Comparison, Regression, Report, evaluate


def result(name: str, status: str = "done", **scores: float | None) -> CaseResult:
    return CaseResult(name=name, prompt=f"prompt {name}", status=status, scores=dict(scores))


def report(*cases: CaseResult, scorers: tuple[str, ...] = ("exact", "judge")) -> Report:
    return Report(cases=cases, scorers=scorers, duration_s=1.0)


# --- compare ---------------------------------------------------------------------------------


def test_compare_lists_regressions_and_improvements_in_dataset_then_scorer_order() -> None:
    before = report(
        result("a", exact=1.0, judge=0.9), result("b", exact=0.0, judge=0.5), result("c", exact=1.0, judge=1.0)
    )
    now = report(
        result("a", exact=0.0, judge=0.4), result("b", exact=1.0, judge=0.5), result("c", exact=1.0, judge=None)
    )
    found = now.compare(before)
    assert found.regressions == [
        Regression("a", "exact", 1.0, 0.0),
        Regression("a", "judge", 0.9, 0.4),
        Regression("c", "judge", 1.0, None),  # None counts as 0
    ]
    assert found.improvements == [Regression("b", "exact", 0.0, 1.0)]
    assert found.added == [] and found.missing == [] and found.ok is False


def test_a_case_that_errors_now_is_one_status_regression_and_the_reverse_an_improvement() -> None:
    before = report(result("a", exact=1.0, judge=1.0), result("b", "error", exact=None, judge=None))
    now = report(result("a", "error", exact=None, judge=None), result("b", exact=0.0, judge=0.0))
    found = now.compare(before)
    assert found.regressions == [Regression("a", "status", "done", "error")]
    assert found.improvements == [Regression("b", "status", "error", "done")]  # its scores not compared


def test_added_and_missing_cases_are_named_and_are_no_regression() -> None:
    before = report(result("a", exact=1.0), result("gone", exact=1.0))
    found = report(result("a", exact=1.0), result("new", exact=0.0)).compare(before)
    assert found == Comparison(regressions=[], improvements=[], added=["new"], missing=["gone"], ok=True)


def test_a_move_within_the_tolerance_is_neither_regression_nor_improvement() -> None:
    before = report(result("a", exact=0.8, judge=0.3))
    now = report(result("a", exact=0.7, judge=0.6))
    assert now.compare(before, tolerance=0.1).regressions == []  # 0.1 down is not more than 0.1
    assert now.compare(before, tolerance=0.1).improvements == [Regression("a", "judge", 0.3, 0.6)]
    assert now.compare(before, tolerance=0.05).regressions == [Regression("a", "exact", 0.8, 0.7)]
    assert now.compare(before, tolerance=0.5).ok and now.compare(before, tolerance=0.5).improvements == []


def test_only_scorers_both_reports_have_are_compared() -> None:
    before = report(result("a", exact=1.0), scorers=("exact",))
    now = report(result("a", exact=1.0, judge=0.0))
    assert now.compare(before).ok


def test_a_negative_tolerance_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        report().compare(report(), tolerance=-0.1)


# --- summary, JSON, Markdown -----------------------------------------------------------------


@attrs.frozen
class Refund:
    order: str
    amount: int


def full_report() -> Report:
    cases = [
        CaseResult(
            name="typed", prompt="Refund A-1", expected={"order": "A-1", "amount": 5}, metadata={"topic": "refunds"},
            output=Refund("A-1", 5), text='{"order":"A-1","amount":5}', scores={"exact": 1.0, "judge": 0.5},
            reasons={"judge": "terse"}, tokens=30, cost=0.25, latency_s=0.5,
        ),
        CaseResult(
            name="broken | piped", prompt="q", status="error", error="RuntimeError: down\nbadly",
            scores={"exact": None, "judge": None}, latency_s=1.5,
        ),
        CaseResult(
            name="plain", prompt="q", output=object(), text="thing", scores={"exact": 0.0, "judge": None},
            scorer_errors={"judge": "the judge gave no verdict"}, tokens=10, latency_s=1.0,
        ),
    ]
    return Report(cases=tuple(cases), scorers=("exact", "judge"), duration_s=2.0)


def test_summary_gives_counts_means_of_scored_cases_sums_and_mean_latency() -> None:
    assert full_report().summary() == {
        "cases": 3,
        "errors": 1,
        "scores": {"exact": 0.5, "judge": 0.5},
        "tokens": 40,
        "cost": 0.25,
        "latency_s": 1.0,
    }
    assert report(result("a", exact=None, judge=None)).summary()["scores"] == {"exact": None, "judge": None}
    assert report(result("a")).summary()["cost"] is None


def test_to_json_has_the_summary_and_each_case_in_the_contracts_shape() -> None:
    data = json.loads(full_report().to_json())
    assert data["summary"] == full_report().summary()
    typed = data["cases"][0]
    assert list(typed)[:11] == [
        "name", "status", "output", "text", "expected", "scores", "tokens", "cost", "latency_s", "error", "metadata"
    ]
    assert typed["output"] == {"order": "A-1", "amount": 5}  # through the converter
    assert typed["reasons"] == {"judge": "terse"} and typed["prompt"] == "Refund A-1"
    assert data["cases"][2]["output"].startswith("<object object")  # no JSON form: its text
    assert data["cases"][1]["error"] == "RuntimeError: down\nbadly"


def test_from_json_reads_back_what_to_json_wrote() -> None:
    text = full_report().to_json()
    again = Report.from_json(text)
    assert again.to_json() == text
    assert again.scorers == ("exact", "judge") and again.duration_s == 2.0
    assert again.cases[0].output == {"order": "A-1", "amount": 5} and again.cases[0].cost == 0.25
    assert again.cases[2].scorer_errors == {"judge": "the judge gave no verdict"}
    assert [case.name for case in again.cases] == ["typed", "broken | piped", "plain"]


def test_from_json_reads_a_report_with_only_the_contracts_keys() -> None:
    data = json.loads(full_report().to_json())
    for case in data["cases"]:
        for key in ("prompt", "reasons", "scorer_errors"):
            del case[key]
    del data["scorers"], data["duration_s"]
    again = Report.from_json(json.dumps(data))
    assert again.scorers == ("exact", "judge") and again.cases[1].status == "error"
    assert again.compare(full_report()).ok


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"cases": 3}',
        '{"cases": [{"name": "a"}]}',
        '{"cases": [{"name": "a", "status": "done", "scores": {"x": "1"}}]}',
        "{",
    ],
)
def test_from_json_refuses_what_is_not_a_report(text: str) -> None:
    with pytest.raises(WireError):
        Report.from_json(text)


def test_markdown_is_a_table_with_one_row_per_case_then_the_summary() -> None:
    text = full_report().to_markdown()
    lines = text.splitlines()
    assert lines[0] == "| case | status | exact | judge | tokens | cost | latency | error |"
    assert lines[1] == "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"
    assert lines[2] == "| typed | done | 1.00 | 0.50 | 30 | $0.250000 | 0.50 s |  |"
    assert lines[3] == "| broken \\| piped | error | — | — | 0 | — | 1.50 s | RuntimeError: down badly |"
    assert lines[4] == "| plain | done | 0.00 | — | 10 | — | 1.00 s | judge: the judge gave no verdict |"
    assert lines[5] == ""
    assert lines[6:] == [
        "**3 cases**, 1 error, in 2.00 s",
        "",
        "- exact: 0.500",
        "- judge: 0.500",
        "- tokens: 40",
        "- cost: $0.250000",
        "- mean latency: 1.00 s",
    ]


def test_markdown_has_no_error_column_when_no_case_has_one() -> None:
    assert report(result("a", exact=1.0, judge=1.0)).to_markdown().splitlines()[0].endswith("| latency |")


# --- progress --------------------------------------------------------------------------------


def read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the other side is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def evaluate_with_stderr(stream: Any, monkeypatch: pytest.MonkeyPatch, progress: bool | None) -> None:
    monkeypatch.setattr(sys, "stderr", stream)
    evaluate(lambda case: "x", [Case(f"c{i}", "q") for i in range(3)], [], progress=progress)


@pytest.mark.parametrize("progress", [None, True])
def test_progress_is_redrawn_on_stderr_when_it_is_a_terminal(monkeypatch: pytest.MonkeyPatch, progress: Any) -> None:
    monkeypatch.delenv("TERM", raising=False)
    main, side = pty.openpty()
    with os.fdopen(side, "w", encoding="utf-8") as terminal:
        evaluate_with_stderr(terminal, monkeypatch, progress)
    drawn = read_all(main)
    os.close(main)
    assert drawn.startswith("\r0/3") and drawn.endswith("\r3/3\r\n")  # the terminal turns \n into \r\n
    assert drawn.count("\r") == 5


def test_no_progress_when_stderr_is_not_a_terminal_or_it_is_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = io.StringIO()
    evaluate_with_stderr(piped, monkeypatch, None)
    assert piped.getvalue() == ""
    main, side = pty.openpty()
    with os.fdopen(side, "w", encoding="utf-8") as terminal:
        evaluate_with_stderr(terminal, monkeypatch, False)
    drawn = read_all(main)
    os.close(main)
    assert drawn == ""


def test_progress_true_draws_even_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = io.StringIO()
    evaluate_with_stderr(piped, monkeypatch, True)
    assert piped.getvalue() == "\r0/3\r1/3\r2/3\r3/3\n"
