"""A controller quorum in memory, in virtual time: a ``LocalCluster`` of Raft clients on the
metadata serde, each with a ``QuorumController`` on a ``DeterministicEventQueue`` that shares
the cluster's clock. :meth:`ControllerQuorum.step` polls the clients, delivers their messages
and runs every controller's due events; time jumps to the earliest deadline of either."""

from __future__ import annotations

import concurrent.futures
import random
from collections.abc import Callable
from typing import Any, TypeVar

from kraft.controller.quorum_controller import ControllerConfig, QuorumController
from kraft.metadata.loader import MetadataLoader
from kraft.metadata.records import ApiMessageAndVersion
from kraft.metadata.serde import MetadataRecordSerde
from kraft.queue import DeterministicEventQueue
from kraft.raft.state_machine import SnapshotPolicy
from kraft.testing.cluster import LocalCluster

R = TypeVar("R")

_NS_PER_MS = 1_000_000


class ControllerQuorum:
    def __init__(
        self,
        voters: int = 3,
        *,
        seed: int = 0,
        snapshot_policy: SnapshotPolicy | None = None,
        **controller_config: Any,
    ) -> None:
        self.cluster: LocalCluster[ApiMessageAndVersion] = LocalCluster(
            voters, seed=seed, serde=MetadataRecordSerde()
        )
        self.config = ControllerConfig(**controller_config)
        self.queues: dict[int, DeterministicEventQueue] = {}
        self.controllers: dict[int, QuorumController] = {}
        #: Each node's metadata loader (images, and snapshots by ``snapshot_policy``).
        self.loaders: dict[int, MetadataLoader] = {}
        for node_id, client in self.cluster.nodes.items():
            self.loaders[node_id] = MetadataLoader(client, snapshot_policy)
            client.register(self.loaders[node_id])
            queue = DeterministicEventQueue(self.cluster.clock)
            self.queues[node_id] = queue
            self.controllers[node_id] = QuorumController(
                node_id,
                client,
                queue,
                self.cluster.clock,
                config=self.config,
                rng=random.Random(seed * 1000 + node_id),
            )

    @property
    def clock(self) -> Any:
        return self.cluster.clock

    def active(self) -> QuorumController | None:
        active = [c for c in self.controllers.values() if c.is_active]
        return max(active, key=lambda c: c.claim_epoch) if active else None

    def step(self) -> bool:
        busy = self.cluster.step()
        for queue in self.queues.values():
            busy = queue.run_until_idle() > 0 or busy
        return busy

    def run_until(self, predicate: Callable[[], bool], timeout_ms: int = 30_000) -> bool:
        end = self.clock.now_ms() + timeout_ms
        while True:
            for _ in range(100_000):
                if not self.step():
                    break
            else:
                raise AssertionError("the controller quorum did not settle")
            if predicate():
                return True
            now = self.clock.now_ms()
            if now >= end:
                return False
            deadlines = [self.cluster.next_deadline_ms()]
            for queue in self.queues.values():
                deadline_ns = queue.next_deadline_ns()
                if deadline_ns is not None:
                    deadlines.append(-(-deadline_ns // _NS_PER_MS))
            self.clock.advance(max(1, min(*deadlines, end) - now))

    def run_for(self, ms: int) -> None:
        self.run_until(lambda: False, ms)

    def wait_active(self, timeout_ms: int = 30_000) -> QuorumController:
        assert self.run_until(lambda: self.active() is not None, timeout_ms)
        active = self.active()
        assert active is not None
        return active

    def result(self, future: concurrent.futures.Future[R], timeout_ms: int = 30_000) -> R:
        """Run until ``future`` is done; its result (or its exception, raised)."""
        assert self.run_until(future.done, timeout_ms), "the future did not complete in time"
        return future.result(timeout=0)
