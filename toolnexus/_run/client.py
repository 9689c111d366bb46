"""``Client``: a synchronous tool-calling loop over one model endpoint.

One client is safe to share between threads: each ``run`` works on its own transcript;
the session, the prepared request template and the metrics are shared and read-only or
lock-guarded.
"""

from __future__ import annotations

import time
import warnings
import weakref
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping

import attrs

from . import loop
from .._model import pricing
from .. import _seconds as seconds
from . import tracing
from .._model.cancel import CancelScope
from .._tools.resources import Held
from ..data import Answer, Request, RunResult
from .._model.engine import ConnectionOptions, HttpEngine, InProcessEngine, ModelEngine, build_engine
from ..errors import ToolnexusError
from .._events.log import EventLog, MemoryEvents, RunEvents
from ..hooks import Hooks, HooksLike
from .runspec import Engine, RunSpec
from .metrics import Metrics, metric_sink
from .._team.pool import WorkerPool
from .._stores.conversations import ConversationStore, InMemoryStore, guard_for
from .._events.streams import ClientRun, RunStream
from .._tools.output import output_type
from .._tools.toolkit import Toolkit, ToolsLike, as_toolkit

if TYPE_CHECKING:
    import requests

_TOOL_WORKERS = 8
_POOL_SIZE = 32  # kept-alive connections: one client is often shared by many threads


class Client:
    """A tool-calling loop against one model.

    Give ``base_url`` for an HTTP endpoint or ``generate`` for an in-process model. The API
    key never appears in a log line, an exception, a repr or a trace span. With
    ``opentelemetry-api`` installed each run is traced. A context manager: leaving it closes.

    Args:
        base_url: The endpoint's URL (``https://api.openai.com/v1``, a local server...).
        model: The model name sent in every request.
        style: The wire style of the endpoint: ``"openai"`` or ``"anthropic"``.
        api_key: The key; ``None`` reads it from the environment (``OPENAI_API_KEY``,
            ``OPENROUTER_API_KEY`` or ``ANTHROPIC_API_KEY``, as the style and URL say).
        headers: More headers for every request (they are treated as secrets too).
        session: A ``requests.Session`` of the host, used as it is (proxies, certificates).
        generate: An in-process model: ``generate(request) -> dict`` instead of HTTP.
        system_prompt: The system message every run starts with.
        max_turns: Model calls a run may make (``RunResult.limit`` is ``"maxTurns"`` when
            it stopped there).
        retries: More attempts on 429, 5xx and connection failures.
        retry_base: Seconds before the first retry, doubled each time, plus jitter.
        timeout: Seconds one whole model exchange may take (connect, send, the entire
            body); ``None``: no bound but the server's.
        max_retry_after: A ``Retry-After`` longer than this many seconds fails at once
            instead of sleeping.
        hooks: ``before_tool``/``after_tool``/... callables (a ``Hooks`` or a dict).
        on_metric: Called with one dict per metric event (model call, tool call, run).
        on_error: ``on_error(info) -> "retry" | "fail"``: overrides the retry decision of a
            failed exchange, within ``retries``.
        wait_for: Answers a tool's ``Request`` inside the run (``wait_for(request) ->
            Answer``) instead of the run ending ``pending``.
        store: Where ``ask`` keeps conversations by id; an in-memory store by default.
        request_params: Merged into every request body (``temperature``, ``tool_choice``...).
        inline: Run every tool call on the thread that called ``run`` (one after another),
            so a tool shares that thread's database connection and transaction.
        around_tool: A context-manager factory entered around every tool call, on the
            thread that runs it.
        trace_content: Record the prompt and completion text on the trace spans.
        prices: ``{"MODEL": {"input": ..., "output": ..., "cached_input": ...}}``, US
            dollars per million tokens (see ``toolnexus.pricing``): ``RunResult.usage`` gets
            its ``cost`` and the metrics ``toolnexus_cost_usd_total``; without a price for
            ``model`` the cost is ``None``.
        reset_tool_choice: A ``tool_choice`` in ``request_params`` that forces a call holds
            only until the run has called a tool; later steps send ``auto``.
        timeout_ms: Deprecated: ``timeout`` in milliseconds, with a ``DeprecationWarning``.
        retry_base_ms: Deprecated: ``retry_base`` in milliseconds, likewise.
        max_retry_after_s: Deprecated: the old name of ``max_retry_after``, likewise.

    Raises:
        ConfigError: neither ``base_url`` nor ``generate`` is given, or an option is not
            one the client can use (a credential with a line break, a malformed price...).
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str,
        style: str = "openai",
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        session: requests.Session | None = None,
        generate: Callable[[dict[str, Any]], Any] | None = None,
        system_prompt: str | None = None,
        max_turns: int = 10,
        retries: int = 2,
        retry_base: float = 0.5,
        timeout: float | None = None,
        max_retry_after: float = 60.0,
        hooks: HooksLike = None,
        on_metric: Callable[[dict[str, Any]], Any] | None = None,
        on_error: Callable[[dict[str, Any]], str] | None = None,
        wait_for: Callable[[Request], Answer] | None = None,
        store: ConversationStore | None = None,
        request_params: dict[str, Any] | None = None,
        inline: bool = False,
        around_tool: Callable[[], ContextManager[Any]] | None = None,
        trace_content: bool = False,
        prices: Mapping[str, Any] | None = None,
        reset_tool_choice: bool = False,
        timeout_ms: float | None = None,
        retry_base_ms: float | None = None,
        max_retry_after_s: float | None = None,
    ) -> None:
        times = seconds.durations("Client", locals())
        connection = ConnectionOptions.among({**locals(), **times})
        price = pricing.table(prices).get(model)
        self.model = model
        self.inline = inline
        self.style = style
        self.base_url = base_url
        self._tool_threads = WorkerPool(_TOOL_WORKERS, thread_name_prefix="toolnexus-tools")  # started on first use
        # inline: every tool call on the run's thread
        executor = _no_threads if inline else self._tool_threads.executor
        self._engine = Engine(model=build_engine(connection, pool_size=_POOL_SIZE), executor=executor)
        self._metrics = Metrics()
        self._spec = RunSpec(
            model=model,
            system=system_prompt,
            max_turns=max_turns,
            hooks=Hooks.of(hooks),
            wait_for=wait_for,
            metric=metric_sink(self._metrics, on_metric),
            around_tool=around_tool,
            trace=tracing.Tracer(content=trace_content, provider=None if generate is not None else style),
            price=price,
            reset_tool_choice=reset_tool_choice,
        )
        self._conversations: ConversationStore = store if store is not None else InMemoryStore()
        self._guard = guard_for(self._conversations)
        self._held = Held()  # what the tools of the toolkits it ran belong to (MCP servers)
        # No reference back to the client, so dropping the last one frees it at once.
        reached = self._engine.model if isinstance(self._engine.model, HttpEngine) else None
        self._finalizer = weakref.finalize(self, _release_unclosed, repr(self), self._tool_threads, reached)
        self._finalizer.atexit = False

    def __repr__(self) -> str:
        in_process = isinstance(self._engine.model, InProcessEngine)
        where = "generate=<in-process>" if in_process else f"base_url={self.base_url!r}"
        return f"Client(model={self.model!r}, style={self.style!r}, {where})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conversation_store(self) -> ConversationStore:
        """Where ``ask``, ``stream`` and ``resume`` keep conversations by id: the one given as
        ``store``, else the client's own in-memory store."""
        return self._conversations

    def metrics(self) -> str:
        """Prometheus text for every model call, tool call and run of this client.

        Returns:
            The counters and histograms in the Prometheus text exposition format, for a
            ``/metrics`` endpoint of the host.
        """
        return self._metrics.render()

    def run(
        self, prompt: str, toolkit: ToolsLike = None, *, history: list[dict[str, Any]] | None = None, output: Any = None
    ) -> RunResult:
        """Run the loop on ``prompt`` after ``history``; see the module docs for outcomes.

        ``toolkit`` is a ``Toolkit``, or a list of tools or plain functions. With ``output=T``
        (an attrs class, a dataclass, a ``TypedDict`` or a JSON Schema dict) the run ends
        when the model gives a value of ``T`` through the ``final_result`` tool:
        ``result.output`` is that value and ``result.text`` its JSON.

        Args:
            prompt: The user message the run starts from.
            toolkit: The tools the model may call: a ``Toolkit``, a list of tools or plain
                functions, or ``None`` for none.
            history: Messages of earlier turns (the wire style's dicts), before ``prompt``.
            output: The type of a typed result, or ``None`` for text.

        Returns:
            The ``RunResult``: ``status`` "done", "pending" (a tool asked for an answer:
            ``result.pending``, continue with ``resume``) or "error"; the transcript, usage
            and, with ``output``, the typed value.

        Raises:
            LLMError: the model endpoint failed past the retries.
            ConfigError: ``output`` cannot be given a schema, or the toolkit already has a
                tool named ``final_result``.
        """
        return self._run(self._typed(output), prompt, toolkit, history)

    def _run(self, spec: RunSpec, prompt: str, toolkit: ToolsLike, history: list[dict[str, Any]] | None) -> RunResult:
        kit = as_toolkit(toolkit)
        messages = loop.initial_messages(self._engine.style, spec.system, history, prompt)
        return self._measured(kit, lambda: loop.start(self._engine, spec, kit, messages))

    def _typed(self, output: Any) -> RunSpec:
        return self._spec if output is None else attrs.evolve(self._spec, output=output_type(output))

    def ask(self, prompt: str, toolkit: ToolsLike = None, *, id: str | None = None, output: Any = None) -> RunResult:
        """``run`` with the conversation ``id`` loaded from and saved to the store.

        Calls on one conversation run one after the other (each sees the last one's
        exchange); calls on different conversations run in parallel.

        Args:
            prompt: The user message of this turn.
            toolkit: The tools the model may call, as for ``run``.
            id: The conversation's id in ``conversation_store``; ``None`` runs without one.
            output: The type of a typed result, as for ``run``.

        Returns:
            The ``RunResult``, as ``run`` returns it; its messages are saved under ``id``.

        Raises:
            LLMError: the model endpoint failed past the retries.
            ConfigError: ``output`` cannot be given a schema.
        """
        return self._ask(self._typed(output), prompt, toolkit, id)

    def _ask(self, spec: RunSpec, prompt: str, toolkit: ToolsLike, id: str | None) -> RunResult:
        if id is None:
            return self._run(spec, prompt, toolkit, None)
        with self._guard.exclusive(self._conversations, id):
            result = self._run(spec, prompt, toolkit, self._conversations.get(id) or [])
            self._conversations.save(id, result.messages)
            self._guard.left_waiting(id, result.pending.id if result.pending is not None else None)
        return result

    def stream(self, prompt: str, toolkit: ToolsLike = None, *, id: str | None = None, output: Any = None) -> RunStream:
        """``ask`` as a ``RunStream``: its events (``text`` as the model writes it, each
        ``message``, ``tool_call``, ``tool_result``, ``retry``, a ``pending`` request, and
        the ``result``) while the run goes on, on a thread of its own (inline: on the
        iterating thread). ``stream.result`` is the ``RunResult`` (with ``output=T``, typed
        as ``run``'s: ``stream.result.output``); closing the stream early interrupts the
        run; an ``LLMError`` is raised by the iteration.

        Args:
            prompt: The user message of this turn.
            toolkit: The tools the model may call, as for ``run``.
            id: The conversation's id, as for ``ask``.
            output: The type of a typed result, as for ``run``.

        Returns:
            The ``RunStream`` of the run's events; iterate it, or close it to stop the run.

        Raises:
            ConfigError: ``output`` cannot be given a schema.
        """
        log = EventLog()
        scope = CancelScope()
        events = RunEvents(None, MemoryEvents(log).emit, log, always_live=True)
        spec = attrs.evolve(self._typed(output), scope=scope, events=events)
        return ClientRun(lambda: self._ask(spec, prompt, toolkit, id), log, scope.cancel, inline=self.inline).start()

    def resume(
        self,
        pending: Request,
        answer: Answer,
        toolkit: ToolsLike = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        id: str | None = None,
        output: Any = None,
    ) -> RunResult:
        """Continue a run that returned ``status="pending"``, from ``messages`` or the store.
        A typed run is continued with the same ``output``.

        With ``id`` the answer is claimed under the conversation: of two resumes with one
        answer, one runs and the other raises ``UnknownRequest``, so the approved tool runs
        once.

        Args:
            pending: The request the run returned (``result.pending``).
            answer: The answer to it (``make_answer(pending.id, ...)``).
            toolkit: The tools of the run, as for ``run``: the approved call runs with them.
            messages: The pending run's transcript (``result.messages``); with ``id`` it is
                read from the store instead.
            id: The conversation's id, when the run was an ``ask``.
            output: The type of a typed run, as it was given to it.

        Returns:
            The continued run's ``RunResult`` (it may be pending again, on a new request).

        Raises:
            ToolnexusError: neither ``messages`` nor ``id`` was given.
            LLMError: the model endpoint failed past the retries.
            UnknownRequest: ``answer.id`` is not ``pending.id``, the conversation is not
                waiting on it (another resume took it), or the transcript has no call
                waiting on it. Nothing changes.
        """
        if id is None:
            if messages is None:
                raise ToolnexusError("resume needs the pending run's messages or its conversation id")
            return self._resumed(list(messages), pending, answer, toolkit, output)
        with self._guard.exclusive(self._conversations, id):
            claimed = self._guard.claim(id, answer.id)
            try:
                transcript = list(messages) if messages is not None else self._conversations.get(id) or []
                result = self._resumed(transcript, pending, answer, toolkit, output)
                self._conversations.save(id, result.messages)
            except BaseException:
                if claimed is not None:
                    self._guard.left_waiting(id, claimed)  # nothing was saved: still waiting
                raise
            self._guard.left_waiting(id, result.pending.id if result.pending is not None else None)
        return result

    def _resumed(
        self, transcript: list[dict[str, Any]], pending: Request, answer: Answer, toolkit: ToolsLike, output: Any
    ) -> RunResult:
        spec, kit = self._typed(output), as_toolkit(toolkit)
        return self._measured(kit, lambda: loop.resume(self._engine, spec, kit, transcript, pending, answer))

    def close(self) -> None:
        """Cancel model calls and retry waits in flight, close what the tools it ran belong
        to (MCP servers), end the tool threads; idempotent.

        A client that is dropped without ``close`` releases both when it is freed, with a
        ``ResourceWarning`` (as an unclosed file does).

        """
        self._finalizer.detach()
        self._held.close()  # first: a tool thread may be waiting on an MCP server
        _release(self._tool_threads, self._engine.model)

    def _measured(self, toolkit: Toolkit | None, body: Callable[[], RunResult]) -> RunResult:
        if toolkit is not None:
            self._held.track(toolkit.tools())
        started = time.perf_counter()
        metric: dict[str, Any] = {"event": "run", "model": self.model}
        try:
            with self._spec.trace.agent(None, model=self.model) as traced:
                result = body()
                traced.done(result.status, result.text, result.pending)
        except Exception as exc:
            metric.update(turns=0, tool_calls=0, total_tokens=0, error=type(exc).__name__)
            raise
        else:
            metric.update(turns=result.turns, tool_calls=result.tool_call_count, total_tokens=result.usage.total_tokens)
            if result.usage.cost is not None:
                metric["cost"] = result.usage.cost
            return result
        finally:
            metric["ms"] = round((time.perf_counter() - started) * 1000, 3)
            self._spec.metric(metric)


def _no_threads() -> Executor | None:
    return None


def _release(tool_threads: WorkerPool, model: ModelEngine | None, *, wait: bool = True) -> None:
    if model is not None:
        model.close()  # first: a tool thread may be waiting on a model call
    tool_threads.close(wait=wait)


def _release_unclosed(described: str, tool_threads: WorkerPool, model: ModelEngine | None) -> None:
    """The finaliser of a client dropped without ``close``: warn if it held anything."""
    if model is not None or tool_threads.started:
        warnings.warn(f"unclosed {described}: call close() or use it in a with block", ResourceWarning, stacklevel=2)
    _release(tool_threads, model, wait=False)  # the last reference may go on a tool thread
