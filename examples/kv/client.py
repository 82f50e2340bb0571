"""A client of the replicated key-value store of ``examples/kv/server.py``.

    python examples/kv/client.py -s 127.0.0.1:19101,127.0.0.1:19102 put color blue
    python examples/kv/client.py -s 127.0.0.1:19102 get color
    python examples/kv/client.py -s 127.0.0.1:19103 cas color red --expected blue
    python examples/kv/client.py -s 127.0.0.1:19103 cas shape round      # only if absent

Any server answers any request. The client asks the servers of ``--servers`` in turn, moving
on when one cannot be reached (nothing was sent) or answers ``not_leader`` (nothing was
written); it stops at the first other answer. It prints the answer (a get prints the value,
or nothing for an absent key; a cas prints ``true`` or ``false``). Exit status 0 on success;
1 on an error answer; 3 when the outcome of a put or cas is unknown (a timeout, or the
connection was lost after the request was sent: it may still take effect); 2 for bad
arguments.

:class:`KvClient` is the same client for programs (the example's test uses it).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any

from kraft.config import ConfigError, Endpoint, parse_bootstrap_servers

__all__ = ["KvClient", "OutcomeUnknownError", "UnreachableError"]


class UnreachableError(ConnectionError):
    """The server could not be reached: the request was not sent."""


class OutcomeUnknownError(TimeoutError):
    """The request was sent but no answer came back: a write may or may not take effect."""


class KvClient:
    """One connection to one server, opened at the first request; one request at a time."""

    def __init__(self, address: Endpoint, timeout_s: float = 5.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._socket: socket.socket | None = None
        self._buffer = b""

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """Send ``body``, return the server's answer. :class:`UnreachableError` when the
        connection cannot be opened, :class:`OutcomeUnknownError` when it fails afterwards or no
        answer comes within ``timeout_s`` (the connection is then closed)."""
        if self._socket is None:
            try:
                self._socket = socket.create_connection(
                    (self.address.host, self.address.port), timeout=self.timeout_s
                )
            except OSError as exc:
                raise UnreachableError(f"{self.address}: {exc}") from exc
            self._buffer = b""
        try:
            self._socket.sendall(json.dumps(body).encode() + b"\n")
            while b"\n" not in self._buffer:
                chunk = self._socket.recv(65536)
                if not chunk:
                    raise OSError("the server closed the connection")
                self._buffer += chunk
        except OSError as exc:  # socket.timeout is an OSError
            self.close()
            raise OutcomeUnknownError(f"{self.address}: {exc}") from exc
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"op": args.op, "key": args.key}
    if args.op in ("put", "cas"):
        body["value"] = args.value
    if args.op == "cas":
        body["expected"] = args.expected
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--servers", "-s", required=True, help="host:port[,host:port...] of kv servers"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per server")
    ops = parser.add_subparsers(dest="op", required=True)
    put = ops.add_parser("put", help="set KEY to VALUE")
    put.add_argument("key")
    put.add_argument("value")
    get = ops.add_parser("get", help="print the value of KEY (nothing if absent)")
    get.add_argument("key")
    cas = ops.add_parser("cas", help="set KEY to VALUE if it holds --expected")
    cas.add_argument("key")
    cas.add_argument("value")
    cas.add_argument("--expected", default=None, help="the value it must hold (default: absent)")
    args = parser.parse_args(argv)
    try:
        servers = parse_bootstrap_servers(args.servers)
    except ConfigError as exc:
        print(f"error: --servers: {exc}", file=sys.stderr)
        return 2
    answer: dict[str, Any] = {}
    for server in servers:
        client = KvClient(server, args.timeout)
        try:
            answer = client.request(_body(args))
        except UnreachableError as exc:
            answer = {"ok": False, "error": "unreachable", "message": str(exc)}
            continue
        except OutcomeUnknownError as exc:
            print(f"error: outcome unknown: {exc}", file=sys.stderr)
            return 3
        finally:
            client.close()
        if answer.get("error") != "not_leader":
            break
    if answer.get("ok"):
        if args.op == "get":
            if answer["value"] is not None:
                print(answer["value"])
        elif args.op == "cas":
            print(json.dumps(answer["swapped"]))
        return 0
    print(f"error: {answer.get('error')}: {answer.get('message')}", file=sys.stderr)
    return 3 if answer.get("error") in ("timeout", "unavailable") and args.op != "get" else 1


if __name__ == "__main__":
    sys.exit(main())
