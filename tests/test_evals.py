"""``toolnexus.evals.evaluate``: cases on worker threads, results in dataset order, the
target kinds, errors, timeouts and what each case costs (CONTRACT §23 "Evaluate")."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from conftest import run_in_thread
from toolnexus import AgentDef, Client, ConfigError, Runtime, agent, suspend, tool
from toolnexus.evals import Case, Dataset, contains, evaluate, exact
from toolnexus.testing import ScriptedLLMServer, ScriptedModel, last_user_text, text_completion

WAIT_S = 10.0
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def upper(request: dict[str, Any]) -> dict[str, Any]:
    """A model that answers the prompt in capitals."""
    return {"content": last_user_text(request).upper(), "usage": USAGE}


def eval_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("toolnexus-eval")]


class Chain:
    """A target whose cases finish out of order, deterministically: in each block of four,
    a case waits until the next one has finished, so ``c3`` ends before ``c2``, ``c2``
    before ``c1``... Case ``c13`` raises."""

    def __init__(self, count: int) -> None:
        self.finished = [threading.Event() for _ in range(count)]
        self.order: list[str] = []
        self._lock = threading.Lock()
        self._running = 0
        self.peak = 0

    def __call__(self, case: Case) -> str:
        index = int(case.name[1:])
        with self._lock:
            self._running += 1
            self.peak = max(self.peak, self._running)
        try:
            if index % 4 != 3 and not self.finished[index + 1].wait(WAIT_S):
                raise TimeoutError(f"{case.name} waited in vain for c{index + 1}")
            if case.name == "c13":
                raise RuntimeError("the target broke")
            return f"answer {index}"
        finally:
            with self._lock:
                self._running -= 1
                self.order.append(case.name)
            self.finished[index].set()


def test_twenty_cases_on_four_workers_keep_dataset_order_with_two_scorers_and_a_failing_case() -> None:
    cases = [Case(f"c{i}", f"question {i}", expected=f"answer {i}") for i in range(20)]
    target = Chain(20)

    report = run_in_thread(lambda: evaluate(target, cases, [exact(), contains()], max_workers=4))

    assert target.order[:4] == ["c3", "c2", "c1", "c0"]  # finished out of order...
    assert [case.name for case in report.cases] == [f"c{i}" for i in range(20)]  # ...reported in order
    assert target.peak == 4
    assert report.scorers == ("exact", "contains")
    failed = report.cases[13]
    assert failed.status == "error" and failed.error == "RuntimeError: the target broke"
    assert failed.scores == {"exact": None, "contains": None} and failed.output is None
    for case in report.cases[:13] + report.cases[14:]:
        assert case.status == "done" and case.scores == {"exact": 1.0, "contains": 1.0}
        assert case.output == case.text == case.expected and case.error is None
    summary = report.summary()
    assert summary["cases"] == 20 and summary["errors"] == 1
    assert summary["scores"] == {"exact": 1.0, "contains": 1.0}  # the error case is not scored
    assert report.duration_s > 0
    assert eval_threads() == []


def test_an_agent_target_runs_each_case_with_the_options_and_reports_tokens_cost_and_latency() -> None:
    lead = agent("lead", does="Answers in capitals")
    cases = Dataset([Case("a", "alpha", expected="ALPHA"), Case("b", "beta", expected="BETA", metadata={"tag": 1})])
    prices = {"m": {"input": 1.0, "output": 2.0}}
    try:
        report = evaluate(lead, cases, max_workers=2, generate=upper, model="m", prices=prices)
    finally:
        lead.close()
    assert [case.scores["exact"] for case in report.cases] == [1.0, 1.0]
    first = report.cases[0]
    assert first.tokens == 5 and first.cost == pytest.approx((3 * 1.0 + 2 * 2.0) / 1e6)
    assert first.latency_s > 0 and first.status == "done" and first.prompt == "alpha"
    assert report.cases[1].metadata == {"tag": 1}
    assert report.summary()["tokens"] == 10 and report.summary()["cost"] == pytest.approx(14 / 1e6)


def test_an_agent_name_runs_in_the_given_runtime() -> None:
    rt = Runtime({"lead": AgentDef("lead", "Answers")}, generate=upper, model="m")
    try:
        report = evaluate("lead", [Case("a", "alpha", expected="ALPHA")], runtime=rt)
        assert report.cases[0].scores == {"exact": 1.0} and report.cases[0].tokens == 5
        assert report.cases[0].cost is None  # no price for the model
        with pytest.raises(ConfigError, match="no agent 'nobody'"):
            evaluate("nobody", [Case("a", "alpha")], runtime=rt)
    finally:
        rt.close(rt.root)
    with pytest.raises(ConfigError, match="needs runtime="):
        evaluate("lead", [Case("a", "alpha")])


def test_a_run_result_gives_its_text_and_usage() -> None:
    client = Client(generate=upper, model="m")
    report = evaluate(lambda case: client.run(case.prompt), [Case("a", "alpha", expected="ALPHA")])
    case = report.cases[0]
    assert (case.status, case.text, case.output, case.tokens) == ("done", "ALPHA", "ALPHA", 5)


def test_a_callables_plain_value_is_the_output_and_its_json_the_text() -> None:
    report = evaluate(lambda case: {"answer": 42}, [Case("a", "q", expected={"answer": 42})])
    case = report.cases[0]
    assert case.output == {"answer": 42} and case.text == '{"answer":42}'
    assert case.scores == {"exact": 1.0}  # a value that is not a string is compared as its JSON
    assert (case.tokens, case.cost) == (0, None)


def test_a_result_with_status_error_is_not_scored_and_its_text_is_the_error() -> None:
    def model(request: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the model is down")

    broken = agent("broken", does="Fails")
    try:
        report = evaluate(broken, [Case("a", "q", expected="x")], generate=model, model="m")
    finally:
        broken.close()
    case = report.cases[0]
    assert case.status == "error" and case.scores == {"exact": None}
    assert case.error == case.text and "the model is down" in case.error


def test_a_run_left_pending_is_reported_pending_and_closed() -> None:
    @tool
    def deploy() -> Any:
        """Deploy, once someone approves."""
        from toolnexus import make_request

        return suspend(make_request("approval", "Deploy?"))

    model = ScriptedModel({"m": [{"tool_calls": [{"name": "deploy", "arguments": {}}]}, {"content": "deployed"}]})
    rt = Runtime({"ops": AgentDef("ops", "Deploys", tools=[deploy])}, generate=model, model="m")
    try:
        report = evaluate("ops", [Case("a", "deploy it")], runtime=rt)
        assert report.cases[0].status == "pending"
        assert rt.inspect("root/ops.1").state == "closed"  # nobody will answer it here
    finally:
        rt.close(rt.root)


def test_timeout_ends_a_case_as_timeout_and_interrupts_the_agents_run() -> None:
    stall = threading.Event()
    reached = threading.Event()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if last_user_text(body) == "slow":
            reached.set()
            stall.wait(WAIT_S)
        return text_completion(body, last_user_text(body).upper())

    with ScriptedLLMServer(answer) as server:
        rt = Runtime({"lead": AgentDef("lead", "Answers")}, base_url=server.base_url, model="m", retries=0)
        cases = [Case("slow", "slow", expected="SLOW"), Case("quick", "quick", expected="QUICK")]
        try:
            report = run_in_thread(lambda: evaluate("lead", cases, runtime=rt, timeout=0.5))
            assert reached.is_set()  # the slow case did reach the model...
            slow, quick = report.cases
            assert slow.status == "timeout" and slow.scores == {"exact": 0.0}  # ...and was cut short
            assert [view.state for view in rt.handles()[1:]] == ["closed", "closed"]
            assert quick.status == "done" and quick.scores == {"exact": 1.0}
        finally:
            stall.set()
            rt.close(rt.root)
        assert server.requests_seen == 2  # the interrupted run asked nothing more


def test_a_callable_past_its_timeout_is_reported_timeout_and_its_thread_ends_when_it_returns() -> None:
    release = threading.Event()

    def slow(case: Case) -> str:
        release.wait(WAIT_S)
        return "late"

    report = run_in_thread(lambda: evaluate(slow, [Case("a", "q", expected="late")], timeout=0.2))
    assert report.cases[0].status == "timeout" and report.cases[0].output is None
    straggler = [thread for thread in eval_threads() if thread.name == "toolnexus-eval-a"]
    release.set()
    for thread in straggler:
        thread.join(WAIT_S)
    assert eval_threads() == []


def test_a_raising_callable_with_a_timeout_is_an_error_case() -> None:
    def broken(case: Case) -> str:
        raise KeyError("missing")

    report = evaluate(broken, [Case("a", "q")], timeout=5)
    assert report.cases[0].status == "error" and report.cases[0].error == "KeyError: 'missing'"


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_max_workers_below_one_or_not_whole_is_a_config_error(workers: Any) -> None:
    with pytest.raises(ConfigError, match="max_workers"):
        evaluate(lambda case: "x", [Case("a", "q")], max_workers=workers)


def test_options_go_only_to_an_agent_target() -> None:
    with pytest.raises(ConfigError, match="options \\(model\\)"):
        evaluate(lambda case: "x", [Case("a", "q")], model="m")
    with pytest.raises(ConfigError, match="not int"):
        evaluate(42, [Case("a", "q")])  # type: ignore[arg-type]


def test_an_empty_dataset_gives_an_empty_report() -> None:
    report = evaluate(lambda case: "x", [])
    assert report.cases == () and report.summary()["latency_s"] is None


def test_settings_an_agents_run_refuses_end_the_evaluation_instead_of_failing_every_case() -> None:
    lead = agent("lead", does="Answers")
    try:
        with pytest.raises(ConfigError, match="base_url"):
            evaluate(lead, [Case(f"c{i}", "q") for i in range(6)], max_workers=2)  # no model at all
        with pytest.raises(TypeError, match="bogus"):
            evaluate(lead, [Case("a", "q")], generate=upper, model="m", bogus=1)
    finally:
        lead.close()
    assert eval_threads() == []
