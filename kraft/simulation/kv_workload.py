"""The ``kv`` workload: simulated clients of the replicated key-value store, and the check that
what they saw is linearizable (docs/simulation.md, "The kv workload").

Each client issues one operation at a time, through a random running node, then thinks a
while: ``put`` and ``cas`` are :meth:`Cluster.submit` of a kv command through that node (a
cas's result is the one that node's state machine computed when it applied the command);
``get`` is :meth:`Cluster.read_barrier` on that node, then a read of the node's own state.
Every operation is logged as ``op_invoked`` and ``op_completed``, and kept as a
:class:`~kraft.simulation.linearizability.Operation` for the end-of-run check
(:meth:`KvWorkload.problems`, run by :meth:`Cluster.validate`): a history that admits no
linearization is an ``linearizable`` violation.

An outcome is one of ``ok``; ``fail``, when the operation surely did not happen (a
``NotLeaderError``: the batch did not commit; the node was down; a read that failed) and is
left out of the history; or ``unknown``, when a write may or may not have taken effect (a
timeout, the node crashed with it pending): it may take effect any time after its invocation.

``reads="local"`` serves a get from the node's state at once, without a barrier: a stale
follower or a deposed leader then answers with old data, which the check must catch (the
test that it is not vacuous).

The workload's choices (operations, keys, values, nodes, think times) come from a random
source of its own, seeded from the cluster's seed, so they shift none of the cluster's timers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kraft.errors import BufferAllocationError, NotLeaderError, RecordBatchTooLargeError
from kraft.kv import KvCommand
from kraft.raft.futures import RaftFuture
from kraft.simulation.linearizability import CheckResult, Operation, check_history
from kraft.simulation.operations import NodeDownError

if TYPE_CHECKING:
    from kraft.simulation.cluster import Cluster

__all__ = ["READS", "KvWorkload"]

#: How a get is served: after a read barrier (linearizable), or from local state at once.
READS = ("barrier", "local")
_KINDS: tuple[Literal["get", "put", "cas"], ...] = ("get", "put", "cas")
#: Errors after which a write surely did not happen.
_DEFINITE = (NotLeaderError, NodeDownError, RecordBatchTooLargeError, BufferAllocationError)
#: Problems the end-of-run check reports: (invariant, nodes, message).
Problems = list[tuple[str, tuple[int, ...], str]]


@dataclass(slots=True)
class _Client:
    client_id: int
    ops: int = 0
    #: The operation it waits for, if any.
    pending: Operation | None = None


class KvWorkload:
    """``clients`` simulated clients doing put / get / cas on ``keys`` keys through ``cluster``
    (see the module docstring). :meth:`start` begins, :meth:`stop` lets each client finish its
    operation and issue no more."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        clients: int = 3,
        keys: int = 3,
        reads: Literal["barrier", "local"] = "barrier",
        think_ms: tuple[int, int] = (0, 100),
        timeout_ms: int | None = None,
    ) -> None:
        if clients < 1 or keys < 1:
            raise ValueError(f"the kv workload needs clients and keys, got {clients}, {keys}")
        if reads not in READS:
            raise ValueError(f"reads must be one of {READS}, not {reads!r}")
        self.cluster = cluster
        self.reads = reads
        self.think_ms = think_ms
        self.timeout_ms = timeout_ms
        self.keys = [f"k{i}" for i in range(keys)]
        self.clients = [_Client(i) for i in range(1, clients + 1)]
        #: Every operation that may have happened, as the checker reads it.
        self.history: list[Operation] = []
        #: Completed operations per outcome.
        self.outcomes: dict[str, int] = {"ok": 0, "fail": 0, "unknown": 0}
        #: The last value each key was seen with or given: what a cas expects, usually.
        self._seen: dict[str, str | None] = dict.fromkeys(self.keys)
        self._rng = random.Random(f"kraft-sim-kv:{cluster.seed}")
        self._running = False

    @property
    def idle(self) -> bool:
        """No client has an operation pending."""
        return all(client.pending is None for client in self.clients)

    def start(self) -> None:
        self._running = True
        for client in self.clients:
            self._think(client)

    def stop(self) -> None:
        self._running = False

    def problems(self) -> Problems:
        """The end-of-run check: the history's linearizability, as a violation if it fails."""
        result = self.check()
        if result.ok:
            return []
        return [("linearizable", (), _explain(result))]

    def check(self) -> CheckResult:
        """The checker's verdict on :attr:`history` and on the operations still pending (their
        outcome unknown)."""
        pending = [c.pending for c in self.clients if c.pending is not None]
        return check_history(self.history + pending)

    # -- one operation --------------------------------------------------------------------
    def _think(self, client: _Client) -> None:
        cluster = self.cluster
        cluster.call_at(
            cluster.now_ms + self._rng.randint(*self.think_ms), lambda: self._invoke(client)
        )

    def _invoke(self, client: _Client) -> None:
        if not self._running:
            return
        rng = self._rng
        cluster = self.cluster
        running = cluster.running
        node_id = rng.choice(running or sorted(cluster.nodes))
        key = rng.choice(self.keys)
        kind: Literal["get", "put", "cas"] = rng.choices(_KINDS, (4, 3, 3))[0]
        client.ops += 1
        value = None if kind == "get" else f"{client.client_id}.{client.ops}"
        expected = None
        if kind == "cas":
            expected = self._seen[key] if rng.random() < 0.8 else None
        if value is not None:
            self._seen[key] = value
        invoked = cluster.now_ms
        details: dict[str, Any] = {"client": client.client_id, "op": kind, "key": key}
        if value is not None:
            details["written"] = value
        if kind == "cas":
            details["expected"] = expected
        cluster.events.emit(invoked, "op_invoked", node=node_id, details=details)
        op = Operation(
            client=client.client_id,
            op=kind,
            key=key,
            invoke_ms=invoked,
            complete_ms=None,
            value=value,
            expected=expected,
        )
        client.pending = op
        if kind == "get":
            if self.reads == "local":
                self._read(client, op, node_id, -1)
                return
            barrier = cluster.read_barrier(node_id, timeout_ms=self.timeout_ms)
            barrier.add_done_callback(lambda done: self._read_done(client, op, node_id, done))
            return
        assert value is not None
        command = (
            KvCommand("put", key, value)
            if kind == "put"
            else KvCommand("cas", key, value, expected)
        )
        write = cluster.submit([command], via=node_id, timeout_ms=self.timeout_ms)
        write.add_done_callback(lambda done: self._write_done(client, op, node_id, done))

    def _read_done(
        self, client: _Client, op: Operation, node_id: int, done: RaftFuture[int]
    ) -> None:
        error = done.exception()
        if error is not None:
            self._complete(client, op, node_id, "fail", error=error)  # a read changes nothing
        else:
            self._read(client, op, node_id, done.result())

    def _read(self, client: _Client, op: Operation, node_id: int, offset: int) -> None:
        state = self.cluster.node(node_id).kv
        if state is None:
            self._complete(
                client, op, node_id, "fail", error=NodeDownError(f"node {node_id} is down")
            )
            return
        value = state.get(op.key)
        self._seen[op.key] = value
        self._complete(client, op, node_id, "ok", result=value, offset=offset)

    def _write_done(
        self, client: _Client, op: Operation, node_id: int, done: RaftFuture[int]
    ) -> None:
        error = done.exception()
        if error is not None:
            outcome = "fail" if isinstance(error, _DEFINITE) else "unknown"
            self._complete(client, op, node_id, outcome, error=error)
            return
        offset = done.result()
        if op.op == "put":
            self._complete(client, op, node_id, "ok", offset=offset)
            return
        state = self.cluster.node(node_id).kv
        try:
            swapped = None if state is None else state.result_at(offset)
        except KeyError:
            swapped = None
        if swapped is None:
            # Committed, but the node took it in through a snapshot: whether it swapped is
            # lost, so the checker may place it either way.
            self._complete(client, op, node_id, "unknown", offset=offset)
        else:
            self._complete(client, op, node_id, "ok", result=swapped, offset=offset)

    def _complete(
        self,
        client: _Client,
        op: Operation,
        node_id: int,
        outcome: str,
        *,
        result: str | bool | None = None,
        offset: int = -1,
        error: BaseException | None = None,
    ) -> None:
        cluster = self.cluster
        now = cluster.now_ms
        details: dict[str, Any] = {
            "client": op.client,
            "op": op.op,
            "key": op.key,
            "outcome": outcome,
        }
        if outcome == "ok" and op.op == "get":
            details["read"] = result
        elif outcome == "ok" and op.op == "cas":
            details["swapped"] = result
        if error is not None:
            details["error"] = type(error).__name__
        cluster.events.emit(
            now,
            "op_completed",
            node=node_id,
            offset=offset,
            latency_ms=now - op.invoke_ms,
            details=details,
        )
        self.outcomes[outcome] += 1
        if outcome == "ok":
            self.history.append(
                Operation(
                    client=op.client,
                    op=op.op,
                    key=op.key,
                    invoke_ms=op.invoke_ms,
                    complete_ms=now,
                    value=op.value,
                    expected=op.expected,
                    result=result,
                )
            )
        elif outcome == "unknown":
            self.history.append(op)
        client.pending = None
        self._think(client)


def _explain(result: CheckResult) -> str:
    if result.outcome == "unknown":
        return f"the linearizability check gave up: {result.message}"
    lines = [f"the kv history is not linearizable: {result.message}:"]
    lines += [f"    {_show(op)}" for op in sorted(result.ops, key=lambda o: o.invoke_ms)]
    return "\n".join(lines)


def _show(op: Operation) -> str:
    """``client 2 [120, 164] cas('k1', '1.3', '2.7') -> True``; ``?`` for an unknown end."""
    args = [repr(op.key)]
    if op.op == "cas":
        args.append(repr(op.expected))
    if op.op != "get":
        args.append(repr(op.value))
    call = f"client {op.client} [{op.invoke_ms}, "
    if op.complete_ms is None:
        return call + f"?] {op.op}({', '.join(args)})"
    return call + f"{op.complete_ms}] {op.op}({', '.join(args)}) -> {op.result!r}"
