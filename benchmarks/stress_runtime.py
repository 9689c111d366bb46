"""Stress the agent runtime: many threads drive one shared handle tree with random verbs.

``--threads`` host threads (32 by default) run random ``spawn`` / ``post`` / ``wake`` /
``wait(timeout)`` / ``wake`` + ``wait()`` / ``interrupt`` / ``close`` / ``run_agent`` /
``inspect`` calls for ``--seconds`` (20 by default) against one ``Runtime``. The registry
has agents with teams, so the in-process model also delegates through the ``task`` tool
(sometimes twice with the same key, sometimes outside its team). Every model call waits a
small random latency on an ``Event``.

Every ``post`` carries a unique token (``tok-<n>``). The model records every token it sees
in a request's last user message (the turn's input), and at the end the script reads what
is left in the inboxes and in the stored transcripts. Then it closes the root and checks:

* legal states -- every sampled state is idle/running/suspended/closed, every handle's
  transitions form a legal chain, and after ``close(rt.root)`` every handle is closed;
* no waiter hung -- every ``wait()`` returned (timed waits within timeout + slack), and
  every host thread finished its last call;
* no post token lost -- every accepted token was seen by the model (in a turn that
  completed or was interrupted; an interrupted turn puts its items back, so a token may be
  seen more than once) or is still in the inbox of its (closed) handle;
* no duplicate in one inbox -- sampled during the run and checked at the end, and no
  token appears twice in one turn's input;
* consumed at most once -- a token is in at most one completed turn's input (the stored
  transcripts) and a consumed token is never back in an inbox;
* slots balanced -- after close no parent counts a running child or holds a queued wake;
* no thread leaked -- no thread named ``toolnexus*`` is alive after ``close(rt.root)``;
* only expected exceptions -- ``SpawnError``, ``InboxFull`` and ``HandleClosed``.

Usage: ``python benchmarks/stress_runtime.py [--seconds 20] [--threads 32] [--seed N]
[--store-latency-ms MS]`` (the last one puts a random delay on every store get/save, as a
database-backed store would have).
Exits 1 when an invariant fails. Not part of the unit suite.

NOTE: for the checks it reads runtime internals -- ``rt._tree.get(id).record`` (``inbox``,
``taken``, ``transitions``, ``running_children``, ``wake_queue``) under the handle's lock.
They are not public API and may change with the runtime.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import itertools
import random
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("toolnexus") is None:  # not installed: stress the checkout itself
    sys.path.insert(0, str(HERE.parent))

from toolnexus import AgentDef, Budget, HandleClosed, InboxFull, InMemoryStore, Runtime, SpawnError  # noqa: E402

TOKEN = re.compile(r"\btok-\d+\b")
LEGAL_STATES = frozenset({"idle", "running", "suspended", "closed"})
LEGAL_TRANSITIONS = frozenset(
    f"{a}\u2192{b}"
    for a, b in [
        ("idle", "running"),
        ("running", "idle"),
        ("running", "suspended"),
        ("suspended", "running"),
        ("suspended", "idle"),
        ("idle", "closed"),
    ]
)
EXPECTED_ERRORS = (SpawnError, InboxFull, HandleClosed)
AGENTS = ["lead", "mid", "leaf", "solo"]
TEAMS = {"m-lead": ["mid", "leaf"], "m-mid": ["leaf"]}
MAX_LIVE = 150  # above this many open handles, spawns turn into closes
WAIT_SLACK_S = 5.0  # a timed wait returning later than timeout + this counts as hung
STUCK_S = 15.0  # a host call in flight longer than this counts as hung

REGISTRY = {
    "lead": AgentDef("lead", "splits work", model="m-lead", team=["mid", "leaf"]),
    "mid": AgentDef("mid", "delegates one level down", model="m-mid", team=["leaf"], budget=Budget(max_concurrent=2)),
    "leaf": AgentDef("leaf", "answers", model="m-leaf"),
    "solo": AgentDef("solo", "works alone", model="m-solo", budget=Budget(max_children=4)),
}


class Model:
    """In-process model: small random latency; delegates sometimes; records the tokens it sees."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: everything below
        self._latency = threading.Event()  # never set: Event.wait is the latency
        self._subtasks = itertools.count(1)
        self.calls = 0
        self.seen: set[str] = set()
        self.dup_in_input: list[str] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        users = [m for m in request["messages"] if m.get("role") == "user"]
        text = str(users[-1].get("content") or "") if users else ""
        tokens = TOKEN.findall(text)
        with self._lock:
            self.calls += 1
            self.seen.update(tokens)
            self.dup_in_input.extend(t for t, n in collections.Counter(tokens).items() if n > 1)
        self._latency.wait(random.uniform(0.0002, 0.004))
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        after_tools = request["messages"][-1].get("role") == "tool"
        team = TEAMS.get(request["model"])
        if team and not after_tools and random.random() < 0.4:
            return {"tool_calls": self._delegations(team), "usage": usage}
        return {"content": f"ack {len(tokens)} item(s)", "usage": usage}

    def _delegations(self, team: list[str]) -> list[dict[str, Any]]:
        roll = random.random()
        if roll < 0.1:  # outside the team: refused, nothing spawned
            return [{"name": "task", "arguments": {"agent": "solo", "prompt": "sneak"}}]
        with self._lock:
            n = next(self._subtasks)
        agent = random.choice(team)
        first = {"name": "task", "arguments": {"agent": agent, "prompt": f"sub-{n}"}}
        if roll < 0.3:  # the same key twice in one turn: must reattach, not duplicate
            return [first, dict(first)]
        if roll < 0.45:
            return [first, {"name": "task", "arguments": {"agent": random.choice(team), "prompt": f"sub-{n}b"}}]
        return [first]


class LatentStore(InMemoryStore):
    """The in-memory store with a random delay on every get/save, like a database would have."""

    def __init__(self, latency_s: float) -> None:
        super().__init__()
        self._latency_s = latency_s
        self._delay = threading.Event()  # never set: Event.wait is the delay

    def get(self, id: str) -> list[dict[str, Any]] | None:
        self._delay.wait(random.uniform(0, self._latency_s))
        return super().get(id)

    def save(self, id: str, messages: list[dict[str, Any]]) -> None:
        self._delay.wait(random.uniform(0, self._latency_s))
        super().save(id, messages)


class Stress:
    """Shared bookkeeping of the host threads (all guarded by ``lock``)."""

    def __init__(self, rt: Runtime, seconds: float) -> None:
        self.rt = rt
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.deadline = time.monotonic() + seconds
        self.tokens = itertools.count(1)
        self.ops: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.unexpected: list[str] = []
        self.statuses: collections.Counter[str] = collections.Counter()
        self.accepted: dict[str, str] = {}  # token -> handle id
        self.rejected_posts = 0
        self.waits_started = 0
        self.waits_returned = 0
        self.late_waits: list[str] = []
        self.in_flight: dict[str, tuple[str, str, float]] = {}  # thread -> (op, handle, since)
        self.stuck: dict[str, str] = {}
        self.live: list[str] = []  # open handle ids, refreshed by the monitor
        self.state_samples = 0
        self.illegal_states: list[str] = []
        self.inbox_dups: list[str] = []

    # --- host threads -----------------------------------------------------------------

    def worker(self, seed: int) -> None:
        rng = random.Random(seed)
        name = threading.current_thread().name
        ops = [
            (self.op_spawn, 14),
            (self.op_post, 30),
            (self.op_wake, 18),
            (self.op_wait, 12),
            (self.op_wake_wait, 6),
            (self.op_interrupt, 8),
            (self.op_close, 4),
            (self.op_run_agent, 2),
            (self.op_inspect, 6),
        ]
        funcs, weights = zip(*ops)
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            op = rng.choices(funcs, weights)[0]
            op_name = op.__name__[3:]
            with self.lock:
                self.ops[op_name] += 1
                self.in_flight[name] = (op_name, "", time.monotonic())
            try:
                op(rng)
            except EXPECTED_ERRORS as exc:
                with self.lock:
                    self.errors[type(exc).__name__] += 1
                    handle_id = self.in_flight.get(name, ("", "", 0.0))[1]
                if isinstance(exc, HandleClosed) and handle_id:
                    self._forget(handle_id)
            except Exception as exc:  # anything else is a finding
                with self.lock:
                    self.errors[type(exc).__name__] += 1
                    self.unexpected.append(f"{op_name}: {type(exc).__name__}: {exc}")
            finally:
                with self.lock:
                    self.in_flight.pop(name, None)

    def _pick(self, rng: random.Random, *, root_ok: bool = False) -> str | None:
        live = self.live  # replaced wholesale by the monitor; reading the reference is safe
        if root_ok and (not live or rng.random() < 0.25):
            return "root"
        return rng.choice(live) if live else None

    def _note(self, handle_id: str) -> None:
        name = threading.current_thread().name
        with self.lock:
            op, _, since = self.in_flight.get(name, ("?", "", time.monotonic()))
            self.in_flight[name] = (op, handle_id, since)

    def _forget(self, handle_id: str) -> None:
        """Drop a closed handle (and its subtree) from the open-handle list."""
        with self.lock:
            self.live = [h for h in self.live if h != handle_id and not h.startswith(handle_id + "/")]

    def op_spawn(self, rng: random.Random) -> None:
        if len(self.live) >= MAX_LIVE:
            return self.op_close(rng)
        parent = self._pick(rng, root_ok=True)
        if parent is None:
            return
        self._note(parent)
        child = self.rt.spawn(parent, rng.choice(AGENTS))
        with self.lock:
            self.live = [*self.live, child.id]

    def op_post(self, rng: random.Random) -> None:
        """A burst of 1-4 posts to one handle, each with a unique token."""
        target = self._pick(rng)
        if target is None:
            return
        self._note(target)
        parent = target.rsplit("/", 1)[0]
        for _ in range(rng.randint(1, 4)):
            token = f"tok-{next(self.tokens)}"
            sender = rng.choice(["external", parent, "root", "root/elsewhere.1"])
            channel = rng.choice(["external", "chat", "timer", "events"])
            try:
                self.rt.post(target, token, sender=sender, channel=channel)
            except EXPECTED_ERRORS:
                with self.lock:
                    self.rejected_posts += 1
                raise
            with self.lock:
                self.accepted[token] = target

    def op_wake(self, rng: random.Random) -> None:
        target = self._pick(rng)
        if target is not None:
            self._note(target)
            self.rt.wake(target, rng.choice([None, "go", "check your inbox"]))

    def _wait(self, target: str, timeout: float | None) -> None:
        """One wait(), counted, with a deadline: it must come back."""
        with self.lock:
            self.waits_started += 1
        started = time.monotonic()
        result = self.rt.wait(target, timeout=timeout)
        took = time.monotonic() - started
        with self.lock:
            self.waits_returned += 1
            self.statuses[result.status] += 1
            if timeout is not None and took > timeout + WAIT_SLACK_S:
                self.late_waits.append(f"{target}: wait(timeout={timeout:.2f}) took {took:.2f}s")

    def op_wait(self, rng: random.Random) -> None:
        target = self._pick(rng)
        if target is not None:
            self._note(target)
            self._wait(target, rng.uniform(0.005, 0.2))

    def op_wake_wait(self, rng: random.Random) -> None:
        """wake, then an unbounded wait: it must return (result, interrupt or close)."""
        target = self._pick(rng)
        if target is not None:
            self._note(target)
            self.rt.wake(target, "go and report")
            self._wait(target, None)

    def op_interrupt(self, rng: random.Random) -> None:
        target = self._pick(rng)
        if target is not None:
            self._note(target)
            self.rt.interrupt(target)

    def op_close(self, rng: random.Random) -> None:
        target = self._pick(rng)
        if target is not None:
            self._note(target)
            self.rt.close(target, force=rng.random() < 0.3)
            self._forget(target)

    def op_run_agent(self, rng: random.Random) -> None:
        result = self.rt.run_agent(rng.choice(["leaf", "solo", "mid"]), "one-shot")
        with self.lock:
            self.statuses[f"run_agent:{result.status}"] += 1

    def op_inspect(self, rng: random.Random) -> None:
        target = self._pick(rng, root_ok=True)
        if target is not None:
            view = self.rt.inspect(target)
            if view.state not in LEGAL_STATES:
                with self.lock:
                    self.illegal_states.append(f"{view.id}: {view.state}")

    # --- the monitor ----------------------------------------------------------------------

    def monitor(self) -> None:
        """Refresh the open-handle list, sample states and inboxes, and spot stuck calls."""
        while not self.stop.wait(0.2):
            views = self.rt.handles()
            live = [v.id for v in views if v.id != "root" and v.state != "closed"]
            bad = [f"{v.id}: {v.state}" for v in views if v.state not in LEGAL_STATES]
            dups = []
            for v in views:
                if v.inbox > 1 and v.state != "closed":
                    dup = duplicate_in_inbox(self.rt, v.id)
                    if dup:
                        dups.append(f"{v.id}: {dup}")
            now = time.monotonic()
            with self.lock:
                self.live = live
                self.state_samples += len(views)
                self.illegal_states.extend(bad)
                self.inbox_dups.extend(dups)
                for thread, (op, handle_id, since) in self.in_flight.items():
                    if now - since > STUCK_S:
                        self.stuck[thread] = f"{op}({handle_id}) in flight for {now - since:.1f}s"


def inbox_texts(rt: Runtime, handle_id: str, *, taken: bool = False) -> list[str]:
    """The texts waiting in a handle's inbox (or taken by its turn). Internal state."""
    handle = rt._tree.get(handle_id)  # internal: the handle table
    with handle.lock:
        items = handle.record.taken if taken else handle.record.inbox
        return [item.text for item in items]


def duplicate_in_inbox(rt: Runtime, handle_id: str) -> list[str]:
    counts = collections.Counter(t for text in inbox_texts(rt, handle_id) for t in TOKEN.findall(text))
    return [t for t, n in counts.items() if n > 1]


def transcript_tokens(rt: Runtime, handle_id: str) -> list[str]:
    """Tokens in the user messages of a handle's stored transcript (its completed turns)."""
    messages = rt.conversation_store.get(handle_id) or []
    return [t for m in messages if m.get("role") == "user" for t in TOKEN.findall(str(m.get("content") or ""))]


def toolnexus_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("toolnexus") and t.is_alive()]


def run(seconds: float, threads: int, seed: int, store_latency_ms: float) -> bool:
    random.seed(seed)
    model = Model()
    store = LatentStore(store_latency_ms / 1000) if store_latency_ms > 0 else None
    # keep every closed handle in memory: the audit below reads each one's inbox
    rt = Runtime(REGISTRY, generate=model, store=store, inbox_cap=8, shutdown_timeout=2, keep_closed=10**9)
    stress = Stress(rt, seconds)
    monitor = threading.Thread(target=stress.monitor, name="stress-monitor", daemon=True)
    host = [threading.Thread(target=stress.worker, args=(seed * 1000 + i,), name=f"stress-{i}", daemon=True) for i in range(threads)]
    started = time.monotonic()
    monitor.start()
    for t in host:
        t.start()

    # Every host thread must finish its last call on its own, before any close releases it.
    for t in host:
        t.join(max(0.0, stress.deadline - time.monotonic()) + STUCK_S)
    hung_threads = [f"{t.name}: {stress.in_flight.get(t.name, ('?', '', 0))[:2]}" for t in host if t.is_alive()]
    stress.stop.set()
    monitor.join(10)
    ran_s = time.monotonic() - started

    close_started = time.monotonic()
    rt.close(rt.root)
    close_s = time.monotonic() - close_started
    for t in host:  # a thread stuck in wait() is released by the close; give it a moment
        t.join(2)

    grace = time.monotonic() + 2.0
    while toolnexus_threads() and time.monotonic() < grace:
        time.sleep(0.05)
    leaked = toolnexus_threads()

    views = rt.handles()
    consumed = collections.Counter(t for v in views for t in transcript_tokens(rt, v.id))
    final_states = collections.Counter(v.state for v in views)
    not_closed = [f"{v.id}: {v.state}" for v in views if v.state != "closed"]
    bad_chains = []
    for v in views:
        chain = rt.transitions(v.id)
        state = "idle"
        for step in chain:
            frm, _, to = step.partition("\u2192")
            if step not in LEGAL_TRANSITIONS or frm != state:
                bad_chains.append(f"{v.id}: {chain}")
                break
            state = to
        else:
            if state != v.state:
                bad_chains.append(f"{v.id}: transitions end in {state}, state is {v.state}")

    remaining: collections.Counter[str] = collections.Counter()
    end_dups, stuck_taken, unbalanced = [], [], []
    for v in views:
        texts = inbox_texts(rt, v.id)
        tokens = [t for text in texts for t in TOKEN.findall(text)]
        remaining.update(tokens)
        dup = [t for t, n in collections.Counter(tokens).items() if n > 1]
        if dup:
            end_dups.append(f"{v.id}: {dup}")
        if v.inbox != len(texts):
            end_dups.append(f"{v.id}: inspect().inbox={v.inbox} but {len(texts)} items")
        if inbox_texts(rt, v.id, taken=True):
            stuck_taken.append(v.id)
        record = rt._tree.get(v.id).record  # internal: slot accounting
        if record.running_children or record.wake_queue:
            unbalanced.append(f"{v.id}: running_children={record.running_children} wake_queue={record.wake_queue}")

    accepted = set(stress.accepted)
    lost = sorted(accepted - model.seen - set(remaining), key=lambda t: int(t[4:]))
    twice_consumed = sorted(t for t, n in consumed.items() if n > 1)
    consumed_and_back = sorted(set(consumed) & set(remaining))
    unknown_tokens = sorted((set(model.seen) | set(remaining)) - accepted)

    events = collections.Counter(e["event"] for e in rt.events())
    print(
        f"stress: {threads} threads for {ran_s:.1f}s (seed {seed}, store latency {store_latency_ms:g} ms); "
        f"close(rt.root) took {close_s * 1000:.0f} ms"
    )
    print("operations:   " + ", ".join(f"{k}={v}" for k, v in sorted(stress.ops.items())) + f"  (total {sum(stress.ops.values())})")
    print("exceptions:   " + (", ".join(f"{k}={v}" for k, v in sorted(stress.errors.items())) or "none"))
    print("wait results: " + ", ".join(f"{k}={v}" for k, v in sorted(stress.statuses.items())))
    print("events:       " + ", ".join(f"{k}={v}" for k, v in sorted(events.items())))
    print(f"handles:      {len(views)} (final states {dict(final_states)}); model calls {model.calls}")
    print(
        f"tokens:       posted {len(accepted) + stress.rejected_posts}, accepted {len(accepted)}, rejected {stress.rejected_posts}, "
        f"seen by model {len(model.seen & accepted)}, consumed by completed turns {len(consumed)}, "
        f"left in inboxes {sum(remaining.values())}, never seen (still in inbox) {len(accepted - model.seen)}"
    )
    print(f"waits:        started {stress.waits_started}, returned {stress.waits_returned}; state samples {stress.state_samples}")

    checks = [
        ("legal states", not stress.illegal_states and not bad_chains and not not_closed,
         stress.illegal_states[:3] + bad_chains[:3] + not_closed[:3]),
        ("no waiter hung", not hung_threads and not stress.stuck and not stress.late_waits and stress.waits_started == stress.waits_returned,
         hung_threads[:3] + list(stress.stuck.values())[:3] + stress.late_waits[:3]),
        ("no post token lost", not lost and not stuck_taken and not unknown_tokens,
         [f"lost {len(lost)}: {lost[:5]}"] * bool(lost) + [f"items left in taken: {stuck_taken[:3]}"] * bool(stuck_taken)
         + [f"tokens never posted: {unknown_tokens[:3]}"] * bool(unknown_tokens)),
        ("no duplicate in one inbox", not stress.inbox_dups and not end_dups and not model.dup_in_input,
         stress.inbox_dups[:3] + end_dups[:3] + model.dup_in_input[:3]),
        ("consumed at most once", not twice_consumed and not consumed_and_back,
         [f"in two completed turns: {twice_consumed[:5]}"] * bool(twice_consumed)
         + [f"consumed yet back in an inbox: {consumed_and_back[:5]}"] * bool(consumed_and_back)),
        ("slots balanced after close", not unbalanced, unbalanced[:3]),
        ("no thread leaked", not leaked, leaked[:5]),
        ("only expected exceptions", not stress.unexpected, stress.unexpected[:5]),
    ]
    ok = True
    for name, passed, detail in checks:
        ok &= bool(passed)
        print(f"{'PASS' if passed else 'FAIL'}  {name}" + ("" if passed else f"  -> {detail}"))
    print("OK" if ok else "FAILED")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the host threads run")
    parser.add_argument("--threads", type=int, default=32, help="host threads")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based)")
    parser.add_argument(
        "--store-latency-ms", type=float, default=0.0, help="random delay up to this on every store get/save (a slow, durable store)"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    return 0 if run(args.seconds, args.threads, seed, args.store_latency_ms) else 1


if __name__ == "__main__":
    sys.exit(main())
