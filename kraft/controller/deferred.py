"""Writes waiting for their offset to commit (Kafka's ``DeferredEventQueue``, the controller's
purgatory).

The active controller replays a write's records at once but answers only when the log commits
its last offset: :meth:`DeferredEventQueue.complete_up_to` runs as each committed batch comes
back. Offsets only grow on the active controller, so the waiting events are kept in offset
order in a deque; a renounce fails them all (their records are reverted, not committed).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

__all__ = ["DeferredEvent", "DeferredEventQueue"]


class DeferredEvent(Protocol):
    """An event that completes once the log commits its offset."""

    def complete(self, exception: BaseException | None) -> None:
        """Succeed (``None``) or fail with ``exception``."""


class DeferredEventQueue:
    """Events by the offset they wait for, completed in offset order."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: deque[tuple[int, DeferredEvent]] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, offset: int, event: DeferredEvent) -> None:
        """Complete ``event`` once ``offset`` commits. ``ValueError`` for an offset below the
        last one added: the active controller's offsets never go back."""
        if self._pending and offset < self._pending[-1][0]:
            raise ValueError(
                f"offset {offset} is below the highest pending offset {self._pending[-1][0]}"
            )
        self._pending.append((offset, event))

    def highest_pending_offset(self) -> int | None:
        """The offset the last event waits for; ``None`` when none waits."""
        return self._pending[-1][0] if self._pending else None

    def complete_up_to(self, offset: int) -> None:
        """Complete every event waiting for ``offset`` or below, in offset order."""
        pending = self._pending
        while pending and pending[0][0] <= offset:
            pending.popleft()[1].complete(None)

    def fail_all(self, exception: BaseException) -> None:
        """Fail every waiting event with ``exception``."""
        pending, self._pending = self._pending, deque()
        for _offset, event in pending:
            event.complete(exception)
