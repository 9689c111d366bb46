"""``evaluate``: run every case of a dataset on worker threads, score it, report in order."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

import attrs

from .._team.level1 import Agent
from ..data import AgentResult, RunResult
from ..errors import ConfigError, SpawnError
from .._seconds import optional_duration
from .dataset import Case, Dataset
from .progress import Progress
from .report import Report
from .results import CaseResult
from .scoring import Scorer, as_text, exact, named, score

if TYPE_CHECKING:
    from .._team.runtime import Runtime

log = logging.getLogger("toolnexus")

#: What a case's run gives back: an ``AgentResult``, a ``RunResult`` or a callable's value.
Outcome = Any
Target = Callable[[Case], Outcome]


class _TimedOut:
    """A callable target still running when its case's time was up."""


class _Misconfigured(Exception):
    """An agent's run refused its settings: every case would fail the same way."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def evaluate(
    target: Agent | str | Callable[[Case], Any],
    dataset: Dataset | Iterable[Case],
    scorers: Iterable[Scorer] = (exact(),),
    *,
    max_workers: int = 4,
    runtime: Runtime | None = None,
    timeout: float | None = None,
    progress: bool | None = None,
    **options: Any,
) -> Report:
    """Run ``target`` on every case, ``max_workers`` cases at a time, and score each.

    Args:
        target: an ``Agent`` (each case is ``target.run(case.prompt, **options)``), the
            name of an agent of ``runtime`` (each case is ``runtime.run_agent(name,
            case.prompt)``), or a callable ``(case) -> AgentResult | RunResult | value``.
        dataset: a ``Dataset`` or a list of ``Case`` values.
        scorers: each a callable ``(case, case_result) -> float | bool | Score``, named by
            its ``name`` attribute or its ``__name__``.
        max_workers: how many cases run at once, each on a thread of its own.
        runtime: the runtime an agent name runs in.
        timeout: seconds each case may run: past it the case is ``timeout`` (an agent's
            run is interrupted; a callable cannot be stopped, so its thread is left to
            finish on its own and its value is dropped).
        progress: draw ``done/total`` on stderr: ``None`` while stderr is a terminal.
        **options: ``Agent.run``'s runtime options (``generate=``, ``base_url=``...).

    Returns:
        The report, cases in dataset order whatever order they finished in. A target
        that raises gives that case status ``error``; a scorer that raises or returns
        something else gives ``None`` and a message in ``scorer_errors``.

    Raises:
        ConfigError: ``max_workers`` below 1, a bad timeout, a scorer without a name or
            two with one, an agent name without a runtime (or unknown to it), options
            for a target that takes none; or an agent's run refused its settings (no
            model endpoint, say), which ends the evaluation since every case would fail.
        TypeError: an option ``Agent.run`` does not know.
    """
    cases = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    scoring = named(scorers)
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ConfigError(f"max_workers must be a whole number >= 1, not {max_workers!r}")
    limit = optional_duration("timeout", timeout)
    run = _runner(target, runtime, limit, options)
    shown = Progress(len(cases), progress)
    started = time.monotonic()
    shown.start()
    try:
        results = _run_all(cases, lambda case: _case(case, run, scoring, shown), max_workers)
    except _Misconfigured as exc:
        raise exc.cause from None
    finally:
        shown.finish()
    return Report(cases=results, scorers=tuple(name for name, _ in scoring), duration_s=time.monotonic() - started)


def _run_all(cases: Dataset, one: Callable[[Case], CaseResult], max_workers: int) -> tuple[CaseResult, ...]:
    """Every case on the pool; the results in dataset order. Interrupted (Ctrl-C), the
    cases not started are dropped and the waiting stops at once: the running ones end
    on their own (the command line closes their runtime)."""
    if not len(cases):
        return ()
    pool = concurrent.futures.ThreadPoolExecutor(min(max_workers, len(cases)), thread_name_prefix="toolnexus-eval")
    try:
        futures = [pool.submit(one, case) for case in cases]
        results = tuple(future.result() for future in futures)
    except _Misconfigured:
        pool.shutdown(wait=True, cancel_futures=True)  # the cases running fail as fast
        raise
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return results


def _case(case: Case, run: Target, scoring: tuple[tuple[str, Scorer], ...], shown: Progress) -> CaseResult:
    began = time.monotonic()
    try:
        result = _result(case, run(case), time.monotonic() - began)
    except _Misconfigured:
        raise
    except Exception as exc:  # the target's failure is this case's error, never the evaluation's
        log.debug("evaluation case %r raised", case.name, exc_info=True)
        failure = f"{type(exc).__name__}: {exc}"
        result = CaseResult(**_fields(case), status="error", error=failure, latency_s=time.monotonic() - began)
    if result.status == "error":  # not scored
        result = attrs.evolve(result, scores={name: None for name, _ in scoring})
    else:
        result = _scored(case, result, scoring)
    shown.advance()
    return result


def _fields(case: Case) -> dict[str, Any]:
    return {"name": case.name, "prompt": case.prompt, "expected": case.expected, "metadata": case.metadata}


def _result(case: Case, outcome: Outcome, latency_s: float) -> CaseResult:
    if isinstance(outcome, _TimedOut):
        return CaseResult(**_fields(case), status="timeout", latency_s=latency_s)
    if isinstance(outcome, (AgentResult, RunResult)):
        usage = outcome.usage
        return CaseResult(
            **_fields(case),
            output=outcome.text if outcome.output is None else outcome.output,
            text=outcome.text,
            status=outcome.status,
            error=outcome.text if outcome.status == "error" else None,
            tokens=usage.total_tokens,
            cost=usage.cost,
            latency_s=latency_s,
        )
    return CaseResult(**_fields(case), output=outcome, text=as_text(outcome), latency_s=latency_s)


def _scored(case: Case, result: CaseResult, scoring: tuple[tuple[str, Scorer], ...]) -> CaseResult:
    scores: dict[str, float | None] = {}
    reasons: dict[str, str] = {}
    problems: dict[str, str] = {}
    for name, scorer in scoring:
        scores[name], reason, problem = score(scorer, case, result)
        if reason is not None:
            reasons[name] = reason
        if problem is not None:
            problems[name] = problem
    return attrs.evolve(result, scores=scores, reasons=reasons, scorer_errors=problems)


def _runner(target: Any, runtime: Runtime | None, timeout: float | None, options: dict[str, Any]) -> Target:
    """How one case runs, for each kind of target."""
    if isinstance(target, Agent):
        if runtime is not None:
            raise ConfigError("runtime= is for a target given by name; an Agent runs in a runtime of its own")
        return _configured(lambda case: _settled_agent(target.run(case.prompt, timeout=timeout, **options)))
    if options:
        raise ConfigError(f"options ({', '.join(sorted(options))}) go to Agent.run: give an Agent as the target")
    if isinstance(target, str):
        if runtime is None:
            raise ConfigError(f"the agent name {target!r} needs runtime=: the runtime to run it in")
        try:
            runtime.definition(target)
        except SpawnError:
            raise ConfigError(f"the runtime has no agent {target!r}") from None
        return _configured(lambda case: _settled_in(runtime, runtime.run_agent(target, case.prompt, timeout=timeout)))
    if callable(target):
        if runtime is not None:
            raise ConfigError("runtime= is for a target given by name, not a callable")
        return target if timeout is None else lambda case: _bounded(target, case, timeout)
    raise ConfigError(f"the target must be an Agent, an agent name or a callable, not {type(target).__name__}")


def _configured(run: Target) -> Target:
    """``run``, with a refused setting (``ConfigError``, an unknown option) made fatal:
    an agent's run raises only for what the host got wrong, and every case would."""

    def checked(case: Case) -> Outcome:
        try:
            return run(case)
        except (ConfigError, TypeError) as exc:
            raise _Misconfigured(exc) from exc

    return checked


def _settled_agent(result: AgentResult) -> AgentResult:
    """An agent's result; a run left pending (nobody will answer it here) is closed."""
    if result.status == "pending" and result.runtime is not None:
        result.runtime.close(result.runtime.root)
    return result


def _settled_in(runtime: Runtime, result: AgentResult) -> AgentResult:
    if result.status == "pending" and result.handle_id:
        runtime.close(result.handle_id)
    return result


def _bounded(target: Target, case: Case, timeout: float) -> Outcome:
    """``target(case)`` on a thread of its own, waited for at most ``timeout`` seconds;
    what it raises is raised here."""
    finished = threading.Event()
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, target(case)))
        except BaseException as exc:  # handed to the waiting worker
            box.append((False, exc))
        finally:
            finished.set()

    threading.Thread(target=run, name=f"toolnexus-eval-{case.name}"[:60], daemon=True).start()
    if not finished.wait(timeout):
        return _TimedOut()
    returned, value = box[0]
    if not returned:
        raise value
    return value
