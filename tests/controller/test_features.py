"""FeatureControlManager: finalizing levels with Kafka's rules, all or none, through replay."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from kraft.controller.features import FeatureControlManager, UpgradeType
from kraft.controller.result import ApiError, ControllerResult
from kraft.metadata.image import MetadataReplayError
from kraft.metadata.records import METADATA_VERSION, ApiMessageAndVersion, FeatureLevelRecord
from kraft.metadata.timeline import SnapshotRegistry
from kraft.protocol.errors import Errors

MV = "metadata.version"
TEST = "test.feature.version"


class Controller:
    """Replays each result's records at the next offsets, with a snapshot at each."""

    def __init__(self, brokers: Iterable[tuple[int, Mapping[str, tuple[int, int]]]] = ()) -> None:
        self.registry = SnapshotRegistry()
        self.brokers = list(brokers)
        self.features = FeatureControlManager(
            self.registry,
            supported={MV: (METADATA_VERSION - 2, METADATA_VERSION), TEST: (1, 5)},
            broker_features=lambda: self.brokers,
        )
        self.offset = -1
        self.registry.get_or_create_snapshot(self.offset)
        self.apply(self.features.bootstrap_records())

    def apply(self, records: list[ApiMessageAndVersion]) -> None:
        for record in records:
            self.offset += 1
            assert isinstance(record.message, FeatureLevelRecord)
            self.features.replay(record.message, self.offset)
            self.registry.get_or_create_snapshot(self.offset)

    def update(
        self,
        updates: Mapping[str, int],
        types: Mapping[str, UpgradeType] | None = None,
        validate_only: bool = False,
    ) -> ControllerResult[ApiError]:
        before = self.features.finalized()
        result = self.features.update_features(updates, types or {}, validate_only)
        assert self.features.finalized() == before  # an operation changes nothing
        self.apply(result.records)
        return result


def test_bootstrap_finalizes_metadata_version_21() -> None:
    registry = SnapshotRegistry()
    features = FeatureControlManager(registry)
    assert features.metadata_version() == 0 and features.finalized() == {}
    [record] = features.bootstrap_records()
    assert record == ApiMessageAndVersion(FeatureLevelRecord(name=MV, feature_level=21), 0)
    features.replay(record.message, 0)  # type: ignore[arg-type]
    assert features.metadata_version() == 21 == METADATA_VERSION
    assert features.finalized() == {MV: 21}


def test_update_writes_one_atomic_batch_and_replay_applies_it() -> None:
    controller = Controller()
    result = controller.update({TEST: 2})
    assert result.response == ApiError.NONE and result.is_atomic
    assert [r.message for r in result.records] == [FeatureLevelRecord(name=TEST, feature_level=2)]
    assert controller.features.finalized() == {MV: METADATA_VERSION, TEST: 2}
    # Level 0 removes the feature.
    controller.update({TEST: 0}, {TEST: UpgradeType.SAFE_DOWNGRADE})
    assert controller.features.finalized() == {MV: METADATA_VERSION}


def test_validate_only_writes_nothing() -> None:
    controller = Controller()
    result = controller.update({TEST: 3}, validate_only=True)
    assert result.response == ApiError.NONE and result.records == []
    assert TEST not in controller.features.finalized()


@pytest.mark.parametrize(
    ("updates", "types", "reason"),
    [
        ({TEST: -1}, {}, "cannot be less than 0"),
        ({TEST: 6}, {}, "supports levels 1 to 5"),
        ({"unknown.feature": 1}, {}, "supports levels 0 to 0"),
        ({TEST: 2}, {TEST: UpgradeType.UNKNOWN}, "does not support the given upgrade type"),
        ({TEST: 4}, {TEST: UpgradeType.SAFE_DOWNGRADE}, "Can't downgrade to a newer version"),
        ({TEST: 1}, {}, "without setting the upgrade type"),
        ({MV: METADATA_VERSION + 1}, {}, "supports levels 19 to 21"),
        ({MV: METADATA_VERSION - 1}, {MV: UpgradeType.SAFE_DOWNGRADE}, "might delete metadata"),
        ({MV: METADATA_VERSION - 1}, {MV: UpgradeType.UNSAFE_DOWNGRADE}, "Unsafe metadata"),
        ({MV: 0}, {MV: UpgradeType.SAFE_DOWNGRADE}, "supports levels 19 to 21"),
    ],
)
def test_refusals_are_invalid_update_version_and_write_nothing(
    updates: dict[str, int], types: dict[str, UpgradeType], reason: str
) -> None:
    controller = Controller()
    controller.update({TEST: 3})
    before = controller.features.finalized()
    result = controller.update(updates, types)
    assert result.response.error is Errors.INVALID_UPDATE_VERSION
    assert reason in (result.response.message or "")
    assert result.records == [] and controller.features.finalized() == before


def test_one_refused_update_refuses_the_whole_request() -> None:
    controller = Controller()
    result = controller.update({TEST: 2, MV: METADATA_VERSION + 5})
    assert result.response.error is Errors.INVALID_UPDATE_VERSION and result.records == []


def test_every_registered_broker_must_support_the_level() -> None:
    controller = Controller(brokers=[(1, {TEST: (1, 5)}), (2, {TEST: (1, 2)})])
    assert controller.update({TEST: 2}).response == ApiError.NONE
    refused = controller.update({TEST: 3}).response
    assert refused.error is Errors.INVALID_UPDATE_VERSION
    assert "Broker 2 only supports levels 1 to 2" in (refused.message or "")
    # A broker that does not name a feature supports only its level 0.
    controller.brokers.append((3, {}))
    assert controller.update({TEST: 1}, {TEST: UpgradeType.SAFE_DOWNGRADE}).response.error is (
        Errors.INVALID_UPDATE_VERSION
    )


def test_reads_at_an_offset_and_revert() -> None:
    controller = Controller()
    committed = controller.offset
    controller.update({TEST: 2})
    assert controller.features.finalized(committed) == {MV: METADATA_VERSION}
    assert controller.features.metadata_version(-1) == 0
    controller.registry.revert_to_snapshot(committed)
    assert controller.features.finalized() == {MV: METADATA_VERSION}


def test_replay_of_an_unsupported_level_is_refused() -> None:
    controller = Controller()
    with pytest.raises(MetadataReplayError, match="supports only levels 1 to 5"):
        controller.features.replay(FeatureLevelRecord(name=TEST, feature_level=9), 5)
    with pytest.raises(MetadataReplayError):
        controller.features.replay(FeatureLevelRecord(name=MV, feature_level=0), 5)
