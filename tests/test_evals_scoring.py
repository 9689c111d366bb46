"""The scorers of ``toolnexus.evals`` and the ``Dataset`` checks (CONTRACT §23 "Evaluate")."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, TypedDict

import attrs
import pytest

from toolnexus import Client, ConfigError, agent
from toolnexus.evals import Case, Dataset, Score, contains, evaluate, exact, judge, matches
from toolnexus.testing import ScriptedModel


def echo(case: Case) -> Any:
    """A target that answers with the case's metadata ``answer`` (the prompt when there is none)."""
    return (case.metadata or {}).get("answer", case.prompt)


def scored(scorer: Any, *cases: Case) -> list[Any]:
    report = evaluate(echo, list(cases), [scorer])
    return [result.scores[report.scorers[0]] for result in report.cases]


# --- exact, contains -------------------------------------------------------------------------


def test_exact_compares_the_stripped_text_with_the_stripped_expected() -> None:
    cases = Case("a", "  Paris\n", expected="Paris "), Case("b", "Paris.", expected="Paris")
    assert scored(exact(), *cases) == [1.0, 0.0]


def test_contains_looks_for_str_of_expected_in_the_text() -> None:
    cases = Case("a", "it is 42 today", expected=42), Case("b", "nothing", expected="42")
    assert scored(contains(), *cases) == [1.0, 0.0]


def test_a_case_without_expected_is_a_scorer_error_for_exact() -> None:
    report = evaluate(echo, [Case("a", "q")], [exact(), contains()])
    case = report.cases[0]
    assert case.scores == {"exact": None, "contains": None}
    assert case.scorer_errors["exact"] == "the case 'a' has no expected value"


# --- matches(T) ------------------------------------------------------------------------------


@attrs.frozen
class Refund:
    order: str
    amount: int


class RefundDict(TypedDict):
    order: str
    amount: int


def test_matches_scores_a_typed_agents_output_against_a_dict_or_an_instance() -> None:
    def model(request: dict[str, Any]) -> dict[str, Any]:
        order = request["messages"][-1]["content"]
        return {"tool_calls": [{"name": "final_result", "arguments": {"order": order, "amount": 20}}]}

    refunds = agent("refunds", does="Settles refunds", output=Refund)
    cases = [
        Case("dict", "A-1", expected={"order": "A-1", "amount": 20}),
        Case("instance", "A-2", expected=Refund("A-2", 20)),
        Case("wrong", "A-3", expected={"order": "A-3", "amount": 99}),
        Case("any", "A-4"),
    ]
    try:
        report = evaluate(refunds, cases, [matches(Refund)], generate=model, model="m")
    finally:
        refunds.close()
    assert [case.scores["matches"] for case in report.cases] == [1.0, 1.0, 0.0, 1.0]
    assert report.cases[0].output == Refund("A-1", 20)
    assert json.loads(report.cases[0].text) == {"order": "A-1", "amount": 20}


def test_matches_gives_zero_for_an_output_of_another_type() -> None:
    assert scored(matches(Refund), Case("a", "q", expected={"order": "q", "amount": 1})) == [0.0]


def test_matches_with_an_expected_that_is_not_a_t_is_a_scorer_error() -> None:
    target = lambda case: Refund("A-1", 1)  # noqa: E731
    cases = [Case("a", "q", expected={"order": "A-1"}), Case("b", "q", expected="A-1")]
    report = evaluate(target, cases, [matches(Refund)])
    assert [case.scores["matches"] for case in report.cases] == [None, None]
    assert "amount" in report.cases[0].scorer_errors["matches"]
    assert "Refund or a dict of its fields" in report.cases[1].scorer_errors["matches"]


def test_matches_takes_a_typeddict() -> None:
    target = lambda case: {"order": "A-1", "amount": 3}  # noqa: E731
    report = evaluate(target, [Case("a", "q", expected={"order": "A-1", "amount": 3})], [matches(RefundDict)])
    assert report.cases[0].scores == {"matches": 1.0}


def test_matches_refuses_what_is_not_a_class_with_fields() -> None:
    with pytest.raises(ConfigError, match="matches"):
        matches(int)


# --- judge -----------------------------------------------------------------------------------


def verdict(score: Any, reason: str = "fine") -> dict[str, Any]:
    return {"tool_calls": [{"name": "final_result", "arguments": {"score": score, "reason": reason}}]}


def test_judge_asks_the_client_with_typed_output_and_keeps_the_reason() -> None:
    model = ScriptedModel({"judge": verdict(0.75, "close, but terse")})
    grader = judge(Client(generate=model, model="judge"), "Names the capital city.")
    case = Case("a", "Capital of France?", expected="Paris", metadata={"answer": "Paris, I think"})
    report = evaluate(echo, [case], [grader])
    case = report.cases[0]
    assert case.scores == {"judge": 0.75} and case.reasons == {"judge": "close, but terse"}
    request = model.requests[0]
    asked = request["messages"][-1]["content"]
    for part in ("Names the capital city.", "Capital of France?", "Paris", "Paris, I think"):
        assert part in asked
    assert [each["function"]["name"] for each in request["tools"]] == ["final_result"]


@pytest.mark.parametrize(("given", "clamped"), [(1.7, 1.0), (-2, 0.0), (0, 0.0)])
def test_the_judges_score_is_clamped_to_zero_and_one(given: float, clamped: float) -> None:
    model = ScriptedModel({"judge": verdict(given)})
    assert scored(judge(Client(generate=model, model="judge"), "Is right."), Case("a", "q")) == [clamped]


def test_a_judge_that_gives_no_verdict_is_a_scorer_error() -> None:
    model = ScriptedModel({"judge": {"content": "I would rather not say."}})
    client = Client(generate=model, model="judge", max_turns=2)
    report = evaluate(echo, [Case("a", "q")], [judge(client, "Is right.", name="grade")])
    case = report.cases[0]
    assert case.scores == {"grade": None} and "no verdict" in case.scorer_errors["grade"]


# --- any callable; names and errors ----------------------------------------------------------


def test_a_callable_scorer_gets_the_case_and_its_result_and_a_bool_counts_as_one_or_zero() -> None:
    def short(case: Case, result: Any) -> bool:
        return len(result.text) <= len(case.prompt)

    def graded(case: Case, result: Any) -> Score:
        return Score(0.5, "half")

    report = evaluate(echo, [Case("a", "q")], [short, graded])
    assert report.scorers == ("short", "graded")
    assert report.cases[0].scores == {"short": 1.0, "graded": 0.5} and report.cases[0].reasons == {"graded": "half"}


def test_a_scorer_that_raises_or_returns_something_else_gives_none_and_its_message() -> None:
    def broken(case: Case, result: Any) -> float:
        raise ValueError("cannot tell")

    def wordy(case: Case, result: Any) -> Any:
        return "good"

    def nan(case: Case, result: Any) -> float:
        return float("nan")

    report = evaluate(echo, [Case("a", "q", expected="q")], [exact(), broken, wordy, nan])
    case = report.cases[0]
    assert case.scores == {"exact": 1.0, "broken": None, "wordy": None, "nan": None}
    assert case.scorer_errors["broken"] == "ValueError: cannot tell"
    assert case.scorer_errors["wordy"] == "returned 'good', not a number or a bool"
    assert "nan" in case.scorer_errors["nan"] and "exact" not in case.scorer_errors


def test_two_scorers_with_one_name_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="two scorers are named 'exact'"):
        evaluate(echo, [Case("a", "q")], [exact(), exact()])
    evaluate(echo, [Case("a", "q", expected="q")], [exact(), exact(name="exact_again")])


def test_a_scorer_name_is_its_name_attribute_else_its_dunder_name() -> None:
    def plain(case: Case, result: Any) -> float:
        return 1.0

    plain.name = "renamed"  # type: ignore[attr-defined]
    assert evaluate(echo, [Case("a", "q")], [plain]).scorers == ("renamed",)
    with pytest.raises(ConfigError, match="has no name"):
        evaluate(echo, [Case("a", "q")], [functools.partial(lambda case, result: 1.0)])


# --- Dataset ---------------------------------------------------------------------------------


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_jsonl_file_gives_one_case_per_line_and_skips_blank_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '{"name": "a", "prompt": "Capital of France?", "expected": "Paris"}',
        "",
        '{"name": "b", "prompt": "2+2?", "expected": 4, "metadata": {"topic": "sums"}}',
        "   ",
        '{"name": "c", "prompt": "Say hi"}',
    )
    cases = Dataset.from_jsonl(path)
    assert len(cases) == 3 and [case.name for case in cases] == ["a", "b", "c"]
    assert cases.cases[1] == Case("b", "2+2?", 4, {"topic": "sums"})
    assert cases.cases[2].expected is None and isinstance(cases.cases, tuple)


@pytest.mark.parametrize(
    ("third", "problem"),
    [
        ('{"name": "c", "prompt": ', "line 3: invalid JSON"),
        ('{"name": "a", "prompt": "again"}', "line 3: the case name 'a' is taken already ("),
        ('{"name": "c", "prompt": "q", "expect": 1}', "line 3: unknown key 'expect'"),
        ('{"name": "", "prompt": "q"}', "line 3: the case has an empty name"),
        ('{"name": "c", "prompt": "  "}', "line 3: the case has an empty prompt"),
        ('{"name": "c"}', "line 3: the case has no prompt"),
        ('["c", "q"]', "line 3: a case must be an object"),
        ('{"name": 3, "prompt": "q"}', "line 3: name must be a string"),
        ('{"name": "c", "prompt": "q", "metadata": [1]}', "line 3: metadata must be an object"),
    ],
)
def test_a_bad_line_is_a_config_error_naming_the_file_and_the_line(tmp_path: Path, third: str, problem: str) -> None:
    path = write(tmp_path, '{"name": "a", "prompt": "q"}', '{"name": "b", "prompt": "q"}', third)
    with pytest.raises(ConfigError) as caught:
        Dataset.from_jsonl(path)
    assert str(caught.value).startswith(f"{path} {problem}")


def test_a_duplicate_name_says_where_the_name_was_first_seen(tmp_path: Path) -> None:
    path = write(tmp_path, '{"name": "a", "prompt": "q"}', '{"name": "a", "prompt": "q"}')
    with pytest.raises(ConfigError, match="line 2: the case name 'a' is taken already \\(.*line 1\\)"):
        Dataset.from_jsonl(path)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the cases"):
        Dataset.from_jsonl(tmp_path / "nothing.jsonl")


def test_a_list_of_cases_is_checked_naming_the_position() -> None:
    assert Dataset([{"name": "a", "prompt": "q"}]).cases == (Case("a", "q"),)
    with pytest.raises(ConfigError, match="case 2: the case name 'a' is taken already"):
        Dataset([Case("a", "q"), Case("a", "r")])
    with pytest.raises(ConfigError, match="case 1: the case has an empty prompt"):
        evaluate(echo, [Case("a", "")])
