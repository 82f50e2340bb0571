"""Timeline collections: state that can be read as of an offset and reverted to it.

Kafka's ``org.apache.kafka.timeline`` (``SnapshotRegistry``, ``TimelineHashMap``,
``TimelineHashSet``, ``TimelineInteger``, ``TimelineObject``). The controller replays records
into these collections as soon as it generates them, before they commit; it takes an in-memory
snapshot at each offset it replays (:meth:`SnapshotRegistry.get_or_create_snapshot`), reads at
the last committed offset, reverts to it when it loses leadership, and deletes the snapshots
that commit.

How a snapshot is kept
    A snapshot holds, for every collection, the values its keys had when the snapshot was taken,
    but only for the keys changed while it was the newest snapshot (a change records the old
    value in the newest snapshot, once per key). The value of a key as of snapshot ``S`` is
    therefore its value in the first snapshot from ``S`` on that recorded it, else its current
    value. Deleting a snapshot hands its recorded values to the one before it (which keeps its
    own where it has one); reverting to ``S`` folds the later snapshots into ``S`` and writes
    ``S``'s recorded values back.

Values must be immutable (frozen structs, tuples, ints, strings): a snapshot keeps a reference
to the old value, not a copy.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Final, Generic, TypeVar

from kraft.common.limits import INT64_MAX
from kraft.errors import KraftError

__all__ = [
    "LATEST",
    "MissingSnapshotError",
    "SnapshotRegistry",
    "TimelineHashMap",
    "TimelineHashSet",
    "TimelineInteger",
    "TimelineObject",
]

#: Read the current state rather than a snapshot (Kafka's ``SnapshotRegistry.LATEST_EPOCH``,
#: ``Long.MAX_VALUE``). Not -1: the controller snapshots offset -1, the state of an empty log.
LATEST: Final = INT64_MAX

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class _Absent:
    """The recorded "old value" of a key that was not there."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Final = _Absent()


class MissingSnapshotError(KraftError, LookupError):
    """A read or revert named an offset that has no in-memory snapshot, or a snapshot was
    requested below the newest one (snapshots are taken in offset order)."""


class _Snapshot:
    """The old values recorded while this was the newest snapshot: collection index → key →
    value (``_ABSENT`` for a key that did not exist)."""

    __slots__ = ("changes", "offset")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.changes: dict[int, dict[Any, Any]] = {}


class _Revertable(ABC):
    """What the registry needs of a collection: write recorded values back, and clear."""

    @abstractmethod
    def _restore(self, changes: dict[Any, Any]) -> None: ...

    @abstractmethod
    def _clear(self) -> None: ...


class SnapshotRegistry:
    """The snapshots, oldest first, and the collections they cover (Kafka's
    ``SnapshotRegistry``). One per controller; every timeline collection registers with it."""

    def __init__(self) -> None:
        self._snapshots: list[_Snapshot] = []
        self._offsets: list[int] = []
        self._revertables: list[_Revertable] = []

    # -- snapshots ----------------------------------------------------------------------------

    def get_or_create_snapshot(self, offset: int) -> None:
        """Take a snapshot of the current state at ``offset``; nothing if the newest snapshot
        is already at ``offset``. A snapshot below the newest one is refused."""
        if self._offsets:
            newest = self._offsets[-1]
            if newest == offset:
                return
            if newest > offset:
                raise MissingSnapshotError(
                    f"cannot snapshot offset {offset}: the newest snapshot is at {newest}"
                )
        self._snapshots.append(_Snapshot(offset))
        self._offsets.append(offset)

    def has_snapshot(self, offset: int) -> bool:
        index = bisect.bisect_left(self._offsets, offset)
        return index < len(self._offsets) and self._offsets[index] == offset

    def offsets(self) -> list[int]:
        """The offsets that have a snapshot, oldest first."""
        return list(self._offsets)

    def latest_offset(self) -> int | None:
        """The offset of the newest snapshot, ``None`` when there is none."""
        return self._offsets[-1] if self._offsets else None

    def revert_to_snapshot(self, offset: int) -> None:
        """Put every collection back as it was at the snapshot at ``offset``, which stays (and
        is the newest again); the later snapshots go."""
        index = self._index(offset)
        while len(self._snapshots) > index + 1:
            self._delete_at(len(self._snapshots) - 1)
        target = self._snapshots[index]
        for rid, changes in target.changes.items():
            self._revertables[rid]._restore(changes)
        target.changes = {}

    def delete_snapshot(self, offset: int) -> None:
        """Forget the snapshot at ``offset``; reads at the other snapshots are unchanged."""
        self._delete_at(self._index(offset))

    def delete_snapshots_up_to(self, offset: int) -> None:
        """Forget every snapshot below ``offset`` (the snapshot at ``offset`` stays)."""
        # The oldest snapshots hand their changes to nobody: nothing older reads through them.
        count = bisect.bisect_left(self._offsets, offset)
        del self._snapshots[:count]
        del self._offsets[:count]

    def reset(self) -> None:
        """Forget every snapshot and empty every collection (a standby loading a snapshot of
        the log starts over)."""
        self._snapshots.clear()
        self._offsets.clear()
        for revertable in self._revertables:
            revertable._clear()

    # -- for the collections -------------------------------------------------------------------

    def _register(self, revertable: _Revertable) -> int:
        self._revertables.append(revertable)
        return len(self._revertables) - 1

    def _record(self, rid: int, key: object, old: object) -> None:
        """Called before a collection changes ``key``: the newest snapshot keeps its first old
        value (later changes in the same snapshot interval do not matter to any read)."""
        if self._snapshots:
            changes = self._snapshots[-1].changes.get(rid)
            if changes is None:
                self._snapshots[-1].changes[rid] = {key: old}
            elif key not in changes:
                changes[key] = old

    def _changes_since(self, rid: int, offset: int) -> list[dict[Any, Any]]:
        """The recorded changes of collection ``rid`` from the snapshot at ``offset`` on,
        oldest first: the first one holding a key gives its value at ``offset``."""
        found = []
        for snapshot in self._snapshots[self._index(offset) :]:
            changes = snapshot.changes.get(rid)
            if changes:
                found.append(changes)
        return found

    def _index(self, offset: int) -> int:
        index = bisect.bisect_left(self._offsets, offset)
        if index == len(self._offsets) or self._offsets[index] != offset:
            raise MissingSnapshotError(
                f"no in-memory snapshot at offset {offset}; snapshots: {self._offsets}"
            )
        return index

    def _delete_at(self, index: int) -> None:
        snapshot = self._snapshots.pop(index)
        del self._offsets[index]
        if index == 0:
            return  # nothing older reads through it
        older = self._snapshots[index - 1]
        for rid, changes in snapshot.changes.items():
            kept = older.changes.get(rid)
            if kept is None:
                older.changes[rid] = changes
            else:
                for key, old in changes.items():
                    kept.setdefault(key, old)


class TimelineHashMap(_Revertable, Generic[K, V]):
    """A dict whose contents can be read as of any snapshot (Kafka's ``TimelineHashMap``)."""

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._rid = registry._register(self)
        self._data: dict[K, V] = {}

    def get(self, key: K, offset: int = LATEST) -> V | None:
        if offset != LATEST:
            for changes in self._registry._changes_since(self._rid, offset):
                if key in changes:
                    old = changes[key]
                    return None if old is _ABSENT else old
        return self._data.get(key)

    def contains(self, key: K, offset: int = LATEST) -> bool:
        if offset == LATEST:
            return key in self._data
        for changes in self._registry._changes_since(self._rid, offset):
            if key in changes:
                return changes[key] is not _ABSENT
        return key in self._data

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def put(self, key: K, value: V) -> V | None:
        """Set ``key``; the previous value, ``None`` if there was none."""
        old = self._data.get(key)
        self._registry._record(self._rid, key, old if key in self._data else _ABSENT)
        self._data[key] = value
        return old

    def remove(self, key: K) -> V | None:
        """Remove ``key``; its value, ``None`` if there was none."""
        if key not in self._data:
            return None
        old = self._data.pop(key)
        self._registry._record(self._rid, key, old)
        return old

    def items(self, offset: int = LATEST) -> list[tuple[K, V]]:
        return list(self._view(offset).items())

    def keys(self, offset: int = LATEST) -> list[K]:
        return list(self._view(offset))

    def values(self, offset: int = LATEST) -> list[V]:
        return list(self._view(offset).values())

    def size(self, offset: int = LATEST) -> int:
        return len(self._data) if offset == LATEST else len(self._view(offset))

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[K]:
        """The current keys (a copy: the map may change while the caller iterates)."""
        return iter(list(self._data))

    def _view(self, offset: int) -> dict[K, V]:
        """The contents as of ``offset`` (the current dict itself for LATEST: callers copy)."""
        if offset == LATEST:
            return self._data
        view = dict(self._data)
        seen: set[object] = set()
        for changes in self._registry._changes_since(self._rid, offset):
            for key, old in changes.items():
                if key in seen:
                    continue
                seen.add(key)
                if old is _ABSENT:
                    view.pop(key, None)
                else:
                    view[key] = old
        return view

    def _restore(self, changes: dict[Any, Any]) -> None:
        for key, old in changes.items():
            if old is _ABSENT:
                self._data.pop(key, None)
            else:
                self._data[key] = old

    def _clear(self) -> None:
        self._data.clear()


class TimelineHashSet(Generic[T]):
    """A set whose contents can be read as of any snapshot (Kafka's ``TimelineHashSet``)."""

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._map: TimelineHashMap[T, bool] = TimelineHashMap(registry)

    def add(self, item: T) -> bool:
        """Add ``item``; whether it was new."""
        if item in self._map:
            return False
        self._map.put(item, True)
        return True

    def discard(self, item: T) -> bool:
        """Remove ``item``; whether it was there."""
        return self._map.remove(item) is not None

    def contains(self, item: T, offset: int = LATEST) -> bool:
        return self._map.contains(item, offset)

    def __contains__(self, item: object) -> bool:
        return item in self._map

    def members(self, offset: int = LATEST) -> frozenset[T]:
        return frozenset(self._map.keys(offset))

    def size(self, offset: int = LATEST) -> int:
        return self._map.size(offset)

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[T]:
        return iter(self._map)


class TimelineObject(_Revertable, Generic[T]):
    """One value that can be read as of any snapshot (Kafka's ``TimelineObject``); ``reset``
    puts the initial value back."""

    _KEY: Final = 0

    def __init__(self, registry: SnapshotRegistry, initial: T) -> None:
        self._registry = registry
        self._rid = registry._register(self)
        self._initial = initial
        self._value = initial

    def get(self, offset: int = LATEST) -> T:
        if offset != LATEST:
            for changes in self._registry._changes_since(self._rid, offset):
                old: T = changes[self._KEY]
                return old
        return self._value

    def set(self, value: T) -> None:
        self._registry._record(self._rid, self._KEY, self._value)
        self._value = value

    def update(self, change: Callable[[T], T]) -> T:
        """Set the value to ``change(value)``; the new value."""
        self.set(change(self._value))
        return self._value

    def _restore(self, changes: dict[Any, Any]) -> None:
        self._value = changes[self._KEY]

    def _clear(self) -> None:
        self._value = self._initial


class TimelineInteger(TimelineObject[int]):
    """An int that can be read as of any snapshot (Kafka's ``TimelineInteger`` and
    ``TimelineLong``: Python has one int)."""

    def __init__(self, registry: SnapshotRegistry, initial: int = 0) -> None:
        super().__init__(registry, initial)

    def increment(self, by: int = 1) -> int:
        return self.update(lambda value: value + by)

    def decrement(self, by: int = 1) -> int:
        return self.update(lambda value: value - by)
