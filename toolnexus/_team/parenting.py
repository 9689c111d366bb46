"""A handle as a parent: the slots its children's turns take under its
``max_concurrent``, the wake queue of those waiting for one, its children, and the
reattachment index of its ``task`` calls.

``Parenting`` is part of ``Handle`` (``handle.py``): the same rules hold, every method
changes the record under the handle's ``lock`` (the index: under ``task_lock``) inside its
unit of work.
"""

from __future__ import annotations

import threading
from typing import Any

from .record import HandleRecord, TaskEntry


class Parenting:
    """The parent's side of ``Handle``."""

    record: HandleRecord
    #: The tree store the record's changes commit to (``handle.RecordStore``).
    store: Any
    task_lock: threading.Lock

    # --- a parent's slots for its children's turns ------------------------------------------

    def take_slot(self, cap: int | None) -> bool:
        with self.store.change(self):
            if cap is not None and self.record.running_children >= cap:
                return False
            self.record.running_children += 1
            return True

    def free_slot(self) -> None:
        with self.store.change(self):
            self.record.running_children -= 1

    def queue_wake(self, child_id: str) -> None:
        """A child's wake waits (FIFO) for one of this handle's slots."""
        with self.store.change(self):
            self.record.wake_queue.append(child_id)

    def drop_wake(self, child_id: str) -> None:
        with self.store.change(self):
            if child_id in self.record.wake_queue:
                self.record.wake_queue.remove(child_id)

    def add_child(self, child_id: str) -> None:
        with self.store.change(self):
            self.record.children.append(child_id)

    def next_child_number(self) -> int:
        with self.store.change(self):
            self.record.spawned += 1
            return self.record.spawned

    # --- the reattachment index (``task_lock`` held) ---------------------------------------

    def task_entry(self, key: tuple[str, str], serial: int) -> TaskEntry | None:
        """The child of ``key`` in turn ``serial`` and the id of the call that made it."""
        entry = self.record.task_keys.get(key)
        return entry if entry is not None and entry.serial == serial else None

    def remember_task(self, key: tuple[str, str], serial: int, child_id: str, call_id: str) -> None:
        with self.store.change(self):
            self.record.task_keys[key] = TaskEntry(serial=serial, child=child_id, call=call_id)

    def task_children(self, serial: int) -> list[str]:
        return [entry.child for entry in self.record.task_keys.values() if entry.serial == serial]
