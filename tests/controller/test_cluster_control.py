"""ClusterControlManager: broker registration with Kafka's rules and codes, registration changes
through replay, and the record builders the replication manager appends."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.controller.cluster_control import BrokerRegistrationReply, ClusterControlManager
from kraft.controller.features import FeatureControlManager
from kraft.controller.heartbeats import UsableBroker
from kraft.controller.result import ControllerApiError, ControllerResult
from kraft.errors import IllegalStateError
from kraft.metadata.codec import decode_record, encode_record
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage, MetadataProvenance, MetadataReplayError
from kraft.metadata.records import (
    METADATA_VERSION,
    ApiMessageAndVersion,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraft.metadata.timeline import SnapshotRegistry
from kraft.protocol.controller_messages import (
    BrokerRegistrationRequest,
    Listener,
    RegistrationFeature,
)
from kraft.protocol.errors import Errors

CLUSTER = "kraft-cluster-1"
MV = "metadata.version"
SUPPORTS_21 = (RegistrationFeature(MV, 19, METADATA_VERSION),)


def request(
    broker_id: int,
    incarnation: int = 1,
    *,
    log_dirs: tuple[uuid.UUID, ...] | None = None,
    features: tuple[RegistrationFeature, ...] = SUPPORTS_21,
    cluster_id: str = CLUSTER,
    rack: str | None = None,
) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=uuid.UUID(int=(broker_id << 32) + incarnation + 1000),
        listeners=(Listener("PLAINTEXT", f"broker{broker_id}", 9092),),
        features=features,
        rack=rack,
        log_dirs=log_dirs if log_dirs is not None else (uuid.UUID(int=(broker_id << 64) + 7),),
    )


class Controller:
    def __init__(self, supported: dict[str, tuple[int, int]] | None = None) -> None:
        self.registry = SnapshotRegistry()
        self.features = FeatureControlManager(
            self.registry, supported={MV: (METADATA_VERSION, METADATA_VERSION), **(supported or {})}
        )
        self.cluster = ClusterControlManager(
            self.registry, cluster_id=CLUSTER, feature_control=self.features
        )
        self.offset = -1
        self.registry.get_or_create_snapshot(-1)
        self.cluster.activate(now_ms=0)
        self.apply(self.features.bootstrap_records())

    def apply(self, records: list[ApiMessageAndVersion]) -> None:
        for record in records:
            self.offset += 1
            match record.message:
                case FeatureLevelRecord() as feature:
                    self.features.replay(feature, self.offset)
                case message:
                    self.cluster.replay(message, self.offset)  # type: ignore[arg-type]
            self.registry.get_or_create_snapshot(self.offset)

    def register(
        self, req: BrokerRegistrationRequest, now_ms: int = 0
    ) -> ControllerResult[BrokerRegistrationReply]:
        before = self.cluster.registrations()
        result = self.cluster.register_broker(req, self.offset + 1, now_ms)
        assert self.cluster.registrations() == before  # only replay changes the state
        self.apply(result.records)
        return result

    def refusal(self, req: BrokerRegistrationRequest, now_ms: int = 0) -> ControllerApiError:
        with pytest.raises(ControllerApiError) as raised:
            self.cluster.register_broker(req, self.offset + 1, now_ms)
        return raised.value


def test_a_new_broker_is_registered_fenced_at_the_offset_of_its_record() -> None:
    controller = Controller()
    result = controller.register(request(1, rack="r1"))
    assert result.is_atomic and result.response == BrokerRegistrationReply(epoch=1)
    [record] = result.records
    assert record.version == 3  # RegisterBrokerRecord v3 at 3.9-IV0
    assert record.message == RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=request(1).incarnation_id,
        broker_epoch=1,
        end_points=(BrokerEndpoint(name="PLAINTEXT", host="broker1", port=9092),),
        features=(BrokerFeature(name=MV, min_supported_version=19, max_supported_version=21),),
        rack="r1",
        fenced=True,
        log_dirs=request(1).log_dirs,
    )
    registration = controller.cluster.registration(1)
    assert registration is not None and registration.epoch == 1 and registration.fenced
    assert controller.cluster.register_broker_record_offset(1) == 1
    assert controller.cluster.broker_ids() == [1] and not controller.cluster.is_unfenced(1)
    assert controller.cluster.registration(1, offset=0) is None  # before its record


def test_the_same_incarnation_amends_and_keeps_epoch_and_state() -> None:
    controller = Controller()
    controller.register(request(1))
    controller.apply([controller.cluster.unfence_record(1, 1)])
    assert controller.cluster.is_unfenced(1)
    amended = controller.register(request(1, rack="r9"))
    assert amended.response.epoch == 1
    registration = controller.cluster.registration(1)
    assert registration is not None
    assert (registration.epoch, registration.fenced, registration.rack) == (1, False, "r9")
    assert controller.cluster.register_broker_record_offset(1) == controller.offset


def test_a_new_incarnation_waits_for_the_old_session_to_expire() -> None:
    controller = Controller()
    controller.register(request(1))
    controller.apply([controller.cluster.unfence_record(1, 1)])
    controller.cluster.heartbeats.touch(1, fenced=False, metadata_offset=2, now_ms=1000)
    refused = controller.refusal(request(1, incarnation=2), now_ms=10_000)
    assert refused.api_error.error is Errors.DUPLICATE_BROKER_REGISTRATION
    # 9 s after its last heartbeat the old incarnation's session is over.
    result = controller.register(request(1, incarnation=2), now_ms=10_001)
    assert result.response.epoch == controller.offset
    registration = controller.cluster.registration(1)
    assert registration is not None and registration.fenced and registration.epoch > 1


def test_registration_refusals_carry_kafkas_codes() -> None:
    controller = Controller()
    controller.register(request(1))
    cases = [
        (request(2, cluster_id="other"), Errors.INCONSISTENT_CLUSTER_ID, "Expected cluster ID"),
        (request(2, log_dirs=()), Errors.INVALID_REGISTRATION, "No directories"),
        (request(2, log_dirs=(uuid.UUID(int=2),)), Errors.INVALID_REGISTRATION, "Reserved"),
        (
            request(2, log_dirs=(uuid.UUID(int=5000),) * 2),
            Errors.INVALID_REGISTRATION,
            "Duplicate directory",
        ),
        (
            request(2, log_dirs=request(1).log_dirs),
            Errors.INVALID_REGISTRATION,
            "Broker 1 is already registered with directory",
        ),
        (
            request(2, features=(RegistrationFeature(MV, 1, 20),)),
            Errors.UNSUPPORTED_VERSION,
            "does not support finalized version 21 of metadata.version",
        ),
        # A broker naming no metadata.version range supports only level 1.
        (request(2, features=()), Errors.UNSUPPORTED_VERSION, "between 1 and 1"),
    ]
    for req, error, message in cases:
        refused = controller.refusal(req)
        assert refused.api_error.error is error, req
        assert message in (refused.api_error.message or ""), refused


def test_a_finalized_feature_the_broker_does_not_name_must_be_off() -> None:
    controller = Controller(supported={"test.feature": (1, 3)})
    controller.apply(
        [ApiMessageAndVersion(FeatureLevelRecord(name="test.feature", feature_level=2), 0)]
    )
    refused = controller.refusal(request(1))
    assert refused.api_error.error is Errors.UNSUPPORTED_VERSION
    assert "finalized version 2 of test.feature" in (refused.api_error.message or "")
    with_feature = request(1, features=(*SUPPORTS_21, RegistrationFeature("test.feature", 1, 3)))
    assert controller.register(with_feature).response.epoch == controller.offset


def test_check_broker_epoch() -> None:
    controller = Controller()
    controller.register(request(1))
    controller.cluster.check_broker_epoch(1, 1)
    for broker_id, epoch, message in [(1, 7, "Expected broker epoch 1"), (3, 1, "No broker")]:
        with pytest.raises(ControllerApiError, match=message) as raised:
            controller.cluster.check_broker_epoch(broker_id, epoch)
        assert raised.value.api_error.error is Errors.STALE_BROKER_EPOCH


def test_fence_unfence_and_controlled_shutdown_records() -> None:
    controller = Controller()
    controller.register(request(1))
    unfence = controller.cluster.unfence_record(1, 1)
    assert unfence == ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=-1), 0
    )
    controller.apply([unfence])
    assert controller.cluster.is_unfenced(1) and controller.cluster.is_active(1)
    assert controller.cluster.heartbeats.current_state(1).name == "UNFENCED"
    shutdown = controller.cluster.controlled_shutdown_record(1, 1)
    assert shutdown == ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, in_controlled_shutdown=1), 1
    )
    controller.apply([shutdown])
    assert controller.cluster.in_controlled_shutdown(1) and not controller.cluster.is_active(1)
    assert controller.cluster.controlled_shutdown_record(1, 1) is None
    fence = controller.cluster.fence_record(1)
    assert fence.message == BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=1)
    controller.apply([fence])
    assert controller.cluster.fenced_broker_ids() == {1}


def test_the_older_fence_and_unfence_records_replay_too() -> None:
    controller = Controller()
    controller.register(request(1))
    controller.apply([ApiMessageAndVersion(UnfenceBrokerRecord(id=1, epoch=1), 0)])
    assert controller.cluster.is_unfenced(1)
    controller.apply([ApiMessageAndVersion(FenceBrokerRecord(id=1, epoch=1), 0)])
    assert not controller.cluster.is_unfenced(1)


def test_changes_at_another_epoch_or_with_unknown_values_cannot_replay() -> None:
    controller = Controller()
    controller.register(request(1))
    bad: list[BrokerRegistrationChangeRecord | UnregisterBrokerRecord] = [
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=-1),
        BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=1, fenced=-1),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, fenced=3),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, in_controlled_shutdown=2),
        UnregisterBrokerRecord(broker_id=1, broker_epoch=9),
    ]
    for record in bad:
        with pytest.raises(MetadataReplayError):
            controller.cluster.replay(record, 99)
    assert controller.cluster.registration(1) is not None


def test_unregister_frees_the_id_and_the_directories() -> None:
    controller = Controller()
    controller.register(request(1))
    with pytest.raises(ControllerApiError) as raised:
        controller.cluster.unregister_record(2)
    assert raised.value.api_error.error is Errors.BROKER_ID_NOT_REGISTERED
    controller.apply([controller.cluster.unregister_record(1)])
    assert controller.cluster.registration(1) is None
    assert controller.cluster.register_broker_record_offset(1) is None
    controller.register(request(2, log_dirs=request(1).log_dirs))
    assert controller.cluster.broker_ids() == [2]


def test_directory_change_moves_ownership() -> None:
    controller = Controller()
    controller.register(request(1))
    new_dir = uuid.UUID(int=9999)
    controller.apply(
        [
            ApiMessageAndVersion(
                BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=1, log_dirs=(new_dir,)), 2
            )
        ]
    )
    registration = controller.cluster.registration(1)
    assert registration is not None and registration.directories == (new_dir,)
    # The old directory is free again; the new one is broker 1's.
    controller.register(request(2, log_dirs=request(1).log_dirs))
    assert controller.refusal(request(3, log_dirs=(new_dir,))).api_error.error is (
        Errors.INVALID_REGISTRATION
    )


def test_usable_brokers_come_from_the_active_controllers_sessions() -> None:
    controller = Controller()
    controller.register(request(1, rack="a"))
    controller.register(request(2, rack="b"))
    controller.apply([controller.cluster.unfence_record(1, 1)])
    assert sorted(controller.cluster.usable_brokers(), key=lambda b: b.id) == [
        UsableBroker(1, "a", False),
        UsableBroker(2, "b", True),
    ]
    controller.cluster.heartbeats.maybe_update_controlled_shutdown_offset(1, controller.offset)
    assert [b.id for b in controller.cluster.usable_brokers()] == [2]
    controller.cluster.deactivate()
    with pytest.raises(IllegalStateError):
        list(controller.cluster.usable_brokers())
    with pytest.raises(IllegalStateError):
        controller.cluster.register_broker(request(3), controller.offset + 1, 0)


def test_activation_gives_every_broker_a_fresh_session() -> None:
    controller = Controller()
    controller.register(request(1))
    controller.apply([controller.cluster.unfence_record(1, 1)])
    controller.cluster.deactivate()
    controller.cluster.activate(now_ms=50_000)
    heartbeats = controller.cluster.heartbeats
    assert heartbeats.has_valid_session(1, 59_000) and not heartbeats.has_valid_session(1, 59_001)


def test_revert_undoes_uncommitted_registrations() -> None:
    controller = Controller()
    controller.register(request(1))
    committed = controller.offset
    controller.register(request(2))
    controller.apply([controller.cluster.unfence_record(1, 1)])
    controller.registry.revert_to_snapshot(committed)
    assert controller.cluster.broker_ids() == [1] and not controller.cluster.is_unfenced(1)
    # Broker 2's directory was never really taken.
    controller.register(request(3, log_dirs=request(2).log_dirs))


ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["register", "unfence", "fence", "shutdown", "unregister"]),
        st.integers(1, 3),
        st.integers(1, 2),
    ),
    max_size=25,
)


@given(actions=ACTIONS)
def test_registrations_equal_the_image_of_the_same_records(
    actions: list[tuple[str, int, int]],
) -> None:
    # The manager and the image (what a broker sees) replay the same records, through the
    # codec, and must agree on every broker.
    controller = Controller()
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in controller.features.bootstrap_records():
        delta.replay(record.message)
    now_ms = 0
    for action, broker_id, incarnation in actions:
        now_ms += 5_000
        registration = controller.cluster.registration(broker_id)
        try:
            match action:
                case "register":
                    records = controller.cluster.register_broker(
                        request(broker_id, incarnation), controller.offset + 1, now_ms
                    ).records
                case _ if registration is None:
                    continue
                case "unfence":
                    records = [controller.cluster.unfence_record(broker_id, registration.epoch)]
                case "fence":
                    records = [controller.cluster.fence_record(broker_id)]
                case "shutdown":
                    shutdown = controller.cluster.controlled_shutdown_record(
                        broker_id, registration.epoch
                    )
                    records = [shutdown] if shutdown else []
                case _:
                    records = [controller.cluster.unregister_record(broker_id)]
        except ControllerApiError:
            continue
        records = [decode_record(encode_record(r)) for r in records]
        controller.apply(records)
        for record in records:
            delta.replay(record.message)
    image = delta.apply(MetadataProvenance(controller.offset, 1, 0))
    assert dict(image.brokers) == {r.id: r for r in controller.cluster.registrations()}
    assert image.features.metadata_version == controller.features.metadata_version()
