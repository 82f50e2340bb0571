"""The timeline collections against a model that copies the whole state at every snapshot:
reads at any live snapshot, and reverts, must equal the model's copies."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kraft.metadata.timeline import (
    LATEST,
    MissingSnapshotError,
    SnapshotRegistry,
    TimelineHashMap,
    TimelineHashSet,
    TimelineInteger,
    TimelineObject,
)

KEYS = st.integers(0, 6)

Model = tuple[dict[int, str], frozenset[int], int, str]


class TimelineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.registry = SnapshotRegistry()
        self.map: TimelineHashMap[int, str] = TimelineHashMap(self.registry)
        self.set: TimelineHashSet[int] = TimelineHashSet(self.registry)
        self.integer = TimelineInteger(self.registry)
        self.object: TimelineObject[str] = TimelineObject(self.registry, "initial")
        self.model_map: dict[int, str] = {}
        self.model_set: set[int] = set()
        self.model_int = 0
        self.model_obj = "initial"
        self.snapshots: dict[int, Model] = {}
        self.next_offset = -1  # the controller snapshots -1, the empty log, first

    def current(self) -> Model:
        return (dict(self.model_map), frozenset(self.model_set), self.model_int, self.model_obj)

    @rule(key=KEYS, value=st.text(max_size=2))
    def put(self, key: int, value: str) -> None:
        assert self.map.put(key, value) == self.model_map.get(key)
        self.model_map[key] = value

    @rule(key=KEYS)
    def remove(self, key: int) -> None:
        assert self.map.remove(key) == self.model_map.pop(key, None)

    @rule(item=KEYS)
    def add(self, item: int) -> None:
        assert self.set.add(item) == (item not in self.model_set)
        self.model_set.add(item)

    @rule(item=KEYS)
    def discard(self, item: int) -> None:
        assert self.set.discard(item) == (item in self.model_set)
        self.model_set.discard(item)

    @rule(by=st.integers(-3, 3))
    def increment(self, by: int) -> None:
        self.model_int += by
        assert self.integer.increment(by) == self.model_int

    @rule(value=st.text(max_size=2))
    def set_object(self, value: str) -> None:
        self.object.set(value)
        self.model_obj = value

    @rule(gap=st.integers(0, 3))
    def snapshot(self, gap: int) -> None:
        offset = self.next_offset + gap
        self.registry.get_or_create_snapshot(offset)
        # Taking the newest snapshot again changes nothing (Kafka's idempotentCreateSnapshot).
        if offset not in self.snapshots:
            self.snapshots[offset] = self.current()
        self.next_offset = offset

    @precondition(lambda self: bool(self.snapshots))
    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.snapshots)))
        self.registry.revert_to_snapshot(offset)
        self.model_map, model_set, self.model_int, self.model_obj = self.snapshots[offset]
        self.model_map = dict(self.model_map)
        self.model_set = set(model_set)
        self.snapshots = {o: m for o, m in self.snapshots.items() if o <= offset}
        self.next_offset = offset

    @precondition(lambda self: bool(self.snapshots))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.snapshots)))
        self.registry.delete_snapshot(offset)
        del self.snapshots[offset]

    @rule(gap=st.integers(-1, 3))
    def delete_up_to(self, gap: int) -> None:
        offset = self.next_offset + gap
        self.registry.delete_snapshots_up_to(offset)
        self.snapshots = {o: m for o, m in self.snapshots.items() if o >= offset}

    @rule()
    def reset(self) -> None:
        self.registry.reset()
        self.model_map, self.model_set, self.model_int, self.model_obj = {}, set(), 0, "initial"
        self.snapshots.clear()

    def read(self, offset: int) -> Model:
        items = dict(self.map.items(offset))
        assert dict(zip(self.map.keys(offset), self.map.values(offset), strict=True)) == items
        assert self.map.size(offset) == len(items)
        for key in range(7):
            assert self.map.get(key, offset) == items.get(key)
            assert self.map.contains(key, offset) == (key in items)
            assert self.set.contains(key, offset) == (key in self.set.members(offset))
        assert self.set.size(offset) == len(self.set.members(offset))
        return (items, self.set.members(offset), self.integer.get(offset), self.object.get(offset))

    @invariant()
    def reads_equal_the_model(self) -> None:
        assert self.read(LATEST) == self.current()
        assert dict(self.map.items()) == self.model_map
        assert set(self.map) == set(self.model_map) and len(self.map) == len(self.model_map)
        assert set(self.set) == self.model_set and len(self.set) == len(self.model_set)
        for offset, model in self.snapshots.items():
            assert self.read(offset) == model
        assert self.registry.offsets() == sorted(self.snapshots)
        assert self.registry.latest_offset() == (max(self.snapshots) if self.snapshots else None)


TimelineMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40)
test_timeline_matches_model = TimelineMachine.TestCase


def test_read_at_a_missing_snapshot_is_a_typed_error() -> None:
    registry = SnapshotRegistry()
    timeline: TimelineHashMap[str, int] = TimelineHashMap(registry)
    registry.get_or_create_snapshot(5)
    timeline.put("a", 1)
    assert timeline.get("a", 5) is None
    with pytest.raises(MissingSnapshotError, match="offset 4"):
        timeline.get("a", 4)
    with pytest.raises(MissingSnapshotError):
        registry.revert_to_snapshot(6)
    with pytest.raises(MissingSnapshotError, match="newest snapshot is at 5"):
        registry.get_or_create_snapshot(3)


def test_snapshot_at_minus_one_is_not_latest() -> None:
    # The controller snapshots offset -1 (an empty log); reading there is not a LATEST read.
    registry = SnapshotRegistry()
    value = TimelineInteger(registry)
    registry.get_or_create_snapshot(-1)
    value.set(7)
    assert value.get(-1) == 0
    assert value.get() == 7
    registry.revert_to_snapshot(-1)
    assert value.get() == 0
