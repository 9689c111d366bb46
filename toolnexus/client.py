"""``Client``: a synchronous tool-calling loop over one model endpoint.

One client is safe to share between threads: each ``run`` works on its own transcript;
the session, the prepared request template and the metrics are shared and read-only or
lock-guarded.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from . import loop
from .data import Answer, Request, RunResult
from .engine import ConnectionOptions, InProcessEngine, build_engine
from .errors import ToolnexusError
from .loop import Engine, Hooks, RunSpec
from .metrics import Metrics, emitter
from .store import ConversationStore, InMemoryStore
from .toolkit import Toolkit

if TYPE_CHECKING:
    import requests

_TOOL_WORKERS = 8
_POOL_SIZE = 32  # kept-alive connections: one client is often shared by many threads


class Client:
    """A tool-calling loop against one model.

    Give ``base_url`` for an HTTP endpoint (``style`` "openai" or "anthropic") or
    ``generate`` for an in-process model. The API key defaults from the environment and
    never appears in a log line, an exception or a repr. ``timeout_ms`` bounds one whole
    model exchange, body included; a ``Retry-After`` past ``max_retry_after_s`` fails at once.
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
        retry_base_ms: int = 500,
        timeout_ms: int | None = None,
        max_retry_after_s: float = 60,
        hooks: Any = None,
        on_metric: Callable[[dict[str, Any]], Any] | None = None,
        on_error: Callable[[dict[str, Any]], str] | None = None,
        wait_for: Callable[[Request], Answer] | None = None,
        store: ConversationStore | None = None,
        request_params: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.style = style
        self.base_url = base_url
        self._executor_lock = threading.Lock()  # guards: _executor, _closed
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        options = ConnectionOptions(
            base_url=base_url,
            style=style,
            api_key=api_key,
            headers=headers,
            session=session,
            generate=generate,
            retries=retries,
            retry_base_ms=retry_base_ms,
            timeout_ms=timeout_ms,
            max_retry_after_s=max_retry_after_s,
            on_error=on_error,
            request_params=request_params,
        )
        self._engine = Engine(model=build_engine(options, pool_size=_POOL_SIZE), executor=self._tool_executor)
        self._metrics = Metrics()
        self._spec = RunSpec(
            model=model,
            system=system_prompt,
            max_turns=max_turns,
            hooks=Hooks.of(hooks),
            wait_for=wait_for,
            emit=emitter(self._metrics, on_metric),
        )
        self._store: ConversationStore = store if store is not None else InMemoryStore()

    def __repr__(self) -> str:
        where = "generate=<in-process>" if isinstance(self._engine.model, InProcessEngine) else f"base_url={self.base_url!r}"
        return f"Client(model={self.model!r}, style={self.style!r}, {where})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conversation_store(self) -> ConversationStore:
        return self._store

    def metrics(self) -> str:
        """Prometheus text for every model call, tool call and run of this client."""
        return self._metrics.render()

    def run(self, prompt: str, toolkit: Toolkit | None = None, *, history: list[dict[str, Any]] | None = None) -> RunResult:
        """Run the loop on ``prompt`` after ``history``; see the module docs for outcomes.

        Raises:
            LLMError: the model endpoint failed past the retries.
        """
        messages = loop.initial_messages(self._engine.style, self._spec.system, history, prompt)
        return self._measured(lambda: loop.start(self._engine, self._spec, toolkit or Toolkit(), messages))

    def ask(self, prompt: str, toolkit: Toolkit | None = None, *, id: str | None = None) -> RunResult:
        """``run`` with the conversation ``id`` loaded from and saved to the store."""
        if id is None:
            return self.run(prompt, toolkit)
        result = self.run(prompt, toolkit, history=self._store.get(id) or [])
        self._store.save(id, result.messages)
        return result

    def resume(
        self,
        pending: Request,
        answer: Answer,
        toolkit: Toolkit | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        id: str | None = None,
    ) -> RunResult:
        """Continue a run that returned ``status="pending"``, from ``messages`` or the store.

        Raises:
            UnknownRequest: ``answer.id`` is not ``pending.id``, or the transcript has no
                call waiting on it. Nothing changes.
        """
        if messages is None:
            if id is None:
                raise ToolnexusError("resume needs the pending run's messages or its conversation id")
            messages = self._store.get(id) or []
        transcript = list(messages)
        result = self._measured(lambda: loop.resume(self._engine, self._spec, toolkit or Toolkit(), transcript, pending, answer))
        if id is not None:
            self._store.save(id, result.messages)
        return result

    def close(self) -> None:
        """Cancel model calls and retry waits in flight, end the tool threads; idempotent."""
        with self._executor_lock:
            executor, self._executor, self._closed = self._executor, None, True
        self._engine.model.close()
        if executor is not None:
            executor.shutdown(wait=True)

    def _tool_executor(self) -> Executor | None:
        with self._executor_lock:
            if self._executor is None and not self._closed:
                self._executor = ThreadPoolExecutor(max_workers=_TOOL_WORKERS, thread_name_prefix="toolnexus-tools")
            return self._executor

    def _measured(self, body: Callable[[], RunResult]) -> RunResult:
        started = time.perf_counter()
        event: dict[str, Any] = {"event": "run", "model": self.model}
        try:
            result = body()
        except Exception as exc:
            event.update(turns=0, tool_calls=0, total_tokens=0, error=type(exc).__name__)
            raise
        else:
            event.update(turns=result.turns, tool_calls=result.tool_call_count, total_tokens=result.usage.total_tokens)
            return result
        finally:
            event["ms"] = round((time.perf_counter() - started) * 1000, 3)
            self._spec.emit(event)
