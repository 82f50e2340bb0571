"""TLS identity binding (``kraft.runtime.tls.TlsConfig.peer_id``): the replica id a client's
verified certificate carries reaches the core as ``InboundRequest.peer_id``; the ``[tls]``
keys that configure it; and the warning of a node whose listener authenticates no one.

Real sockets on 127.0.0.1; every wait is bounded and every channel closed.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from kraft.config import ConfigError, Endpoint, QuorumConfig
from kraft.log.meta_properties import format_storage, random_uuid
from kraft.protocol.envelope import InboundRequest, OutboundRequest
from kraft.protocol.frame import RequestHeader, encode_request
from kraft.protocol.messages import DescribeQuorumRequest
from kraft.record.serde import StrSerde
from kraft.runtime import node as node_module
from kraft.runtime.config import load_node_config
from kraft.runtime.node import RaftNode, unauthenticated_listener
from kraft.runtime.queue import BlockingMessageQueue
from kraft.runtime.tls import TlsConfig
from kraft.runtime.transport import TrioNetworkChannel
from kraft.testing import ManualClock

LOCALHOST = "127.0.0.1"
WAIT_MS = 5_000
TLS = TlsConfig(certfile=Path("c.pem"), keyfile=Path("k.pem"))


def by_cn(*names: str) -> dict[str, Any]:
    """What ``getpeercert()`` returns for a certificate with these subject CNs."""
    return {"subject": tuple((("commonName", name),) for name in names)}


def by_san(*entries: tuple[str, str]) -> dict[str, Any]:
    return {"subject": ((("commonName", "kraft-node-7"),),), "subjectAltName": entries}


# -- the mapping ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("certificate", "expected"),
    [
        (by_cn("kraft-node-3"), 3),
        (by_cn("KRAFT-NODE-0"), 0),
        (by_cn("kraft-node-3", "kraft-node-3"), 3),
        (by_cn("kraft-node-3", "kraft-node-4"), -1),  # two ids prove neither
        (by_cn("kraft-node-03"), -1),  # one spelling per id
        (by_cn("kraft-node-+3"), -1),
        (by_cn("kraft-node-2147483648"), -1),  # above int32
        (by_cn("kraft-node-3.example"), -1),  # matched whole
        (by_cn("admin"), -1),
        (None, -1),  # no certificate (require_client_cert off)
        ({}, -1),
    ],
)
def test_peer_id_from_the_common_name(certificate: dict[str, Any] | None, expected: int) -> None:
    assert TlsConfig(TLS.certfile, TLS.keyfile, peer_identity="cn").peer_id(certificate) == expected


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ((("DNS", "node-5.kraft.internal"),), 5),
        ((("URI", "node-5.kraft.internal"),), 5),
        ((("IP Address", "10.0.0.5"), ("DNS", "node-5.kraft.internal")), 5),
        ((("DNS", "node-5.kraft.internal"), ("DNS", "node-6.kraft.internal")), -1),
        ((("DNS", "node-5.kraft.internalx"),), -1),
        ((), -1),  # the CN does not count
    ],
)
def test_peer_id_from_a_subject_alt_name(
    entries: tuple[tuple[str, str], ...], expected: int
) -> None:
    tls = TlsConfig(
        TLS.certfile, TLS.keyfile, peer_identity="san", peer_id_format="node-{id}.kraft.internal"
    )
    assert tls.peer_id(by_san(*entries)) == expected


@pytest.mark.parametrize(
    ("peer_id_format", "entry"),
    [  # the examples of docs/operations.md, Security
        ("node{id}.kraft.internal", ("DNS", "node3.kraft.internal")),
        ("spiffe://example.org/kraft/{id}", ("URI", "spiffe://example.org/kraft/3")),
    ],
)
def test_the_documented_san_formats(peer_id_format: str, entry: tuple[str, str]) -> None:
    tls = TlsConfig(TLS.certfile, TLS.keyfile, peer_identity="san", peer_id_format=peer_id_format)
    assert tls.peer_id(by_san(entry)) == 3
    assert tls.peer_id(by_san((entry[0], entry[1].replace("3", "3x")))) == -1


def test_without_identity_binding_no_peer_is_authenticated() -> None:
    assert TLS.peer_id(by_cn("kraft-node-3")) is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"peer_identity": "subject"}, "tls.peer_identity must be one of cn, san"),
        ({"peer_identity": "cn", "verify": False}, "needs tls.verify"),
        ({"peer_identity": "cn", "peer_id_format": "kraft-node"}, r"must hold \{id\} once"),
        ({"peer_identity": "cn", "peer_id_format": "{id}-{id}"}, r"must hold \{id\} once"),
    ],
)
def test_bad_identity_settings(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TlsConfig(TLS.certfile, TLS.keyfile, **fields)


def test_the_tls_keys_in_toml(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'node_id = 1\ndata_dir = "d"\nvoters = "1@127.0.0.1:9091"\n'
        "[quorum]\nreject_unknown_replicas = true\n"
        '[tls]\ncertfile = "c.pem"\nkeyfile = "k.pem"\nrequire_client_cert = false\n'
        'peer_identity = "san"\npeer_id_format = "node-{id}.kraft"\n'
    )
    config = load_node_config(path)
    assert config.quorum.reject_unknown_replicas
    assert config.tls == TlsConfig(
        tmp_path / "c.pem",
        tmp_path / "k.pem",
        require_client_cert=False,
        peer_identity="san",
        peer_id_format="node-{id}.kraft",
    )
    path.write_text(path.read_text().replace('"san"', '"dn"'))
    with pytest.raises(ConfigError, match=r"node\.toml: tls\.peer_identity must be one of"):
        load_node_config(path)


def test_by_default_no_unknown_replica_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('node_id = 1\ndata_dir = "d"\nvoters = "1@127.0.0.1:9091"\n')
    assert not load_node_config(path).quorum.reject_unknown_replicas


# -- the transport ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls_files(ca: trustme.CA, directory: Path, name: str, **fields: Any) -> TlsConfig:
    """A certificate for 127.0.0.1 with CN ``name`` (and SAN DNS ``name``), trusting ``ca``."""
    directory.mkdir(parents=True, exist_ok=True)
    leaf = ca.issue_cert(LOCALHOST, name, common_name=name)
    certfile, keyfile, cafile = (directory / f"{name}.{ext}" for ext in ("pem", "key", "ca"))
    certfile.write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    keyfile.write_bytes(leaf.private_key_pem.bytes())
    ca.cert_pem.write_to_path(str(cafile))
    return TlsConfig(certfile=certfile, keyfile=keyfile, cafile=cafile, **fields)


MakeChannel = Callable[..., tuple[TrioNetworkChannel, BlockingMessageQueue]]


@pytest.fixture
def make_channel() -> Iterator[MakeChannel]:
    made: list[TrioNetworkChannel] = []

    def make(
        node_id: int, tls: TlsConfig, peers: dict[int, Endpoint] | None = None
    ) -> tuple[TrioNetworkChannel, BlockingMessageQueue]:
        queue = BlockingMessageQueue()
        channel = TrioNetworkChannel(
            node_id=node_id,
            cluster_id="c",
            listen=Endpoint(LOCALHOST, 0) if peers is None else None,
            peers=peers or {},
            queue=queue,
            clock=ManualClock(start_ms=0),
            tls=tls,
            thread_name=f"kraft-test-identity-{node_id}-{len(made)}",
        )
        made.append(channel)
        channel.start()
        return channel, queue

    yield make
    for channel in made:
        channel.close()


def received(queue: BlockingMessageQueue) -> InboundRequest:
    message = queue.poll(WAIT_MS)
    assert isinstance(message, InboundRequest), f"no request within {WAIT_MS} ms"
    return message


@pytest.mark.parametrize(
    ("server_fields", "client_name", "expected"),
    [
        ({"peer_identity": "cn"}, "kraft-node-2", 2),
        ({"peer_identity": "cn"}, "kraft-admin", -1),
        ({"peer_identity": "san", "peer_id_format": "kraft-node-{id}"}, "kraft-node-2", 2),
        ({}, "kraft-node-2", None),
    ],
)
def test_each_request_carries_the_id_its_connection_proved(
    make_channel: MakeChannel,
    ca: trustme.CA,
    tmp_path: Path,
    server_fields: dict[str, Any],
    client_name: str,
    expected: int | None,
) -> None:
    server, server_queue = make_channel(1, tls_files(ca, tmp_path, "kraft-node-1", **server_fields))
    assert server.listen_address is not None
    client, _ = make_channel(3, tls_files(ca, tmp_path, client_name), {1: server.listen_address})
    client.send(OutboundRequest(client.new_correlation_id(), 1, DescribeQuorumRequest(), 0))
    request = received(server_queue)
    assert (request.source, request.peer_id) == (3, expected)


def _send_without_a_certificate(ca: trustme.CA, address: Endpoint) -> bytes:
    """One DescribeQuorum over TLS presenting no certificate; what the server sent back before
    closing (b"" when it closed at once)."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    body = DescribeQuorumRequest()
    frame = encode_request(RequestHeader.for_body(body, 1, cluster_id="c"), body)
    with (
        socket.create_connection((address.host, address.port), timeout=WAIT_MS / 1000) as raw,
        context.wrap_socket(raw, server_hostname=address.host) as sock,
    ):
        try:
            sock.sendall(frame)
            return sock.recv(1)
        except (ssl.SSLError, ConnectionError):
            return b""


def test_a_client_without_a_certificate_is_refused_by_default(
    make_channel: MakeChannel, ca: trustme.CA, tmp_path: Path
) -> None:
    server, queue = make_channel(1, tls_files(ca, tmp_path, "kraft-node-1", peer_identity="cn"))
    assert server.listen_address is not None
    assert _send_without_a_certificate(ca, server.listen_address) == b""
    assert queue.poll(0) is None


def test_optional_client_certificates_make_a_certificate_less_peer_anonymous(
    make_channel: MakeChannel, ca: trustme.CA, tmp_path: Path
) -> None:
    tls = tls_files(ca, tmp_path, "kraft-node-1", peer_identity="cn", require_client_cert=False)
    server, queue = make_channel(1, tls)
    assert server.listen_address is not None
    with socket.create_connection((LOCALHOST, server.listen_address.port), timeout=5) as raw:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        with context.wrap_socket(raw, server_hostname=LOCALHOST) as sock:
            body = DescribeQuorumRequest()
            sock.sendall(encode_request(RequestHeader.for_body(body, 1, cluster_id="c"), body))
            request = received(queue)
    assert (request.source, request.peer_id) == (-1, -1)


# -- the warning ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "tls", "reason"),
    [
        ("127.0.0.1", None, None),
        ("::1", None, None),
        ("localhost", None, None),
        ("0.0.0.0", None, "no TLS"),
        ("10.1.2.3", None, "no TLS"),
        ("node1.example", None, "no TLS"),
        ("0.0.0.0", TlsConfig(TLS.certfile, TLS.keyfile, verify=False), "tls.verify = false"),
        (
            "0.0.0.0",
            TlsConfig(TLS.certfile, TLS.keyfile, require_client_cert=False),
            "tls.require_client_cert = false",
        ),
        ("0.0.0.0", TLS, None),
    ],
)
def test_which_listeners_let_anyone_in(
    host: str, tls: TlsConfig | None, reason: str | None
) -> None:
    found = unauthenticated_listener(Endpoint(host, 9093), tls)
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found


@pytest.mark.parametrize("reason", [None, "no TLS"])
def test_a_node_says_once_at_start_that_its_listener_lets_anyone_in(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    reason: str | None,
) -> None:
    """The node on 127.0.0.1, told (or not) that its listener authenticates no one: tests bind
    loopback only, so the verdict on the address is tested above."""
    monkeypatch.setattr(node_module, "unauthenticated_listener", lambda listen, tls: reason)
    format_storage(tmp_path, random_uuid(), node_id=1)
    node = RaftNode(
        node_id=1,
        data_dir=tmp_path,
        config=QuorumConfig(voters={1: Endpoint(LOCALHOST, 0)}),
        serde=StrSerde(),
        shutdown_timeout_ms=500,
    )
    caplog.set_level(logging.WARNING, logger="kraft.runtime.node")
    with node:
        pass
    warnings = [r.getMessage() for r in caplog.records if r.name == "kraft.runtime.node"]
    if reason is None:
        assert warnings == []
    else:
        (warning,) = warnings
        assert f"node 1 listens on {node.listen_address} with no TLS: any host" in warning
        assert "peer_identity" in warning
