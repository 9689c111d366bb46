"""Every duration an option takes is seconds as a float; the names first given in
milliseconds still work for this release, each with a DeprecationWarning; both results
carry a ``usage``."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest

import toolnexus.celery as tn_celery
from toolnexus import AgentDef, Budget, Client, LLMError, Runtime, Usage
from toolnexus import mcp
from toolnexus import _seconds as seconds
from toolnexus import wire
from toolnexus.cli.commands import load_team
from toolnexus.errors import ConfigError
from toolnexus.testing import ScriptedLLMServer, text_completion


def talker(body):
    return text_completion(body, "hello there")


def registry():
    return {"a": AgentDef("a", "Talks.")}


def defaults_of(callable_, names):
    parameters = inspect.signature(callable_).parameters
    return {name: parameters[name].default for name in names if name in parameters}


def test_every_signature_writes_the_defaults_in_seconds():
    options = {"timeout", "retry_base", "max_retry_after", "shutdown_timeout", "lease", "resend_after"}
    for callable_ in (Client, Runtime, tn_celery.install):
        for name, default in defaults_of(callable_, options).items():
            assert default == seconds.DEFAULTS[name], (callable_, name)
    assert defaults_of(Runtime, options).keys() == {"timeout", "retry_base", "max_retry_after", "shutdown_timeout", "lease"}


def test_an_old_client_option_warns_and_becomes_seconds():
    with ScriptedLLMServer(talker, delay_s=2) as slow:
        with pytest.warns(DeprecationWarning, match=r"timeout_ms=\.\.\.\) is deprecated.*timeout=0\.2"):
            client = Client(base_url=slow.base_url, model="m", timeout_ms=200, retries=0)
        with client, pytest.raises(LLMError, match=r"timeout=0\.2 s"):
            client.run("hello")


def test_the_warning_points_at_the_callers_line():
    with pytest.warns(DeprecationWarning) as caught:
        Client(generate=lambda body: text_completion(body, "x"), model="m", retry_base_ms=10).close()
    assert caught[0].filename == __file__


def test_a_runtime_takes_its_old_options_as_seconds():
    with pytest.warns(DeprecationWarning) as caught:
        rt = Runtime(registry(), generate=talker, lease_ms=1500, shutdown_ms=2000)
    assert sorted(str(w.message).split("(")[-1] for w in caught) == ["lease=1.5)", "shutdown_timeout=2.0)"]
    try:
        assert rt.run_agent("a", "hi", timeout=10).text == "hello there"
    finally:
        rt.close(rt.root)
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="lease must be a finite number of seconds > 0"):
        Runtime(registry(), generate=talker, lease_ms=0)


def test_an_old_name_next_to_its_new_one_is_a_type_error():
    with pytest.raises(TypeError, match="give timeout= or timeout_ms=, not both"):
        Client(generate=talker, model="m", timeout=1.0, timeout_ms=1000)


def test_a_name_an_owner_never_took_is_a_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'lease_ms'"):
        Client(generate=talker, model="m", lease_ms=1000)
    with pytest.raises(TypeError, match="unexpected keyword argument 'timeout_typo'"):
        Runtime(registry(), generate=talker, timeout_typo=1)


@pytest.mark.parametrize("callable_", [Client, Runtime, Budget, tn_celery.install])
def test_each_old_name_is_a_keyword_of_its_own_so_a_type_checker_sees_a_misspelt_one(callable_):
    parameters = inspect.signature(callable_).parameters
    assert not [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    for old, (new, _) in seconds.RENAMED.items():
        assert (old in parameters) == (new in parameters), (callable_, old)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "5", True])
def test_a_duration_that_is_not_a_positive_number_of_seconds_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="timeout must be"):
        Client(generate=talker, model="m", timeout=bad)


def test_a_budget_wall_cap_is_seconds_and_the_old_name_still_reads():
    assert Budget(max_wall=1.5).max_wall == 1.5
    with pytest.warns(DeprecationWarning, match="max_wall=1.5"):
        old = Budget(max_wall_ms=1500)
    assert old == Budget(max_wall=1.5)
    with pytest.warns(DeprecationWarning):
        assert old.max_wall_ms == 1500
    with pytest.raises(ConfigError, match="max_wall"):
        Budget(max_wall=-1)


def test_a_budget_stored_in_milliseconds_is_read_as_seconds_without_a_word():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert wire.from_json(Budget, '{"max_wall_ms": 2500, "max_turns": 3}') == Budget(max_wall=2.5, max_turns=3)
        assert wire.from_json(Budget, wire.to_json(Budget(max_wall=0.25))) == Budget(max_wall=0.25)


def test_an_mcp_server_takes_its_timeout_in_seconds():
    with pytest.raises(TypeError):
        mcp.stdio(["true"], timeout_s=5)  # type: ignore[call-arg]
    with pytest.raises(ConfigError):
        mcp.stdio(["true"], timeout=0)


def write_team(folder: Path, text: str) -> Path:
    path = folder / "team.toml"
    path.write_text(text)
    return path


def test_a_team_file_timeout_is_seconds_and_the_millisecond_key_warns(tmp_path):
    assert load_team(str(write_team(tmp_path, '[connection]\ntimeout = 2.5\n[agents.a]\ndoes = "x"\n'))).connection["timeout"] == 2.5
    with pytest.warns(DeprecationWarning, match="write timeout = 2.5"):
        team = load_team(str(write_team(tmp_path, '[connection]\ntimeout_ms = 2500\n[agents.a]\ndoes = "x"\n')))
    assert team.connection["timeout"] == 2.5 and "timeout_ms" not in team.connection
    with pytest.warns(DeprecationWarning, match="write max_wall = 3"):
        team = load_team(str(write_team(tmp_path, '[agents.a]\ndoes = "x"\n[agents.a.budget]\nmax_wall_ms = 3000\n')))
    assert team.registry["a"].budget.max_wall == 3


def test_both_results_carry_a_usage():
    with Client(generate=talker, model="m") as client:
        run = client.run("hi")
    rt = Runtime(registry(), generate=talker)
    try:
        turn = rt.run_agent("a", "hi", timeout=10)
    finally:
        rt.close(rt.root)
    for result in (run, turn):
        assert isinstance(result.usage, Usage)
        assert result.usage.total_tokens > 0
        assert result.usage.prompt_tokens + result.usage.completion_tokens == result.usage.total_tokens
    assert turn.total_tokens == turn.usage.total_tokens and turn.cost == turn.usage.cost
    assert turn.usage == run.usage  # the same reply, the same spend
