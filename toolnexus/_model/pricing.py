"""Prices: what a model call costs, in US dollars, from the tokens it used.

``prices={"MODEL": {"input": USD_PER_MTOK, "output": USD_PER_MTOK, "cached_input":
USD_PER_MTOK}}`` on ``Client``, ``Runtime`` and ``agent().run`` (and ``[prices."MODEL"]``
in team files). A model is looked up by the name the run used: an agent's own ``model``,
or the runtime's when it inherits.

How a reply is priced: ``prompt_tokens`` are every input token (both wire styles count the
cached ones in it, CONTRACT §13), so the uncached part is priced at ``input``, the
``cached_tokens`` part at ``cached_input`` (``input`` when the price has none), and
``completion_tokens`` at ``output``. Anthropic's ``cache_creation_input_tokens`` are part of
the uncached input, priced at ``input``. Costs stay float dollars; nothing is rounded.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from ..data import Usage
from ..errors import ConfigError

_PER_TOKEN = 1 / 1_000_000
_KEYS = ("input", "output", "cached_input")


@attrs.frozen(kw_only=True)
class Price:
    """One model's price, in US dollars per million tokens."""

    input: float
    output: float
    #: Input tokens read from the provider's prompt cache; ``None`` prices them at ``input``.
    cached_input: float | None = None

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at this price."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        dollars = (
            (usage.prompt_tokens - cached) * self.input + cached * cached_rate + usage.completion_tokens * self.output
        )
        return dollars * _PER_TOKEN


def table(prices: Mapping[str, Any] | None) -> dict[str, Price]:
    """``prices=`` as given, checked: every model maps to ``input`` and ``output`` (and
    optionally ``cached_input``), each a finite number >= 0.

    Raises:
        ConfigError: a price that is not such a table, naming the model and the key.
    """
    if prices is None:
        return {}
    if not isinstance(prices, Mapping):
        raise ConfigError(
            f'prices must map model names to {{"input": ..., "output": ...}}, not {type(prices).__name__}'
        )
    return {str(model): _price(str(model), spec) for model, spec in prices.items()}


def _price(model: str, spec: Any) -> Price:
    if isinstance(spec, Price):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"prices[{model!r}] must be a table of input, output and cached_input, not {type(spec).__name__}"
        )
    unknown = sorted(set(spec) - set(_KEYS))
    if unknown:
        raise ConfigError(
            f"prices[{model!r}]: unknown key(s) {', '.join(map(str, unknown))} (known: {', '.join(_KEYS)})"
        )
    missing = [key for key in ("input", "output") if key not in spec]
    if missing:
        raise ConfigError(f"prices[{model!r}] needs {' and '.join(missing)} (US dollars per million tokens)")
    for key, value in spec.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConfigError(
                f"prices[{model!r}].{key} must be a number >= 0 (US dollars per million tokens), not {value!r}"
            )
    cached = spec.get("cached_input")
    return Price(
        input=float(spec["input"]), output=float(spec["output"]), cached_input=None if cached is None else float(cached)
    )


def priced(usage: Usage, price: Price | None) -> Usage:
    """``usage`` with its ``cost`` at ``price`` (left ``None`` when the model has no price)."""
    if price is None:
        return usage
    return attrs.evolve(usage, cost=price.cost(usage))
