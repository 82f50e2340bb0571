"""The registered brokers (Kafka's ``ClusterControlManager``).

A broker registers with an incarnation id (a fresh uuid per process start). A new incarnation
gets a new broker epoch, the offset its ``RegisterBrokerRecord`` takes, and starts fenced; the
same incarnation registering again amends its registration and keeps its epoch and state.
Fencing, unfencing and controlled shutdown are ``BrokerRegistrationChangeRecord``s that this
manager builds (:meth:`ClusterControlManager.fence_record` ...) and the operations of the
replication manager append, with the partition leadership moves they imply.

The registrations are timeline state; the brokers' sessions (:class:`BrokerHeartbeatManager`)
exist only while this controller is active (:meth:`ClusterControlManager.activate`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import msgspec

from kraft.controller.features import FeatureControlManager
from kraft.controller.heartbeats import (
    BROKER_SESSION_TIMEOUT_MS,
    BrokerHeartbeatManager,
    UsableBroker,
)
from kraft.controller.result import ControllerApiError, ControllerResult
from kraft.errors import IllegalStateError
from kraft.metadata.image import METADATA_VERSION_FEATURE, BrokerRegistration, MetadataReplayError
from kraft.metadata.records import (
    ApiMessageAndVersion,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    at_latest_version,
)
from kraft.metadata.timeline import LATEST, SnapshotRegistry, TimelineHashMap
from kraft.protocol.controller_messages import BrokerRegistrationRequest, RegistrationFeature
from kraft.protocol.errors import Errors

__all__ = ["BrokerRegistrationReply", "ClusterControlManager", "UsableBroker"]

_log = logging.getLogger(__name__)

#: The ``metadata.version`` a broker that names no range is assumed to support (Kafka's
#: ``MetadataVersion.MINIMUM_KRAFT_VERSION``, 3.0-IV1).
_MINIMUM_KRAFT_VERSION = 1
#: ``BrokerRegistrationChangeRecord.fenced`` (Kafka's ``BrokerRegistrationFencingChange``).
_FENCE, _NO_FENCING_CHANGE, _UNFENCE = 1, 0, -1
_FENCING_CHANGE = {_UNFENCE: False, _NO_FENCING_CHANGE: None, _FENCE: True}
#: ``BrokerRegistrationChangeRecord.in_controlled_shutdown``
#: (``BrokerRegistrationInControlledShutdownChange``).
_IN_CONTROLLED_SHUTDOWN = 1
_SHUTDOWN_CHANGE = {0: None, _IN_CONTROLLED_SHUTDOWN: True}
#: Kafka's ``DirectoryId.reserved``: uuids whose high 64 bits are 0 and low bits below 100.
_RESERVED_DIRECTORIES = 100


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    """What a successful registration answers (Kafka's ``BrokerRegistrationReply``)."""

    epoch: int


BrokerChangeRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerRegistrationChangeRecord
)


class ClusterControlManager:
    """The brokers' registrations, their offsets, and which broker owns which log directory."""

    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        cluster_id: str,
        feature_control: FeatureControlManager,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
    ) -> None:
        self.cluster_id = cluster_id
        self._features = feature_control
        self._session_timeout_ms = session_timeout_ms
        self._registrations: TimelineHashMap[int, BrokerRegistration] = TimelineHashMap(registry)
        self._register_offsets: TimelineHashMap[int, int] = TimelineHashMap(registry)
        self._directory_owner: TimelineHashMap[uuid.UUID, int] = TimelineHashMap(registry)
        self._heartbeats: BrokerHeartbeatManager | None = None

    # -- activation ------------------------------------------------------------

    def activate(self, now_ms: int) -> None:
        """This controller became active: every registered broker gets a fresh session from
        ``now_ms`` (Kafka's ``activate``)."""
        self._heartbeats = BrokerHeartbeatManager(self._session_timeout_ms)
        for registration in self._registrations.values():
            self._heartbeats.register(
                registration.id, registration.epoch, registration.fenced, now_ms
            )

    def deactivate(self) -> None:
        self._heartbeats = None

    def track_broker_heartbeat(self, broker_id: int, epoch: int, now_ms: int) -> None:
        """A heartbeat arrived (Kafka's ``trackBrokerHeartbeat``): called from any thread, it
        reads ``_heartbeats`` once, as the queue's thread may swap it; a controller that is not
        active records nothing (the queued heartbeat answers NOT_CONTROLLER)."""
        heartbeats = self._heartbeats
        if heartbeats is not None:
            heartbeats.record_contact(broker_id, epoch, now_ms)

    @property
    def heartbeats(self) -> BrokerHeartbeatManager:
        """The brokers' sessions; only an active controller has them."""
        if self._heartbeats is None:
            raise IllegalStateError("the cluster control manager is not active")
        return self._heartbeats

    # -- reads -----------------------------------------------------------------

    def registration(self, broker_id: int, offset: int = LATEST) -> BrokerRegistration | None:
        return self._registrations.get(broker_id, offset)

    def registrations(self, offset: int = LATEST) -> list[BrokerRegistration]:
        """Every registration, by broker id."""
        return sorted(self._registrations.values(offset), key=lambda r: r.id)

    def broker_ids(self, offset: int = LATEST) -> list[int]:
        return sorted(self._registrations.keys(offset))

    def register_broker_record_offset(self, broker_id: int) -> int | None:
        """The offset of ``broker_id``'s latest ``RegisterBrokerRecord``: a fenced broker is
        unfenced once it has replayed this far."""
        return self._register_offsets.get(broker_id)

    def is_unfenced(self, broker_id: int) -> bool:
        registration = self._registrations.get(broker_id)
        return registration is not None and not registration.fenced

    def in_controlled_shutdown(self, broker_id: int) -> bool:
        registration = self._registrations.get(broker_id)
        return registration is not None and registration.in_controlled_shutdown

    def is_active(self, broker_id: int) -> bool:
        """Registered, unfenced and not in controlled shutdown: may lead partitions."""
        registration = self._registrations.get(broker_id)
        return (
            registration is not None
            and not registration.fenced
            and not registration.in_controlled_shutdown
        )

    def fenced_broker_ids(self) -> set[int]:
        return {r.id for r in self._registrations.values() if r.fenced}

    def usable_brokers(self) -> Iterator[UsableBroker]:
        """The brokers replicas may go on: those not shutting down (Kafka's
        ``usableBrokers``, from the heartbeat manager, so only on the active controller)."""
        return self.heartbeats.usable_brokers(self._rack_of)

    def broker_supported_features(self) -> Iterator[tuple[int, Mapping[str, tuple[int, int]]]]:
        """Each broker's supported feature ranges, for ``FeatureControlManager``."""
        for registration in self._registrations.values():
            yield (
                registration.id,
                {
                    f.name: (f.min_supported_version, f.max_supported_version)
                    for f in registration.supported_features
                },
            )

    def check_broker_epoch(self, broker_id: int, epoch: int) -> None:
        """Raise STALE_BROKER_EPOCH unless ``broker_id`` is registered at ``epoch``."""
        registration = self._registrations.get(broker_id)
        if registration is None:
            raise ControllerApiError(
                Errors.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}"
            )
        if registration.epoch != epoch:
            raise ControllerApiError(
                Errors.STALE_BROKER_EPOCH,
                f"Expected broker epoch {registration.epoch}, but got broker epoch {epoch}",
            )

    # -- operations ------------------------------------------------------------

    def register_broker(
        self, request: BrokerRegistrationRequest, next_offset: int, now_ms: int
    ) -> ControllerResult[BrokerRegistrationReply]:
        """The record registering (or re-registering) a broker; ``next_offset`` is the offset
        that record will take, the new broker epoch. Refusals raise :class:`ControllerApiError`
        with Kafka's code: INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION (another
        incarnation still has a live session), BROKER_ID_NOT_REGISTERED (a ZooKeeper broker),
        INVALID_REGISTRATION (log directories), UNSUPPORTED_VERSION (features)."""
        heartbeats = self.heartbeats
        if request.cluster_id != self.cluster_id:
            raise ControllerApiError(
                Errors.INCONSISTENT_CLUSTER_ID,
                f"Expected cluster ID {self.cluster_id}, but got cluster ID {request.cluster_id}",
            )
        broker_id = request.broker_id
        existing = self._registrations.get(broker_id)
        if (
            existing is not None
            and existing.incarnation_id != request.incarnation_id
            and heartbeats.has_valid_session(broker_id, now_ms)
        ):
            raise ControllerApiError(
                Errors.DUPLICATE_BROKER_REGISTRATION,
                "Another broker is registered with that broker id.",
            )
        if request.is_migrating_zk_broker:
            raise ControllerApiError(
                Errors.BROKER_ID_NOT_REGISTERED,
                "Controller does not support registering ZK brokers.",
            )
        self._check_directories(broker_id, request.log_dirs)
        features = self._checked_features(request.features)
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=request.incarnation_id,
            broker_epoch=next_offset,
            end_points=tuple(
                BrokerEndpoint(
                    name=listener.name,
                    host=listener.host,
                    port=listener.port,
                    security_protocol=listener.security_protocol,
                )
                for listener in request.listeners
            ),
            features=features,
            rack=request.rack,
            log_dirs=request.log_dirs,
        )
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            record = msgspec.structs.replace(
                record,
                broker_epoch=existing.epoch,
                fenced=existing.fenced,
                in_controlled_shutdown=existing.in_controlled_shutdown,
            )
        return ControllerResult(
            [at_latest_version(record)],
            BrokerRegistrationReply(record.broker_epoch),
            is_atomic=True,
        )

    def _check_directories(self, broker_id: int, log_dirs: tuple[uuid.UUID, ...]) -> None:
        """Kafka's directory checks (KIP-858, on at 3.9-IV0): at least one, none reserved, no
        duplicates, none another broker owns."""
        reason = None
        if not log_dirs:
            reason = "No directories specified in request"
        elif any(d.int < _RESERVED_DIRECTORIES for d in log_dirs):
            reason = "Reserved directory ID in request"
        elif len(set(log_dirs)) != len(log_dirs):
            reason = "Duplicate directory ID in request"
        else:
            for directory in log_dirs:
                owner = self._directory_owner.get(directory)
                if owner is not None and owner != broker_id:
                    reason = f"Broker {owner} is already registered with directory {directory}"
                    break
        if reason is not None:
            raise ControllerApiError(Errors.INVALID_REGISTRATION, reason)

    def _checked_features(
        self, requested: tuple[RegistrationFeature, ...]
    ) -> tuple[BrokerFeature, ...]:
        """The broker's features as its record holds them, once each finalized feature is
        within the broker's range (Kafka's ``processRegistrationFeature``). A broker naming
        no ``metadata.version`` range supports only the first KRaft level; one not naming a
        finalized feature supports only level 0 of it."""
        finalized = self._features.finalized()
        ranges = {f.name: (f.min_supported_version, f.max_supported_version) for f in requested}
        ranges.setdefault(
            METADATA_VERSION_FEATURE, (_MINIMUM_KRAFT_VERSION, _MINIMUM_KRAFT_VERSION)
        )
        for name in finalized:
            ranges.setdefault(name, (0, 0))
        for name, (low, high) in ranges.items():
            default = _MINIMUM_KRAFT_VERSION if name == METADATA_VERSION_FEATURE else 0
            level = finalized.get(name, default)
            if not low <= level <= high:
                raise ControllerApiError(
                    Errors.UNSUPPORTED_VERSION,
                    f"Unable to register because the broker does not support finalized version "
                    f"{level} of {name}. The broker wants a version between {low} and {high}, "
                    f"inclusive.",
                )
        named = {f.name for f in requested}
        return tuple(
            BrokerFeature(name=name, min_supported_version=low, max_supported_version=high)
            for name, (low, high) in ranges.items()
            if name in named or name == METADATA_VERSION_FEATURE
        )

    # -- record builders (for the replication manager's broker operations) -----

    def fence_record(self, broker_id: int) -> ApiMessageAndVersion:
        """The record fencing ``broker_id`` (Kafka writes it at version 0)."""
        change = BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=self._registered(broker_id).epoch, fenced=_FENCE
        )
        return ApiMessageAndVersion(change, 0)

    def unfence_record(self, broker_id: int, broker_epoch: int) -> ApiMessageAndVersion:
        """The record unfencing ``broker_id`` at ``broker_epoch`` (version 0, as Kafka)."""
        change = BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=broker_epoch, fenced=_UNFENCE
        )
        return ApiMessageAndVersion(change, 0)

    def controlled_shutdown_record(
        self, broker_id: int, broker_epoch: int
    ) -> ApiMessageAndVersion | None:
        """The record putting ``broker_id`` in controlled shutdown (version 1, the first with
        the field), ``None`` if it already is."""
        if self.in_controlled_shutdown(broker_id):
            return None
        change = BrokerRegistrationChangeRecord(
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            in_controlled_shutdown=_IN_CONTROLLED_SHUTDOWN,
        )
        return ApiMessageAndVersion(change, 1)

    def unregister_record(self, broker_id: int) -> ApiMessageAndVersion:
        """The record unregistering ``broker_id`` at its current epoch; BROKER_ID_NOT_REGISTERED
        if it is not registered."""
        registration = self._registrations.get(broker_id)
        if registration is None:
            raise ControllerApiError(
                Errors.BROKER_ID_NOT_REGISTERED,
                f"Broker ID {broker_id} is not currently registered",
            )
        return at_latest_version(
            UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.epoch)
        )

    # -- replay ----------------------------------------------------------------

    def replay(self, record: BrokerChangeRecord, offset: int) -> None:
        match record:
            case RegisterBrokerRecord():
                self._replay_register(record, offset)
            case UnregisterBrokerRecord():
                registration = self._at_epoch(record.broker_id, record.broker_epoch, record, offset)
                self._register_offsets.remove(record.broker_id)
                self._move_directories(record.broker_id, registration.directories, ())
                self._registrations.remove(record.broker_id)
                if self._heartbeats is not None:
                    self._heartbeats.remove(record.broker_id)
            case FenceBrokerRecord():
                self._replay_change(record.id, record.epoch, record, offset, fenced=True)
            case UnfenceBrokerRecord():
                self._replay_change(record.id, record.epoch, record, offset, fenced=False)
            case BrokerRegistrationChangeRecord():
                if (
                    record.fenced not in _FENCING_CHANGE
                    or record.in_controlled_shutdown not in _SHUTDOWN_CHANGE
                ):
                    raise MetadataReplayError(
                        f"BrokerRegistrationChangeRecord at offset {offset}: unknown fenced "
                        f"{record.fenced} or in_controlled_shutdown "
                        f"{record.in_controlled_shutdown} value"
                    )
                self._replay_change(
                    record.broker_id,
                    record.broker_epoch,
                    record,
                    offset,
                    fenced=_FENCING_CHANGE[record.fenced],
                    in_controlled_shutdown=_SHUTDOWN_CHANGE[record.in_controlled_shutdown],
                    directories=record.log_dirs or None,
                )

    def _replay_register(self, record: RegisterBrokerRecord, offset: int) -> None:
        registration = BrokerRegistration.from_record(record)
        previous = self._registrations.put(record.broker_id, registration)
        self._register_offsets.put(record.broker_id, offset)
        self._move_directories(
            record.broker_id, previous.directories if previous else (), record.log_dirs
        )
        if self._heartbeats is not None:
            if previous is not None and previous.incarnation_id != record.incarnation_id:
                self._heartbeats.remove(record.broker_id)
            self._heartbeats.register(record.broker_id, record.broker_epoch, record.fenced)
        _log.info(
            "broker %d registered (incarnation %s, epoch %d, %s)",
            record.broker_id,
            record.incarnation_id,
            record.broker_epoch,
            "fenced" if record.fenced else "unfenced",
        )

    def _replay_change(
        self,
        broker_id: int,
        broker_epoch: int,
        record: BrokerChangeRecord,
        offset: int,
        *,
        fenced: bool | None,
        in_controlled_shutdown: bool | None = None,
        directories: tuple[uuid.UUID, ...] | None = None,
    ) -> None:
        current = self._at_epoch(broker_id, broker_epoch, record, offset)
        changed = msgspec.structs.replace(
            current,
            fenced=current.fenced if fenced is None else fenced,
            in_controlled_shutdown=(
                current.in_controlled_shutdown
                if in_controlled_shutdown is None
                else in_controlled_shutdown
            ),
            directories=current.directories if directories is None else directories,
        )
        if changed != current:
            self._registrations.put(broker_id, changed)
            self._move_directories(broker_id, current.directories, changed.directories)
        if self._heartbeats is not None:
            self._heartbeats.register(broker_id, changed.epoch, changed.fenced)

    def _at_epoch(
        self, broker_id: int, epoch: int, record: BrokerChangeRecord, offset: int
    ) -> BrokerRegistration:
        registration = self._registrations.get(broker_id)
        if registration is None or registration.epoch != epoch:
            raise MetadataReplayError(
                f"{type(record).__name__} at offset {offset}: no registration of broker "
                f"{broker_id} at epoch {epoch}"
            )
        return registration

    def _move_directories(
        self, broker_id: int, removed: tuple[uuid.UUID, ...], added: tuple[uuid.UUID, ...]
    ) -> None:
        for directory in removed:
            if directory not in added:
                self._directory_owner.remove(directory)
        for directory in added:
            self._directory_owner.put(directory, broker_id)

    def _registered(self, broker_id: int) -> BrokerRegistration:
        registration = self._registrations.get(broker_id)
        if registration is None:
            raise IllegalStateError(f"broker {broker_id} is not registered")
        return registration

    def _rack_of(self, broker_id: int) -> str | None:
        registration = self._registrations.get(broker_id)
        return registration.rack if registration is not None else None
