"""``examples/kv/server.py``'s answers, on a stand-in node (no quorum), and the client's exit
statuses: what each request does, and what each failure tells the client about its write."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from kraft.errors import IllegalStateError, NotLeaderError, OperationTimeoutError
from kraft.kv import KvCommand, KvStateMachine
from kraft.runtime.processes import free_ports

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kv"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kv_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


server = load("server")
client = load("client")


class StandInNode:
    """Appends apply at once to the machine, as a node's listener would before the append's
    future completes; ``failure`` makes every call fail instead."""

    def __init__(self, machine: KvStateMachine) -> None:
        self.machine = machine
        self.offset = -1
        self.failure: Exception | None = None
        self.barriers = 0

    async def append(self, records: Sequence[KvCommand], *, timeout_ms: int | None = None) -> int:
        if self.failure is not None:
            raise self.failure
        for record in records:
            self.offset += 1
            self.machine.apply(self.offset, record)
        return self.offset

    async def read_barrier(self, *, timeout_ms: int | None = None) -> int:
        if self.failure is not None:
            raise self.failure
        self.barriers += 1
        return self.offset


def ask(node: StandInNode, request: dict[str, Any] | bytes) -> dict[str, Any]:
    line = request if isinstance(request, bytes) else json.dumps(request).encode()
    answer: dict[str, Any] = trio.run(server.answer, node, node.machine, line)
    return answer


def test_put_get_and_cas_answer_from_the_state_machine() -> None:
    node = StandInNode(KvStateMachine())
    assert ask(node, {"op": "get", "key": "k"}) == {"ok": True, "value": None, "offset": -1}
    assert node.barriers == 1  # a get waits for a read barrier
    assert ask(node, {"op": "cas", "key": "k", "value": "a", "expected": None})["swapped"]
    assert ask(node, {"op": "put", "key": "k", "value": "b"}) == {"ok": True, "offset": 1}
    assert not ask(node, {"op": "cas", "key": "k", "value": "c", "expected": "a"})["swapped"]
    answer = ask(node, {"op": "cas", "key": "k", "value": "d", "expected": "b"})
    assert answer == {"ok": True, "offset": 3, "swapped": True}
    assert ask(node, {"op": "get", "key": "k"})["value"] == "d"


@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (NotLeaderError("moved", leader_id=2, epoch=3), "not_leader"),
        (OperationTimeoutError("slow"), "timeout"),
        (IllegalStateError("node 1 has stopped"), "unavailable"),
    ],
)
def test_failures_say_what_became_of_the_write(failure: Exception, kind: str) -> None:
    node = StandInNode(KvStateMachine())
    node.failure = failure
    answer = ask(node, {"op": "put", "key": "k", "value": "v"})
    assert answer["ok"] is False and answer["error"] == kind
    if kind == "not_leader":
        assert answer["leader_id"] == 2


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1, 2]",
        b'{"op": "put", "key": "k"}',
        b'{"op": "get", "key": 7}',
        b'{"op": "delete", "key": "k"}',
        b'{"op": "get", "key": "k", "timeout_ms": -1}',
    ],
)
def test_bad_requests_do_nothing(line: bytes) -> None:
    node = StandInNode(KvStateMachine())
    answer = ask(node, line)
    assert answer["ok"] is False and answer["error"] == "bad_request"
    assert node.offset == -1 and node.barriers == 0


def test_the_client_moves_on_from_unreachable_servers_and_fails_when_none_answers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ports = free_ports(2)
    servers = ",".join(f"127.0.0.1:{port}" for port in ports)
    assert client.main(["-s", servers, "put", "k", "v"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unreachable:") and str(ports[1]) in err
    assert client.main(["-s", "nowhere", "get", "k"]) == 2
