"""MetadataState: a controller's state and the image of the same committed records compare
equal, on every node; after a renounce, the old active controller's state at LATEST is the
committed image again, while before it LATEST held the uncommitted write."""

from __future__ import annotations

import pytest
from harness import ControllerQuorum
from test_quorum_controller_topics import CLUSTER_ID, with_unfenced_brokers

from kraft.controller.configs import ConfigResource, ConfigResourceType, OpType
from kraft.controller.state_view import MetadataState
from kraft.protocol.controller_messages import CreatableTopic, CreateTopicsRequest


@pytest.fixture
def quorum() -> ControllerQuorum:
    return ControllerQuorum(3, cluster_id=CLUSTER_ID, default_replication_factor=3)


def create(quorum: ControllerQuorum, *names: str) -> None:
    active = quorum.wait_active()
    request = CreateTopicsRequest(
        topics=tuple(CreatableTopic(name=n, num_partitions=2) for n in names)
    )
    quorum.result(active.create_topics(request))


def settled(quorum: ControllerQuorum) -> bool:
    return all(
        quorum.loaders[n].image.provenance.offset == c.last_committed_offset
        for n, c in quorum.controllers.items()
    )


def test_every_controller_holds_what_its_image_holds(quorum: ControllerQuorum) -> None:
    brokers, active = with_unfenced_brokers(quorum)
    create(quorum, "a", "b")
    resource = ConfigResource(ConfigResourceType.TOPIC, "a")
    quorum.result(
        active.incremental_alter_configs({resource: {"retention.ms": (OpType.SET, "1000")}})
    )
    assert quorum.run_until(lambda: settled(quorum))
    for node_id, controller in quorum.controllers.items():
        state = MetadataState.of_controller(controller)
        assert state == MetadataState.of_image(quorum.loaders[node_id].image)
        assert set(state.topics) == {"a", "b"}
        assert state.configs == {(2, "a"): {"retention.ms": "1000"}}
        assert len(state.brokers) == len(brokers.epochs)


def test_after_a_renounce_latest_is_the_committed_image(quorum: ControllerQuorum) -> None:
    _, active = with_unfenced_brokers(quorum)
    create(quorum, "a")
    assert quorum.run_until(lambda: settled(quorum))
    committed = active.last_committed_offset
    image = quorum.loaders[active.node_id].image
    quorum.cluster.disconnected.add(active.node_id)
    request = CreateTopicsRequest(topics=(CreatableTopic(name="b", num_partitions=2),))
    active.create_topics(request)
    quorum.step()
    assert "b" in MetadataState.of_controller(active).topics  # replayed, uncommitted
    assert MetadataState.of_controller(active, committed) == MetadataState.of_image(image)
    assert quorum.run_until(lambda: not active.is_active, 60_000)
    assert active.last_committed_offset == committed
    assert MetadataState.of_controller(active) == MetadataState.of_image(image)
