"""ProducerIdControlManager: blocks of 1000 that never overlap, for registered brokers only."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.common.limits import INT64_MAX
from kraft.controller.cluster_control import ClusterControlManager
from kraft.controller.features import FeatureControlManager
from kraft.controller.producer_ids import ProducerIdControlManager, ProducerIdsBlock
from kraft.controller.result import ControllerApiError
from kraft.metadata.image import MetadataReplayError
from kraft.metadata.records import ProducerIdsRecord, RegisterBrokerRecord
from kraft.metadata.timeline import SnapshotRegistry
from kraft.protocol.errors import Errors


class Controller:
    def __init__(self) -> None:
        self.registry = SnapshotRegistry()
        features = FeatureControlManager(self.registry)
        self.cluster = ClusterControlManager(
            self.registry, cluster_id="c", feature_control=features
        )
        self.producer_ids = ProducerIdControlManager(self.registry, self.cluster)
        for broker_id in (1, 2):
            self.cluster.replay(
                RegisterBrokerRecord(
                    broker_id=broker_id,
                    broker_epoch=100 + broker_id,
                    incarnation_id=uuid.UUID(int=broker_id),
                ),
                offset=broker_id,
            )
        self.offset = 2
        self.registry.get_or_create_snapshot(self.offset)

    def allocate(self, broker_id: int) -> ProducerIdsBlock:
        result = self.producer_ids.generate_next_producer_id(broker_id, 100 + broker_id)
        [record] = result.records
        assert isinstance(record.message, ProducerIdsRecord)
        self.offset += 1
        self.producer_ids.replay(record.message, self.offset)
        self.registry.get_or_create_snapshot(self.offset)
        return result.response


def test_first_blocks() -> None:
    controller = Controller()
    first = controller.producer_ids.generate_next_producer_id(1, 101)
    assert first.response == ProducerIdsBlock(1, 0, 1000)
    assert [r.message for r in first.records] == [
        ProducerIdsRecord(broker_id=1, broker_epoch=101, next_producer_id=1000)
    ]
    # Generating changes nothing until the record is replayed.
    assert controller.producer_ids.next_producer_id() == 0
    assert controller.allocate(1) == ProducerIdsBlock(1, 0)
    assert controller.allocate(2) == ProducerIdsBlock(2, 1000)
    assert controller.allocate(1).last_producer_id == 2999


@given(
    brokers=st.lists(st.sampled_from([1, 2]), min_size=1, max_size=30), revert_at=st.integers(0, 30)
)
def test_blocks_never_overlap_across_reverts(brokers: list[int], revert_at: int) -> None:
    controller = Controller()
    handed_out: list[ProducerIdsBlock] = []
    for i, broker_id in enumerate(brokers):
        if i == revert_at:
            # An uncommitted block is undone with the rest (a renounce); the ids return.
            committed = controller.offset
            controller.allocate(broker_id)
            controller.registry.revert_to_snapshot(committed)
        handed_out.append(controller.allocate(broker_id))
    ids = [set(range(b.first_producer_id, b.next_block_first_id)) for b in handed_out]
    assert sum(map(len, ids)) == len(set().union(*ids)) == 1000 * len(brokers)


def test_unknown_broker_or_stale_epoch() -> None:
    controller = Controller()
    for broker_id, epoch in [(3, 103), (1, 99)]:
        with pytest.raises(ControllerApiError) as raised:
            controller.producer_ids.generate_next_producer_id(broker_id, epoch)
        assert raised.value.api_error.error is Errors.STALE_BROKER_EPOCH


def test_replay_never_goes_back() -> None:
    controller = Controller()
    controller.allocate(1)
    with pytest.raises(MetadataReplayError, match="not above the current 1000"):
        controller.producer_ids.replay(
            ProducerIdsRecord(broker_id=1, broker_epoch=101, next_producer_id=1000), 9
        )


def test_exhausted_ids() -> None:
    controller = Controller()
    last_block = INT64_MAX - 1000
    controller.producer_ids.replay(
        ProducerIdsRecord(broker_id=1, broker_epoch=101, next_producer_id=last_block), 1
    )
    assert controller.allocate(2).first_producer_id == last_block
    with pytest.raises(ControllerApiError) as raised:
        controller.producer_ids.generate_next_producer_id(1, 101)
    assert raised.value.api_error.error is Errors.UNKNOWN_SERVER_ERROR
