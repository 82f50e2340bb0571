"""Deterministic cluster simulation, after Kafka's ``RaftEventSimulationTest``
(docs/simulation.md).

Every node's real :class:`~kraft.raft.client.KafkaRaftClient` runs in one thread over a virtual
clock, one seeded random source, a simulated network and simulated disks; invariants are checked
after every event and everything is written to a JSON Lines event log.
"""

from kraft.simulation.admin import VoterChange
from kraft.simulation.cluster import (
    Cluster,
    InvariantViolationError,
    SimulationError,
    replay_command,
    sim_config,
)
from kraft.simulation.events import KINDS, SCHEMA_VERSION, Event, EventLog, read_events
from kraft.simulation.faults import FaultRecord
from kraft.simulation.invariants import INVARIANTS, InvariantChecker, Violation
from kraft.simulation.network import LinkConfig, SimNetwork
from kraft.simulation.node import CounterIncrement, ReplicatedCounter, SimNode, SimSerde

__all__ = [
    "INVARIANTS",
    "KINDS",
    "SCHEMA_VERSION",
    "Cluster",
    "CounterIncrement",
    "Event",
    "EventLog",
    "FaultRecord",
    "InvariantChecker",
    "LinkConfig",
    "ReplicatedCounter",
    "SimNetwork",
    "SimNode",
    "SimSerde",
    "SimulationError",
    "InvariantViolationError",
    "Violation",
    "VoterChange",
    "read_events",
    "replay_command",
    "sim_config",
]
