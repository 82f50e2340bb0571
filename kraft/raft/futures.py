"""``RaftFuture``: the outcome of a commit, a read barrier or a leader transfer, sans-IO.

The client creates one per call (``KafkaRaftClient.append``, ``read_barrier``,
``transfer_leadership``) and completes it from ``poll()``, so it needs no lock: it lives on
the polling thread. The simulator uses these objects directly; the runtime wraps each in a
``concurrent.futures.Future`` (``RaftNode``) and ``kraft.aio`` in an awaitable, by adding a
done callback on the polling thread (docs/embedding.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from kraft.errors import IllegalStateError

__all__ = ["RaftFuture"]

logger = logging.getLogger(__name__)

R = TypeVar("R")


class RaftFuture(Generic[R]):
    """A result the client will produce on a later poll; completed once, then immutable."""

    __slots__ = ("_callbacks", "_done", "_exception", "_result")

    def __init__(self) -> None:
        self._done = False
        self._result: R | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[RaftFuture[R]], None]] = []

    def done(self) -> bool:
        return self._done

    def result(self) -> R:
        """The result; raises the failure. ``IllegalStateError`` if not done yet."""
        if not self._done:
            raise IllegalStateError("the future is not done")
        if self._exception is not None:
            raise self._exception
        return self._result  # type: ignore[return-value]  # set with _done when no exception

    def exception(self) -> BaseException | None:
        """The failure, or None for a success. ``IllegalStateError`` if not done yet."""
        if not self._done:
            raise IllegalStateError("the future is not done")
        return self._exception

    def add_done_callback(self, fn: Callable[[RaftFuture[R]], None]) -> None:
        """Call ``fn(self)`` when done (at once if it is). A callback's exception is logged."""
        if self._done:
            self._call(fn)
        else:
            self._callbacks.append(fn)

    # -- the client's side --------------------------------------------------------------------
    def set_result(self, value: R) -> None:
        self._complete(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._complete(None, exc)

    def _complete(self, value: R | None, exc: BaseException | None) -> None:
        if self._done:
            raise IllegalStateError("the future is done already")
        self._done = True
        self._result = value
        self._exception = exc
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._call(fn)

    def _call(self, fn: Callable[[RaftFuture[R]], None]) -> None:
        try:
            fn(self)
        except Exception:
            # A caller's callback must not break the poll that completed the future.
            logger.exception("a RaftFuture done callback failed")

    def __repr__(self) -> str:
        if not self._done:
            return "RaftFuture(pending)"
        if self._exception is not None:
            return f"RaftFuture(failed: {self._exception!r})"
        return f"RaftFuture({self._result!r})"
