"""The cases an evaluation runs: ``Case`` values and the ``Dataset`` that checks them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import attrs

from ..errors import ConfigError, WireError
from ..wire import parse_json

_KEYS = ("name", "prompt", "expected", "metadata")


@attrs.frozen
class Case:
    """One prompt to evaluate.

    ``expected`` is what the scorers compare the answer with (``None``: nothing to
    compare); ``metadata`` rides along into the report untouched.
    """

    name: str
    prompt: str
    expected: Any = None
    metadata: dict[str, Any] | None = None


def _to_cases(cases: Iterable[Case | Mapping[str, Any]]) -> tuple[Case, ...]:
    """``Dataset(cases)``: each a ``Case`` or a mapping with its keys; checked as a file's lines are."""
    if isinstance(cases, (str, bytes, Mapping)):
        raise ConfigError(f"Dataset takes a list of cases, not a {type(cases).__name__}")
    checked = _Checked()
    for index, case in enumerate(cases, 1):
        checked.add(case, f"case {index}")
    return tuple(checked.cases)


@attrs.frozen
class Dataset:
    """The cases of an evaluation, in the order the report lists them.

    Built from a list of ``Case`` values (or mappings with the same keys), or read with
    ``Dataset.from_jsonl``. Every case has a non-empty name and prompt, and names are
    unique.

    Raises:
        ConfigError: a duplicate or empty name, an empty prompt, an unknown key or a
            value of the wrong type (naming the case by its position).
    """

    cases: tuple[Case, ...] = attrs.field(converter=_to_cases)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Dataset:
        """Read one case per line: ``{"name", "prompt", "expected"?, "metadata"?}``.

        Blank lines are skipped.

        Args:
            path: a UTF-8 text file.

        Returns:
            The cases, in file order.

        Raises:
            ConfigError: the file cannot be read, or a line is not a JSON object, has an
                unknown key, a duplicate or empty name or an empty prompt; the message
                names the file and the line.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the cases: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        checked = _Checked()
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            try:
                data = parse_json(line, what="a case")
            except WireError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            checked.add(data, where)
        return cls(checked.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)


class _Checked:
    """Cases checked one by one, remembering where each name was first seen."""

    def __init__(self) -> None:
        self.cases: list[Case] = []
        self._seen: dict[str, str] = {}

    def add(self, given: Any, where: str) -> None:
        case = given if isinstance(given, Case) else _from_mapping(given, where)
        _check(case, where)
        if case.name in self._seen:
            raise ConfigError(f"{where}: the case name {case.name!r} is taken already ({self._seen[case.name]})")
        self._seen[case.name] = where
        self.cases.append(case)


def _from_mapping(data: Any, where: str) -> Case:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a case must be an object with name and prompt, not {type(data).__name__}")
    unknown = [key for key in data if key not in _KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (a case has {', '.join(_KEYS)})")
    for key in ("name", "prompt"):
        if key not in data:
            raise ConfigError(f"{where}: the case has no {key}")
    return Case(data["name"], data["prompt"], data.get("expected"), data.get("metadata"))


def _check(case: Case, where: str) -> None:
    for key in ("name", "prompt"):
        value = getattr(case, key)
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string, not {type(value).__name__}")
        if not value.strip():
            raise ConfigError(f"{where}: the case has an empty {key}")
    if case.metadata is not None and not isinstance(case.metadata, dict):
        raise ConfigError(f"{where}: metadata must be an object, not {type(case.metadata).__name__}")
