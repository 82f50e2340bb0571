"""Crafted event logs for the analysis tests, written by the simulator's own ``EventLog``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kraft.simulation.events import EventLog


class RunLog:
    """One run's ``events.jsonl``, event by event, in the sweep layout under ``root``."""

    def __init__(
        self,
        root: Path,
        scenario: str = "crafted",
        seed: int = 1,
        voters: int = 3,
        observers: int = 0,
    ) -> None:
        self.path = root / scenario / f"seed-{seed}" / "events.jsonl"
        self.log = EventLog(f"{scenario}/{seed}", seed, scenario, self.path)
        self.roles: dict[int, tuple[str, int]] = {}
        self.log.emit(
            0,
            "run_started",
            details={
                "voters": voters,
                "observers": observers,
                "config": {
                    "election_timeout_ms": 1000,
                    "fetch_timeout_ms": 2000,
                    "append_linger_ms": 25,
                    "fetch_max_wait_ms": 500,
                },
            },
        )
        for node in range(1, voters + observers + 1):
            self.start(0, node)

    def start(self, t: int, node: int, epoch: int = 0, role: str = "Unattached") -> None:
        self.log.emit(
            t,
            "node_started",
            node=node,
            epoch=epoch,
            role=role,
            log_end_offset=0,
            high_watermark=0,
            details={"incarnation": 1},
        )
        self.state(t, node, role, epoch)

    def state(
        self,
        t: int,
        node: int,
        role: str,
        epoch: int,
        *,
        leader: int = -1,
        high_watermark: int = 0,
        kind: str = "state_changed",
    ) -> None:
        before_role, before_epoch = self.roles.get(node, ("Down", -1))
        fields: dict[str, Any] = {
            "node": node,
            "log_end_offset": 0,
            "high_watermark": high_watermark,
            "role": role,
        }
        if role == "Down":
            details: dict[str, Any] = {"from_role": "crashed"}
        else:
            fields.update(epoch=epoch, leader=leader)
            details = {"from_role": before_role, "from_epoch": before_epoch}
        self.roles[node] = (role, epoch)
        self.log.emit(t, kind, details=details if kind == "state_changed" else None, **fields)

    def commit(
        self,
        t: int,
        node: int,
        offset: int,
        *,
        epoch: int,
        latency_ms: int,
        checksum: int,
        base_offset: int | None = None,
        count: int = 1,
        high_watermark: int | None = None,
    ) -> None:
        role, _ = self.roles[node]
        self.log.emit(
            t,
            "batch_committed",
            node=node,
            epoch=epoch,
            role=role,
            offset=offset,
            base_offset=offset if base_offset is None else base_offset,
            checksum=checksum,
            count=count,
            latency_ms=latency_ms,
            high_watermark=offset + 1 if high_watermark is None else high_watermark,
        )

    def append(self, t: int, accepted: bool = True) -> None:
        if accepted:
            self.log.emit(t, "append_accepted", count=1)
        else:
            self.log.emit(t, "append_refused", count=1)

    def fault(self, t: int, fault: str, targets: list[int], index: int = 0) -> None:
        self.log.emit(
            t, "fault_injected", details={"fault": fault, "index": index, "targets": targets}
        )

    def close(self, t: int) -> Path:
        self.log.emit(
            t, "run_finished", details={"violations": 0, "events": self.log.count + 1, "faults": 0}
        )
        self.log.close()
        return self.path


def checksum_of(offset: int) -> int:
    """A made-up CRC for the batch at ``offset``."""
    return 1_000_000 + offset


def golden_run(root: Path, scenario: str = "crafted", seed: int = 1) -> RunLog:
    """Three voters. Node 1 campaigns 1000-1020 ms and leads epoch 1; ten one-record batches
    commit on it with latencies 10, 20, ..., 100 ms (on nodes 2 and 3: 5 ms more). At 2000 ms
    node 1 is killed; appends are refused until node 2, campaigning 3000-3200 ms, leads epoch
    2 and commits its control batch at 3300 ms and one record at 3400 ms. The run ends at
    4000 ms, nothing appended after 3400 ms. Left open for more events (close it)."""
    run = RunLog(root, scenario, seed)
    run.state(1000, 1, "Prospective", 0)
    run.state(1005, 1, "Candidate", 1)
    run.state(1020, 1, "Leader", 1, leader=1)
    run.state(1022, 2, "Follower", 1, leader=1)
    run.state(1022, 3, "Follower", 1, leader=1)
    for i in range(10):
        offset, t = i + 1, 1100 + 10 * i
        run.append(t - 5)
        run.commit(t, 1, offset, epoch=1, latency_ms=10 * (i + 1), checksum=checksum_of(offset))
        for node in (2, 3):
            run.commit(
                t + 5,
                node,
                offset,
                epoch=1,
                latency_ms=10 * (i + 1) + 5,
                checksum=checksum_of(offset),
            )
    run.fault(2000, "kill", [1])
    run.state(2000, 1, "Down", 1)
    for t in range(2100, 3000, 100):
        run.append(t, accepted=False)
    run.state(3000, 2, "Prospective", 1, leader=1, high_watermark=11)
    run.state(3010, 2, "Candidate", 2, high_watermark=11)
    run.state(3200, 2, "Leader", 2, leader=2, high_watermark=11)
    run.state(3202, 3, "Follower", 2, leader=2, high_watermark=11)
    run.commit(3300, 2, 11, epoch=2, latency_ms=100, checksum=checksum_of(11), count=0)
    run.commit(3301, 3, 11, epoch=2, latency_ms=101, checksum=checksum_of(11), count=0)
    run.append(3350)
    run.commit(3400, 2, 12, epoch=2, latency_ms=50, checksum=checksum_of(12))
    run.commit(3402, 3, 12, epoch=2, latency_ms=52, checksum=checksum_of(12))
    return run


def controller_run(root: Path, scenario: str = "controller", seed: int = 1) -> Path:
    """A controller cluster's events (kraft.analysis.controller), answers known by
    construction. Node 1 claims at 100 ms. Topic t: partitions 0 and 2 led by broker 101,
    1 by 102; topic u: partition 0 led by 101. Controller calls: create_topic ok in 40 and
    60 ms, one NOT_CONTROLLER, delete_topic of u ok in 30 ms (at 5000, before u got a new
    leader: left out). Broker 101 crashes at 1000 (t/0 re-led by 101 in a new epoch at 1500:
    no election), is fenced at 10000 (9000 ms), t/0 moves to 102 then (9000 ms), t/2 to no
    leader then to 103 at 12000 (11000 ms). 101 restarts at 13000, crashes at 14000 and
    restarts at 14500 before being fenced: the fencing at 24000 is another incarnation's. 103
    shuts down at 16000: t/2 moves to 102 at 16050 (50 ms). Node 1 renounces at 17000, node 2
    claims at 17300 (300 ms), renounces at 19000 and nobody claims. The run ends at 25000."""
    run = RunLog(root, scenario, seed)
    log = run.log

    def claim(t: int, node: int, epoch: int, renounce: bool = False) -> None:
        kind = "controller_renounced" if renounce else "controller_claimed"
        log.emit(t, kind, node=node, epoch=epoch)

    def lead(t: int, topic: str, partition: int, leader: int, previous: int, epoch: int) -> None:
        log.emit(
            t,
            "partition_leader_changed",
            node=1,
            offset=t,
            details={
                "topic": topic,
                "partition": partition,
                "leader": leader,
                "previous_leader": previous,
                "leader_epoch": epoch,
                "partition_epoch": epoch,
                "isr": [] if leader < 0 else [leader],
            },
        )

    def call(t: int, node: int, op: str, topic: str, latency_ms: int, outcome: str) -> None:
        log.emit(
            t,
            "controller_op_completed",
            node=node,
            latency_ms=latency_ms,
            details={"op": op, "topic": topic, "outcome": outcome},
        )

    def fenced(t: int, broker: int) -> None:
        log.emit(
            t, "broker_fenced", node=1, offset=t, details={"broker": broker, "broker_epoch": 1}
        )

    claim(100, 1, 1)
    for broker in (101, 102, 103):
        log.emit(
            200, "broker_registered", node=1, details={"broker": broker, "broker_epoch": broker}
        )
    lead(500, "t", 0, 101, -1, 0)
    lead(500, "t", 1, 102, -1, 0)
    lead(500, "t", 2, 101, -1, 0)
    call(550, 1, "create_topic", "t", 40, "ok")
    lead(600, "u", 0, 101, -1, 0)
    call(610, 1, "create_topic", "u", 60, "ok")
    call(700, 2, "create_topic", "v", 5, "NOT_CONTROLLER")
    run.fault(1000, "broker_crash", [101])
    lead(1500, "t", 0, 101, 101, 1)
    call(5000, 1, "delete_topic", "u", 30, "ok")
    fenced(10000, 101)
    lead(10000, "t", 0, 102, 101, 2)
    lead(10000, "t", 2, -1, 101, 1)
    lead(12000, "t", 2, 103, -1, 2)
    run.fault(13000, "broker_restart", [101], index=1)
    run.fault(14000, "broker_crash", [101], index=2)
    run.fault(14500, "broker_restart", [101], index=3)
    run.fault(16000, "broker_shutdown", [103], index=4)
    lead(16050, "t", 2, 102, 103, 3)
    claim(17000, 1, 1, renounce=True)
    claim(17300, 2, 2)
    claim(19000, 2, 2, renounce=True)
    fenced(24000, 101)
    return run.close(25000)
