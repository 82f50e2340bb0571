"""``TlsConfig``: the certificates a replica presents and trusts, as ``ssl.SSLContext`` objects.

Replicas authenticate each other with mutual TLS. Each presents its own certificate chain (the
listener to connecting peers, the connecting side to the listener) and, with ``verify`` on,
refuses a peer whose chain does not lead to ``cafile`` (the system's CAs when ``None``). The
connecting side also checks that the certificate names the host it dialled
(``check_hostname``); the listener cannot check a client's name, only its chain. TLS 1.2 is
the minimum.

The files are read when a context is built, in the thread that starts the transport, so that
a missing or malformed file is a :class:`~kraft.errors.TransportError` at start-up and never a
failure inside the network thread. Encrypted private keys are not supported.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from kraft.errors import TransportError

__all__ = ["TlsConfig"]


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """This node's certificate and key, the CAs it trusts, and how strictly it checks peers.

    ``verify`` on the listener means a client certificate is required and verified; on the
    connecting side, the listener's certificate is verified (and its name checked against the
    dialled host when ``check_hostname``). ``verify=False`` encrypts without authenticating:
    for tests only.
    """

    certfile: Path
    keyfile: Path
    cafile: Path | None = None
    verify: bool = True
    check_hostname: bool = True

    def server_context(self) -> ssl.SSLContext:
        """The context a listener wraps accepted connections with."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._configure(context, ssl.Purpose.CLIENT_AUTH)
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
