"""Metrics (what ``on_metric`` gets) and their Prometheus text rendering.

A metric is one dict per model call, tool call and run (``{"event": "llm" | "tool" |
"run", ...}``: the key is part of what hosts read, the word "event" is not ours). The loop
hands each to its run's ``metric`` sink; ``Metrics`` folds them into counters and
histograms behind one lock, and ``render`` writes the text exposition format.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import defaultdict
from typing import Any, Callable

log = logging.getLogger("toolnexus")

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

Labels = tuple[tuple[str, str], ...]


class _Histogram:
    __slots__ = ("counts", "total", "count")

    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        counts = self.counts
        for i in range(bisect.bisect_left(BUCKETS, seconds), len(BUCKETS)):  # every bucket whose bound it fits
            counts[i] += 1
        self.total += seconds
        self.count += 1


class Metrics:
    """Thread-safe counters for one client (or runtime)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: every dict below; never held across user code
        self._llm_requests: dict[Labels, int] = defaultdict(int)
        self._tokens: dict[Labels, int] = defaultdict(int)
        self._llm_seconds: dict[Labels, _Histogram] = defaultdict(_Histogram)
        self._tool_calls: dict[Labels, int] = defaultdict(int)
        self._tool_seconds: dict[Labels, _Histogram] = defaultdict(_Histogram)
        self._run_errors: dict[Labels, int] = defaultdict(int)
        self._cost: dict[Labels, float] = defaultdict(float)

    def record(self, metric: dict[str, Any], agent: str = "") -> None:
        """Fold one metric in; ``agent`` labels its cost (empty for a bare ``Client``)."""
        kind = metric.get("event")
        with self._lock:
            if kind == "llm":
                model = str(metric.get("model", ""))
                self._llm_requests[(("model", model), ("status", str(metric.get("status", ""))))] += 1
                cost = metric.get("cost")
                if isinstance(cost, (int, float)):
                    self._cost[(("agent", agent), ("model", model))] += cost
                self._tokens[(("type", "prompt"),)] += int(metric.get("prompt_tokens") or 0)
                self._tokens[(("type", "completion"),)] += int(metric.get("completion_tokens") or 0)
                self._llm_seconds[(("model", model),)].observe(float(metric.get("ms", 0)) / 1000)
            elif kind == "tool":
                tool = str(metric.get("tool", ""))
                source, is_error = str(metric.get("source", "")), _bool(metric.get("is_error"))
                key = (("tool", tool), ("source", source), ("is_error", is_error))
                self._tool_calls[key] += 1
                self._tool_seconds[(("tool", tool),)].observe(float(metric.get("ms", 0)) / 1000)
            elif kind == "run" and metric.get("error"):
                self._run_errors[(("model", str(metric.get("model", ""))),)] += 1

    def render(self) -> str:
        """The Prometheus text exposition, families in a fixed order, series sorted."""
        with self._lock:
            parts = [
                _counter("toolnexus_llm_requests_total", "Model calls by model and outcome.", self._llm_requests),
                _counter("toolnexus_llm_tokens_total", "Tokens used, by type.", self._tokens),
                _histogram("toolnexus_llm_request_duration_seconds", "Model call duration.", self._llm_seconds),
                _counter("toolnexus_tool_calls_total", "Tool calls by tool, source and error.", self._tool_calls),
                _histogram("toolnexus_tool_duration_seconds", "Tool call duration.", self._tool_seconds),
                _counter("toolnexus_run_errors_total", "Runs that ended in an error.", self._run_errors),
                _counter(
                    "toolnexus_cost_usd_total", "US dollars spent on model calls, by agent and model.", self._cost
                ),
            ]
        return "".join(parts)


def _bool(value: Any) -> str:
    return "true" if value else "false"


def _label_text(labels: Labels) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _counter(name: str, help_text: str, series: dict[Labels, int] | dict[Labels, float]) -> str:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
    for text, value in sorted((_label_text(k), v) for k, v in series.items()):
        lines.append(f"{name}{{{text}}} {_number(value)}")
    return "\n".join(lines) + "\n"


def _histogram(name: str, help_text: str, series: dict[Labels, _Histogram]) -> str:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for text, hist in sorted(((_label_text(k), h) for k, h in series.items()), key=lambda item: item[0]):
        for bound, count in zip(BUCKETS, hist.counts):
            lines.append(f'{name}_bucket{{{text},le="{_number(bound)}"}} {count}')
        lines.append(f'{name}_bucket{{{text},le="+Inf"}} {hist.count}')
        lines.append(f"{name}_sum{{{text}}} {_number(round(hist.total, 6))}")
        lines.append(f"{name}_count{{{text}}} {hist.count}")
    return "\n".join(lines) + "\n"


def metric_sink(
    metrics: Metrics, on_metric: Callable[[dict[str, Any]], Any] | None, agent: str = ""
) -> Callable[[dict[str, Any]], None]:
    """One callable that records a metric (for ``agent``'s metrics) and hands it to the
    host's ``on_metric``."""

    def sink(metric: dict[str, Any]) -> None:
        metrics.record(metric, agent)
        if on_metric is not None:
            try:
                on_metric(metric)
            except Exception:
                log.debug("on_metric raised; ignored", exc_info=True)

    return sink
