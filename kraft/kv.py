"""A replicated key-value map on :class:`~kraft.raft.state_machine.StateMachine`: put, get and
compare-and-set, the state machine of the simulator's kv workload, of ``examples/kv`` and of
docs/embedding.md.

Writes are :class:`KvCommand` records appended to the log (encoded by :class:`KvSerde`,
msgspec MessagePack); every replica applies them in offset order, so every replica holds the
same map at the same offset. Reads are not records: a linearizable ``get`` is
``read_barrier()`` on any node, then :meth:`KvStateMachine.get` on that node's state machine.

A cas's outcome depends on the state when it is applied, which its submitter cannot know in
advance. :class:`KvStateMachine` keeps the outcome of every command it applied, by offset, for
the last ``result_window`` commands: the submitter's ``append`` future completes with the
batch's last offset only after this node's listeners (so this state machine) applied it, and
then :meth:`KvStateMachine.result_at` answers. This module sits beside the Raft core, not in
``kraft.simulation``, because the example service and the docs use it too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Literal

import msgspec

from kraft.raft.state_machine import StateMachine
from kraft.record.serde import MsgspecSerde

__all__ = ["KvCommand", "KvSerde", "KvStateMachine"]

#: Outcomes kept by default: far more than the commands in flight at any time.
DEFAULT_RESULT_WINDOW = 100_000


class KvCommand(msgspec.Struct, frozen=True, array_like=True):
    """``put``: ``key`` := ``value``. ``cas``: ``key`` := ``value`` if the key holds
    ``expected`` (``None``: if the key is absent)."""

    op: Literal["put", "cas"]
    key: str
    value: str
    expected: str | None = None


class KvSerde(MsgspecSerde[KvCommand]):
    """:class:`KvCommand` records as MessagePack arrays."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(KvCommand)


class KvStateMachine(StateMachine[KvCommand]):
    """The map, and the outcome of the last ``result_window`` commands applied."""

    def __init__(self, result_window: int = DEFAULT_RESULT_WINDOW) -> None:
        if result_window < 1:
            raise ValueError(f"result_window must be positive: {result_window}")
        self.result_window = result_window
        self._data: dict[str, str] = {}
        self._results: OrderedDict[int, bool] = OrderedDict()

    def get(self, key: str) -> str | None:
        """The value of ``key`` in the state applied so far (``None``: absent)."""
        return self._data.get(key)

    def __len__(self) -> int:
        return len(self._data)

    def result_at(self, offset: int) -> bool:
        """Whether the command applied at ``offset`` took effect: True for a put, whether it
        swapped for a cas. ``KeyError`` if no command applied here at that offset is still
        kept (not applied yet, older than the window, or covered by a loaded snapshot)."""
        return self._results[offset]

    def apply(self, offset: int, record: KvCommand) -> None:
        data = self._data
        took_effect = record.op == "put" or data.get(record.key) == record.expected
        if took_effect:
            data[record.key] = record.value
        results = self._results
        results[offset] = took_effect
        if len(results) > self.result_window:
            results.popitem(last=False)

    def snapshot_records(self) -> Iterator[KvCommand]:
        for key, value in self._data.items():
            yield KvCommand("put", key, value)

    def load_snapshot(self, records: Iterable[KvCommand]) -> None:
        for record in records:
            self._data[record.key] = record.value

    def reset(self) -> None:
        self._data.clear()
        self._results.clear()
