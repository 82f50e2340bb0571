"""A hostile replica (issue 17, hole 1): one request frame claiming any replica id, over plain
TCP or TLS with any certificate, written with kraft's own frame codec; prints the answer.

    python tests/runtime/hostile_replica.py 127.0.0.1:9091 vote --claim 99 --epoch 4
    python tests/runtime/hostile_replica.py 127.0.0.1:9091 begin --claim 99 --epoch 4 \\
        --cert node2.pem --key node2.key --ca ca.pem

Against a node without identity binding or ``reject_unknown_replicas``, a Vote with a higher
epoch deposes the leader and a BeginQuorumEpoch makes a follower follow replica 99 (Kafka
behaves the same). The tests in test_hostile_replicas.py import :func:`send_as`.
"""

from __future__ import annotations

import argparse
import socket
import ssl

from kraft.config import Endpoint, parse_bootstrap_servers
from kraft.protocol import messages
from kraft.protocol.frame import RequestHeader, ResponseFrameDecoder, encode_request
from kraft.protocol.messages import BeginQuorumEpochRequest, Request, Response, VoteRequest

#: A last offset no real log reaches: the vote is "up to date" wherever it lands.
_FAR_AHEAD = 1 << 40


def vote(candidate: int, epoch: int) -> VoteRequest:
    """A standard vote for ``candidate`` in ``epoch``, with a log ahead of everyone's."""
    return VoteRequest(
        replica_epoch=epoch,
        replica_id=candidate,
        last_offset_epoch=epoch - 1,
        last_offset=_FAR_AHEAD,
    )


def begin(leader: int, epoch: int) -> BeginQuorumEpochRequest:
    """``leader`` announces itself for ``epoch``, at an address where nothing listens."""
    return BeginQuorumEpochRequest(
        leader_id=leader,
        leader_epoch=epoch,
        leader_endpoints=(messages.Endpoint("CONTROLLER", "127.0.0.1", 1),),
    )


def tls_context(certfile: str, keyfile: str, cafile: str) -> ssl.SSLContext:
    """A client context presenting ``certfile``, trusting ``cafile``."""
    context = ssl.create_default_context(cafile=cafile)
    context.load_cert_chain(certfile, keyfile)
    return context


def send_as(
    address: Endpoint,
    body: Request,
    *,
    source: int,
    cluster_id: str | None = None,
    tls: ssl.SSLContext | None = None,
    timeout_s: float = 10.0,
) -> Response:
    """Send ``body`` with header source ``source`` on a connection of its own; the answer."""
    header = RequestHeader.for_body(body, 1, source_replica_id=source, cluster_id=cluster_id)
    decoder = ResponseFrameDecoder()
    with socket.create_connection((address.host, address.port), timeout=timeout_s) as raw:
        sock = raw if tls is None else tls.wrap_socket(raw, server_hostname=address.host)
        with sock:
            sock.sendall(encode_request(header, body))
            while (frame := decoder.next_frame()) is None:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError(f"{address} closed the connection without answering")
                decoder.feed(data)
    return frame.body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="host:port of a node")
    parser.add_argument("request", choices=("vote", "begin"))
    parser.add_argument("--claim", type=int, default=99, help="the candidate or leader id")
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--source", type=int, help="header source (default: --claim)")
    parser.add_argument("--cluster-id")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--ca")
    args = parser.parse_args()
    body = (vote if args.request == "vote" else begin)(args.claim, args.epoch)
    tls = None if args.cert is None else tls_context(args.cert, args.key, args.ca)
    source = args.claim if args.source is None else args.source
    (address,) = parse_bootstrap_servers(args.address)
    print(send_as(address, body, source=source, cluster_id=args.cluster_id, tls=tls))


if __name__ == "__main__":
    main()
