"""``kraft broker simulate``: brokers that only register and heartbeat, so that a controller
quorum can be exercised without Kafka (docs/controller.md).

Each of ``--count`` brokers (ids ``--first-id`` on) registers with the active controller
(BrokerRegistration: a fresh incarnation id and log directory, a PLAINTEXT listener on
``--host`` at port 9092 + id that nothing listens on, ``metadata.version`` up to 21), then
heartbeats every ``--interval`` seconds (Kafka's ``broker.heartbeat.interval.ms``, 2 s),
reporting its own broker epoch as the metadata offset it has read: a simulated broker reads
no log, and its registration is what the controller waits for before unfencing it. The
controller is reached as ``kraft topics`` reaches it, following NOT_CONTROLLER to the new
leader. A heartbeat refused with STALE_BROKER_EPOCH or a registration error registers again.

One JSON object a line on stdout for each change::

    {"event": "registered", "broker": 1, "epoch": 12}
    {"event": "unfenced", "broker": 1}
    {"event": "fenced", "broker": 1}
    {"event": "error", "broker": 1, "error": "..."}

Runs until SIGTERM or SIGINT (or ``--duration`` seconds); exit status 0, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from types import FrameType
from typing import Any

from kraft.cli.controller_client import ControllerClient, add_tool_arguments, client_from_args
from kraft.errors import KraftError
from kraft.protocol.controller_messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    Listener,
    RegistrationFeature,
)
from kraft.protocol.errors import Errors, error_name

__all__ = ["SimulatedBroker", "register"]

#: The metadata.version levels a simulated broker supports (kraft's records: 3.9-IV0 is 21).
_METADATA_VERSION_RANGE = (1, 21)
#: Port of a simulated broker's (unused) listener: 9092 + its id.
_BASE_PORT = 9092


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``kraft broker simulate`` to the command line."""
    group: argparse.ArgumentParser = subparsers.add_parser(
        "broker",
        help="simulated brokers for a controller quorum",
        description="Brokers that register and heartbeat with a controller quorum.",
    )
    group.set_defaults(group_parser=group)
    commands = group.add_subparsers(title="broker commands", metavar="COMMAND")
    simulate = commands.add_parser(
        "simulate", help="run simulated brokers that register and heartbeat"
    )
    add_tool_arguments(simulate)
    simulate.add_argument("--count", type=int, required=True, help="how many brokers")
    simulate.add_argument("--first-id", type=int, default=1, help="the first broker id (1)")
    simulate.add_argument("--rack", default=None, help="the brokers' rack (none)")
    simulate.add_argument("--host", default="127.0.0.1", help="their listeners' host")
    simulate.add_argument(
        "--interval", type=float, default=2.0, help="seconds between heartbeats (2)"
    )
    simulate.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds"
    )
    simulate.set_defaults(handler=_simulate)


@dataclass
class SimulatedBroker:
    """One simulated broker: its registration's epoch (-1: not registered) and whether the
    controller last said it is fenced. :meth:`step` registers or heartbeats once."""

    broker_id: int
    cluster_id: str
    rack: str | None = None
    host: str = "127.0.0.1"
    epoch: int = -1
    fenced: bool = True
    incarnation_id: uuid.UUID = dataclasses.field(default_factory=uuid.uuid4)
    log_dir: uuid.UUID = dataclasses.field(default_factory=uuid.uuid4)

    def registration(self) -> BrokerRegistrationRequest:
        return BrokerRegistrationRequest(
            broker_id=self.broker_id,
            cluster_id=self.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=(
                Listener(name="PLAINTEXT", host=self.host, port=_BASE_PORT + self.broker_id),
            ),
            features=(
                RegistrationFeature(
                    name="metadata.version",
                    min_supported_version=_METADATA_VERSION_RANGE[0],
                    max_supported_version=_METADATA_VERSION_RANGE[1],
                ),
            ),
            rack=self.rack,
            log_dirs=(self.log_dir,),
        )

    def heartbeat(self) -> BrokerHeartbeatRequest:
        return BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.epoch,
            current_metadata_offset=self.epoch,
        )

    def step(self, client: ControllerClient, timeout_s: float) -> dict[str, Any] | None:
        """Register (when not registered) or heartbeat once; the event to report, if any.
        Raises :class:`~kraft.errors.KraftError` when no controller answered."""
        if self.epoch < 0:
            registered = client.send(self.registration(), timeout_s)
            assert isinstance(registered, BrokerRegistrationResponse)
            if registered.error_code != Errors.NONE:
                return self.error(error_name(registered.error_code))
            self.epoch, self.fenced = registered.broker_epoch, True
            return {"event": "registered", "broker": self.broker_id, "epoch": self.epoch}
        beat = client.send(self.heartbeat(), timeout_s)
        assert isinstance(beat, BrokerHeartbeatResponse)
        if beat.error_code != Errors.NONE:
            self.epoch = -1  # a stale epoch, or a registration the controller lost: again
            return self.error(error_name(beat.error_code))
        if beat.is_fenced == self.fenced:
            return None
        self.fenced = beat.is_fenced
        return {"event": "fenced" if self.fenced else "unfenced", "broker": self.broker_id}

    def error(self, error: str) -> dict[str, Any]:
        return {"event": "error", "broker": self.broker_id, "error": error}


def _cluster_id(client: ControllerClient, given: str | None, timeout_s: float) -> str:
    """The cluster id to register with: ``given``, else the active controller's."""
    if given is not None:
        return given
    described = client.send(DescribeClusterRequest(), timeout_s)
    assert isinstance(described, DescribeClusterResponse)
    return described.cluster_id


def _simulate(args: argparse.Namespace) -> int:
    if args.count < 1 or args.first_id < 0 or args.interval <= 0:
        print("error: need --count >= 1, --first-id >= 0 and --interval > 0", file=sys.stderr)
        return 2
    client = client_from_args(args)
    if client is None:
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    end = None if args.duration is None else time.monotonic() + args.duration
    # A request may take a heartbeat interval or two: the controller may be failing over.
    timeout_s = max(args.interval * 2, 5.0)
    try:
        cluster_id = _cluster_id(client, args.cluster_id, args.timeout)
        brokers = [
            SimulatedBroker(broker_id, cluster_id, rack=args.rack, host=args.host)
            for broker_id in range(args.first_id, args.first_id + args.count)
        ]
        while not stop.is_set() and (end is None or time.monotonic() < end):
            started = time.monotonic()
            for broker in brokers:
                try:
                    event = broker.step(client, timeout_s)
                except KraftError as exc:
                    event = broker.error(str(exc))
                if event is not None:
                    print(json.dumps(event), flush=True)
                if stop.is_set():
                    break
            stop.wait(max(0.0, args.interval - (time.monotonic() - started)))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0
