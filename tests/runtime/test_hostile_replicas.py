"""Issue 17, hole 1, against three real ``kraft node`` processes on 127.0.0.1: a peer that is
not who it claims to be cannot depose the leader.

Under mutual TLS with identity binding (``tls.peer_identity = "cn"``), a peer holding a valid
certificate for one replica (or for none) and claiming another in a VoteRequest or a
BeginQuorumEpoch is answered CLUSTER_AUTHORIZATION_FAILED. In plaintext with
``quorum.reject_unknown_replicas``, replica 99's VoteRequest and BeginQuorumEpoch are. Either
way every node keeps its leader and epoch, and appends keep committing. The hostile client is
``hostile_replica.py``. Every wait is bounded; the processes are killed at the end.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from hostile_replica import begin, send_as, vote

from kraft.config import parse_bootstrap_servers
from kraft.protocol.errors import Errors
from kraft.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse, Request
from kraft.runtime.processes import LOOPBACK_TIMERS, LocalQuorum

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
STRANGER = 99


def issue(ca: trustme.CA, directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 with subject CN ``name``: (chain file, key file)."""
    leaf = ca.issue_cert("127.0.0.1", common_name=name)
    certfile, keyfile = directory / f"{name}.pem", directory / f"{name}.key"
    certfile.write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    keyfile.write_bytes(leaf.private_key_pem.bytes())
    return certfile, keyfile


def client_context(ca: trustme.CA, name: str) -> ssl.SSLContext:
    """What the hostile client presents: a certificate from the quorum's CA, CN ``name``."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    ca.issue_cert("127.0.0.1", common_name=name).configure_cert(context)
    return context


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def mtls_quorum(tmp_path: Path, ca: trustme.CA) -> Iterator[LocalQuorum]:
    """Three voters; node N presents CN kraft-node-N and binds its peers' ids by CN."""
    local = LocalQuorum(tmp_path / "quorum", 3, quorum=LOOPBACK_TIMERS)
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    for node_id, node in local.nodes.items():
        certfile, keyfile = issue(ca, tmp_path, f"kraft-node-{node_id}")
        with node.config_path.open("a") as config:
            config.write(
                f'[tls]\ncertfile = "{certfile}"\nkeyfile = "{keyfile}"\ncafile = "{cafile}"\n'
                'peer_identity = "cn"\n'
            )
    try:
        local.start(TIMEOUT_S)
        yield local
    finally:
        local.close(kill=True)


@pytest.fixture
def plaintext_quorum(tmp_path: Path) -> Iterator[LocalQuorum]:
    local = LocalQuorum(
        tmp_path / "quorum", 3, quorum={**LOOPBACK_TIMERS, "reject_unknown_replicas": True}
    )
    try:
        local.start(TIMEOUT_S)
        yield local
    finally:
        local.close(kill=True)


def settled(quorum: LocalQuorum) -> tuple[int, int, dict[int, int]]:
    """Once a record committed on every node: (leader, epoch, each node's event count)."""
    offset, leader = quorum.append("before", timeout_s=TIMEOUT_S)
    for node_id in quorum.nodes:
        quorum.wait_committed(node_id, offset, TIMEOUT_S)
    event = quorum.nodes[leader].last_leader_event()
    assert event is not None
    return leader, event["epoch"], {n: node.mark() for n, node in quorum.nodes.items()}


def attack(
    quorum: LocalQuorum,
    attempts: list[tuple[int, Request, int, ssl.SSLContext | None]],
) -> None:
    """Send each (target node, request, claimed header source, TLS context); every one is
    refused."""
    for target, body, source, tls in attempts:
        (address,) = parse_bootstrap_servers(quorum.addresses[target])
        response = send_as(address, body, source=source, cluster_id=quorum.cluster_id, tls=tls)
        assert response.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED, (target, response)


def assert_undisturbed(quorum: LocalQuorum, leader: int, epoch: int, marks: dict[int, int]) -> None:
    """Appends still commit everywhere, through the same leader, and no node saw another
    leader or epoch since ``marks``."""
    for i in range(5):
        offset, writer = quorum.append(f"after-{i}", timeout_s=TIMEOUT_S)
        assert writer == leader
    for node_id, node in quorum.nodes.items():
        quorum.wait_committed(node_id, offset, TIMEOUT_S)
        changes = [e for e in node.events()[marks[node_id] :] if e.get("event") == "leader"]
        assert changes == [], (node_id, changes)
        last = node.last_leader_event()
        assert last is not None and (last["leader"], last["epoch"]) == (leader, epoch)


def test_under_mutual_tls_no_peer_speaks_for_another_replica(
    mtls_quorum: LocalQuorum, ca: trustme.CA
) -> None:
    quorum = mtls_quorum
    leader, epoch, marks = settled(quorum)
    one, two = sorted(n for n in quorum.nodes if n != leader)
    as_one = client_context(ca, f"kraft-node-{one}")  # a voter's own certificate
    as_stranger = client_context(ca, f"kraft-node-{STRANGER}")
    as_admin = client_context(ca, "kraft-admin")  # names no replica
    attack(
        quorum,
        [
            (leader, vote(two, epoch + 1), two, as_one),
            (two, begin(STRANGER, epoch + 1), STRANGER, as_one),
            (leader, vote(two, epoch + 1), two, as_stranger),
            (two, begin(leader, epoch + 1), leader, as_stranger),
            (leader, vote(two, epoch + 1), two, as_admin),
        ],
    )
    # A certificate without a replica id still describes the quorum (kraft quorum describe).
    (address,) = parse_bootstrap_servers(quorum.addresses[leader])
    described = send_as(
        address, DescribeQuorumRequest(), source=-1, cluster_id=quorum.cluster_id, tls=as_admin
    )
    assert isinstance(described, DescribeQuorumResponse)
    assert (described.leader_id, described.leader_epoch) == (leader, epoch)
    assert_undisturbed(quorum, leader, epoch, marks)


def test_reject_unknown_replicas_keeps_a_plaintext_stranger_from_deposing_the_leader(
    plaintext_quorum: LocalQuorum,
) -> None:
    quorum = plaintext_quorum
    leader, epoch, marks = settled(quorum)
    attempts: list[tuple[int, Request, int, ssl.SSLContext | None]] = [
        (node_id, vote(STRANGER, epoch + 1), STRANGER, None) for node_id in quorum.nodes
    ]
    attempts += [
        (node_id, begin(STRANGER, epoch + 1), STRANGER, None)
        for node_id in quorum.nodes
        if node_id != leader
    ]
    attack(quorum, attempts)
    assert_undisturbed(quorum, leader, epoch, marks)
