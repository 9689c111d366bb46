"""The pytest plugin installed with toolnexus: the ``tn_cassette`` fixture and the
``--tn-record`` option. Registered through the ``pytest11`` entry point, so it loads in
every pytest run of an environment where toolnexus is installed: it imports nothing of
toolnexus until a test asks for the fixture."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\[\]=+-]")


def pytest_addoption(parser: Any) -> None:
    """``--tn-record=once|none|all``: the mode of every ``tn_cassette``."""
    group = parser.getgroup("toolnexus")
    group.addoption(
        "--tn-record",
        action="store",
        dest="tn_record",
        default="once",
        choices=("once", "none", "all"),
        help="mode of the tn_cassette fixture: once (record when there is no cassette), none (replay only), "
        "all (record again)",
    )


def cassette_path(test_file: Path, test_name: str) -> Path:
    """Where a test's cassette lives: ``cassettes/<test module>/<test name>.jsonl`` beside
    the test file (characters a file name should not hold are replaced by ``_``)."""
    return test_file.parent / "cassettes" / test_file.stem / f"{_UNSAFE.sub('_', test_name)}.jsonl"


@pytest.fixture
def tn_cassette(request: Any) -> Iterator[Any]:
    """An active ``Cassette`` for this test: every model exchange of the test is recorded
    to, or replayed from, ``cassettes/<test module>/<test name>.jsonl`` beside the test
    file, in the mode ``--tn-record`` gives (``once`` by default)."""
    from .cassette import Cassette

    path = cassette_path(Path(str(request.node.path)), request.node.name)
    with Cassette(path, request.config.getoption("tn_record")) as active:
        yield active
