"""A throw-away certificate authority for the fakes' HTTPS mode.

The agent refuses plain http:// unless told otherwise, so tests of the real TLS path need a
server certificate that a client can be made to trust without touching the system store:
a CA that lives only as long as the test, whose PEM is written wherever the client looks.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme

# The fake servers bind 127.0.0.1 only; clients reach them by name or by address.
SERVER_IDENTITIES = ("localhost", "127.0.0.1")


class TLSAuthority:
    """One CA and one server certificate for `localhost` and `127.0.0.1`."""

    def __init__(self) -> None:
        self._ca = trustme.CA()
        self._server_cert = self._ca.issue_cert(*SERVER_IDENTITIES)

    @property
    def ca_pem(self) -> bytes:
        return self._ca.cert_pem.bytes()

    def server_context(self) -> ssl.SSLContext:
        """A server-side context presenting the certificate; a new one on every call."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_cert.configure_cert(context)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client-side context that trusts this CA and nothing else."""
        return ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))

    def write_ca_bundle(self, path: str | Path) -> Path:
        """Write the CA certificate as PEM (what SSL_CERT_FILE or a CA-bundle setting expects)."""
        target = Path(path)
        target.write_bytes(self.ca_pem)
        return target
