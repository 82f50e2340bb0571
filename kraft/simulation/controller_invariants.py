"""The invariants of a controller cluster (docs/simulation.md#invariants): checks of the
committed metadata every node's ``MetadataLoader`` publishes, of what the controllers
acknowledged, and of a controller's state after it renounces.

Names, as they appear in reports and in the event log:

``image_agreement``            every node's image at the same committed offset has the same
                               content (:func:`~kraft.metadata.digest.image_digest`)
``broker_epoch_monotonic``     a broker's epoch in the committed images never decreases
``fenced_never_leads``         no partition leader in a committed image is a fenced or an
                               unregistered broker (one in controlled shutdown may lead: Kafka
                               writes its registration change before its leadership moves, in
                               a write that may span batches; fencing moves leaders first)
``partition_epochs_monotonic`` a partition's leader epoch and partition epoch never go back
                               while its topic exists
``acked_topic_durable``        a topic whose creation was acknowledged is in the highest
                               committed image seen then, and in every image from that offset
                               on with the same id, unless a deletion of it was sent
``producer_ids_disjoint``      the producer id blocks handed out never overlap, and the next
                               producer id in the committed images never decreases
``revert_to_committed``        right after a renounce, the old active controller's state read
                               at LATEST equals the committed image at its last committed offset

The checks are incremental: an image shares every part its records did not touch with the image
before it (``MetadataDelta.apply``), so only the brokers and topics that are new objects since a
node's previous image are looked at. Monotonic checks compare an image with the highest offset
seen so far for the broker or partition, from any node: a node that restarts and replays from
an older offset is not compared backwards. Images are kept per offset only while some running
node has not reached that offset (:meth:`ControllerInvariants.node_stopped` takes a node out of
that count).
"""

from __future__ import annotations

import bisect
import heapq
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from kraft.controller.state_view import MetadataState
from kraft.metadata.digest import image_digest
from kraft.metadata.image import NO_LEADER, MetadataImage, PartitionRegistration

if TYPE_CHECKING:
    from kraft.simulation.invariants import InvariantChecker
    from kraft.simulation.node import SimNode

__all__ = ["CONTROLLER_INVARIANTS", "ControllerInvariants", "Report", "SimControllerInvariants"]

CONTROLLER_INVARIANTS: Final = (
    "image_agreement",
    "broker_epoch_monotonic",
    "fenced_never_leads",
    "partition_epochs_monotonic",
    "acked_topic_durable",
    "producer_ids_disjoint",
    "revert_to_committed",
)

#: Where a problem goes: (invariant, nodes, message), ``InvariantChecker.report``.
Report = Callable[[str, tuple[int, ...], str], None]


class ControllerInvariants:
    """The controller invariants of one cluster (module docstring); every problem goes to
    ``report``. The cluster calls the ``on_*`` hooks and the ``topic_*`` / ``producer_ids_*``
    ones as its futures complete."""

    def __init__(self, report: Report) -> None:
        self._report = report
        #: Each running node's latest image, and the highest one any node published.
        self._latest: dict[int, MetadataImage] = {}
        self._highest = MetadataImage.EMPTY
        #: The first image seen at each offset still above some running node, and its node.
        self._at_offset: dict[int, tuple[int, MetadataImage]] = {}
        self._offsets_heap: list[int] = []
        #: broker id -> (offset, epoch) of the highest offset seen.
        self._broker_epochs: dict[int, tuple[int, int]] = {}
        #: (topic id, partition) -> (offset, leader epoch, partition epoch), highest offset.
        self._partition_epochs: dict[tuple[uuid.UUID, int], tuple[int, int, int]] = {}
        #: (offset, next producer id) of the highest offset seen.
        self._next_producer_id = (-1, -1)
        #: Acknowledged topics: name -> (id, offset known committed at).
        self._acked_topics: dict[str, tuple[uuid.UUID, int]] = {}
        #: Names a deletion was sent for: no longer checked.
        self._deleting: set[str] = set()
        #: Producer id blocks handed out: sorted (first id, last id, broker).
        self._blocks: list[tuple[int, int, int]] = []
        #: How many renounces were compared with a committed image, and how many had none.
        self.reverts_checked = 0
        self.reverts_unchecked = 0

    # -- images ---------------------------------------------------------------------------------
    def on_image(self, node_id: int, image: MetadataImage) -> None:
        """``node_id``'s loader published ``image`` (committed metadata)."""
        previous = self._latest.get(node_id)
        if previous is not None and image.provenance.offset < previous.provenance.offset:
            previous = None  # a node starting over (a snapshot, a restart): look at everything
        self._latest[node_id] = image
        offset = image.provenance.offset
        if offset > self._highest.provenance.offset:
            self._highest = image
        self._check_agreement(node_id, image)
        changed_brokers = [
            broker
            for broker_id, broker in image.brokers.items()
            if previous is None or previous.brokers.get(broker_id) is not broker
        ]
        brokers_gone = previous is not None and any(
            broker_id not in image.brokers for broker_id in previous.brokers
        )
        for broker in changed_brokers:
            self._check_broker_epoch(node_id, offset, broker.id, broker.epoch)
        if previous is None or changed_brokers or brokers_gone:
            topics = list(image.topics.values())
        else:
            topics = [
                topic
                for name, topic in image.topics.items()
                if previous.topics.get(name) is not topic
            ]
        for topic in topics:
            for index, partition in topic.partitions.items():
                leader = partition.leader
                if leader != NO_LEADER:
                    registration = image.brokers.get(leader)
                    if registration is None or registration.fenced:
                        what = "unregistered" if registration is None else "fenced"
                        self._report(
                            "fenced_never_leads",
                            (node_id,),
                            f"node {node_id}'s image at offset {offset}: {topic.name}-{index} "
                            f"is led by {what} broker {leader}",
                        )
                self._check_partition_epochs(
                    node_id, offset, (topic.id, index), topic.name, partition
                )
        self._check_acked_topics(node_id, image)
        self._check_next_producer_id(node_id, offset, image.producer_ids.next_producer_id)
        self._drop_below(min(i.provenance.offset for i in self._latest.values()))

    @property
    def offsets_kept(self) -> int:
        """How many offsets' images are kept (bounded by the running nodes' lag)."""
        return len(self._at_offset)

    def node_stopped(self, node_id: int) -> None:
        """``node_id`` stopped (killed, wiped): it no longer holds images back."""
        self._latest.pop(node_id, None)

    def _check_agreement(self, node_id: int, image: MetadataImage) -> None:
        offset = image.provenance.offset
        first = self._at_offset.get(offset)
        if first is None:
            self._at_offset[offset] = (node_id, image)
            heapq.heappush(self._offsets_heap, offset)
            return
        other, known = first
        # Equal images have equal digests; the digests tell content from provenance apart.
        if known != image and image_digest(known) != image_digest(image):
            self._report(
                "image_agreement",
                (node_id, other),
                f"node {node_id}'s image at offset {offset} has digest "
                f"{image_digest(image)[:12]}, node {other}'s {image_digest(known)[:12]}: "
                + "; ".join(
                    MetadataState.of_image(known).differences(MetadataState.of_image(image))
                ),
            )

    def _drop_below(self, floor: int) -> None:
        heap = self._offsets_heap
        while heap and heap[0] < floor:
            self._at_offset.pop(heapq.heappop(heap), None)

    def _check_broker_epoch(self, node_id: int, offset: int, broker_id: int, epoch: int) -> None:
        known = self._broker_epochs.get(broker_id)
        if known is not None and offset < known[0]:
            return
        if known is not None and epoch < known[1]:
            self._report(
                "broker_epoch_monotonic",
                (node_id,),
                f"node {node_id}'s image at offset {offset} has broker {broker_id} at epoch "
                f"{epoch}, the image at offset {known[0]} had epoch {known[1]}",
            )
        self._broker_epochs[broker_id] = (offset, epoch)

    def _check_partition_epochs(
        self,
        node_id: int,
        offset: int,
        key: tuple[uuid.UUID, int],
        name: str,
        partition: PartitionRegistration,
    ) -> None:
        leader_epoch, partition_epoch = partition.leader_epoch, partition.partition_epoch
        known = self._partition_epochs.get(key)
        if known is not None and offset < known[0]:
            return
        if known is not None and (leader_epoch < known[1] or partition_epoch < known[2]):
            self._report(
                "partition_epochs_monotonic",
                (node_id,),
                f"node {node_id}'s image at offset {offset} has {name}-{key[1]} at leader "
                f"epoch {leader_epoch}, partition epoch {partition_epoch}; the image at offset "
                f"{known[0]} had {known[1]}, {known[2]}",
            )
        self._partition_epochs[key] = (offset, leader_epoch, partition_epoch)

    def _check_acked_topics(self, node_id: int, image: MetadataImage) -> None:
        offset = image.provenance.offset
        for name, (topic_id, committed) in self._acked_topics.items():
            if offset < committed:
                continue
            topic = image.topics.get(name)
            if topic is None or topic.id != topic_id:
                found = "missing" if topic is None else f"there with id {topic.id}"
                self._report(
                    "acked_topic_durable",
                    (node_id,),
                    f"topic {name!r} (id {topic_id}), acknowledged as created by offset "
                    f"{committed}, is {found} in node {node_id}'s image at offset {offset}",
                )

    def _check_next_producer_id(self, node_id: int, offset: int, next_id: int) -> None:
        known_offset, known = self._next_producer_id
        if offset < known_offset:
            return
        if next_id < known:
            self._report(
                "producer_ids_disjoint",
                (node_id,),
                f"node {node_id}'s image at offset {offset} has next producer id {next_id}, "
                f"the image at offset {known_offset} had {known}",
            )
        self._next_producer_id = (offset, next_id)

    # -- what the controllers acknowledged -----------------------------------------------------
    def topic_acked(self, name: str) -> None:
        """A controller acknowledged the creation of ``name``: its record committed, so the
        highest committed image seen so far holds it, and every image from there on must hold
        it with that id."""
        if name in self._deleting:
            return
        highest = self._highest
        offset = highest.provenance.offset
        topic = highest.topics.get(name)
        if topic is None:
            self._report(
                "acked_topic_durable",
                (),
                f"topic {name!r} was acknowledged as created, but the highest committed image "
                f"(offset {offset}) does not hold it",
            )
            return
        self._acked_topics[name] = (topic.id, offset)

    def topic_deletion_sent(self, name: str) -> None:
        """A deletion of ``name`` was sent: from now on the topic may go."""
        self._deleting.add(name)
        self._acked_topics.pop(name, None)

    def producer_ids_handed_out(self, broker_id: int, first_id: int, count: int) -> None:
        """A controller acknowledged the block ``first_id``..``first_id + count - 1`` to
        ``broker_id``."""
        block = (first_id, first_id + count - 1, broker_id)
        index = bisect.bisect_left(self._blocks, block)
        for neighbour in self._blocks[max(index - 1, 0) : index + 1]:
            if neighbour[0] <= block[1] and block[0] <= neighbour[1]:
                self._report(
                    "producer_ids_disjoint",
                    (),
                    f"producer ids {block[0]}..{block[1]} handed to broker {broker_id} overlap "
                    f"{neighbour[0]}..{neighbour[1]} handed to broker {neighbour[2]}",
                )
        self._blocks.insert(index, block)

    # -- renounce ------------------------------------------------------------------------------
    def on_renounce(self, node_id: int, committed_offset: int, state: MetadataState) -> None:
        """``node_id``'s controller renounced; ``state`` is what it reads at LATEST now, and
        ``committed_offset`` its last committed offset. Compared with the committed image at
        that offset if one is still known (:attr:`reverts_unchecked` counts those that are
        not)."""
        first = self._at_offset.get(committed_offset)
        image = None if first is None else first[1]
        latest = self._latest.get(node_id)
        if image is None and latest is not None and latest.provenance.offset == committed_offset:
            image = latest
        if image is None:
            self.reverts_unchecked += 1
            return
        self.reverts_checked += 1
        differences = MetadataState.of_image(image).differences(state)
        if differences:
            self._report(
                "revert_to_committed",
                (node_id,),
                f"node {node_id}'s controller after renouncing differs from the committed image "
                f"at offset {committed_offset} (image != controller): " + "; ".join(differences),
            )


class _Cluster(Protocol):
    """What :class:`SimControllerInvariants` reads of the cluster."""

    nodes: dict[int, SimNode]
    checker: InvariantChecker


class SimControllerInvariants(ControllerInvariants):
    """The controller invariants of a simulated cluster: a
    :class:`~kraft.simulation.controller.ControllerObserver` reporting to the cluster's
    checker (``cluster.controller_sim.invariants``)."""

    def __init__(self, cluster: _Cluster) -> None:
        # The checker is made after the controller part of the cluster: look it up per report.
        super().__init__(lambda *problem: cluster.checker.report(*problem))  # noqa: PLW0108
        self._nodes = cluster.nodes

    def image_published(self, node_id: int, image: MetadataImage) -> None:
        for stopped in [n for n in self._latest if not self._nodes[n].running]:
            self.node_stopped(stopped)
        self.on_image(node_id, image)

    def claimed(self, node_id: int, epoch: int) -> None:
        """Nothing to check: a claim changes no committed metadata."""

    def renounced(self, node_id: int, epoch: int, reason: str) -> None:
        controller = self._nodes[node_id].controller
        if reason != "renounced" or controller is None:
            self.node_stopped(node_id)
        elif not controller.is_active:  # not a claim carried into a later epoch
            self.on_renounce(
                node_id,
                controller.last_committed_offset,
                MetadataState.of_controller(controller),
            )

    def topic_op(self, op: str, topic: str, outcome: str | None) -> None:
        if op == "delete_topic" and outcome is None:
            self.topic_deletion_sent(topic)
        elif op == "create_topic" and outcome == "ok":
            self.topic_acked(topic)
