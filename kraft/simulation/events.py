"""The simulation's event log: one :class:`Event` a line, JSON Lines, written with msgspec.

This file format is the contract with :mod:`kraft.analysis` (docs/simulation.md documents every
field and kind). :data:`SCHEMA_VERSION` changes whenever a field or a kind changes meaning.
Nothing in an event depends on the wall clock or the process, so the same seed writes the same
bytes: :attr:`EventLog.digest` is the run's fingerprint, compared by ``kraft sim replay``.
"""

from __future__ import annotations

import hashlib
from collections import deque
from pathlib import Path
from typing import IO, Any

import msgspec

__all__ = ["KINDS", "SCHEMA_VERSION", "Event", "EventLog", "read_events"]

#: Version of the event-log schema (the ``v`` field of every line).
SCHEMA_VERSION = 1

#: Every event kind, with what it means (docs/simulation.md has the fields of each).
KINDS: dict[str, str] = {
    "run_started": "the run begins (cluster shape and configuration in details)",
    "run_finished": "the run ends (violations, events, simulated ms in details)",
    "node_started": "a node's Raft client was created and initialized",
    "state_changed": "a node's role or epoch changed (previous role and epoch in details)",
    "vote_granted": "a node granted a vote or pre-vote to `peer`",
    "vote_refused": "a node refused a vote or pre-vote to `peer`",
    "message_sent": "a node sent `message` to `peer`",
    "message_delivered": "a message from `peer` reached the node's queue",
    "message_dropped": "a message from the node to `peer` was lost (reason in details)",
    "message_duplicated": "the network will deliver a second copy of a message to `peer`",
    "append_accepted": "the leader accepted `count` records ending at `offset`",
    "append_refused": "an append found no writable leader",
    "batch_committed": "a node's listener received a committed batch ending at `offset`",
    "snapshot_created": "a node's counter wrote a snapshot ending at `offset` (exclusive)",
    "snapshot_loaded": "a node's counter was handed the snapshot ending at `offset`",
    "fault_injected": "a fault began (its kind and targets in details)",
    "fault_healed": "a fault ended (its kind and targets in details)",
    "fault_suppressed": "a fault the scenario asked for was skipped (shrinking)",
    "invariant_violated": "an invariant failed (name and message in details)",
    "expectation_failed": "a scenario's liveness expectation did not hold",
    "invariants_checked": "the end-of-run validation (checks made in details)",
    "run_error": "the run raised (a livelock, a scenario bug): the error in details",
    "voter_change_requested": "the admin asked leader `peer` to add or remove voter `node`",
    "voter_change_answered": "the admin got the answer to a voter change (error in details)",
    "op_invoked": "a kv client invoked an operation through the node (client, op, key in details)",
    "op_completed": "a kv client's operation completed (outcome, result or error in details)",
    "controller_claimed": "the node's controller became active in `epoch`",
    "controller_renounced": "the node's controller stopped being active in `epoch` (why: details)",
    "broker_registered": "the node's controller answered a broker's registration (broker, epoch)",
    "broker_fenced": "the first committed image to fence a broker (at `offset`, broker in details)",
    "broker_unfenced": "the first committed image to unfence a broker (at `offset`)",
    "partition_leader_changed": "the first committed image with a partition's new leader or epoch",
    "controller_op_completed": "a topic operation or a broker registration was answered (details)",
}


class Event(msgspec.Struct, omit_defaults=True, frozen=True):
    """One line of the event log. Fields left at their default are not written."""

    v: int
    run_id: str
    seed: int
    scenario: str
    time_ms: int
    seq: int
    kind: str
    #: The node the event happened on; -1 for the cluster (faults, run markers, the network).
    node: int = -1
    epoch: int = -1
    leader: int = -1
    role: str | None = None
    log_end_offset: int = -1
    high_watermark: int = -1
    #: The event's own offset: an append's or a committed batch's last offset.
    offset: int = -1
    #: A committed batch's first offset.
    base_offset: int = -1
    #: A committed batch's CRC-32C as this node's log holds it (equal on every node).
    checksum: int = -1
    #: Records in an append or a committed batch (0 for a control batch).
    count: int = -1
    #: For ``batch_committed``: simulated ms from the leader's append to this node's commit.
    latency_ms: int = -1
    #: The other node of a message or a vote.
    peer: int = -1
    #: A message's type (``FetchRequest``, ``VoteResponse``, ...).
    message: str | None = None
    details: dict[str, Any] | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)


class EventLog:
    """Numbers, hashes, keeps the last few and (with a file) writes every event.

    ``recent`` holds the last ``keep`` events for a violation report; every event is hashed
    (:attr:`digest`) whether or not it is written to a file.
    """

    __slots__ = ("_buffer", "_file", "_hash", "count", "recent", "run_id", "scenario", "seed")

    def __init__(
        self,
        run_id: str,
        seed: int,
        scenario: str,
        path: Path | None = None,
        keep: int = 64,
    ) -> None:
        self.run_id = run_id
        self.seed = seed
        self.scenario = scenario
        self.count = 0
        self.recent: deque[Event] = deque(maxlen=keep)
        self._hash = hashlib.sha256()
        self._buffer = bytearray()
        self._file: IO[bytes] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("wb")

    def emit(self, time_ms: int, kind: str, **fields: Any) -> Event:
        """Record one event (``fields`` are :class:`Event`'s optional fields)."""
        event = Event(
            SCHEMA_VERSION,
            self.run_id,
            self.seed,
            self.scenario,
            time_ms,
            self.count,
            kind,
            **fields,
        )
        self.count += 1
        self.recent.append(event)
        buffer = self._buffer
        _encoder.encode_into(event, buffer, len(buffer))
        buffer.extend(b"\n")
        if len(buffer) >= 1 << 16:
            self._drain()
        return event

    def _drain(self) -> None:
        data = bytes(self._buffer)
        self._buffer.clear()
        self._hash.update(data)
        if self._file is not None:
            self._file.write(data)

    @property
    def digest(self) -> str:
        """SHA-256 of every line written so far (hex)."""
        self._drain()
        return self._hash.hexdigest()

    def close(self) -> None:
        self._drain()
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: Path | str) -> list[Event]:
    """Every event of a JSON Lines event log, in order."""
    with Path(path).open("rb") as f:
        return [_decoder.decode(line) for line in f if line.strip()]
