"""The leader's fetch purgatory: long-polling Fetch requests parked until data or a deadline.

Kafka's ``ThresholdPurgatory`` completes a future from an expiration thread; the sans-IO core
has no thread, so the purgatory is a list the client checks on every poll: entries complete
when the leader's log end offset passes their fetch offset or its high watermark passes
theirs (:meth:`FetchPurgatory.ready`),
expire at their deadline (:meth:`FetchPurgatory.expired`), or are all failed when leadership
ends (:meth:`FetchPurgatory.drain`). :meth:`FetchPurgatory.next_deadline_ms` feeds the time
``poll()`` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kraft.protocol.envelope import InboundRequest
from kraft.raft.states import NO_DEADLINE

__all__ = ["FetchPurgatory", "ParkedFetch"]


@dataclass(slots=True)
class ParkedFetch:
    """A Fetch waiting for the leader's log to pass ``fetch_offset`` until ``deadline_ms``."""

    request: InboundRequest
    fetch_offset: int
    #: The fetcher's high watermark (KIP-1166): a higher leader HW completes the fetch.
    high_watermark: int
    deadline_ms: int


class FetchPurgatory:
    """Parked fetches, in arrival order."""

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        self._parked: list[ParkedFetch] = []

    def __len__(self) -> int:
        return len(self._parked)

    def park(
        self, request: InboundRequest, fetch_offset: int, high_watermark: int, deadline_ms: int
    ) -> None:
        self._parked.append(ParkedFetch(request, fetch_offset, high_watermark, deadline_ms))

    def ready(self, log_end_offset: int, high_watermark: int | None) -> list[ParkedFetch]:
        """Remove and return the fetches that now have news: data past their fetch offset,
        or (KIP-1166, when ``high_watermark`` is given) a high watermark past theirs."""
        if high_watermark is None:
            return self._take(lambda p: p.fetch_offset < log_end_offset)
        return self._take(
            lambda p: p.fetch_offset < log_end_offset or p.high_watermark < high_watermark
        )

    def hasten(self, high_watermark: int, deadline_ms: int) -> None:
        """Fetches whose high watermark is behind ``high_watermark`` wait at most until
        ``deadline_ms`` (the high watermark linger)."""
        for parked in self._parked:
            if parked.high_watermark < high_watermark and parked.deadline_ms > deadline_ms:
                parked.deadline_ms = deadline_ms

    def expired(self, now_ms: int) -> list[ParkedFetch]:
        """Remove and return the fetches whose wait is over."""
        return self._take(lambda p: p.deadline_ms <= now_ms)

    def drain(self) -> list[ParkedFetch]:
        """Remove and return every parked fetch (leadership ended)."""
        parked, self._parked = self._parked, []
        return parked

    def next_deadline_ms(self) -> int:
        return min((p.deadline_ms for p in self._parked), default=NO_DEADLINE)

    def _take(self, predicate: Callable[[ParkedFetch], bool]) -> list[ParkedFetch]:
        taken: list[ParkedFetch] = []
        kept: list[ParkedFetch] = []
        for parked in self._parked:
            (taken if predicate(parked) else kept).append(parked)
        self._parked = kept
        return taken
