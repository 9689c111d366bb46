"""One conversation, many threads: ``ask``/``resume`` with an ``id`` hold the conversation,
and a client that is dropped without ``close`` still releases its threads and sockets."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import warnings
import weakref

import pytest

from _helpers import EMPTY_SCHEMA, HANG, call, calls, text
from toolnexus import Answer, Client, InMemoryStore, Tool, Toolkit, UnknownRequest, make_request, suspend
from toolnexus.testing import ScriptedLLMServer, last_user_text, tool_messages

OVERLAP_S = 1.0  # how long the first caller waits for a second one to join it


class Overlap:
    """Makes two callers overlap when nothing keeps them apart: the first to arrive waits
    (up to ``OVERLAP_S``) for the second; the second lets the first go on."""

    def __init__(self, patience=OVERLAP_S):
        self._patience = patience
        self._lock = threading.Lock()
        self._arrived = 0
        self.second_came = threading.Event()

    def meet(self):
        with self._lock:
            self._arrived += 1
            first = self._arrived == 1
        if first:
            self.second_came.wait(self._patience)
        else:
            self.second_came.set()


class Payment:
    """An approved payment: suspends until answered, then pays (counting each payment)."""

    def __init__(self, overlap=None):
        self.overlap = overlap
        self.lock = threading.Lock()
        self.paid = 0
        self.requests = []

    def execute(self, args, ctx):
        if ctx.answer is None:
            request = make_request("approval", "pay 100?")
            self.requests.append(request)
            return suspend(request)
        if self.overlap is not None:
            self.overlap.meet()
        with self.lock:
            self.paid += 1
        return "paid"

    def toolkit(self):
        return Toolkit([Tool("pay", "Pays.", EMPTY_SCHEMA, self.execute)])


def pay_once(request):
    return text("done:" + ",".join(tool_messages(request))) if tool_messages(request) else calls(call("p1", "pay"))


def both(first, second):
    """Run two calls at once; each outcome is a value or the exception it raised."""
    outcomes = [None, None]

    def runner(index, fn):
        def run():
            try:
                outcomes[index] = fn()
            except Exception as exc:
                outcomes[index] = exc

        return run

    threads = [threading.Thread(target=runner(i, fn), daemon=True) for i, fn in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG)
        assert not thread.is_alive(), "a call on the conversation hung"
    return outcomes


def test_two_resumes_with_one_answer_run_the_approved_tool_once():
    payment = Payment(Overlap())
    with Client(model="m", generate=pay_once) as client:
        pending = client.ask("pay the bill", payment.toolkit(), id="conv")
        assert pending.status == "pending"
        answer = Answer(id=pending.pending.id, ok=True)
        outcomes = both(
            lambda: client.resume(pending.pending, answer, payment.toolkit(), id="conv"),
            lambda: client.resume(pending.pending, answer, payment.toolkit(), id="conv"),
        )
        done = [o for o in outcomes if not isinstance(o, Exception)]
        refused = [o for o in outcomes if isinstance(o, Exception)]
        assert [r.status for r in done] == ["done"]
        assert len(refused) == 1 and isinstance(refused[0], UnknownRequest)
        assert payment.paid == 1
        saved = client.conversation_store.get("conv")
        assert [m["content"] for m in saved if m["role"] == "tool"] == ["paid"]


def test_a_stale_answer_is_refused_once_the_conversation_waits_on_a_new_request():
    payment = Payment()

    def pay_twice(request):
        results = tool_messages(request)
        if len(results) < 2 or results[-1] != "paid":
            return calls(call(f"p{len(results) + 1}", "pay"))
        return text("done")

    with Client(model="m", generate=pay_twice) as client:
        first = client.ask("pay two bills", payment.toolkit(), id="conv")
        approve_first = Answer(id=first.pending.id, ok=True)
        second = client.resume(first.pending, approve_first, payment.toolkit(), id="conv")
        assert second.status == "pending" and second.pending.id != first.pending.id
        with pytest.raises(UnknownRequest):
            client.resume(first.pending, approve_first, payment.toolkit(), id="conv")
        assert payment.paid == 1
        finished = client.resume(second.pending, Answer(id=second.pending.id, ok=True), payment.toolkit(), id="conv")
        assert finished.status == "done" and payment.paid == 2


def test_concurrent_asks_on_one_conversation_keep_every_exchange():
    overlap = Overlap()
    histories = []

    def model(request):
        overlap.meet()
        histories.append([m["content"] for m in request["messages"]])
        return text("re:" + last_user_text(request))

    with Client(model="m", generate=model) as client:
        outcomes = both(lambda: client.ask("one", id="conv"), lambda: client.ask("two", id="conv"))
        assert all(result.status == "done" for result in outcomes)
        saved = [m["content"] for m in client.conversation_store.get("conv")]
        assert sorted(saved[0::2]) == ["one", "two"] and len(saved) == 4
        assert saved[1] == "re:" + saved[0] and saved[3] == "re:" + saved[2]
        assert len(histories[1]) == 3  # the later exchange saw the earlier one


def test_asks_on_different_conversations_are_not_serialised():
    overlap = Overlap(patience=HANG)
    met = []

    def model(request):
        overlap.meet()
        met.append(last_user_text(request))
        return text("ok")

    with Client(model="m", generate=model) as client:
        both(lambda: client.ask("one", id="a"), lambda: client.ask("two", id="b"))
    assert overlap.second_came.is_set()  # the second arrived while the first was still inside


class LockingStore(InMemoryStore):
    """A store shared between processes would lock in its database; this one records."""

    def __init__(self):
        super().__init__()
        self.held = []
        self.entered = 0

    @contextlib.contextmanager
    def lock(self, id):
        self.held.append(id)
        self.entered += 1
        try:
            yield
        finally:
            self.held.remove(id)


def test_a_store_with_its_own_lock_is_held_around_each_exchange():
    store = LockingStore()
    seen = []

    def model(request):
        seen.append(list(store.held))
        return text("ok")

    with Client(model="m", generate=model, store=store) as client:
        client.ask("hello", id="conv")
        client.ask("again", id="conv")
    assert seen == [["conv"], ["conv"]] and store.entered == 2 and store.held == []


def test_clients_sharing_one_store_are_serialised_on_a_conversation():
    overlap = Overlap()
    store = InMemoryStore()

    def model(request):
        overlap.meet()
        return text("re:" + last_user_text(request))

    with Client(model="m", generate=model, store=store) as one, Client(model="m", generate=model, store=store) as two:
        both(lambda: one.ask("one", id="conv"), lambda: two.ask("two", id="conv"))
    assert len(store.get("conv")) == 4


def _sockets_to(port):
    """This process's open TCP sockets whose far end is ``port`` on this machine (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                mine.add(target[len("socket:[") : -1])
    return mine & inodes


def _tool_threads():
    return [t for t in threading.enumerate() if t.name.startswith("toolnexus-tools")]


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="counts sockets through Linux /proc")
def test_an_unclosed_client_releases_its_threads_and_sockets_when_dropped():
    def model(request):
        return text("ok") if tool_messages(request) else calls(call("c1", "noop"))

    with ScriptedLLMServer() as server:
        before = set(_tool_threads())
        client = Client(model="m", base_url=server.base_url, api_key="k")
        client.run("hi")
        assert _sockets_to(server.port)  # a kept-alive connection
        tools = Client(model="m", generate=model)
        tools.run("go", Toolkit([Tool("noop", "Does nothing.", EMPTY_SCHEMA, lambda args, ctx: "ok")]))
        started = set(_tool_threads()) - before
        assert started
        gone = [weakref.ref(client), weakref.ref(tools)]
        gc.disable()  # released by reference counting alone, not by the cycle collector
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                del client, tools
        finally:
            gc.enable()
        assert [ref() for ref in gone] == [None, None]
        assert not _sockets_to(server.port)
        for thread in started:
            thread.join(HANG)
            assert not thread.is_alive()
        unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
        assert len(unclosed) == 2 and all("unclosed Client(model='m'" in str(w.message) for w in unclosed)


def test_a_closed_client_gives_no_resource_warning():
    client = Client(model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    client.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del client
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# --- the in-memory store holds copies ----------------------------------------------------


def test_the_in_memory_store_keeps_a_copy_the_caller_cannot_change():
    store = InMemoryStore()
    messages = [{"role": "user", "content": "go", "parts": [{"n": 1}]}]
    store.save("c", messages)
    messages[0]["parts"][0]["n"] = 2
    messages.append({"role": "user", "content": "later"})
    loaded = store.get("c")
    assert loaded == [{"role": "user", "content": "go", "parts": [{"n": 1}]}]
    loaded[0]["parts"].clear()
    assert store.get("c")[0]["parts"] == [{"n": 1}]


def test_the_in_memory_store_copies_a_transcript_holding_objects_of_the_caller():
    class Note(dict):
        pass

    store = InMemoryStore()
    note = Note(text="kept")
    store.save("c", [{"role": "user", "content": "go", "note": note}])
    note["text"] = "changed"
    loaded = store.get("c")
    assert type(loaded[0]["note"]) is Note
    assert loaded[0]["note"] == {"text": "kept"}
