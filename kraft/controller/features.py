"""The finalized feature levels, ``metadata.version`` first (Kafka's ``FeatureControlManager``).

kraft's controller writes every record at the versions of ``metadata.version`` 3.9-IV0 (level
21, :data:`~kraft.metadata.records.METADATA_VERSION`), so by default it supports that level
only: an update to any other level is refused as unsupported, and so is a ``metadata.version``
downgrade (Kafka refuses the downgrades that would lose metadata; kraft cannot write the older
record versions at all). Other features are supported where the caller says so
(``supported``); each registered broker must support a level before it is finalized.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping

from kraft.controller.result import ApiError, ControllerResult
from kraft.metadata.image import METADATA_VERSION_FEATURE, MetadataReplayError
from kraft.metadata.records import (
    METADATA_VERSION,
    ApiMessageAndVersion,
    FeatureLevelRecord,
    at_latest_version,
)
from kraft.metadata.timeline import LATEST, SnapshotRegistry, TimelineHashMap, TimelineInteger
from kraft.protocol.errors import Errors

__all__ = [
    "KRAFT_SUPPORTED_FEATURES",
    "BrokerFeatureRanges",
    "FeatureControlManager",
    "UpgradeType",
]

_log = logging.getLogger(__name__)

#: The feature levels kraft's controller supports: (min, max) by feature name.
KRAFT_SUPPORTED_FEATURES: Mapping[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (METADATA_VERSION, METADATA_VERSION)
}

#: Each registered broker's id and the (min, max) level it supports of each feature it names.
BrokerFeatureRanges = Callable[[], Iterable[tuple[int, Mapping[str, tuple[int, int]]]]]


class UpgradeType(enum.IntEnum):
    """UpdateFeatures' ``UpgradeType`` (Kafka's ``FeatureUpdate.UpgradeType``)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def _no_brokers() -> Iterable[tuple[int, Mapping[str, tuple[int, int]]]]:
    return ()


class FeatureControlManager:
    """The finalized level of each feature, in timeline collections.

    ``metadata_version()`` is 0 until a ``FeatureLevelRecord`` for ``metadata.version`` is
    replayed (the controller writes :meth:`bootstrap_records` on an empty log).
    ``broker_features`` gives the registered brokers' supported ranges (Kafka's
    ``ClusterFeatureSupportDescriber``; the controller wires it to
    ``ClusterControlManager.broker_supported_features``).
    """

    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        supported: Mapping[str, tuple[int, int]] = KRAFT_SUPPORTED_FEATURES,
        broker_features: BrokerFeatureRanges = _no_brokers,
    ) -> None:
        self._supported = dict(supported)
        self._broker_features = broker_features
        self._metadata_version = TimelineInteger(registry)
        self._finalized: TimelineHashMap[str, int] = TimelineHashMap(registry)

    def bootstrap_records(self) -> list[ApiMessageAndVersion]:
        """The records that start a cluster's log: ``metadata.version`` at its highest
        supported level (Kafka's ``BootstrapMetadata``)."""
        level = self._supported[METADATA_VERSION_FEATURE][1]
        return [
            at_latest_version(
                FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=level)
            )
        ]

    def metadata_version(self, offset: int = LATEST) -> int:
        return self._metadata_version.get(offset)

    def finalized(self, offset: int = LATEST) -> dict[str, int]:
        """Every finalized feature and its level, ``metadata.version`` included once set."""
        levels = dict(self._finalized.items(offset))
        metadata_version = self._metadata_version.get(offset)
        if metadata_version:
            levels[METADATA_VERSION_FEATURE] = metadata_version
        return levels

    def supported_range(self, name: str) -> tuple[int, int]:
        """The levels of ``name`` this controller supports; (0, 0) for a feature it does not
        know (Kafka's ``QuorumFeatures.DISABLED``: level 0 means "off")."""
        return self._supported.get(name, (0, 0))

    # -- operations ------------------------------------------------------------

    def update_features(
        self,
        updates: Mapping[str, int],
        upgrade_types: Mapping[str, UpgradeType],
        validate_only: bool,
    ) -> ControllerResult[ApiError]:
        """Finalize each feature of ``updates`` at its level (0 removes it), all or none: the
        first refused update is the answer (INVALID_UPDATE_VERSION), and no record is written.
        Upgrade types default to UPGRADE."""
        records: list[ApiMessageAndVersion] = []
        for name, level in updates.items():
            upgrade_type = upgrade_types.get(name, UpgradeType.UPGRADE)
            reason = self._refusal(name, level, upgrade_type)
            if reason is not None:
                message = f"Invalid update version {level} for feature {name}. {reason}"
                _log.debug("%s", message)  # the response carries it to the caller
                return ControllerResult([], ApiError(Errors.INVALID_UPDATE_VERSION, message))
            records.append(at_latest_version(FeatureLevelRecord(name=name, feature_level=level)))
        return ControllerResult([] if validate_only else records, ApiError.NONE, is_atomic=True)

    def _refusal(self, name: str, level: int, upgrade_type: UpgradeType) -> str | None:
        """Why ``name`` may not go to ``level`` (Kafka's ``updateFeature`` checks, in its
        order), or ``None``."""
        if upgrade_type is UpgradeType.UNKNOWN:
            return "The controller does not support the given upgrade type."
        if level < 0:
            return "A feature version cannot be less than 0."
        return self._unsupported(name, level) or self._wrong_direction(name, level, upgrade_type)

    def _unsupported(self, name: str, level: int) -> str | None:
        """Why this controller or a registered broker cannot run ``name`` at ``level``."""
        if not self._supports(name, level):
            low, high = self.supported_range(name)
            return f"The controller supports levels {low} to {high} of {name}."
        for broker_id, ranges in self._broker_features():
            low, high = ranges.get(name, (0, 0))
            if not low <= level <= high:
                return f"Broker {broker_id} only supports levels {low} to {high}."
        return None

    def _wrong_direction(self, name: str, level: int, upgrade_type: UpgradeType) -> str | None:
        """Why ``upgrade_type`` does not allow moving ``name`` to ``level``."""
        current = self.finalized().get(name, 0)
        if level < current and upgrade_type is UpgradeType.UPGRADE:
            return (
                "Can't downgrade the version of this feature without setting the upgrade "
                "type to either safe or unsafe downgrade."
            )
        if level > current and upgrade_type is not UpgradeType.UPGRADE:
            return "Can't downgrade to a newer version."
        if name == METADATA_VERSION_FEATURE and level < current:
            if upgrade_type is UpgradeType.UNSAFE_DOWNGRADE:
                return "Unsafe metadata downgrade is not supported in this version."
            return (
                "Refusing to perform the requested downgrade because it might delete "
                "metadata information."
            )
        return None

    def _supports(self, name: str, level: int) -> bool:
        """Level 0 turns a feature off, which is always possible but for metadata.version."""
        low, high = self.supported_range(name)
        return low <= level <= high or (level == 0 and name != METADATA_VERSION_FEATURE)

    # -- replay ----------------------------------------------------------------

    def replay(self, record: FeatureLevelRecord, offset: int) -> None:
        """A finalized level; level 0 removes a feature. A level this controller does not
        support cannot be replayed (Kafka's replay throws too)."""
        level = record.feature_level
        if not self._supports(record.name, level):
            low, high = self.supported_range(record.name)
            raise MetadataReplayError(
                f"FeatureLevelRecord at offset {offset} sets {record.name} to {level}, but this "
                f"controller supports only levels {low} to {high}"
            )
        if record.name == METADATA_VERSION_FEATURE:
            self._metadata_version.set(level)
        elif level == 0:
            self._finalized.remove(record.name)
        else:
            self._finalized.put(record.name, level)
