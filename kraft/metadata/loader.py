"""``MetadataLoader``: the raft listener that turns ``__cluster_metadata`` into
:class:`~kraft.metadata.image.MetadataImage` s, hands them to publishers, and writes them as
snapshots (Kafka's ``MetadataLoader`` with its ``SnapshotGenerator`` publisher).

- ``handle_commit``: the records of every batch the reader holds are replayed into one
  :class:`~kraft.metadata.delta.MetadataDelta` over the current image; the next image has the
  provenance of the reader's last batch (its last offset, epoch and append time). Control
  batches hold no metadata record and only move the provenance.
- ``handle_load_snapshot``: the snapshot's records are replayed onto
  :data:`~kraft.metadata.image.MetadataImage.EMPTY`; the image's provenance is the snapshot's
  last contained offset and epoch and its header's last contained log time.
- Each new image goes to every publisher, ``publisher(delta, image)``, in the order they were
  added (Kafka's ``MetadataPublisher.onMetadataUpdate``). A publisher added later first gets
  the current image, as a delta from EMPTY (Kafka's ``installNewPublishers``).
- Snapshots: after a ``handle_commit``, :class:`~kraft.raft.state_machine.SnapshotGenerator`
  writes ``image.records()`` at the image's offset + 1 when
  :class:`~kraft.raft.state_machine.SnapshotPolicy` says so (Kafka's
  ``metadata.log.max.record.bytes.between.snapshots``, 20 MiB, and
  ``metadata.log.max.snapshot.interval.ms``, one hour).

A record that does not fit the image (:class:`~kraft.metadata.image.MetadataReplayError`) is
skipped with a (rate-limited) error line and counted in :attr:`MetadataLoader.replay_errors`,
as Kafka's loader reports it to its fault handler and goes on: the rest of the batch still
applies. A publisher that raises is logged (rate-limited) and the others still run.

Metadata transactions (KIP-868), as Kafka's ``MetadataBatchLoader`` reads them: the records
before a ``BeginTransactionRecord`` are published as an image of their own; no image is
published (and no snapshot written) until the ``EndTransactionRecord``, even across commits; an
``AbortTransactionRecord`` drops the transaction's records (the next image has only a newer
provenance). A marker out of place (an End without a Begin...) is skipped as a record that does
not fit.

That reading of batches is :class:`MetadataBatchLoader` and that of snapshots
:func:`load_snapshot`; neither needs a client (``kraft metadata shell`` reads files with them).

Every callback runs on the thread that polls the client; sans-IO like the raft core.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kraft.common.ratelimit import LogLimiter
from kraft.metadata.delta import MetadataDelta
from kraft.metadata.image import MetadataImage, MetadataProvenance, MetadataReplayError
from kraft.metadata.records import (
    AbortTransactionRecord,
    ApiMessageAndVersion,
    BeginTransactionRecord,
    EndTransactionRecord,
)
from kraft.raft.listeners import BatchReader, Listener, SnapshotReaderLike
from kraft.raft.state_machine import SnapshotGenerator, SnapshotPolicy
from kraft.record.typed import Batch

if TYPE_CHECKING:
    from kraft.raft.client import KafkaRaftClient

__all__ = ["MetadataBatchLoader", "MetadataLoader", "Publisher", "ReplayFailure", "load_snapshot"]

logger = logging.getLogger(__name__)

#: Called with each new image and the delta that made it from the previous one.
Publisher = Callable[[MetadataDelta, MetadataImage], None]
#: Called with where a record was (``"the metadata record at offset 12"``) and why it was
#: skipped.
ReplayFailure = Callable[[str, str], None]

_ERROR_LOG_INTERVAL_MS = 60_000


def _replay(
    delta: MetadataDelta, record: ApiMessageAndVersion, where: str, failed: ReplayFailure
) -> bool:
    try:
        delta.replay(record.message)
    except MetadataReplayError as exc:
        failed(where, str(exc))
        return False
    return True


def load_snapshot(
    reader: SnapshotReaderLike[ApiMessageAndVersion], failed: ReplayFailure
) -> tuple[MetadataDelta, MetadataImage]:
    """The image of a snapshot: its records replayed onto EMPTY, at the snapshot's last
    contained offset, epoch and log time; the reader is closed."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    try:
        for batch in reader:
            for index, record in enumerate(batch.records):
                _replay(
                    delta, record, f"record {batch.base_offset + index} of the snapshot", failed
                )
    finally:
        reader.close()
    snapshot_id = reader.snapshot_id
    provenance = MetadataProvenance(
        snapshot_id.offset - 1, snapshot_id.epoch, reader.last_contained_log_timestamp_ms
    )
    return delta, delta.apply(provenance)


class MetadataBatchLoader:
    """Log batches into images, with Kafka's metadata transactions (Kafka's
    ``MetadataBatchLoader``; see the module docstring): :meth:`load_batch` for each batch in
    order, :meth:`flush` after the last one of a commit; each image goes to ``publish``."""

    def __init__(self, image: MetadataImage, publish: Publisher, failed: ReplayFailure) -> None:
        #: The latest image published.
        self.image = image
        self._publish_to = publish
        self._failed = failed
        #: What the records read since the last image change, and how many records (the
        #: markers of transactions included) were read.
        self._delta = MetadataDelta(image)
        self._read = 0
        #: The offset of the open transaction's BeginTransactionRecord.
        self.transaction: int | None = None

    def reset(self, image: MetadataImage) -> None:
        """Start again from ``image`` (a snapshot's), forgetting what was read since the last
        image and any open transaction."""
        self._restart_delta(image)
        self.transaction = None

    def _restart_delta(self, image: MetadataImage) -> None:
        self.image = image
        self._delta = MetadataDelta(image)
        self._read = 0

    def _publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self._restart_delta(image)
        self._publish_to(delta, image)

    def load_batch(self, batch: Batch[ApiMessageAndVersion]) -> None:
        """Replay ``batch``: at a ``BeginTransactionRecord`` the records before it are
        published first; an ``AbortTransactionRecord`` drops the transaction's records."""
        for offset, record in enumerate(batch.records, start=batch.base_offset):
            message = record.message
            where = f"the metadata record at offset {offset}"
            match message:
                case BeginTransactionRecord() if self.transaction is None:
                    if self._read:  # Kafka's: publish what was read before the Begin
                        before = MetadataProvenance(
                            offset - 1, batch.epoch, batch.append_timestamp_ms
                        )
                        self._publish(self._delta, self._delta.apply(before))
                    self.transaction = offset
                case EndTransactionRecord() if self.transaction is not None:
                    self.transaction = None
                case AbortTransactionRecord() if self.transaction is not None:
                    self.transaction = None
                    self._restart_delta(self.image)
                case BeginTransactionRecord() | EndTransactionRecord() | AbortTransactionRecord():
                    state = "inside" if self.transaction is not None else "outside"
                    self._failed(where, f"{type(message).__name__} {state} a transaction")
                case _:
                    _replay(self._delta, record, where, self._failed)
            self._read += 1

    def flush(self, last: Batch[ApiMessageAndVersion]) -> MetadataImage | None:
        """Publish the image up to ``last``, the last batch loaded; ``None`` (nothing
        published) while a transaction is open."""
        if self.transaction is not None:
            return None
        delta = self._delta
        image = delta.apply(
            MetadataProvenance(last.last_offset, last.epoch, last.append_timestamp_ms)
        )
        self._publish(delta, image)
        return image


class MetadataLoader(Listener[ApiMessageAndVersion]):
    """Builds images from ``client``'s commits and snapshots (see the module docstring).

    Register it with ``client.register(loader)``; read :attr:`image` on the polling thread, or
    add a publisher.
    """

    def __init__(
        self,
        client: KafkaRaftClient[ApiMessageAndVersion],
        policy: SnapshotPolicy | None = None,
    ) -> None:
        self.client = client
        #: How many records were skipped because they did not fit the image.
        self.replay_errors = 0
        self.snapshots = SnapshotGenerator(client, policy)
        self._publishers: list[Publisher] = []
        self._batches = MetadataBatchLoader(MetadataImage.EMPTY, self._publish, self._replay_failed)
        self._replay_log = LogLimiter(_ERROR_LOG_INTERVAL_MS)
        self._publisher_log = LogLimiter(_ERROR_LOG_INTERVAL_MS)

    @property
    def image(self) -> MetadataImage:
        """The latest image; EMPTY until the first commit or snapshot."""
        return self._batches.image

    # -- publishers ----------------------------------------------------------------------------
    def add_publisher(self, publisher: Publisher) -> None:
        """Send every new image to ``publisher``, the current one first unless it is EMPTY."""
        self._publishers.append(publisher)
        image = self.image
        if image.provenance != MetadataProvenance.EMPTY:
            delta = MetadataDelta(MetadataImage.EMPTY)
            for record in image.records():
                delta.replay(record.message)
            self._call(publisher, delta, image)

    def remove_publisher(self, publisher: Publisher) -> None:
        """Send ``publisher`` nothing more; ``ValueError`` if it was not added."""
        self._publishers.remove(publisher)

    def _call(self, publisher: Publisher, delta: MetadataDelta, image: MetadataImage) -> None:
        try:
            publisher(delta, image)
        except Exception:
            if self._publisher_log.allow(self.client.clock.now_ms()):
                logger.exception(
                    "publisher %r failed on the image at offset %d",
                    publisher,
                    image.provenance.offset,
                )

    def _publish(self, delta: MetadataDelta, image: MetadataImage) -> None:
        for publisher in list(self._publishers):
            self._call(publisher, delta, image)

    def _replay_failed(self, where: str, why: str) -> None:
        self.replay_errors += 1
        if self._replay_log.allow(self.client.clock.now_ms()):
            logger.error("skipping %s: %s", where, why)

    # -- raft callbacks ------------------------------------------------------------------------
    def handle_commit(self, reader: BatchReader[ApiMessageAndVersion]) -> None:
        last: Batch[ApiMessageAndVersion] | None = None
        with reader:
            for batch in reader:
                self._batches.load_batch(batch)
                self.snapshots.applied(batch.size_in_bytes)
                last = batch
        if last is None:
            return
        image = self._batches.flush(last)
        if image is not None:  # else a transaction is open: no image until it ends
            self.snapshots.maybe_snapshot(last, image.records)

    def handle_load_snapshot(self, reader: SnapshotReaderLike[ApiMessageAndVersion]) -> None:
        delta, image = load_snapshot(reader, self._replay_failed)
        self._batches.reset(image)
        self._publish(delta, image)
        self.snapshots.restart()

    def begin_shutdown(self) -> None:
        self.snapshots.begin_shutdown()
