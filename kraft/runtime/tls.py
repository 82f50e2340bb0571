"""``TlsConfig``: the certificates a replica presents and trusts, as ``ssl.SSLContext`` objects.

Replicas authenticate each other with mutual TLS. Each presents its own certificate chain (the
listener to connecting peers, the connecting side to the listener) and, with ``verify`` on,
refuses a peer whose chain does not lead to ``cafile`` (the system's CAs when ``None``). The
connecting side also checks that the certificate names the host it dialled
(``check_hostname``); the listener cannot check a client's name, only its chain. TLS 1.2 is
the minimum.

Identity binding (``peer_identity``): the listener reads the replica id a client's verified
certificate carries, in its subject CN or a SAN, by ``peer_id_format`` (``kraft-node-{id}``
by default): :meth:`TlsConfig.peer_id`. The transport hands it to the core with every request
(``InboundRequest.peer_id``), which refuses requests that claim another replica
(``kraft.raft.rpc.PeerCheck``; docs/operations.md "Security").

The files are read when a context is built, in the thread that starts the transport, so that
a missing or malformed file is a :class:`~kraft.errors.TransportError` at start-up and never a
failure inside the network thread. Encrypted private keys are not supported.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kraft.common.limits import INT32_MAX
from kraft.config import ConfigError
from kraft.errors import TransportError

__all__ = ["DEFAULT_PEER_ID_FORMAT", "PEER_IDENTITY_FIELDS", "TlsConfig"]

#: The certificate fields ``peer_identity`` may name: the subject's commonName, or the
#: subjectAltName's DNS and URI entries.
PEER_IDENTITY_FIELDS: Final = ("cn", "san")
#: ``peer_id_format`` by default: CN (or a SAN) ``kraft-node-3`` is replica 3.
DEFAULT_PEER_ID_FORMAT: Final = "kraft-node-{id}"
#: The id placeholder of ``peer_id_format``, and the decimal id it stands for (no sign, no
#: leading zero: one spelling per id).
_ID_PLACEHOLDER: Final = "{id}"
_ID_PATTERN: Final = "(0|[1-9][0-9]{0,9})"


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """This node's certificate and key, the CAs it trusts, and how strictly it checks peers.

    ``verify`` on the listener means a client certificate is verified, and required unless
    ``require_client_cert`` is off (then a client without one is accepted as nobody: with
    identity binding it may only describe the quorum and fetch as an anonymous observer); on
    the connecting side, the listener's certificate is verified (and its name checked against
    the dialled host when ``check_hostname``). ``verify=False`` encrypts without
    authenticating: for tests only. ``peer_identity`` (``"cn"`` or ``"san"``, see
    :meth:`peer_id`) binds each inbound connection to the replica id its certificate carries.
    """

    certfile: Path
    keyfile: Path
    cafile: Path | None = None
    verify: bool = True
    check_hostname: bool = True
    require_client_cert: bool = True
    peer_identity: str | None = None
    peer_id_format: str = DEFAULT_PEER_ID_FORMAT

    def __post_init__(self) -> None:
        if self.peer_identity is None:
            return
        if self.peer_identity not in PEER_IDENTITY_FIELDS:
            raise ConfigError(
                f"tls.peer_identity must be one of {', '.join(PEER_IDENTITY_FIELDS)}, "
                f"not {self.peer_identity!r}"
            )
        if not self.verify:
            raise ConfigError(
                "tls.peer_identity needs tls.verify: an unverified name proves nothing"
            )
        if self.peer_id_format.count(_ID_PLACEHOLDER) != 1:
            raise ConfigError(
                f"tls.peer_id_format must hold {_ID_PLACEHOLDER} once, not {self.peer_id_format!r}"
            )

    def peer_id(self, certificate: Mapping[str, Any] | None) -> int | None:
        """The replica id a client's verified certificate (``getpeercert()``) binds; None
        without identity binding.

        The names of the field ``peer_identity`` chooses (each subject CN, or each DNS and URI
        subjectAltName) are matched whole, ignoring case, against ``peer_id_format`` with
        ``{id}`` a decimal int32. One id found: that id. None found, two different ones, or no
        certificate (``require_client_cert`` off): -1, a peer that is no replica.
        """
        if self.peer_identity is None:
            return None
        prefix, _, suffix = self.peer_id_format.partition(_ID_PLACEHOLDER)
        pattern = re.compile(re.escape(prefix) + _ID_PATTERN + re.escape(suffix), re.IGNORECASE)
        names = _common_names if self.peer_identity == "cn" else _alt_names
        ids = {
            replica
            for name in names(certificate or {})
            if (match := pattern.fullmatch(name)) is not None
            and (replica := int(match.group(1))) <= INT32_MAX
        }
        return ids.pop() if len(ids) == 1 else -1

    def server_context(self) -> ssl.SSLContext:
        """The context a listener wraps accepted connections with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._configure(context, ssl.Purpose.CLIENT_AUTH)
        if self.verify and not self.require_client_cert:
            context.verify_mode = ssl.CERT_OPTIONAL
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context outbound connections are wrapped with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        # check_hostname must be off before verify_mode may drop to CERT_NONE.
        context.check_hostname = self.verify and self.check_hostname
        self._configure(context, ssl.Purpose.SERVER_AUTH)
        return context

    def _configure(self, context: ssl.SSLContext, purpose: ssl.Purpose) -> None:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED if self.verify else ssl.CERT_NONE
        try:
            context.load_cert_chain(os.fspath(self.certfile), os.fspath(self.keyfile))
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise TransportError(
                f"cannot load the TLS certificate {self.certfile} with key {self.keyfile}: {exc}"
            ) from exc
        if not self.verify:
            return
        if self.cafile is None:
            context.load_default_certs(purpose)
            return
        try:
            context.load_verify_locations(cafile=os.fspath(self.cafile))
        except (OSError, ValueError) as exc:
            raise TransportError(f"cannot load the TLS CA file {self.cafile}: {exc}") from exc


def _common_names(certificate: Mapping[str, Any]) -> Iterator[str]:
    """Each commonName of the subject (``getpeercert()``'s tuple of RDNs of pairs)."""
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                yield value


def _alt_names(certificate: Mapping[str, Any]) -> Iterator[str]:
    """Each DNS and URI subjectAltName (IP addresses name hosts, not replicas)."""
    for kind, value in certificate.get("subjectAltName", ()):
        if kind in ("DNS", "URI"):
            yield value
