"""A replicated key-value store: one node of a kraft quorum that serves put / get / cas.

    python examples/kv/server.py NODE.toml --kv-listen 127.0.0.1:19101

The node is a :class:`~kraft.runtime.node.RaftNode` built from NODE.toml (as ``kraft node
start`` builds it), opened with :func:`kraft.aio.open_node`, with the map of
:mod:`kraft.kv` as its state machine. Clients speak JSON lines on ``--kv-listen``: one request
object a line, answered by one object a line, in order (``examples/kv/client.py`` is a
client; README.md next to this file has the protocol). Every node answers every request:

- ``put`` and ``cas`` append a :class:`~kraft.kv.KvCommand` with ``await node.append(...)``;
  a follower forwards it to the leader (the core does). The append completes once the command
  is committed and applied here, so a cas's outcome is the state machine's
  ``result_at(offset)``.
- ``get`` waits for ``await node.read_barrier()`` (the leader's read index, confirmed by a
  majority), then reads the local map: every write acknowledged before the get is in it.

An error answer says whether the write may still take effect: ``not_leader`` (it did not and
will not: leadership moved before it committed; try again), ``timeout`` and ``unavailable``
(unknown: it may still commit), ``bad_request`` (nothing was done).

The process prints JSON lines on stdout as ``kraft node start --console`` does, so that
``kraft.runtime.processes.LocalQuorum`` can run it: ``started`` (with the node's address and
the client address ``kv``), and ``leader`` at every leader change. Logs go to stderr. SIGTERM
or SIGINT stops it gracefully (exit status 0); a fatal fault of the node stops it with status 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import trio

from kraft.aio import AsyncNode, open_node
from kraft.config import ConfigError, parse_endpoint
from kraft.errors import (
    FatalFaultError,
    IllegalStateError,
    KraftError,
    NotLeaderError,
    OperationTimeoutError,
)
from kraft.kv import KvCommand, KvSerde, KvStateMachine
from kraft.raft.listeners import LeaderAndEpoch
from kraft.raft.state_machine import StateMachineListener

logger = logging.getLogger("kv.server")

#: The longest request line accepted; a longer one closes the connection.
MAX_LINE_BYTES = 64 * 1024


class Events:
    """JSON lines on stdout, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, **fields: Any) -> None:
        line = json.dumps(fields)
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class KvListener(StateMachineListener[KvCommand]):
    """The state machine's listener, which also reports leader changes."""

    def __init__(self, node: AsyncNode[KvCommand], machine: KvStateMachine, emit: Events):
        super().__init__(node.raft_node.client, machine)
        self._emit = emit

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._emit(event="leader", leader=leader.leader_id, epoch=leader.epoch)


class BadRequestError(ValueError):
    """A request line that is not a request this server knows."""


def _text(request: dict[str, Any], field: str, *, optional: bool = False) -> str | None:
    value = request.get(field)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise BadRequestError(f"{field!r} must be a string")
    return value


async def execute(
    node: AsyncNode[KvCommand], machine: KvStateMachine, request: dict[str, Any]
) -> dict[str, Any]:
    """The answer to one request (see the module docstring)."""
    op = request.get("op")
    timeout_ms = request.get("timeout_ms")
    if timeout_ms is not None and (type(timeout_ms) is not int or timeout_ms < 0):
        raise BadRequestError("'timeout_ms' must be a non-negative integer")
    key = _text(request, "key")
    assert key is not None
    if op == "get":
        barrier = await node.read_barrier(timeout_ms=timeout_ms)
        return {"ok": True, "value": machine.get(key), "offset": barrier}
    if op not in ("put", "cas"):
        raise BadRequestError(f"unknown op {op!r}: put, get or cas")
    value = _text(request, "value")
    assert value is not None
    expected = _text(request, "expected", optional=True) if op == "cas" else None
    offset = await node.append([KvCommand(op, key, value, expected)], timeout_ms=timeout_ms)
    if op == "put":
        return {"ok": True, "offset": offset}
    try:
        swapped = machine.result_at(offset)
    except KeyError:  # a snapshot loaded since covers it: applied, outcome forgotten
        return {"ok": False, "error": "unavailable", "message": f"outcome at {offset} lost"}
    return {"ok": True, "offset": offset, "swapped": swapped}


async def answer(
    node: AsyncNode[KvCommand], machine: KvStateMachine, line: bytes
) -> dict[str, Any]:
    try:
        request = json.loads(line)
        if not isinstance(request, dict):
            raise BadRequestError("a request is a JSON object")
        return await execute(node, machine, request)
    except (BadRequestError, ValueError) as exc:
        return {"ok": False, "error": "bad_request", "message": str(exc)}
    except NotLeaderError as exc:
        return {"ok": False, "error": "not_leader", "leader_id": exc.leader_id, "message": str(exc)}
    except OperationTimeoutError as exc:
        return {"ok": False, "error": "timeout", "message": str(exc)}
    except (IllegalStateError, KraftError) as exc:
        return {"ok": False, "error": "unavailable", "message": str(exc)}


async def serve_client(
    node: AsyncNode[KvCommand], machine: KvStateMachine, stream: trio.SocketStream
) -> None:
    """Answer the requests of one connection, one at a time, until it closes."""
    buffer = bytearray()
    async with stream:
        try:
            while True:
                newline = buffer.find(b"\n")
                if newline < 0:
                    if len(buffer) > MAX_LINE_BYTES:
                        logger.warning(
                            "closing a client: a request line over %d bytes", MAX_LINE_BYTES
                        )
                        return
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    buffer += chunk
                    continue
                line, buffer = bytes(buffer[:newline]), buffer[newline + 1 :]
                reply = await answer(node, machine, line)
                await stream.send_all(json.dumps(reply).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the client went away


async def main_async(config: Path, kv_host: str, kv_port: int) -> None:
    emit = Events()
    async with open_node(config, KvSerde()) as node:
        machine = KvStateMachine()
        node.raft_node.register(KvListener(node, machine, emit))
        listeners = await trio.open_tcp_listeners(kv_port, host=kv_host)
        kv_address = listeners[0].socket.getsockname()
        emit(
            event="started",
            node=node.raft_node.node_id,
            listen=str(node.raft_node.listen_address),
            kv=f"{kv_address[0]}:{kv_address[1]}",
        )
        async with trio.open_nursery() as nursery:

            async def handle(stream: trio.SocketStream) -> None:
                await serve_client(node, machine, stream)

            async def stop_on_signal() -> None:
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        logger.info("signal %d: stopping", signum)
                        break
                nursery.cancel_scope.cancel()

            async def stop_with_node() -> None:
                # A fatal fault stops the node (RaftNode.wait returns): the service stops too.
                await trio.to_thread.run_sync(node.raft_node.wait, abandon_on_cancel=True)
                nursery.cancel_scope.cancel()

            nursery.start_soon(trio.serve_listeners, handle, listeners)
            nursery.start_soon(stop_on_signal)
            nursery.start_soon(stop_with_node)
    if node.raft_node.failure is not None:
        raise FatalFaultError(f"node stopped on a fatal fault: {node.raft_node.failure}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the node's TOML file")
    parser.add_argument(
        "--kv-listen", required=True, help="host:port the clients connect to (port 0: any)"
    )
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        kv = parse_endpoint(args.kv_listen, "--kv-listen")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        trio.run(main_async, args.config, kv.host, kv.port)
    except (KraftError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
