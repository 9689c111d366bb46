"""``toolnexus eval TEAM.toml CASES.jsonl``: a team's agent on every case, the report printed.

Exit status: 0 when every case ended ``done`` (and nothing regressed against
``--baseline``), 2 otherwise, 1 when the evaluation cannot run (a bad file, an unknown
agent or scorer): the command line turns the ``ToolnexusError`` raised here into one line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError, WireError
from .._team.runtime import Runtime
from ..cli.teamfile import Team, TeamFileError, _imported, load_team
from .dataset import Dataset
from .report import Report
from .runner import evaluate
from .scoring import Scorer, contains, exact

EXIT_DONE, EXIT_CANNOT_RUN, EXIT_NOT_DONE = 0, 1, 2
BUILT_IN: dict[str, Callable[[], Scorer]] = {"exact": exact, "contains": contains}
ConnectionOptions = Callable[[argparse.Namespace, Team], dict[str, Any]]


def add_command(commands: Any, connection: Callable[[argparse.ArgumentParser], None]) -> None:
    """``eval`` on the ``toolnexus`` parser's subparsers; ``connection`` adds the
    ``--base-url``/``--model``/``--style`` flags every command that runs a team has."""
    command = commands.add_parser(
        "eval",
        help="run a team's agent on every case of a JSONL file and score the answers",
        description="Run the entry agent of TEAM (or --agent NAME) on every case of CASES "
        '(one {"name", "prompt", "expected"?, "metadata"?} object per line), several at once, '
        "score each answer, print the report as Markdown. Exit status: 0 when every case ended done "
        "(and nothing regressed against --baseline), 2 otherwise, 1 when it cannot run.",
    )
    command.add_argument("team", metavar="TEAM.toml")
    command.add_argument("cases", metavar="CASES.jsonl")
    command.add_argument("--agent", metavar="NAME", help="the agent to evaluate (default: the team's entry)")
    command.add_argument("--workers", type=int, default=4, metavar="N", help="cases run at once (default 4)")
    command.add_argument(
        "--scorer",
        action="append",
        metavar="exact|contains|MODULE:ATTR",
        help="score with this (repeatable; default exact); MODULE:ATTR names a callable (case, case_result)",
    )
    command.add_argument("--json", dest="json_out", metavar="OUT", help="also write the report as JSON to OUT")
    command.add_argument("--baseline", metavar="OLD.json", help="compare with a report written by --json earlier")
    connection(command)


def run(args: argparse.Namespace, connection_options: ConnectionOptions) -> int:
    """The ``eval`` command; ``connection_options`` reads the endpoint from the flags and
    the team file.

    Raises:
        ToolnexusError: the evaluation cannot run (exit status 1).
    """
    dataset = Dataset.from_jsonl(args.cases)
    if not len(dataset):
        raise ConfigError(f"{args.cases}: no cases")
    baseline = _baseline(args.baseline) if args.baseline else None
    base = str(Path(args.team).resolve().parent)
    scorers = [_scorer(spec, base) for spec in args.scorer or ["exact"]]
    with contextlib.closing(load_team(args.team)) as team:  # its MCP servers end with the command
        name = args.agent or team.entry
        if name not in team.registry:
            raise TeamFileError(f"{args.team} has no agent {name!r} (agents: {', '.join(sorted(team.registry))})")
        rt = Runtime(team.registry, **connection_options(args, team))
        try:
            report = evaluate(name, dataset, scorers, runtime=rt, max_workers=args.workers)
        finally:
            rt.close(rt.root, force=True)
    sys.stdout.write(report.to_markdown())
    comparison = None if baseline is None else report.compare(baseline)
    if comparison is not None:
        sys.stdout.write("\n" + comparison.to_markdown())
    sys.stdout.flush()
    if args.json_out:
        _write(args.json_out, report.to_json() + "\n")
    finished = all(case.status == "done" for case in report.cases)
    return EXIT_DONE if finished and (comparison is None or comparison.ok) else EXIT_NOT_DONE


def _scorer(spec: str, base: str) -> Scorer:
    """``exact``, ``contains``, or ``module:attr`` naming a scorer (a module next to the
    team file is importable, after installed ones)."""
    if spec in BUILT_IN:
        return BUILT_IN[spec]()
    if ":" not in spec:
        raise ConfigError(f"--scorer {spec!r}: use exact, contains or MODULE:ATTR")
    scorer: Scorer = _imported(spec, base, "--scorer", "scorer", TeamFileError)
    if not callable(scorer):
        raise ConfigError(f"--scorer {spec!r} is not callable as (case, case_result)")
    return scorer


def _baseline(path: str) -> Report:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the baseline: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return Report.from_json(text)
    except WireError as exc:
        raise ConfigError(f"{path}: not a report written by --json: {exc}") from None


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the report: {exc.strerror or exc}") from None


__all__ = ["add_command", "run"]
