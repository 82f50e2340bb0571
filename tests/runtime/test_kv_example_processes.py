"""``examples/kv``: three key-value server processes stay linearizable while their leader is
killed (-9) and restarted under concurrent clients.

Each client thread sends put / get / cas on a few keys to a random server (``examples/kv/
client.py``'s :class:`KvClient`) and records what it saw: invocation and completion times,
and the result. An answer that says nothing was written (``not_leader``), or a server that
could not be reached, leaves nothing in the history; a write whose answer never came or says
``timeout`` / ``unavailable`` has an unknown outcome (it may take effect at any time after
its invocation). A get that failed observed nothing and is left out. Times are milliseconds of
the monotonic clock, the invocation rounded down and the completion up, so that each
operation's interval holds its real one. The history is then checked with
:func:`kraft.simulation.linearizability.check_history`.

Every wait is bounded; the quorum's processes are SIGKILLed in a ``finally``.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from kraft.cli.log_dump import RecordEvent, find_segments, scan_file
from kraft.config import Endpoint
from kraft.kv import KvCommand, KvSerde
from kraft.runtime.processes import LOOPBACK_TIMERS, LocalQuorum, free_ports
from kraft.simulation.linearizability import Operation, OpKind, check_history

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "kv" / "server.py"
TIMEOUT_S = 60.0
CLIENTS = 4
KEYS = ("a", "b", "c", "d", "e", "f")
#: The server's timeout for one operation, and the client's (a little longer).
OP_TIMEOUT_MS = 2000
CLIENT_TIMEOUT_S = 4.0
#: A client's pause after an error, as real clients back off: it also keeps the number of
#: unknown outcomes, which the checker's search is exponential in, small.
ERROR_BACKOFF_S = 0.2
#: How long the clients run in each phase (before the kill, while a node is down, after).
PHASE_S = 2.0


def load_client() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "kv_client", ROOT / "examples" / "kv" / "client.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kv = load_client()


def now_ms() -> float:
    return time.monotonic() * 1000


class Workload:
    """``CLIENTS`` threads issuing random operations until :meth:`stop`."""

    def __init__(self, servers: list[Endpoint], seed: int) -> None:
        self.servers = servers
        self.seed = seed
        self.history: list[Operation] = []
        self.completed = 0
        #: What went wrong in a client thread (raised again by :meth:`stop`).
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(c,), name=f"kv-client-{c}", daemon=True)
            for c in range(CLIENTS)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the clients (each ends its request first: bounded by its timeout)."""
        self._stop.set()
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(CLIENT_TIMEOUT_S * 3)
                assert not thread.is_alive(), f"{thread.name} did not stop"
        if self.errors:
            raise self.errors[0]

    def _record(self, op: Operation) -> None:
        with self._lock:
            self.history.append(op)
            self.completed += op.complete_ms is not None

    def _run(self, client_id: int) -> None:
        rng = random.Random(self.seed * 100 + client_id)
        clients = [kv.KvClient(address, CLIENT_TIMEOUT_S) for address in self.servers]
        seen: dict[str, str | None] = {}
        count = 0
        try:
            while not self._stop.is_set():
                count += 1
                key = rng.choice(KEYS)
                kind: OpKind = rng.choice(("put", "get", "get", "cas"))
                body: dict[str, object] = {"op": kind, "key": key, "timeout_ms": OP_TIMEOUT_MS}
                value = expected = None
                if kind != "get":
                    value = body["value"] = f"{client_id}-{count}"
                if kind == "cas":
                    expected = body["expected"] = seen.get(key)
                invoke = now_ms()
                try:
                    answer = rng.choice(clients).request(body)
                except kv.UnreachableError:
                    time.sleep(ERROR_BACKOFF_S)  # that server is down: nothing was sent
                    continue
                except kv.OutcomeUnknownError:
                    answer = {"ok": False, "error": "timeout"}
                complete = now_ms()
                complete_ms: int | None = math.ceil(complete)
                result = None
                if answer["ok"]:
                    result = answer.get("value") if kind == "get" else answer.get("swapped")
                    if kind == "get":
                        seen[key] = result
                    elif kind == "put" or result:
                        seen[key] = value
                elif answer["error"] in ("timeout", "unavailable") and kind != "get":
                    complete_ms = None  # the write may or may not take effect
                if answer["ok"] or complete_ms is None:
                    self._record(
                        Operation(
                            client=client_id,
                            op=kind,
                            key=key,
                            value=value,
                            expected=expected,
                            invoke_ms=math.floor(invoke),
                            complete_ms=complete_ms,
                            result=result,
                        )
                    )
                else:
                    assert answer["error"] in ("not_leader", "timeout", "unavailable"), answer
                if not answer["ok"]:
                    time.sleep(ERROR_BACKOFF_S)
        except BaseException as exc:
            with self._lock:
                self.errors.append(exc)
        finally:
            for client in clients:
                client.close()


def committed_commands(data_dir: Path) -> list[KvCommand]:
    """The kv commands in a node's log, in offset order (read as ``kraft log dump`` does)."""
    serde = KvSerde()
    return [
        serde.decode(event.value)
        for path in find_segments(data_dir)
        for event in scan_file(path, with_records=True)
        if isinstance(event, RecordEvent) and event.control_type is None and event.value
    ]


@pytest.mark.slow
def test_kv_servers_stay_linearizable_while_the_leader_is_killed_and_restarted(
    tmp_path: Path,
) -> None:
    ports = free_ports(3)
    quorum = LocalQuorum(
        tmp_path / "quorum",
        3,
        quorum=LOOPBACK_TIMERS,
        command=lambda node_id, config: [
            sys.executable,
            str(SERVER),
            str(config),
            "--kv-listen",
            f"127.0.0.1:{ports[node_id - 1]}",
        ],
    )
    workload = Workload([Endpoint("127.0.0.1", port) for port in ports], seed=19)
    try:
        quorum.start(TIMEOUT_S)
        first = quorum.leader(TIMEOUT_S)
        workload.start()
        time.sleep(PHASE_S)  # the clients' phase before the kill (no condition is awaited)
        before_kill = workload.completed

        quorum.nodes[first].kill()
        assert quorum.nodes[first].wait(TIMEOUT_S) == -9
        second = quorum.leader(TIMEOUT_S, exclude=[first])
        time.sleep(PHASE_S)
        during = workload.completed

        quorum.nodes[first].start()
        mark = quorum.nodes[first].mark()
        quorum.nodes[first].wait_for(lambda e: e.get("event") == "started", TIMEOUT_S, since=mark)
        time.sleep(PHASE_S)
    finally:
        try:
            workload.stop()
        finally:
            quorum.close(kill=True)
    assert second != first
    # Every write was sent once (each value is unique): none may be in the log twice.
    values = [command.value for command in committed_commands(tmp_path / "quorum" / "node-1")]
    assert len(values) == len(set(values)), "a command committed twice"
    # Not vacuous: operations completed before the kill, while a node was down, and after.
    assert before_kill >= 20 and during > before_kill and workload.completed > during
    assert {op.op for op in workload.history if op.complete_ms is not None} == {"put", "get", "cas"}
    result = check_history(workload.history)
    assert result.ok, "\n".join([result.message, *map(repr, result.ops)])
